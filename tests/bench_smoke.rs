//! smdb-bench against the real server: every workload runs briefly with no errors, `--scale`
//! starts its own servers, `--cluster` routes by slot over a two-group cluster, `--report`
//! summarises JSON outputs, `--help` documents every option.

mod common;

use std::process::Command;

use clap::CommandFactory;
use common::Server;
use serde_json::Value;

fn bench_bin() -> std::path::PathBuf {
    common::bench_bin()
}

/// Runs smdb-bench and returns its JSON lines (panics with its output on failure).
fn bench(args: &[&str]) -> Vec<Value> {
    let out = Command::new(bench_bin())
        .args(args)
        .output()
        .expect("run smdb-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "smdb-bench {args:?} failed: {stdout}\n{stderr}"
    );
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `bench` with the arguments of a whitespace-separated line (no argument has spaces here).
fn bench_line(line: &str) -> Vec<Value> {
    bench(&line.split_whitespace().collect::<Vec<_>>())
}

fn assert_clean(run: &Value, what: &str) {
    assert!(
        run["ops"].as_u64().unwrap_or(0) > 0,
        "{what}: no ops: {run}"
    );
    assert!(
        run["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{what}: {run}"
    );
    assert_eq!(run["errors_total"], 0, "{what}: errors: {run}");
    assert_eq!(run["errors"], serde_json::json!({}), "{what}: {run}");
    assert_eq!(run["errors_outside_window"], 0, "{what}: {run}");
    assert!(
        run["latency_us"]["p50"].as_f64().unwrap_or(0.0) > 0.0,
        "{what}: {run}"
    );
    assert!(run["latency_us"]["p99"].as_f64() >= run["latency_us"]["p50"].as_f64());
}

#[test]
fn every_workload_runs_without_errors_and_reports_summarise_them() {
    let (s, dir) = Server::start("");
    let addr = s.addr.to_string();
    let info = s.client().call("INFO", serde_json::json!({})).unwrap();
    let mut lines = String::new();
    for w in ["ping", "get", "create", "apply", "mixed"] {
        let runs = bench_line(&format!(
            "--addr {addr} --workload {w} --duration 1 --warmup 0.2 --connections 4 \
             --in-flight 4 --instances 200 --json"
        ));
        assert_eq!(runs.len(), 1, "{w}: one JSON line");
        let run = &runs[0];
        assert_clean(run, w);
        assert_eq!(run["workload"], w);
        assert_eq!(run["shards"], info["shards"], "shard count from INFO");
        assert!(run["cpu"]["bench_cores"].is_number(), "{run}");
        lines.push_str(&run.to_string());
        lines.push('\n');
        if w == "mixed" {
            for op in ["GET_INSTANCE", "APPLY_EVENT", "CREATE_INSTANCE"] {
                assert!(
                    run["per_op"][op]["ops"].as_u64().unwrap_or(0) > 0,
                    "{op}: {run}"
                );
            }
        }
    }
    let file = dir.path().join("runs.json");
    std::fs::write(&file, lines).unwrap();
    let out = Command::new(bench_bin())
        .arg("--report")
        .arg(&file)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.starts_with("| run |"), "{table}");
    let rows = table.lines().filter(|l| l.starts_with('|')).count();
    assert_eq!(
        rows,
        2 + 5,
        "header, separator, one row per workload: {table}"
    );
    let apply_row = format!("| apply 4x4 | {} | 1 |", info["shards"]);
    assert!(table.contains(&apply_row), "{table}");
}

#[test]
fn cluster_mode_routes_each_request_to_its_slot_s_primary() {
    let _serial = common::ha::serial();
    let etcd = common::etcd::Etcd::start(1);
    let groups = ["g1", "g2"];
    let (_dirs, members, _) = common::cluster::start_groups(&etcd, "bench", &groups, 1);
    common::cluster::create(&members, std::time::Duration::from_secs(5));
    let seed = members[1].addr.to_string();
    for w in ["apply", "get"] {
        let runs = bench_line(&format!(
            "--cluster --addr {seed} --workload {w} --duration 1 --warmup 0.2 --connections 4 \
             --in-flight 4 --instances 300 --json"
        ));
        assert_eq!(runs.len(), 1, "{w}: one JSON line");
        assert_clean(&runs[0], w);
        assert_eq!(runs[0]["cluster_groups"], 2, "{w}: {}", runs[0]);
        assert_eq!(runs[0]["shards"], 2, "one shard per group: {}", runs[0]);
    }
    // The pre-created instances went to their slots' groups: both hold some, none refused.
    let held: Vec<u64> = members
        .iter()
        .map(|m| {
            let info = m.client().call("INFO", serde_json::json!({})).unwrap();
            info["instances"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(held.iter().sum::<u64>(), 600, "{held:?}");
    assert!(held.iter().all(|n| *n > 0), "{held:?}");

    // Against a server not in cluster mode --cluster loads it alone.
    let (s, _dir) = Server::start("");
    let runs = bench_line(&format!(
        "--cluster --addr {} --workload apply --duration 0.5 --warmup 0.1 --connections 2 \
         --in-flight 2 --instances 50 --json",
        s.addr
    ));
    assert_clean(&runs[0], "standalone");
    assert_eq!(runs[0]["cluster_groups"], 0, "{}", runs[0]);
}

#[test]
fn scale_mode_starts_a_server_per_shard_count() {
    let dir = common::temp_dir();
    let base = dir.path().join("base.toml");
    // Small WAL segments: less to zero at start-up; also checks --server-config is used.
    std::fs::write(&base, "[storage]\nsegment_bytes = 4194304\n").unwrap();
    let runs = bench_line(&format!(
        "--scale 2 --workload get --duration 0.5 --warmup 0.1 --connections 2 --in-flight 2 \
         --instances 100 --json --server-config {} --data-parent {}",
        base.display(),
        dir.path().display()
    ));
    assert_eq!(runs.len(), 2);
    for (k, run) in runs.iter().enumerate() {
        assert_clean(run, "scale");
        assert_eq!(run["shards"], k + 1);
        assert_eq!(run["server"]["fsync"], "always");
        let server_cores = &run["cpu"]["server_cores"];
        assert!(server_cores.is_number(), "server pid known: {run}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(
        left.len(),
        1,
        "spawned servers' data dirs are removed: {left:?}"
    );
}

#[test]
fn fill_mode_reports_bytes_per_instance_and_recovers_after_sigkill() {
    let dir = common::temp_dir();
    let base = dir.path().join("base.toml");
    std::fs::write(&base, "[storage]\nsegment_bytes = 4194304\n").unwrap();
    let runs = bench_line(&format!(
        "--spawn --fill --fill-recover --instances 2000 --events-per-instance 2 --fsync never \
         --connections 2 --in-flight 16 --json --server-config {} --data-parent {}",
        base.display(),
        dir.path().display()
    ));
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["mode"], "fill");
    assert_eq!(run["instances"], 2000);
    assert_eq!(run["events_per_instance"], 2);
    // The server grew by the instances (an RSS read, so only its sign is certain).
    assert!(
        run["rss_after"].as_u64() > run["rss_before"].as_u64(),
        "{run}"
    );
    assert!(run["bytes_per_instance"].as_f64().unwrap() > 0.0, "{run}");
    // Recovered after SIGKILL (the bench checks the first instance's event count itself).
    assert!(run["recovery_s"].as_f64().unwrap() > 0.0, "{run}");
    assert!(run["rss_recovered"].as_u64().unwrap() > 0, "{run}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "the data dir is removed: {left:?}");
}

#[test]
fn fill_needs_a_server_pid_to_read() {
    let out = Command::new(bench_bin())
        .args(["--fill", "--addr", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--server-pid"), "{err}");
}

#[test]
fn help_documents_every_option() {
    let out = Command::new(bench_bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for arg in smdb_bench::Options::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        assert!(
            help.contains(&format!("--{long}")),
            "--{long} missing from --help"
        );
        assert!(arg.get_help().is_some(), "--{long} has no help text");
    }
}

#[test]
fn unreachable_server_is_a_clear_failure() {
    let out = Command::new(bench_bin())
        .args([
            "--addr",
            "127.0.0.1:1",
            "--duration",
            "0.1",
            "--warmup",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connect to 127.0.0.1:1"), "{err}");
}
