//! The metric families of docs/monitoring/README.md, "Metrics" (names, types and labels exactly as written there) plus a
//! few `svc_` extras, built into a `prometheus_client` registry from one `Scrape`.
//!
//! A fresh registry is built per scrape: every value is a constant read moments before, so
//! nothing here is updated from hot paths. Label values are escaped here (the crate writes
//! them raw) because machine and state names come from clients.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};
use shards::engine::{CountMap, EngineStats, Name};
use shards::wal::{BATCH_BOUNDS_ENTRIES, DURATION_BOUNDS_SECONDS};
use shards::ErrorCode;

use super::histogram::HistogramSnapshot;
use super::scrape::{PrimaryStats, ReplicaStats, ReplicationStats, Scrape};
use super::shard::ShardStats;
use crate::protocol::Op;

/// Counters whose spec name has no `_total` suffix. Every other counter's spec name ends in
/// `_total`, and OpenMetrics appends `_total` to every counter sample, so the registry holds
/// those under their spec name less `_total`. OpenMetrics has no counter whose sample lacks
/// `_total`, so these are registered as type `unknown` with the spec name as sample name: the
/// stored series keeps the spec's name whichever format a scraper negotiates. The Prometheus
/// text declares them `counter` again (`exposition.rs`).
pub const COUNTERS_WITHOUT_TOTAL: [&str; 1] = ["svc_connections_rejected"];

/// Builds the registry for one scrape.
pub fn registry(s: &Scrape) -> Registry {
    let mut r = Registry::default();
    connections(&mut r, s);
    requests(&mut r, s);
    counter(
        &mut r,
        "svc_auth_failures_total",
        "Failed AUTH requests (wrong token or method), and HTTP requests with a bad bearer token",
        // AUTH_FAILED arises only there: an RCP1 AUTH, or any op over HTTP.
        s.fronts
            .errors
            .iter()
            .map(|codes| codes[ErrorCode::AuthFailed.index()])
            .sum(),
    );
    instances(&mut r, s);
    wal(&mut r, &s.shards);
    super::snapshots::register(&mut r, &s.shards);
    gauge(
        &mut r,
        "svc_subscriptions_active",
        "Active subscriptions",
        s.subscriptions_active,
    );
    counter(
        &mut r,
        "svc_events_broadcast_total",
        "Events broadcast to subscribers",
        s.events_broadcast,
    );
    let mut queued = Series::new(MetricType::Gauge);
    for (shard, n) in s.pushes_queued.iter().enumerate() {
        let shard = shard.to_string();
        queued.push(labels(&[("shard", &shard)]), ConstGauge::new(*n));
    }
    r.register(
        "svc_subscription_pushes_queued",
        "Pushes waiting in subscription queues, by the shard they came from",
        queued,
    );
    match &s.replication {
        Some(ReplicationStats::Primary(p)) => primary(&mut r, p),
        Some(ReplicationStats::Replica(p)) => replica(&mut r, p),
        None => {}
    }
    if let Some(ha) = &s.ha {
        super::ha::register(&mut r, ha);
    }
    if let Some(cluster) = &s.cluster {
        super::cluster::register(&mut r, cluster);
    }
    let up = ConstGauge::new(s.uptime_seconds);
    r.register("svc_uptime_seconds", "Seconds since the server started", up);
    gauge(
        &mut r,
        "svc_memory_used_bytes",
        "Resident memory of the process in bytes",
        s.memory_used_bytes,
    );
    r
}

fn connections(r: &mut Registry, s: &Scrape) {
    let f = &s.fronts;
    gauge(
        r,
        "svc_connections_active",
        "Client connections open now",
        f.connections_active,
    );
    counter(
        r,
        "svc_connections_total",
        "Client connections accepted since start",
        f.connections_total,
    );
    counter(
        r,
        "svc_connections_rejected",
        "Connections rejected because network.max_connections was reached",
        f.connections_rejected,
    );
    gauge(
        r,
        "svc_connections_limit",
        "The connection limit (network.max_connections)",
        s.connections_limit,
    );
}

