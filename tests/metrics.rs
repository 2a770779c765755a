//! The metrics listener against the real server (docs/monitoring/README.md, "The metrics listener", §4.3): every spec metric with its
//! type, exact increments after known requests, connection figures at a limit, replication
//! metrics by role, /health, content negotiation, promtool on the exposition and the alert
//! rules, and the listener's absence when disabled.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::run::{output, output_ok, output_with_stdin};
use common::scrape::*;
use common::tools::promtool;
use common::*;
use serde_json::{json, Value};

/// Metrics on, on an ephemeral port.
const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";

fn with_metrics(extra: &str) -> String {
    format!("{METRICS}\n{extra}")
}

/// Spec §4.3 (replication aside) plus `svc_connections_limit`, with Prometheus types.
const SPEC: [(&str, &str); 22] = [
    ("svc_connections_active", "gauge"),
    ("svc_connections_total", "counter"),
    ("svc_connections_rejected", "counter"),
    ("svc_connections_limit", "gauge"),
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
];

const PRIMARY: [(&str, &str); 6] = [
    ("svc_replication_connected_replicas", "gauge"),
    ("svc_replication_entries_sent_total", "counter"),
    ("svc_replication_sync_timeouts_total", "counter"),
    ("svc_replication_slow_replica_disconnects_total", "counter"),
    ("svc_replication_replica_lag_entries", "gauge"),
    ("svc_replication_replica_last_acked_sequence", "gauge"),
];

const REPLICA: [&str; 2] = ["svc_replication_lag_entries", "svc_replication_lag_seconds"];

fn apply(c: &mut Client, id: &str, event: &str, payload: Value) -> Result<Value, ClientError> {
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": id, "event": event, "payload": payload}),
    )
}

#[test]
fn every_spec_metric_is_exposed_with_its_type() {
    let (s, _d) = Server::start(METRICS);
    let r = http_get(metrics_addr(&s), "/metrics", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let e = Exposition::parse(&r.body);
    for (name, kind) in SPEC {
        assert_eq!(
            e.types.get(name).map(String::as_str),
            Some(kind),
            "{name} in\n{}",
            e.text
        );
    }
    assert!(!e.text.contains("# EOF"), "Prometheus text has no EOF");
    assert_eq!(e.get("svc_connections_limit", &[]), 1024.0);
    assert!(e.get("svc_memory_used_bytes", &[]) > 1e6, "resident memory");
    assert!(e.get("svc_uptime_seconds", &[]) >= 0.0);
}

#[test]
fn requests_and_errors_count_each_request_by_op_and_code() {
    let (s, _d) = Server::start(&with_metrics("[shards]\ncount = 2"));
    let before = scrape(&s);
    let mut c = s.client(); // HELLO
    for _ in 0..3 {
        c.call("PING", json!({})).unwrap();
    }
    assert_eq!(
        err_code(c.call("NO_SUCH_OP", json!({}))),
        "UNKNOWN_OPERATION"
    );
    let missing = c.call("GET_INSTANCE", json!({"id": "nope"}));
    assert_eq!(err_code(missing), "INSTANCE_NOT_FOUND");
    let mut raw = s.raw_client();
    assert_eq!(err_code(raw.call("INFO", json!({}))), "HELLO_REQUIRED");
    let after = scrape(&s);

    let delta =
        |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);
    assert_eq!(delta("svc_requests_total", &[("op", "HELLO")]), 1.0);
    assert_eq!(delta("svc_requests_total", &[("op", "PING")]), 3.0);
    assert_eq!(delta("svc_requests_total", &[("op", "UNKNOWN")]), 1.0);
    assert_eq!(delta("svc_requests_total", &[("op", "GET_INSTANCE")]), 1.0);
    assert_eq!(delta("svc_requests_total", &[("op", "INFO")]), 1.0);
    let errors = "svc_requests_errors_total";
    assert_eq!(
        delta(errors, &[("op", "UNKNOWN"), ("code", "UNKNOWN_OPERATION")]),
        1.0
    );
    assert_eq!(
        delta(
            errors,
            &[("op", "GET_INSTANCE"), ("code", "INSTANCE_NOT_FOUND")]
        ),
        1.0
    );
    assert_eq!(
        delta(errors, &[("op", "INFO"), ("code", "HELLO_REQUIRED")]),
        1.0
    );
    assert!(after
        .series(errors)
        .iter()
        .all(|(l, _)| l.get("op").map(String::as_str) != Some("PING")));
    let count = "svc_requests_duration_seconds_count";
    assert_eq!(delta(count, &[("op", "PING")]), 3.0);
    let inf = [("op", "PING"), ("le", "+Inf")];
    assert_eq!(delta("svc_requests_duration_seconds_bucket", &inf), 3.0);
}

