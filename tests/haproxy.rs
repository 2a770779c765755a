//! tuning/haproxy.cfg against the real HAProxy (Debian package `haproxy`, which `.ci/test`
//! installs; without it each test fails with the install line): the file is valid, and a
//! rolling drain behind it loses no request: two smdb servers with PROXY v2, client load
//! through HAProxy, one server drained by SIGTERM. tuning/lb-check.sh runs the same check by
//! hand.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::balancer::retrying;
use common::*;
use serde_json::json;
use smdb_client::Client;

fn config_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tuning/haproxy.cfg")
}

#[test]
fn haproxy_accepts_the_tuning_config() {
    let bin = tools::haproxy();
    let out = Command::new(bin)
        .arg("-c")
        .arg("-f")
        .arg(config_file())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "haproxy -c: {text}");
    assert!(text.contains("Configuration file is valid"), "{text}");
}

/// What one load thread did.
#[derive(Default, Debug)]
struct Load {
    requests: u64,
    retries: u64,
    failures: u64,
    connects: u64,
    created: Vec<String>,
}

const SERVER: &str = "[network]\nproxy_protocol = true\ndrain_grace_ms = 2000\ndrain_timeout_ms = 10000\n[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n[logging]\nlevel = \"debug\"";

struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn direct(s: &Server) -> Client {
    s.proxied_client()
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn a_drained_server_behind_haproxy_costs_clients_no_request() {
    let bin = tools::haproxy();
    let (mut s1, _d1) = Server::start_with_env(SERVER, &[("RUST_LOG", "")]);
    let (s2, _d2) = Server::start_with_env(SERVER, &[("RUST_LOG", "")]);
    for s in [&s1, &s2] {
        put_order_machine(&mut direct(s));
    }
    let lb = free_addr();
    let haproxy_log = s1.dir.join("haproxy.log");
    let child = Command::new(bin)
        .arg("-db")
        .arg("-f")
        .arg(config_file())
        .env("SMDB_LB_BIND", &lb)
        .env("SMDB1_ADDR", s1.addr.to_string())
        .env(
            "SMDB1_METRICS_PORT",
            s1.metrics_addr.unwrap().port().to_string(),
        )
        .env("SMDB2_ADDR", s2.addr.to_string())
        .env(
            "SMDB2_METRICS_PORT",
            s2.metrics_addr.unwrap().port().to_string(),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&haproxy_log).unwrap())
        .spawn()
        .unwrap();
    let _haproxy = Haproxy(child);
    // Both servers up: `rise 2` at 500 ms.
    std::thread::sleep(Duration::from_millis(1500));

    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (lb, stop) = (lb.clone(), stop.clone());
            std::thread::spawn(move || {
                // Rides out the drain: up to ~10 s of SHUTTING_DOWN and reconnects.
                let opts = retrying(format!("lb-load-{t}"), 60, Duration::from_millis(200));
                let mut c = Client::connect_with(&lb, &opts).expect("connect through haproxy");
                let mut load = Load::default();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("t{t}-{n}");
                    n += 1;
                    load.requests += 2;
                    match c.create_instance("order", 1, &id, &json!({"total": 1})) {
                        Ok(_) => load.created.push(id),
                        Err(e) => {
                            eprintln!("thread {t}: CREATE_INSTANCE failed: {e}");
                            load.failures += 1;
                        }
                    }
                    if let Err(e) = c.ping() {
                        eprintln!("thread {t}: PING failed: {e}");
                        load.failures += 1;
                    }
                }
                load.retries = c.retries();
                load.connects = c.connects();
                load
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(1000));
    let t0 = Instant::now();
    s1.signal(libc::SIGTERM);
    let status = s1
        .wait_exit(Duration::from_secs(15))
        .expect("server 1 exits");
    let drained_in = t0.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let loads: Vec<Load> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let sum = |f: fn(&Load) -> u64| loads.iter().map(f).sum::<u64>();
    let (requests, retries, failures, connects) = (
        sum(|l| l.requests),
        sum(|l| l.retries),
        sum(|l| l.failures),
        sum(|l| l.connects),
    );
    eprintln!(
        "haproxy rolling drain: requests {requests}, SHUTTING_DOWN retries {retries}, failures {failures}, connections {connects}; server 1 drained and exited in {drained_in:?}"
    );
    assert_eq!(status.code(), Some(0), "{}", s1.log());
    let lb_log = std::fs::read_to_string(&haproxy_log).unwrap_or_default();
    assert_eq!(failures, 0, "no request failed; haproxy:\n{lb_log}");
    assert!(retries > 0, "the drained server's clients were sent away");
    assert!(requests > 100, "load ran: {requests}");
    // Clients reached the servers through HAProxy, named by PROXY v2 headers.
    assert!(s2.log().contains("connection opened"), "{}", s2.log());

    // Every acknowledged create is on one of the two servers.
    s1.relaunch().unwrap();
    let created: usize = loads.iter().map(|l| l.created.len()).sum();
    let count = |s: &Server| {
        direct(s).info().unwrap().extra["instances"]
            .as_u64()
            .unwrap() as usize
    };
    assert_eq!(count(&s1) + count(&s2), created);
}

