//! The cluster families (docs/cluster.md, "Metrics"), emitted only in cluster mode (a member
//! with `[cluster] enabled`; a server without it shows none): `svc_cluster_map_epoch`,
//! `svc_cluster_slots_owned`, `svc_cluster_state_ok`, `svc_cluster_migrating_slots{direction}`
//! (gauges, from the member's map copy), `svc_cluster_moved_total`,
//! `svc_cluster_tryagain_total` (answers given, from `cluster::Counters`),
//! `svc_cluster_migration_entries_total{direction}`, `svc_cluster_migrations_total{result}`
//! (counters) and `svc_cluster_slot_freeze_seconds` (histogram). Read at scrape time
//! (`control::metrics::gather::cluster_figures`). Bound: a fixed set of series (two
//! directions, two results, ten buckets); the move families stay 0 (empty) until slot moves
//! exist.

use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::families::{counter, counter_by, gauge, labels, Hist, Series};
use super::histogram::HistogramSnapshot;

/// `svc_cluster_slot_freeze_seconds`'s bounds (docs/cluster.md, "Metrics").
pub const FREEZE_BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0];

/// One scrape's cluster figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterFigures {
    /// The copy's `map_epoch` (0 without a valid map).
    pub map_epoch: u64,
    /// Slots of this member's group by its copy.
    pub slots_owned: u64,
    /// `MapCopy::state_ok`.
    pub state_ok: bool,
    /// Slots of the copy's running moves from this member's group.
    pub migrating_out: u64,
    /// Slots of the copy's running moves to this member's group.
    pub migrating_in: u64,
    pub moved: u64,
    pub tryagain: u64,
    /// Entries copied out of / into this member's slots by moves.
    pub migration_entries_out: u64,
    pub migration_entries_in: u64,
    /// Moves this member finished (as the source's primary), by result.
    pub migrations_done: u64,
    pub migrations_aborted: u64,
    /// Each freeze attempt's length.
    pub slot_freeze: HistogramSnapshot,
}

impl Default for ClusterFigures {
    fn default() -> Self {
        ClusterFigures {
            map_epoch: 0,
            slots_owned: 0,
            state_ok: false,
            migrating_out: 0,
            migrating_in: 0,
            moved: 0,
            tryagain: 0,
            migration_entries_out: 0,
            migration_entries_in: 0,
            migrations_done: 0,
            migrations_aborted: 0,
            slot_freeze: HistogramSnapshot::empty(&FREEZE_BOUNDS),
        }
    }
}

pub(super) fn register(r: &mut Registry, f: &ClusterFigures) {
    gauge(
        r,
        "svc_cluster_map_epoch",
        "The map_epoch of this member's copy of the slot map (0: none read)",
        f.map_epoch,
    );
    gauge(
        r,
        "svc_cluster_slots_owned",
        "Slots of this member's group, by its copy of the map",
        f.slots_owned,
    );
    gauge(
        r,
        "svc_cluster_state_ok",
        "1 when this member's copy is a valid map and every group owning a slot has a primary",
        u64::from(f.state_ok),
    );
    let mut migrating = Series::new(MetricType::Gauge);
    for (direction, n) in [("out", f.migrating_out), ("in", f.migrating_in)] {
        migrating.push(labels(&[("direction", direction)]), ConstGauge::new(n));
    }
    r.register(
        "svc_cluster_migrating_slots",
        "Slots of running moves from (out) or to (in) this member's group, by its copy",
        migrating,
    );
    counters(r, f);
    r.register(
        "svc_cluster_slot_freeze_seconds",
        "Length of each slot freeze attempt of a move",
        Hist(f.slot_freeze.clone()),
    );
}

fn counters(r: &mut Registry, f: &ClusterFigures) {
    counter(
        r,
        "svc_cluster_moved_total",
        "MOVED answers this member gave",
        f.moved,
    );
    counter(
        r,
        "svc_cluster_tryagain_total",
        "TRYAGAIN answers this member gave",
        f.tryagain,
    );
    counter_by(
        r,
        "svc_cluster_migration_entries_total",
        "Entries moves copied out of or into this member's slots",
        "direction",
        [
            ("out", f.migration_entries_out),
            ("in", f.migration_entries_in),
        ],
    );
    counter_by(
        r,
        "svc_cluster_migrations_total",
        "Moves this member ran as the source's primary, by result",
        "result",
        [
            ("done", f.migrations_done),
            ("aborted", f.migrations_aborted),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::exposition::{encode, Format};

    #[test]
    fn the_cluster_families_have_their_names_types_and_labels() {
        let f = ClusterFigures {
            map_epoch: 4,
            slots_owned: 8192,
            state_ok: true,
            moved: 3,
            ..ClusterFigures::default()
        };
        let mut r = Registry::default();
        register(&mut r, &f);
        let text = encode(&r, Format::Prometheus).unwrap();
        for line in [
            "# TYPE svc_cluster_map_epoch gauge",
            "svc_cluster_map_epoch 4",
            "svc_cluster_slots_owned 8192",
            "svc_cluster_state_ok 1",
            "svc_cluster_migrating_slots{direction=\"out\"} 0",
            "svc_cluster_migrating_slots{direction=\"in\"} 0",
            "# TYPE svc_cluster_moved_total counter",
            "svc_cluster_moved_total 3",
            "svc_cluster_tryagain_total 0",
            "svc_cluster_migration_entries_total{direction=\"in\"} 0",
            "svc_cluster_migrations_total{result=\"aborted\"} 0",
            "# TYPE svc_cluster_slot_freeze_seconds histogram",
            "svc_cluster_slot_freeze_seconds_bucket{le=\"0.005\"} 0",
            "svc_cluster_slot_freeze_seconds_bucket{le=\"5.0\"} 0",
            "svc_cluster_slot_freeze_seconds_bucket{le=\"+Inf\"} 0",
            "svc_cluster_slot_freeze_seconds_count 0",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }
}