#[test]
fn frame_errors_are_counted_under_op_frame() {
    let (s, _d) = Server::start(METRICS);
    let mut c = s.raw_client();
    // Bad magic, 4 flag bytes, length 2, a checksum, the payload.
    c.send_raw(b"XXXX\0\0\0\0\0\0\0\x02\0\0\0\0{}").unwrap();
    let _ = c.read_message(); // the INVALID_FRAME error, then the server closes
    let e = scrape(&s);
    let labels = [("op", "FRAME"), ("code", "INVALID_FRAME")];
    assert_eq!(e.get("svc_requests_errors_total", &labels), 1.0);
}

#[test]
fn engine_metrics_follow_creates_transitions_and_deletes() {
    let (s, _d) = Server::start(&with_metrics("[shards]\ncount = 2"));
    let mut c = s.order_client();
    for id in ["o1", "o2", "o3"] {
        create_order(&mut c, id, 10);
    }
    apply(&mut c, "o1", "pay", json!({"amount": 10})).unwrap(); // new -> paid
    let refused = apply(&mut c, "o2", "pay", json!({"amount": 5}));
    assert_eq!(err_code(refused), "GUARD_FAILED");
    apply(&mut c, "o1", "touch", json!({})).unwrap(); // paid -> paid: applied, no transition
    c.call("DELETE_INSTANCE", json!({"id": "o3"})).unwrap();

    let e = scrape(&s);
    assert_eq!(e.get("svc_machines_total", &[]), 1.0);
    assert_eq!(e.get("svc_instances_total", &[]), 2.0);
    let state = |st: &str| {
        e.get(
            "svc_instances_by_state",
            &[("machine", "order"), ("state", st)],
        )
    };
    assert_eq!(
        (state("new"), state("paid"), state("shipped")),
        (1.0, 1.0, 0.0)
    );
    assert_eq!(
        e.get("svc_events_applied_total", &[("machine", "order")]),
        2.0
    );
    let moved = |from: &str, to: &str| {
        let l = [("machine", "order"), ("from", from), ("to", to)];
        e.value("svc_transitions_total", &l)
    };
    assert_eq!(moved("new", "paid"), Some(1.0));
    assert_eq!(
        moved("paid", "paid"),
        None,
        "a self-loop is not a transition"
    );
    assert_eq!(e.series("svc_transitions_total").len(), 1);
    let guard = [("op", "APPLY_EVENT"), ("code", "GUARD_FAILED")];
    assert_eq!(e.get("svc_requests_errors_total", &guard), 1.0);
}