/// The ops whose durations `svc_query_duration_seconds` shows (docs/queries.md).
const QUERY_OPS: [Op; 3] = [Op::ListInstances, Op::FindInstances, Op::ScanInstances];

/// Query durations (docs/queries.md): the request durations of the query ops, under their own
/// name so a dashboard of queries needs no op filter.
fn queries(r: &mut Registry, s: &Scrape) {
    let mut duration = Series::new(MetricType::Histogram);
    for op in QUERY_OPS {
        if s.fronts.requests[op.index()] > 0 {
            let h = Hist(s.fronts.durations[op.index()].clone());
            duration.push(labels(&[("op", op.as_str())]), h);
        }
    }
    r.register(
        "svc_query_duration_seconds",
        "Duration of LIST, FIND and SCAN requests in seconds",
        duration,
    );
}

fn requests(r: &mut Registry, s: &Scrape) {
    let f = &s.fronts;
    let mut total = Series::new(MetricType::Counter);
    let mut duration = Series::new(MetricType::Histogram);
    let mut errors = Series::new(MetricType::Counter);
    for &op in Op::ALL {
        let n = f.requests[op.index()];
        if n > 0 {
            total.push(labels(&[("op", op.as_str())]), ConstCounter::new(n));
            duration.push(
                labels(&[("op", op.as_str())]),
                Hist(f.durations[op.index()].clone()),
            );
        }
        for &code in ErrorCode::ALL {
            let n = f.errors[op.index()][code.index()];
            if n > 0 {
                let l = labels(&[("op", op.as_str()), ("code", code.as_str())]);
                errors.push(l, ConstCounter::new(n));
            }
        }
    }
    register_counter(r, "svc_requests_total", "Requests by operation", total);
    r.register(
        "svc_requests_duration_seconds",
        "Request duration by operation in seconds",
        duration,
    );
    register_counter(
        r,
        "svc_requests_errors_total",
        "Failed requests by operation and error code",
        errors,
    );
}

fn machines(r: &mut Registry, shards: &[ShardStats]) {
    // Every shard holds every definition: the count is the same on all of them.
    let defs = shards.iter().map(|s| s.machines).max().unwrap_or(0);
    gauge(r, "svc_machines_total", "Machine definition versions", defs);
    let instances = shards.iter().map(|s| s.instances).sum::<u64>();
    gauge(r, "svc_instances_total", "Instances", instances);

    let mut by_state: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut applied: BTreeMap<&str, u64> = BTreeMap::new();
    let mut moved: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for s in shards {
        for ((m, st), n) in &s.engine.by_state {
            *by_state.entry((m, st)).or_default() += n;
        }
        for (m, n) in &s.engine.events_applied {
            *applied.entry(m).or_default() += n;
        }
        for ((m, from, to), n) in &s.engine.transitions {
            *moved.entry((m, from, to)).or_default() += n;
        }
    }
    let mut g = Series::new(MetricType::Gauge);
    for ((m, st), n) in by_state {
        g.push(labels(&[("machine", m), ("state", st)]), ConstGauge::new(n));
    }
    r.register(
        "svc_instances_by_state",
        "Instances per machine and state",
        g,
    );
    let mut c = Series::new(MetricType::Counter);
    for (m, n) in applied {
        c.push(labels(&[("machine", m)]), ConstCounter::new(n));
    }
    register_counter(
        r,
        "svc_events_applied_total",
        "Events applied per machine",
        c,
    );
    let mut c = Series::new(MetricType::Counter);
    for ((m, from, to), n) in moved {
        let l = labels(&[("machine", m), ("from", from), ("to", to)]);
        c.push(l, ConstCounter::new(n));
    }
    register_counter(
        r,
        "svc_transitions_total",
        "State changes per machine and state pair",
        c,
    );
}