/// The drain timing the tuning files promise holds together: the grace the HAProxy file asks
/// for covers its time to mark a server down twice, and systemd waits longer than the drain.
#[test]
fn tuning_files_match_the_drain_timing() {
    let tuning = |f: &str| {
        std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tuning")
                .join(f),
        )
        .unwrap()
    };
    let cfg = tuning("haproxy.cfg");
    let number_after = |text: &str, key: &str| -> u64 {
        let at = text.find(key).unwrap_or_else(|| panic!("{key} missing")) + key.len();
        text[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or_else(|_| panic!("no number after {key}"))
    };
    let grace = number_after(&cfg, "drain_grace_ms =");
    let line = cfg
        .lines()
        .find(|l| l.trim_start().starts_with("default-server"))
        .expect("a default-server line");
    let inter = number_after(line, " inter");
    let fall = number_after(line, " fall");
    assert!(cfg.contains("send-proxy-v2"), "PROXY v2 on");
    assert!(cfg.contains("uri /health"), "health check on /health");
    assert!(
        grace >= 2 * inter * fall,
        "drain_grace_ms {grace} vs inter {inter} ms x fall {fall}"
    );
    let envoy = tuning("envoy.yaml");
    assert!(envoy.contains("version: V2") && envoy.contains("path: /health"));
    let unit = tuning("smdb.service");
    let stop = number_after(&unit, "\nTimeoutStopSec=");
    let drain = smdb::config::Config::from_toml("")
        .unwrap()
        .network
        .drain_timeout_ms;
    assert!(
        stop * 1000 >= drain + 5000,
        "TimeoutStopSec={stop} s must exceed network.drain_timeout_ms = {drain} ms"
    );
}

/// The failover cluster's balancer files: HAProxy accepts tuning/haproxy-ha.cfg (tests/ha.rs
/// runs it through a failover), and both it and the Envoy file (not runnable here) check the
/// role endpoints and send PROXY v2.
#[test]
fn the_failover_balancer_files_check_the_role_endpoints() {
    let tuning = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tuning");
    let out = Command::new(tools::haproxy())
        .arg("-c")
        .arg("-f")
        .arg(tuning.join("haproxy-ha.cfg"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "haproxy -c: {text}");
    let haproxy = std::fs::read_to_string(tuning.join("haproxy-ha.cfg")).unwrap();
    let envoy = std::fs::read_to_string(tuning.join("envoy-ha.yaml")).unwrap();
    for (name, text, primary, replica) in [
        (
            "haproxy-ha.cfg",
            &haproxy,
            "uri /health/primary",
            "uri /health/replica",
        ),
        (
            "envoy-ha.yaml",
            &envoy,
            "path: /health/primary",
            "path: /health/replica",
        ),
    ] {
        assert!(text.contains(primary), "{name} checks /health/primary");
        assert!(text.contains(replica), "{name} checks /health/replica");
    }
    assert!(haproxy.contains("on-marked-down shutdown-sessions"));
    assert!(haproxy.contains("send-proxy-v2"));
    assert!(envoy.contains("close_connections_on_host_health_failure: true"));
    assert!(envoy.contains("version: V2"));
}