/// The log's figures move by exactly the entries written: with sequential requests each write
/// is its own group commit, one segment write and one durability point. Under `always` that is
/// the O_DSYNC write itself: `svc_wal_fsyncs_total` counts it, and no explicit fdatasync (the
/// fsync duration histogram) happens per commit.
#[test]
fn wal_metrics_count_each_entry_write_and_fsync() {
    let (s, _d) = Server::start(&with_metrics("[storage]\nfsync = \"always\""));
    let mut c = s.order_client();
    let before = scrape(&s);
    for i in 0..5 {
        create_order(&mut c, &format!("w{i}"), 1);
    }
    for i in 0..3 {
        apply(&mut c, &format!("w{i}"), "pay", json!({"amount": 1})).unwrap();
    }
    let after = scrape(&s);
    let delta = |name: &str| after.get(name, &[]) - before.get(name, &[]);
    assert_eq!(delta("svc_wal_offset"), 8.0, "one entry per write");
    assert_eq!(delta("svc_wal_entries_total"), 8.0);
    assert_eq!(
        after.get("svc_wal_durable_offset", &[]),
        after.get("svc_wal_offset", &[])
    );
    assert!(after.get("svc_wal_segments", &[]) >= 1.0);
    assert_eq!(delta("svc_wal_writes_total"), 8.0);
    assert_eq!(delta("svc_wal_fsyncs_total"), 8.0);
    assert_eq!(delta("svc_wal_write_duration_seconds_count"), 8.0);
    assert_eq!(delta("svc_wal_fsync_duration_seconds_count"), 0.0);
    assert_eq!(delta("svc_wal_batch_size_count"), 8.0);
    let one_entry = [("le", "1.0")];
    let b = |e: &Exposition| e.get("svc_wal_batch_size_bucket", &one_entry);
    assert_eq!(b(&after) - b(&before), 8.0, "batches of one entry");
    assert!(
        delta("svc_wal_size_bytes") > 8.0 * 16.0,
        "entries take bytes"
    );
    assert_eq!(after.get("svc_wal_poisoned_shards", &[]), 0.0);
}

/// `svc_instances_by_state` after a restart shows exactly what recovery rebuilt from the log.
#[test]
fn instances_by_state_is_exact_after_recovery() {
    let (mut s, _d) = Server::start(&with_metrics("[shards]\ncount = 2"));
    let mut c = s.order_client();
    for id in ["r1", "r2", "r3", "r4"] {
        create_order(&mut c, id, 1);
    }
    apply(&mut c, "r1", "pay", json!({"amount": 1})).unwrap();
    apply(&mut c, "r2", "cancel", json!({})).unwrap();
    c.call("DELETE_INSTANCE", json!({"id": "r4"})).unwrap();
    let before = scrape(&s);
    drop(c);
    s.restart_after_kill();
    let after = scrape(&s);
    let state = |e: &Exposition, st: &str| {
        e.get(
            "svc_instances_by_state",
            &[("machine", "order"), ("state", st)],
        )
    };
    assert_eq!(before.get("svc_instances_total", &[]), 3.0);
    assert_eq!(after.get("svc_instances_total", &[]), 3.0);
    for (st, n) in [
        ("new", 1.0),
        ("paid", 1.0),
        ("cancelled", 1.0),
        ("shipped", 0.0),
    ] {
        assert_eq!(state(&before, st), n, "{st} before");
        assert_eq!(state(&after, st), n, "{st} after recovery");
    }
    let applied = |e: &Exposition| e.get("svc_events_applied_total", &[("machine", "order")]);
    assert_eq!(
        applied(&after),
        applied(&before),
        "replay counts what apply counted"
    );
}

