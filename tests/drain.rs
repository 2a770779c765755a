//! Behind a load balancer (docs/protocol.md, "Behind a load balancer"), against the real binary: the SIGTERM drain (health
//! 503 at once, grace kept, every request answered, exit 0, second SIGTERM and the drain
//! timeout), restart right after SIGKILL on the same ports, and JSON-only output.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::scrape::http_get;
use common::*;
use serde_json::{json, Value};

const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";

fn drain_config(grace_ms: u64, timeout_ms: u64) -> String {
    format!("[network]\ndrain_grace_ms = {grace_ms}\ndrain_timeout_ms = {timeout_ms}\n{METRICS}")
}

fn create_params(id: &str) -> Value {
    json!({"machine": "order", "version": 1, "id": id, "context": {"total": 1}})
}

/// What the pipelining client saw.
struct Seen {
    sent: usize,
    acked: Vec<String>,
    shutting_down: usize,
    last_ok: Option<Instant>,
    first_refused: Option<Instant>,
    closed_after_all_answers: bool,
}

/// Pipelines CREATE_INSTANCE in batches of 16 until the server answers SHUTTING_DOWN, then
/// stops sending and reads until the server closes.
fn pipeline(mut c: Client, tag: &str) -> Seen {
    let mut seen = Seen {
        sent: 0,
        acked: Vec::new(),
        shutting_down: 0,
        last_ok: None,
        first_refused: None,
        closed_after_all_answers: false,
    };
    let mut n = 0;
    while seen.first_refused.is_none() {
        let mut ids = Vec::new();
        for _ in 0..16 {
            let id = format!("{tag}{n}");
            n += 1;
            let rid = c.send("CREATE_INSTANCE", &create_params(&id)).unwrap();
            ids.push((rid, id));
            seen.sent += 1;
        }
        for (rid, id) in ids {
            let r = c.recv_response().expect("every request gets a response");
            assert_eq!(r["id"], rid.as_str(), "in order: {r}");
            match r["status"].as_str() {
                Some("ok") => {
                    seen.acked.push(id);
                    seen.last_ok = Some(Instant::now());
                }
                _ => {
                    assert_eq!(r["error"]["code"], "SHUTTING_DOWN", "{r}");
                    assert_eq!(r["error"]["retryable"], true, "{r}");
                    seen.shutting_down += 1;
                    seen.first_refused.get_or_insert_with(Instant::now);
                }
            }
        }
    }
    // Nothing more to answer: the next read sees the server close the connection.
    seen.closed_after_all_answers = c.read_message().is_err_and(|e| e.is_connection_lost());
    seen
}

fn health_status(s: &Server) -> u16 {
    http_get(s.metrics_addr.unwrap(), "/health", &[]).status
}

