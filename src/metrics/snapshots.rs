//! The snapshot families: `svc_snapshots_total` (counter), `svc_snapshot_duration_seconds`
//! (histogram, one observation per whole snapshot), `svc_snapshot_bytes` (gauge: the payload of
//! the last one, summed over shards). docs/wal.md "The snapshot walk".

use prometheus_client::registry::Registry;

use super::families::{counter, gauge, Hist};
use super::histogram::HistogramSnapshot;
use super::shard::ShardStats;
use super::shard::SNAPSHOT_BOUNDS_SECONDS;

pub(crate) fn register(r: &mut Registry, shards: &[ShardStats]) {
    let total = shards.iter().map(|s| s.snapshots.total).sum();
    counter(r, "svc_snapshots_total", "Snapshots completed", total);
    let mut duration = HistogramSnapshot::default();
    for s in shards {
        duration.merge(&s.snapshots.duration);
    }
    if duration.buckets.is_empty() {
        duration = HistogramSnapshot::empty(&SNAPSHOT_BOUNDS_SECONDS);
    }
    r.register(
        "svc_snapshot_duration_seconds",
        "Seconds per snapshot, from the walk's start to the file in place",
        Hist(duration),
    );
    let bytes = shards.iter().map(|s| s.snapshots.last_bytes).sum();
    gauge(
        r,
        "svc_snapshot_bytes",
        "Payload bytes of each shard's last snapshot, summed over shards",
        bytes,
    );
}

#[cfg(test)]
mod tests {
    use crate::metrics::exposition::{encode, Format};
    use crate::metrics::families::registry;
    use crate::metrics::families::tests::sample;

    #[test]
    fn snapshot_families_sum_the_shards() {
        let mut s = sample(None);
        for (i, shard) in s.shards.iter_mut().enumerate() {
            shard.snapshots.total = 2 + i as u64;
            shard.snapshots.last_bytes = 1000 * (i as u64 + 1);
            let mut h = shards::wal::Histogram::new(&super::SNAPSHOT_BOUNDS_SECONDS);
            h.observe(0.3);
            shard.snapshots.duration = crate::metrics::shard::snapshot(&h);
        }
        let text = encode(&registry(&s), Format::Prometheus).unwrap();
        for line in [
            "# TYPE svc_snapshots_total counter",
            "svc_snapshots_total 5",
            "# TYPE svc_snapshot_duration_seconds histogram",
            "svc_snapshot_duration_seconds_count 2",
            "svc_snapshot_duration_seconds_bucket{le=\"0.5\"} 2",
            "# TYPE svc_snapshot_bytes gauge",
            "svc_snapshot_bytes 3000",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