/// What the shards hold and do with their instances: machines, instances, timers, indexes
/// and queries.
fn instances(r: &mut Registry, s: &Scrape) {
    machines(r, &s.shards);
    timers(r, &s.shards);
    lifecycle(r, &s.shards);
    indexes(r, &s.shards);
    queries(r, s);
}

/// Migrations and retention deletions (docs/lifecycle.md), per machine.
fn lifecycle(r: &mut Registry, shards: &[ShardStats]) {
    let help = "Instances migrated to another definition version per machine";
    per_machine(r, shards, "svc_migrated_instances_total", help, |e| {
        &e.migrated
    });
    let help = "Instances deleted by their machine's retention per machine";
    per_machine(r, shards, "svc_instances_expired_total", help, |e| {
        &e.expired
    });
}

/// A counter per machine, summed over shards from one of the engine's per-machine counts.
fn per_machine(
    r: &mut Registry,
    shards: &[ShardStats],
    name: &str,
    help: &str,
    of: fn(&EngineStats) -> &CountMap<Name>,
) {
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    for s in shards {
        for (m, n) in of(&s.engine) {
            *sums.entry(m).or_default() += n;
        }
    }
    let mut c = Series::new(MetricType::Counter);
    for (m, n) in sums {
        c.push(labels(&[("machine", m)]), ConstCounter::new(n));
    }
    register_counter(r, name, help, c);
}

/// Entries of the declared indexes (docs/queries.md), summed over shards.
fn indexes(r: &mut Registry, shards: &[ShardStats]) {
    let mut entries: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for s in shards {
        for (m, path, n) in &s.index_entries {
            *entries.entry((m, path)).or_default() += n;
        }
    }
    let mut g = Series::new(MetricType::Gauge);
    for ((m, path), n) in entries {
        g.push(
            labels(&[("machine", m), ("index", path)]),
            ConstGauge::new(n),
        );
    }
    r.register(
        "svc_index_entries",
        "Entries of each declared index, by machine and index path",
        g,
    );
}

/// Durable timers (docs/protocol.md, "Timed transitions").
fn timers(r: &mut Registry, shards: &[ShardStats]) {
    let pending = shards.iter().map(|s| s.timers_pending).sum::<u64>();
    gauge(r, "svc_timers_pending", "Armed durable timers", pending);
    let help = "Events applied by durable timers per machine";
    per_machine(r, shards, "svc_timers_fired_total", help, |e| {
        &e.timers_fired
    });
    let lateness = merged(
        shards,
        |s| &s.timer_lateness,
        &super::shard::LATENESS_BOUNDS_SECONDS,
    );
    r.register(
        "svc_timer_lateness_seconds",
        "Seconds from a timer's due time to its fire",
        Hist(lateness),
    );
}

