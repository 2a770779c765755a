//! Metrics on the control executor: gathering one scrape from every executor (`gather`) and
//! serving it on `metrics.bind_addr` (`http`: `/metrics`, `/health`, and with failover
//! `/health/primary`, `/health/replica`). The figures and families are `crate::metrics`'.

pub mod gather;
pub mod http;
