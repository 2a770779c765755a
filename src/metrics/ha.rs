//! The failover families (docs/ha.md, "Metrics"), emitted only when `ha.enabled`:
//! `svc_ha_is_primary`, `svc_ha_epoch`, `svc_ha_lease_remaining_seconds` (gauges),
//! `svc_ha_failovers_total`, `svc_ha_demotions_total{reason}`, `svc_ha_etcd_errors_total`
//! (counters). Read from the HA thread's `HaStats` and `member::ReplState` at scrape time
//! (`control::metrics::gather::ha_figures`).

use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::families::{counter, counter_by, gauge};

/// One scrape's failover figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HaFigures {
    pub is_primary: bool,
    pub epoch: u64,
    pub lease_remaining_seconds: f64,
    pub failovers: u64,
    /// By reason, in `DEMOTION_REASONS` order.
    pub demotions: Vec<(&'static str, u64)>,
    pub etcd_errors: u64,
}

pub(super) fn register(r: &mut Registry, f: &HaFigures) {
    gauge(
        r,
        "svc_ha_is_primary",
        "1 on the member that holds the leader key with a valid lease and accepts writes",
        u64::from(f.is_primary),
    );
    gauge(
        r,
        "svc_ha_epoch",
        "The highest epoch this member has seen",
        f.epoch,
    );
    r.register(
        "svc_ha_lease_remaining_seconds",
        "Seconds until this member's primary lease runs out (0 when it holds none)",
        ConstGauge::new(f.lease_remaining_seconds),
    );
    counter(
        r,
        "svc_ha_failovers_total",
        "Terms this member won",
        f.failovers,
    );
    counter_by(
        r,
        "svc_ha_demotions_total",
        "Terms this member lost while primary, by reason",
        "reason",
        f.demotions.iter().map(|(reason, n)| (*reason, *n)),
    );

    counter(
        r,
        "svc_ha_etcd_errors_total",
        "etcd calls that failed or timed out",
        f.etcd_errors,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::exposition::{encode, Format};

    #[test]
    fn the_ha_families_have_their_names_types_and_reasons() {
        let f = HaFigures {
            is_primary: true,
            epoch: 7,
            lease_remaining_seconds: 1.5,
            failovers: 2,
            demotions: vec![("lease_expired", 1), ("leader_key_lost", 0)],
            etcd_errors: 3,
        };
        let mut r = Registry::default();
        register(&mut r, &f);
        let text = encode(&r, Format::Prometheus).unwrap();
        for line in [
            "# TYPE svc_ha_is_primary gauge",
            "svc_ha_is_primary 1",
            "svc_ha_epoch 7",
            "svc_ha_lease_remaining_seconds 1.5",
            "# TYPE svc_ha_failovers_total counter",
            "svc_ha_failovers_total 2",
            "svc_ha_demotions_total{reason=\"lease_expired\"} 1",
            "svc_ha_etcd_errors_total 3",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }
}
