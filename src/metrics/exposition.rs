//! Encoding a registry for the scraper: the Prometheus text format 0.0.4 by default, with the
//! spec's names exactly, or OpenMetrics 1.0 when the scraper prefers it (`Accept`).
//!
//! The crate encodes OpenMetrics only, whose counter samples always end in `_total`. The
//! Prometheus text is derived from that output by `openmetrics_to_prometheus`: counter family
//! names become the spec names (`svc_requests_total`), the suffix-less counters that
//! OpenMetrics can only carry as `unknown` are declared `counter` again, and `# UNIT`/`# EOF`
//! lines go. Sample lines are never changed.

use std::collections::HashSet;

use prometheus_client::registry::Registry;

use super::families::COUNTERS_WITHOUT_TOTAL;

pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => PROMETHEUS_TEXT,
            Format::OpenMetrics => OPENMETRICS_TEXT,
        }
    }

    /// OpenMetrics when `Accept` ranks `application/openmetrics-text` at least as high as
    /// every other type it accepts; the Prometheus text otherwise (also without `Accept`).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut other) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            if media == "application/openmetrics-text" {
                om = om.max(q);
            } else {
                other = other.max(q);
            }
        }
        if om > 0.0 && om >= other {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// Encodes `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut om = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut om, registry)?;
    Ok(match format {
        Format::OpenMetrics => om,
        Format::Prometheus => openmetrics_to_prometheus(&om),
    })
}

/// Rewrites the crate's OpenMetrics text as Prometheus text 0.0.4 with the spec's names.
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        let Some((prefix, rest)) = meta else {
            out.push_str(line); // a sample
            out.push('\n');
            continue;
        };
        let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
        out.push_str(prefix);
        out.push_str(name);
        if counters.contains(name) {
            out.push_str("_total");
        }
        out.push(' ');
        if prefix == "# TYPE " && tail == "unknown" && COUNTERS_WITHOUT_TOTAL.contains(&name) {
            out.push_str("counter");
        } else {
            out.push_str(tail);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_openmetrics_only_when_ranked_first() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        let low = "text/plain;version=0.0.4,application/openmetrics-text;q=0.5";
        assert_eq!(Format::negotiate(Some(low)), Format::Prometheus);
        let off = "application/openmetrics-text;q=0";
        assert_eq!(Format::negotiate(Some(off)), Format::Prometheus);
    }

    #[test]
    fn counters_get_their_spec_names_in_prometheus_text() {
        let om = "# HELP svc_requests Requests by operation.\n\
                  # TYPE svc_requests counter\n\
                  svc_requests_total{op=\"PING\"} 2\n\
                  # HELP svc_connections_rejected Rejected.\n\
                  # TYPE svc_connections_rejected unknown\n\
                  svc_connections_rejected 1\n\
                  # HELP svc_instances_total Instances.\n\
                  # TYPE svc_instances_total gauge\n\
                  svc_instances_total 3\n\
                  # HELP h_seconds H.\n\
                  # TYPE h_seconds histogram\n\
                  # UNIT h_seconds seconds\n\
                  h_seconds_sum 0.0\n\
                  # EOF\n";
        let want = "# HELP svc_requests_total Requests by operation.\n\
                    # TYPE svc_requests_total counter\n\
                    svc_requests_total{op=\"PING\"} 2\n\
                    # HELP svc_connections_rejected Rejected.\n\
                    # TYPE svc_connections_rejected counter\n\
                    svc_connections_rejected 1\n\
                    # HELP svc_instances_total Instances.\n\
                    # TYPE svc_instances_total gauge\n\
                    svc_instances_total 3\n\
                    # HELP h_seconds H.\n\
                    # TYPE h_seconds histogram\n\
                    h_seconds_sum 0.0\n";
        assert_eq!(openmetrics_to_prometheus(om), want);
    }
}