#[test]
fn connections_active_total_and_rejected_at_the_limit() {
    let (s, _d) = Server::start(&with_metrics("[network]\nmax_connections = 2"));
    let c1 = s.client();
    let _c2 = s.client();
    let mut c3 = s.raw_client();
    let refused = c3.read_message().expect("a CONNECTION_LIMIT frame");
    assert_eq!(refused["error"]["code"], "CONNECTION_LIMIT");
    let e = scrape(&s);
    assert_eq!(e.get("svc_connections_limit", &[]), 2.0);
    assert_eq!(e.get("svc_connections_active", &[]), 2.0);
    assert_eq!(e.get("svc_connections_total", &[]), 2.0);
    assert_eq!(e.get("svc_connections_rejected", &[]), 1.0);
    drop(c1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = scrape(&s);
        if e.get("svc_connections_active", &[]) == 1.0 {
            assert_eq!(e.get("svc_connections_total", &[]), 2.0);
            break;
        }
        assert!(Instant::now() < deadline, "active never dropped to 1");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn replication_metrics_only_with_a_role() {
    let (s, _d) = Server::start(METRICS);
    let e = scrape(&s);
    assert!(
        !e.text.contains("svc_replication_"),
        "standalone:\n{}",
        e.text
    );
    drop(s);

    let (s, _d) = Server::start(&with_metrics("[replication]\nrole = \"primary\""));
    let e = scrape(&s);
    for (name, kind) in PRIMARY {
        assert_eq!(e.types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    for name in REPLICA {
        assert!(!e.types.contains_key(name), "{name} on a primary");
    }
    assert_eq!(e.get("svc_replication_connected_replicas", &[]), 0.0);
    assert_eq!(e.get("svc_replication_entries_sent_total", &[]), 0.0);
    assert!(e.series("svc_replication_replica_lag_entries").is_empty());
}

#[test]
fn health_is_200_with_json_and_other_paths_are_refused() {
    let (s, _d) = Server::start(METRICS);
    let addr = metrics_addr(&s);
    let r = http_get(addr, "/health", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["shards"], 1);

    assert_eq!(http_get(addr, "/nope", &[]).status, 404);
    assert_eq!(http_get(addr, "/metrics/x", &[]).status, 404);
    let post = http_raw(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.status, 405);
    let head = http_raw(addr, b"HEAD /health HTTP/1.1\r\n\r\n");
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(http_raw(addr, b"NOT HTTP AT ALL\r\n\r\n").status, 400);
}

#[test]
fn request_heads_are_bounded_in_size_and_time() {
    let (s, _d) = Server::start(METRICS);
    let addr = metrics_addr(&s);
    let big = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9000)
    );
    assert_eq!(http_raw(addr, big.as_bytes()).status, 431);

    let started = Instant::now();
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(&mut slow, b"GET /metrics HTTP/1.1\r\n").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = String::new();
    let _ = slow.read_to_string(&mut got);
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(15),
        "{took:?}"
    );
    // The listener still serves.
    assert_eq!(http_get(addr, "/health", &[]).status, 200);
}

#[test]
fn openmetrics_is_served_when_the_scraper_prefers_it() {
    let (s, _d) = Server::start(METRICS);
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let r = http_get(metrics_addr(&s), "/metrics", &[("Accept", accept)]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(r.body.ends_with("# EOF\n"));
    assert!(r.body.contains("# TYPE svc_requests counter\n"));
    // OpenMetrics counters end in `_total`; this one keeps its spec name as type `unknown`.
    assert!(r.body.contains("# TYPE svc_connections_rejected unknown\n"));
    assert!(r.body.contains("\nsvc_connections_rejected 0\n"));
    let plain = http_get(metrics_addr(&s), "/metrics", &[("Accept", "text/plain")]);
    assert!(plain.body.contains("# TYPE svc_requests_total counter\n"));
}

#[test]
fn metrics_listener_is_absent_when_disabled() {
    // A port that is busy: a disabled listener must not even try to bind it.
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let extra = format!(
        "[metrics]\nenabled = false\nbind_addr = \"{}\"",
        busy.local_addr().unwrap()
    );
    let (s, _d) = Server::start(&extra);
    assert_eq!(s.metrics_addr, None, "no ` metrics=` on the stdout line");
    s.client().call("PING", json!({})).unwrap();
}

#[test]
fn busy_metrics_port_fails_start_up_naming_it() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap();
    let dir = temp_dir();
    let extra = format!("[metrics]\nenabled = true\nbind_addr = \"{addr}\"");
    let err = Server::start_in(dir.path(), &extra)
        .err()
        .expect("a busy metrics port must fail start-up");
    assert!(err.contains("metrics.bind_addr"), "{err}");
    assert!(err.to_lowercase().contains("address in use"), "{err}");
}

/// promtool lints names; the spec fixes three names that its lint dislikes. Those and only
/// those are tolerated.
const SPEC_LINT_EXCEPTIONS: [&str; 3] = [
    "svc_connections_rejected counter metrics should have \"_total\" suffix",
    "svc_instances_total non-counter metrics should not have \"_total\" suffix",
    "svc_machines_total non-counter metrics should not have \"_total\" suffix",
];

fn promtool_check_metrics(text: &str) {
    let (code, stdout, stderr) =
        output_with_stdin(Command::new(promtool()).args(["check", "metrics"]), text);
    let report = format!("{stdout}{stderr}");
    // promtool exits 3 when it only has lint findings, 1 when the text does not parse.
    assert!(
        matches!(code, 0 | 3),
        "promtool failed (exit {code}):\n{report}\n{text}"
    );
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            SPEC_LINT_EXCEPTIONS.contains(&line.trim()),
            "promtool: {line}\n{text}"
        );
    }
}