fn wal(r: &mut Registry, shards: &[ShardStats]) {
    let sum = |f: fn(&ShardStats) -> u64| shards.iter().map(f).sum::<u64>();
    gauge(
        r,
        "svc_wal_offset",
        "Log offset (sum of every shard's newest entry offset)",
        sum(|s| s.log.offset),
    );
    gauge(
        r,
        "svc_wal_size_bytes",
        "Bytes in all log segments",
        sum(|s| s.log.size_bytes),
    );
    gauge(
        r,
        "svc_wal_segments",
        "Log segments",
        sum(|s| s.log.segments),
    );
    counter(
        r,
        "svc_wal_writes_total",
        "Log writes (one per group commit)",
        sum(|s| s.log.writes_total),
    );
    let write = merged(shards, |s| &s.log.write_duration, &DURATION_BOUNDS_SECONDS);
    let fsync = merged(shards, |s| &s.log.fsync_duration, &DURATION_BOUNDS_SECONDS);
    let batch = merged(shards, |s| &s.log.batch_size, &BATCH_BOUNDS_ENTRIES);
    r.register(
        "svc_wal_write_duration_seconds",
        "Log segment write duration in seconds (fdatasync excluded)",
        Hist(write),
    );
    counter(
        r,
        "svc_wal_fsyncs_total",
        "Log fsync (fdatasync) operations",
        sum(|s| s.log.fsyncs_total),
    );
    // Extras.
    gauge(
        r,
        "svc_wal_durable_offset",
        "Log offset on disk (sum over shards)",
        sum(|s| s.log.durable),
    );
    counter(
        r,
        "svc_wal_entries_total",
        "Log entries appended since start",
        sum(|s| s.log.entries_total),
    );
    r.register(
        "svc_wal_batch_size",
        "Log entries per group-commit write",
        Hist(batch),
    );
    r.register(
        "svc_wal_fsync_duration_seconds",
        "Log fdatasync duration in seconds",
        Hist(fsync),
    );
    let poisoned = shards.iter().filter(|s| s.log.poisoned).count() as u64;
    gauge(
        r,
        "svc_wal_poisoned_shards",
        "Shards whose log failed and refuses writes",
        poisoned,
    );
    let full = shards.iter().any(|s| s.log.storage_full);
    gauge(
        r,
        "svc_wal_storage_full",
        "1 while any shard refuses writes because the disk is full (STORAGE_FULL)",
        u64::from(full),
    );
    counter(
        r,
        "svc_wal_archived_segments_total",
        "Closed log segments copied into storage.archive_dir",
        sum(|s| s.log.archived_segments_total),
    );
    counter(
        r,
        "svc_wal_archive_failures_total",
        "Failed attempts to copy a closed log segment into storage.archive_dir (retried)",
        sum(|s| s.log.archive_failures_total),
    );
    let mut depth = Series::new(MetricType::Gauge);
    for s in shards {
        let shard = s.shard.to_string();
        depth.push(labels(&[("shard", &shard)]), ConstGauge::new(s.queue_depth));
    }
    r.register(
        "svc_shard_queue_depth",
        "Replies waiting for the log per shard",
        depth,
    );
}

/// Every shard's histogram added up, on the first shard's bounds (all shards use the same).
fn merged(
    shards: &[ShardStats],
    of: fn(&ShardStats) -> &HistogramSnapshot,
    fallback: &[f64],
) -> HistogramSnapshot {
    let mut total = HistogramSnapshot::default();
    for s in shards {
        total.merge(of(s));
    }
    if total.buckets.is_empty() {
        total = HistogramSnapshot::empty(fallback);
    }
    total
}

fn primary(r: &mut Registry, p: &PrimaryStats) {
    gauge(
        r,
        "svc_replication_connected_replicas",
        "Replicas connected",
        p.connected_replicas,
    );
    counter(
        r,
        "svc_replication_entries_sent_total",
        "Log entries fanned out to replicas",
        p.entries_sent,
    );
    counter(
        r,
        "svc_replication_sync_timeouts_total",
        "Writes exceeding sync_timeout_ms in sync mode",
        p.sync_timeouts,
    );
    counter(
        r,
        "svc_replication_slow_replica_disconnects_total",
        "Replicas dropped because their fan-out queue filled",
        p.slow_replica_disconnects,
    );
    let mut lag = Series::new(MetricType::Gauge);
    let mut acked = Series::new(MetricType::Gauge);
    for rep in &p.replicas {
        let l = labels(&[("replica_id", &rep.replica_id)]);
        lag.push(l.clone(), ConstGauge::new(rep.lag_entries));
        acked.push(l, ConstGauge::new(rep.last_acked_sequence));
    }
    r.register(
        "svc_replication_replica_lag_entries",
        "Per-replica lag in log entries",
        lag,
    );
    r.register(
        "svc_replication_replica_last_acked_sequence",
        "Per-replica last acknowledged log sequence",
        acked,
    );
    truncated(r, p.truncated_entries);
}