#[test]
fn sigterm_drain_keeps_the_grace_answers_every_request_and_exits_zero() {
    let grace = Duration::from_millis(600);
    let (mut s, _d) = Server::start(&drain_config(600, 5000));
    let _c = s.order_client();
    assert_eq!(health_status(&s), 200);
    let loader = {
        let c = s.client();
        std::thread::spawn(move || pipeline(c, "p"))
    };
    std::thread::sleep(Duration::from_millis(200));

    let t0 = Instant::now();
    s.signal(libc::SIGTERM);
    let health_503 = loop {
        if health_status(&s) == 503 {
            break t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "/health never 503");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(
        health_503 < Duration::from_millis(100),
        "/health 503 after {health_503:?}"
    );
    // During the grace period new connections are still served.
    std::thread::sleep(Duration::from_millis(200));
    let mut late = s.client();
    assert!(late.ping().unwrap().pong);

    let seen = loader.join().unwrap();
    let refused_at = seen.first_refused.unwrap() - t0;
    let last_ok_at = seen.last_ok.unwrap() - t0;
    eprintln!(
        "drain: /health 503 after {health_503:?}; sent {} ok {} SHUTTING_DOWN {}; last ok at {last_ok_at:?}, first SHUTTING_DOWN at {refused_at:?} (grace {grace:?})",
        seen.sent,
        seen.acked.len(),
        seen.shutting_down
    );
    assert_eq!(seen.sent, seen.acked.len() + seen.shutting_down);
    assert!(refused_at >= grace, "grace kept: refused at {refused_at:?}");
    assert!(
        last_ok_at >= grace - Duration::from_millis(100),
        "served during the grace: last ok at {last_ok_at:?}"
    );
    assert!(
        seen.closed_after_all_answers,
        "closed after the last answer"
    );
    // After the grace the listener is gone.
    assert!(
        Client::connect_hello(s.addr, "late").is_err(),
        "no new connections"
    );
    let status = s.wait_exit(Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(0), "{}", s.log());

    // Every acknowledged write is there after a restart.
    s.relaunch().unwrap();
    let mut c = s.client();
    for id in &seen.acked {
        c.call("GET_INSTANCE", json!({"id": id}))
            .unwrap_or_else(|e| panic!("{id} acknowledged but missing: {e}"));
    }
}

#[test]
fn a_second_sigterm_ends_the_drain_at_once() {
    let (mut s, _d) = Server::start(&drain_config(5000, 10000));
    let mut c = s.client();
    s.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    assert!(c.ping().unwrap().pong, "served during the grace");
    assert_eq!(health_status(&s), 503);
    let t1 = Instant::now();
    s.signal(libc::SIGTERM);
    let status = s.wait_exit(Duration::from_secs(5)).expect("exits");
    let took = t1.elapsed();
    eprintln!("second SIGTERM: exited {took:?} later");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(status.code(), Some(0), "{}", s.log());
    assert!(c.ping().is_err(), "connection closed");
}

#[test]
fn the_drain_timeout_bounds_a_client_that_never_goes_quiet() {
    let (mut s, _d) = Server::start(&drain_config(0, 800));
    let mut c = s.client();
    let chatter = std::thread::spawn(move || {
        let (mut ok, mut refused) = (0, 0);
        loop {
            match c.ping() {
                Ok(_) => ok += 1,
                Err(e) if e.is_shutting_down() => refused += 1,
                Err(_) => return (ok, refused),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    s.signal(libc::SIGTERM);
    let status = s.wait_exit(Duration::from_secs(5)).expect("exits");
    let took = t0.elapsed();
    let (ok, refused) = chatter.join().unwrap();
    eprintln!(
        "drain timeout 800 ms: exited after {took:?}; pings ok {ok}, SHUTTING_DOWN {refused}"
    );
    assert!(refused > 10, "kept being answered SHUTTING_DOWN: {refused}");
    assert!(
        took >= Duration::from_millis(750) && took < Duration::from_millis(2500),
        "took {took:?}"
    );
    assert_eq!(status.code(), Some(0), "{}", s.log());
}

#[test]
fn restart_right_after_sigkill_on_the_same_ports_ten_times() {
    let (port, mport) = (free_port(), free_port());
    let extra = format!(
        "[network]\nbind_addr = \"127.0.0.1:{port}\"\n[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:{mport}\""
    );
    let (mut s, _d) = Server::start(&extra);
    let c = s.order_client();
    drop(c);
    for k in 0..10 {
        let mut c = s.client();
        c.call("CREATE_INSTANCE", create_params(&format!("k{k}")))
            .unwrap();
        drop(c);
        s.kill();
        let t = Instant::now();
        s.relaunch()
            .unwrap_or_else(|e| panic!("restart {k} failed: {e}"));
        let expected: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        assert_eq!(s.addr, expected);
        assert_eq!(s.metrics_addr.unwrap().port(), mport);
        eprintln!("restart {k}: listening after {:?}", t.elapsed());
        let mut c = s.client();
        for j in 0..=k {
            c.call("GET_INSTANCE", json!({"id": format!("k{j}")}))
                .unwrap_or_else(|e| panic!("k{j} missing after restart {k}: {e}"));
        }
    }
    let retried = s.log().matches("is in use; retrying").count();
    eprintln!("bind retries logged in 10 restarts: {retried}");
}

fn assert_all_json(what: &str, text: &str) -> usize {
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"));
        assert!(v.is_object(), "{what}: not an object: {line}");
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        n += 1;
    }
    n
}

#[test]
fn json_mode_writes_only_json_lines_on_stdout_and_stderr() {
    let json_cfg = format!(
        "[logging]\nformat = \"json\"\nlevel = \"debug\"\n{}",
        drain_config(100, 2000)
    );
    let (mut s, d) = Server::start_with_env(&json_cfg, &[("RUST_LOG", "")]);
    let mut c = s.order_client();
    c.call("CREATE_INSTANCE", create_params("j1")).unwrap();
    assert!(c.call("GET_INSTANCE", json!({"id": "nope"})).is_err());
    s.signal(libc::SIGTERM);
    assert_eq!(
        s.wait_exit(Duration::from_secs(10)).unwrap().code(),
        Some(0)
    );
    let out = s.stdout();
    assert_eq!(assert_all_json("stdout", &out), 1, "{out}");
    let listening: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(listening["message"], "smdb-server listening");
    assert_eq!(listening["addr"], s.addr.to_string().as_str());
    assert_eq!(
        listening["metrics_addr"],
        s.metrics_addr.unwrap().to_string().as_str()
    );
    let n = assert_all_json("stderr", &s.log());
    assert!(n > 5, "{}", s.log());

    // Start-up failures: a config error and a data dir that cannot be used.
    let bad = "[logging]\nformat = \"json\"\n[network]\nbogus = 1\n";
    let (code, stdout, stderr) = run_config_to_exit(&d.path().join("bad.toml"), bad);
    assert_eq!(code, 78, "{stderr}");
    assert_eq!(stdout, "");
    assert_eq!(assert_all_json("config error", &stderr), 1, "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");

    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let unusable = format!(
        "[logging]\nformat = \"json\"\n[network]\nbind_addr = \"127.0.0.1:0\"\n[metrics]\nenabled = false\n[http]\nenabled = false\n[storage]\ndata_dir = \"{}\"\n",
        file.join("data").display()
    );
    let (code, stdout, stderr) = run_config_to_exit(&d.path().join("unusable.toml"), &unusable);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        assert_all_json("start-up failure", &stderr) >= 1,
        "{stderr}"
    );
}