#[test]
fn promtool_accepts_the_exposition() {
    let (s, _d) = Server::start(&with_metrics(
        "[shards]\ncount = 2\n[replication]\nrole = \"primary\"",
    ));
    let mut c = s.order_client();
    create_order(&mut c, "p1", 1);
    apply(&mut c, "p1", "pay", json!({"amount": 1})).unwrap();
    let _ = c.call("NO_SUCH_OP", json!({}));
    let r = http_get(metrics_addr(&s), "/metrics", &[]);
    promtool_check_metrics(&r.body);
}

#[test]
fn promtool_accepts_the_alert_rules() {
    output_ok(Command::new(promtool()).args(["check", "rules", ALERTS]));
}

/// Every family the server can expose (including both replication roles), built through the
/// library from synthetic figures, parses and lints clean: no running engine needed.
#[test]
fn promtool_accepts_every_family_with_labels() {
    for text in synthetic_expositions() {
        promtool_check_metrics(&text);
    }
}

/// The Prometheus text for synthetic figures: standalone, primary and replica.
fn synthetic_expositions() -> Vec<String> {
    use smdb::metrics::exposition::{encode, Format};
    use smdb::metrics::families::registry;
    use smdb::metrics::front::FrontTotals;
    use smdb::metrics::scrape::{PrimaryStats, ReplicaPosition, ReplicaStats};
    use smdb::metrics::scrape::{ReplicationStats, Scrape};
    use smdb::metrics::{FrontStats, ShardStats};
    use smdb::protocol::Op;

    let f = std::sync::Arc::new(FrontStats::default());
    f.record_ok(Op::Ping, Duration::from_micros(70));
    f.record_failure(
        Op::ApplyEvent,
        shards::ErrorCode::GuardFailed,
        Duration::from_millis(3),
    );
    let mut shard = ShardStats::default();
    let key = |a: &str, b: &str| (a.into(), b.into());
    shard.engine.by_state.insert(key("order", "new"), 2);
    shard
        .engine
        .by_state
        .insert(key("we\"ird\\name", "st\nate"), 1);
    shard.engine.events_applied.insert("order".into(), 4);
    shard.engine.timers_fired.insert("order".into(), 1);
    let t = ("order".into(), "new".into(), "paid".into());
    shard.engine.transitions.insert(t, 1);
    shard.log.write_duration.buckets[2].1 = 3;
    shard.log.write_duration.sum = 0.0001;
    let primary = PrimaryStats {
        replicas: vec![ReplicaPosition {
            replica_id: "replica-a".into(),
            lag_entries: 2,
            last_acked_sequence: 40,
        }],
        ..PrimaryStats::default()
    };
    let mut out = Vec::new();
    let roles = [
        None,
        Some(ReplicationStats::Primary(primary)),
        Some(ReplicationStats::Replica(ReplicaStats::default())),
    ];
    for (i, role) in roles.into_iter().enumerate() {
        // The primary's scrape also carries the failover families (ha.enabled).
        let ha = (i == 1).then(|| smdb::metrics::ha::HaFigures {
            is_primary: true,
            epoch: 3,
            lease_remaining_seconds: 2.5,
            failovers: 1,
            demotions: vec![("lease_expired", 0)],
            etcd_errors: 2,
        });
        let scrape = Scrape {
            fronts: FrontTotals::sum(std::slice::from_ref(&f)),
            shards: vec![shard.clone()],
            connections_limit: 1024,
            uptime_seconds: 2.5,
            memory_used_bytes: 1 << 24,
            subscriptions_active: 0,
            events_broadcast: 0,
            pushes_queued: vec![0],
            replication: role,
            ha,
            // The primary's scrape is also a cluster member's.
            cluster: (i == 1).then(smdb::metrics::cluster::ClusterFigures::default),
        };
        out.push(encode(&registry(&scrape), Format::Prometheus).unwrap());
    }
    out
}