/// Entries a member dropped from its log when it rejoined as a replica (docs/replication.md); shown
/// in both roles, since a rejoined member that is later promoted keeps its count.
fn truncated(r: &mut Registry, n: u64) {
    counter(
        r,
        "svc_replication_truncated_entries_total",
        "Log entries dropped when rejoining as a replica (an unreplicated tail)",
        n,
    );
}

fn replica(r: &mut Registry, p: &ReplicaStats) {
    gauge(
        r,
        "svc_replication_lag_entries",
        "Log entries behind the primary",
        p.lag_entries,
    );
    let secs = ConstGauge::new(p.lag_seconds);
    r.register(
        "svc_replication_lag_seconds",
        "Seconds behind the primary's latest write",
        secs,
    );
    truncated(r, p.truncated_entries);
}

pub(super) fn gauge(r: &mut Registry, name: &str, help: &str, v: u64) {
    r.register(name, help, ConstGauge::new(v));
}

pub(super) fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    if COUNTERS_WITHOUT_TOTAL.contains(&name) {
        r.register(name, help, SuffixlessCounter(v));
    } else {
        register_counter(r, name, help, ConstCounter::new(v));
    }
}

/// A counter family with one label: a series per `(value, count)`.
pub(super) fn counter_by<'a>(
    r: &mut Registry,
    name: &str,
    help: &str,
    label: &'static str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let mut series = Series::new(MetricType::Counter);
    for (value, n) in values {
        series.push(labels(&[(label, value)]), ConstCounter::new(n));
    }
    register_counter(r, name, help, series);
}

/// Registers a counter under its spec name less `_total` (OpenMetrics adds it back).
pub(super) fn register_counter(r: &mut Registry, spec_name: &str, help: &str, m: impl Metric) {
    debug_assert!(
        spec_name.ends_with("_total"),
        "{spec_name}: see COUNTERS_WITHOUT_TOTAL"
    );
    let base = spec_name.strip_suffix("_total").unwrap_or(spec_name);
    r.register(base, help, m);
}

/// A counter whose spec name lacks `_total` (see `COUNTERS_WITHOUT_TOTAL`).
#[derive(Debug)]
struct SuffixlessCounter(u64);

impl EncodeMetric for SuffixlessCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_gauge(&self.0) // a bare `name value` sample
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// A label set; values are escaped when encoded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Labels(Vec<(&'static str, Escaped)>);

pub(super) fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    Labels(
        pairs
            .iter()
            .map(|(k, v)| (*k, Escaped(v.to_string())))
            .collect(),
    )
}

impl EncodeLabelSet for Labels {
    fn encode(&self, encoder: prometheus_client::encoding::LabelSetEncoder) -> std::fmt::Result {
        self.0.as_slice().encode(encoder)
    }
}

/// A label value written with the text formats' escapes: `\\`, `\"` and `\n`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Escaped(String);