/// Every `svc_` name in `text`.
fn svc_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("svc_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/docs/monitoring/grafana-dashboard.json"
);
const ALERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/monitoring/alerts.yml");

#[test]
fn dashboard_and_alerts_query_only_exposed_metrics() {
    let mut exposed = std::collections::HashSet::new();
    for text in synthetic_expositions() {
        for (name, _, _) in Exposition::parse(&text).samples {
            exposed.insert(name);
        }
    }
    for path in [DASHBOARD, ALERTS] {
        let text = std::fs::read_to_string(path).unwrap();
        let names = svc_names(&text);
        assert!(names.len() > 10, "{path} queries smdb metrics");
        for name in names {
            assert!(
                exposed.contains(&name),
                "{path} uses {name}, which is not exposed"
            );
        }
    }
}

/// The alert rules' own unit tests (failover alerts firing, pending and clearing on the series a
/// failover leaves) pass under promtool.
#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let tests = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/monitoring/alerts.test.yml"
    );
    output_ok(Command::new(promtool()).args(["test", "rules", tests]));
}

/// Each dashboard query, with Grafana's variables filled in, parses as PromQL (promtool checks
/// them as recording rules).
#[test]
fn dashboard_queries_are_valid_promql() {
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut n = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$job", "smdb")
                .replace("$instance", ".*");
            n += 1;
            rules.push_str(&format!(
                "      - record: dashboard:query{n}\n        expr: {}\n",
                serde_json::to_string(&expr).unwrap()
            ));
        }
    }
    assert!(n >= 20, "the dashboard has its panels");
    let dir = temp_dir();
    let path = dir.path().join("dashboard-rules.yml");
    std::fs::write(&path, &rules).unwrap();
    let (code, stdout, stderr) =
        output(Command::new(promtool()).args(["check", "rules"]).arg(&path));
    assert_eq!(code, 0, "{stdout}{stderr}\n{rules}");
}

/// Subscriptions show in `svc_subscriptions_active` while they live, and every push sent counts
/// once in `svc_events_broadcast_total`.
#[test]
fn subscription_metrics_follow_watches_and_pushes() {
    let (s, _d) = Server::start(&with_metrics("[shards]\ncount = 2"));
    let mut c = s.order_client();
    for id in ["w1", "w2", "w3"] {
        create_order(&mut c, id, 1);
    }
    let mut sub = s.client();
    let w = sub
        .call("WATCH_ALL", json!({"machines": ["order"]}))
        .unwrap();
    let sub_id = w["subscription_id"].clone();
    assert_eq!(scrape(&s).get("svc_subscriptions_active", &[]), 1.0);
    for id in ["w1", "w2", "w3"] {
        apply(&mut c, id, "pay", json!({"amount": 1})).unwrap();
    }
    for _ in 0..3 {
        assert_eq!(sub.recv_push().unwrap()["type"], "event");
    }
    let e = scrape(&s);
    assert_eq!(e.get("svc_events_broadcast_total", &[]), 3.0);
    assert_eq!(
        e.series("svc_subscription_pushes_queued").len(),
        2,
        "one per shard"
    );
    sub.call("UNWATCH", json!({"subscription_id": sub_id}))
        .unwrap();
    assert_eq!(scrape(&s).get("svc_subscriptions_active", &[]), 0.0);
}