impl EncodeLabelValue for Escaped {
    fn encode(&self, w: &mut LabelValueEncoder) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => w.write_str("\\\\")?,
                '"' => w.write_str("\\\"")?,
                '\n' => w.write_str("\\n")?,
                c => w.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Labelled series of one family, encoded in the order pushed (sorted input gives a stable
/// exposition; the crate's `Family` iterates a hash map).
#[derive(Debug)]
pub(super) struct Series<M> {
    kind: MetricType,
    items: Vec<(Labels, M)>,
}

impl<M> Series<M> {
    pub(super) fn new(kind: MetricType) -> Self {
        Series {
            kind,
            items: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, l: Labels, m: M) {
        self.items.push((l, m));
    }
}

impl<M: EncodeMetric> EncodeMetric for Series<M> {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        for (l, m) in &self.items {
            m.encode(encoder.encode_family(l)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

/// A histogram snapshot as a crate metric.
#[derive(Debug)]
pub(super) struct Hist(pub(super) HistogramSnapshot);

impl EncodeMetric for Hist {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        // The crate writes `le="+Inf"` for a bound of f64::MAX.
        let mut buckets: Vec<(f64, u64)> = self
            .0
            .buckets
            .iter()
            .map(|(b, n)| (if b.is_finite() { *b } else { f64::MAX }, *n))
            .collect();
        if !buckets.last().is_some_and(|(b, _)| *b == f64::MAX) {
            buckets.push((f64::MAX, 0)); // a histogram always ends with the +Inf bucket
        }
        encoder.encode_histogram::<NoLabelSet>(self.0.sum, self.0.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::metrics::exposition::{encode, Format};
    use crate::metrics::front::{FrontStats, FrontTotals};
    use crate::metrics::scrape::ReplicaPosition;

    /// Spec §4.3: every metric with its type (replication ones checked separately).
    const SPEC: [(&str, &str); 22] = [
        ("svc_connections_active", "gauge"),
        ("svc_connections_total", "counter"),
        ("svc_connections_rejected", "counter"),
        ("svc_requests_total", "counter"),
        ("svc_requests_duration_seconds", "histogram"),
        ("svc_requests_errors_total", "counter"),
        ("svc_machines_total", "gauge"),
        ("svc_instances_total", "gauge"),
        ("svc_instances_by_state", "gauge"),
        ("svc_events_applied_total", "counter"),
        ("svc_transitions_total", "counter"),
        ("svc_wal_offset", "gauge"),
        ("svc_wal_size_bytes", "gauge"),
        ("svc_wal_segments", "gauge"),
        ("svc_wal_writes_total", "counter"),
        ("svc_wal_write_duration_seconds", "histogram"),
        ("svc_wal_fsyncs_total", "counter"),
        ("svc_subscriptions_active", "gauge"),
        ("svc_events_broadcast_total", "counter"),
        ("svc_uptime_seconds", "gauge"),
        ("svc_memory_used_bytes", "gauge"),
        ("svc_connections_limit", "gauge"),
    ];

    fn shard(i: u32, machine: &str) -> ShardStats {
        let mut s = ShardStats {
            shard: i,
            instances: 2,
            machines: 1,
            ..ShardStats::default()
        };
        let m: shards::engine::Name = machine.into();
        s.engine.by_state.insert((m.clone(), "new".into()), 1);
        s.engine.by_state.insert((m.clone(), "paid".into()), 1);
        s.engine.events_applied.insert(m.clone(), 3);
        s.engine
            .transitions
            .insert((m, "new".into(), "paid".into()), 1);
        s.log.offset = 5;
        s.log.segments = 1;
        s.log.writes_total = 4;
        s.log.write_duration.buckets[1].1 = 4; // <= 100 µs
        s
    }

    pub(crate) fn sample(role: Option<ReplicationStats>) -> Scrape {
        let f = std::sync::Arc::new(FrontStats::default());
        f.record_ok(Op::Ping, Duration::from_micros(40));
        f.record_failure(
            Op::ApplyEvent,
            ErrorCode::GuardFailed,
            Duration::from_millis(1),
        );
        f.connection_opened();
        f.connection_rejected();
        Scrape {
            fronts: FrontTotals::sum(&[f]),
            shards: vec![shard(0, "order"), shard(1, "order")],
            connections_limit: 1024,
            uptime_seconds: 1.5,
            memory_used_bytes: 1 << 20,
            subscriptions_active: 0,
            events_broadcast: 0,
            pushes_queued: vec![0, 0],
            replication: role,
            ha: None,
            cluster: None,
        }
    }

    fn type_lines(text: &str) -> HashMap<String, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    fn prometheus(s: &Scrape) -> String {
        encode(&registry(s), Format::Prometheus).unwrap()
    }

    #[test]
    fn every_spec_metric_has_its_name_and_type() {
        let text = prometheus(&sample(None));
        let types = type_lines(&text);
        for (name, kind) in SPEC {
            assert_eq!(
                types.get(name).map(String::as_str),
                Some(kind),
                "{name}\n{text}"
            );
        }
        assert!(
            !text.contains("svc_replication_"),
            "standalone: no replication metrics"
        );
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn samples_sum_fronts_and_shards() {
        let text = prometheus(&sample(None));
        for line in [
            "svc_requests_total{op=\"PING\"} 1",
            "svc_requests_total{op=\"APPLY_EVENT\"} 1",
            "svc_requests_errors_total{op=\"APPLY_EVENT\",code=\"GUARD_FAILED\"} 1",
            "svc_requests_duration_seconds_bucket{le=\"0.00005\",op=\"PING\"} 1",
            "svc_requests_duration_seconds_bucket{le=\"+Inf\",op=\"PING\"} 1",
            "svc_requests_duration_seconds_count{op=\"PING\"} 1",
            "svc_connections_rejected 1",
            "svc_connections_total 1",
            "svc_connections_active 1",
            "svc_connections_limit 1024",
            "svc_machines_total 1",
            "svc_instances_total 4",
            "svc_instances_by_state{machine=\"order\",state=\"new\"} 2",
            "svc_events_applied_total{machine=\"order\"} 6",
            "svc_transitions_total{machine=\"order\",from=\"new\",to=\"paid\"} 2",
            "svc_wal_offset 10",
            "svc_wal_segments 2",
            "svc_wal_writes_total 8",
            "svc_wal_write_duration_seconds_count 8",
            "svc_wal_write_duration_seconds_bucket{le=\"0.0001\"} 8",
            "svc_shard_queue_depth{shard=\"1\"} 0",
            "svc_memory_used_bytes 1048576",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = sample(None);
        s.shards = vec![shard(0, "a\"b\\c\nd")];
        let text = prometheus(&s);
        let want = "svc_events_applied_total{machine=\"a\\\"b\\\\c\\nd\"} 3";
        assert!(text.lines().any(|l| l == want), "{text}");
    }

    #[test]
    fn replication_metrics_follow_the_role() {
        let primary = PrimaryStats {
            replicas: vec![ReplicaPosition {
                replica_id: "r1".into(),
                lag_entries: 3,
                last_acked_sequence: 9,
            }],
            ..PrimaryStats::default()
        };
        let text = prometheus(&sample(Some(ReplicationStats::Primary(primary))));
        let types = type_lines(&text);
        for (name, kind) in [
            ("svc_replication_connected_replicas", "gauge"),
            ("svc_replication_entries_sent_total", "counter"),
            ("svc_replication_sync_timeouts_total", "counter"),
            ("svc_replication_slow_replica_disconnects_total", "counter"),
            ("svc_replication_replica_lag_entries", "gauge"),
            ("svc_replication_replica_last_acked_sequence", "gauge"),
        ] {
            assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
        }
        assert!(text.contains("svc_replication_replica_lag_entries{replica_id=\"r1\"} 3"));
        assert!(
            !text.contains("svc_replication_lag_"),
            "replica metrics on a primary"
        );
        let text = prometheus(&sample(Some(ReplicationStats::Replica(
            ReplicaStats::default(),
        ))));
        let replica = type_lines(&text);
        assert_eq!(replica.get("svc_replication_lag_entries").unwrap(), "gauge");
        assert_eq!(replica.get("svc_replication_lag_seconds").unwrap(), "gauge");
        assert!(!text.contains("svc_replication_connected_replicas"));
    }

    #[test]
    fn openmetrics_keeps_counter_families_and_ends_with_eof() {
        let text = encode(&registry(&sample(None)), Format::OpenMetrics).unwrap();
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("# TYPE svc_requests counter\n"));
        assert!(text.contains("svc_requests_total{op=\"PING\"} 1\n"));
        assert!(text.contains("# TYPE svc_connections_rejected unknown\n"));
        assert!(text.contains("svc_connections_rejected 1\n"));
    }
}
