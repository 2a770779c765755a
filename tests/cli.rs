//! `smdb-cli` against the real server: every subcommand's success and one failure, `--json`
//! output that parses, help for every command, completions and man page, and the REPL driven
//! through piped stdin (errors with codes, multi-line JSON, reconnect after a restart).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::run::{cli_at, output_with_stdin};
use common::*;
use serde_json::{json, Value};

fn cli_bin() -> std::path::PathBuf {
    common::cli_bin()
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    /// The stdout as one JSON value (from `--json`).
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.stdout))
    }

    /// Asserts a failure with `code` and the `error: CODE: ` line on stderr.
    fn fails_with(&self, exit: i32, code: &str) {
        assert_eq!(self.code, exit, "exit status; stderr: {}", self.stderr);
        assert!(
            self.stderr.contains(&format!("error: {code}: ")),
            "stderr lacks error: {code}: {:?}",
            self.stderr
        );
    }

    fn ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "stderr: {}\nstdout: {}",
            self.stderr, self.stdout
        );
        self
    }
}

/// Runs `smdb-cli --addr ADDR ARGS...` with `stdin` piped in.
fn cli_in(addr: &str, args: &[&str], stdin: &str) -> Out {
    let (code, stdout, stderr) = output_with_stdin(cli_at(addr).args(args), stdin);
    Out {
        code,
        stdout,
        stderr,
    }
}

fn cli(s: &Server, args: &[&str]) -> Out {
    cli_in(&s.addr.to_string(), args, "")
}

/// `smdb-cli --addr <addr> <args>` running, its stdout and stderr piped to the test.
fn spawn_cli(addr: &str, args: &[&str]) -> Child {
    (Command::new(cli_bin()).arg("--addr").arg(addr).args(args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("smdb-cli starts")
}

/// An address where nothing listens.
fn dead_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn write_file(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn machine_subcommands_succeed_and_fail_with_codes() {
    let (s, dir) = Server::start("");
    let full = write_file(
        dir.path(),
        "order.json",
        &json!({"machine": "order", "version": 1, "definition": order_definition()}),
    );
    let bare = write_file(dir.path(), "bare.json", &order_definition());
    let r = cli(&s, &["--json", "put-machine", &full]);
    assert_eq!(r.ok().json()["created"], true);
    let human = cli(&s, &["put-machine", &full]);
    assert!(human.ok().stdout.contains("unchanged"), "{}", human.stdout);
    let r = cli(
        &s,
        &[
            "--json",
            "put-machine",
            &bare,
            "--machine",
            "order",
            "--version",
            "2",
        ],
    );
    assert_eq!(r.ok().json()["version"], 2);
    cli(&s, &["put-machine", &bare]).fails_with(2, "USAGE");
    let bad = write_file(
        dir.path(),
        "bad.json",
        &json!({"states": ["a"], "initial": "zz"}),
    );
    let r = cli(&s, &["put-machine", &bad, "-m", "bad", "-v", "1"]);
    r.fails_with(1, "INVALID_DEFINITION");
    assert!(r.stderr.contains("details:"), "details shown: {}", r.stderr);

    let r = cli(&s, &["--json", "get-machine", "order", "--version", "1"]);
    assert_eq!(r.ok().json()["definition"]["initial"], "new");
    let human = cli(&s, &["get-machine", "order"]);
    assert!(human.ok().stdout.contains("payload.amount >= ctx.total"));
    cli(&s, &["get-machine", "nope"]).fails_with(1, "MACHINE_NOT_FOUND");

    let r = cli(&s, &["--json", "list-machines"]);
    assert_eq!(
        r.ok().json()["machines"],
        json!([{"machine": "order", "versions": [1, 2]}])
    );
    assert!(cli(&s, &["list-machines"])
        .ok()
        .stdout
        .contains("order    1, 2"));
    cli_in(&dead_addr(), &["list-machines"], "").fails_with(3, "CONNECT_FAILED");
}

#[test]
fn instance_subcommands_succeed_and_fail_with_codes() {
    let (s, _d) = Server::start("");
    put_order_machine(&mut s.client());
    let r = cli(
        &s,
        &[
            "--json",
            "create",
            "order",
            "o1",
            "--context",
            r#"{"total":30}"#,
        ],
    );
    assert_eq!(r.ok().json()["state"], "new");
    // No --version: the latest is looked up.
    let r = cli(&s, &["create", "order", "o2", "-c", "{}"]);
    assert!(r.ok().stdout.contains("state:"), "{}", r.stdout);
    cli(&s, &["create", "order", "o3", "--version", "1"]).ok();
    cli(&s, &["create", "order", "o1", "--version", "1"]).fails_with(1, "INSTANCE_EXISTS");
    cli(&s, &["create", "order", "o9", "--context", "{nope"]).fails_with(2, "USAGE");

    let r = cli(&s, &["--json", "get", "o1"]);
    assert_eq!(r.ok().json()["context"], json!({"total": 30}));
    cli(&s, &["get", "missing"]).fails_with(1, "INSTANCE_NOT_FOUND");

    let r = cli(
        &s,
        &[
            "--json",
            "apply",
            "o1",
            "pay",
            "--payload",
            r#"{"amount":30}"#,
        ],
    );
    assert_eq!(r.ok().json()["to_state"], "paid");
    let r = cli(&s, &["apply", "o2", "pay", "-p", r#"{"amount":-1}"#]);
    r.fails_with(1, "GUARD_FAILED");
    let r = cli(&s, &["apply", "o1", "ship", "--expected-state", "new"]);
    r.fails_with(1, "CONFLICT");
    let r = cli(&s, &["apply", "o1", "ship"]);
    assert!(
        r.ok().stdout.contains("o1: paid -> shipped"),
        "{}",
        r.stdout
    );

    let r = cli(&s, &["--json", "list", "--limit", "1", "--all"]);
    let ids: Vec<Value> = r.ok().json()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![json!("o1"), json!("o2"), json!("o3")],
        "--all follows cursors"
    );
    let page = cli(&s, &["--json", "list", "--limit", "2"]).json();
    assert!(page["next_cursor"].is_string());
    let r = cli(&s, &["list", "--state", "shipped"]);
    assert!(r.ok().stdout.contains("(1 instance)"), "{}", r.stdout);
    cli(&s, &["list", "--limit", "0"]).fails_with(1, "BAD_REQUEST");

    let r = cli(&s, &["--json", "history", "o1"]);
    let events = r.ok().json()["events"].clone();
    assert_eq!(events[0]["event"], "pay");
    assert_eq!(events[1]["to_state"], "shipped");
    assert!(cli(&s, &["history", "o1", "--from", "2"])
        .ok()
        .stdout
        .contains("ship"));
    cli(&s, &["history", "missing"]).fails_with(1, "INSTANCE_NOT_FOUND");

    let r = cli(&s, &["--json", "delete", "o3"]);
    assert_eq!(r.ok().json()["deleted"], true);
    cli(&s, &["delete", "o3"]).fails_with(1, "INSTANCE_NOT_FOUND");
}

#[test]
fn ping_info_raw_and_local_subcommands() {
    let (s, dir) = Server::start("");
    assert_eq!(cli(&s, &["ping"]).ok().stdout.trim(), "pong");
    assert_eq!(cli(&s, &["--json", "ping"]).json(), json!({"pong": true}));
    cli_in(&dead_addr(), &["ping"], "").fails_with(3, "CONNECT_FAILED");

    let info = cli(&s, &["--json", "info"]);
    assert_eq!(info.ok().json()["server_name"], "smdb");
    assert!(cli(&s, &["info"]).ok().stdout.contains("server_version:"));
    cli_in(&dead_addr(), &["info", "--connect-timeout", "1"], "").fails_with(3, "CONNECT_FAILED");

    let r = cli(&s, &["--json", "raw", "PING"]);
    assert_eq!(r.ok().json(), json!({"pong": true}));
    let r = cli(&s, &["raw", "LIST_INSTANCES", r#"{"limit": 5}"#]);
    assert!(
        r.ok().stdout.contains("\"instances\""),
        "pretty JSON: {}",
        r.stdout
    );
    // Params from standard input.
    let r = cli_in(
        &s.addr.to_string(),
        &["--json", "raw", "GET_MACHINE", "-"],
        r#"{"machine":"x"}"#,
    );
    r.fails_with(1, "MACHINE_NOT_FOUND");
    cli(&s, &["raw", "NO_SUCH_OP"]).fails_with(1, "UNKNOWN_OPERATION");
    cli(&s, &["raw", "PING", "[1]"]).fails_with(2, "USAGE");

    for shell in ["bash", "zsh", "fish"] {
        let r = cli(&s, &["completions", shell]);
        assert!(r.ok().stdout.contains("put-machine"), "{shell}");
    }
    let r = cli(&s, &["completions", "tcsh"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: USAGE: "), "{}", r.stderr);

    let man = cli(&s, &["man"]);
    assert!(
        man.ok().stdout.starts_with(".ie"),
        "{}",
        &man.stdout[..40.min(man.stdout.len())]
    );
    assert!(man.stdout.contains("smdb\\-cli"));
    let mandir = dir.path().join("man");
    cli(&s, &["man", "--dir", mandir.to_str().unwrap()]).ok();
    assert!(mandir.join("smdb-cli.1").exists() && mandir.join("smdb-cli-watch.1").exists());
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, "").unwrap();
    let r = cli(&s, &["man", "--dir", blocked.join("sub").to_str().unwrap()]);
    r.fails_with(2, "USAGE");

    cli(&s, &["--timeout", "abc", "ping"]).fails_with(2, "USAGE");
    cli(&s, &["get"]).fails_with(2, "USAGE");
}

#[test]
fn help_is_complete_for_every_subcommand() {
    let top = cli_in("127.0.0.1:1", &["--help"], "");
    top.ok();
    let subs = [
        "ping",
        "info",
        "put-machine",
        "get-machine",
        "list-machines",
        "diagram",
        "create",
        "get",
        "list",
        "delete",
        "apply",
        "history",
        "watch",
        "raw",
        "completions",
        "man",
        "backup",
        "timers",
        "migrate",
        "delete-instances",
    ];
    for sub in subs {
        assert!(
            top.stdout.contains(&format!("  {sub} ")),
            "--help lists {sub}"
        );
        let h = cli_in("127.0.0.1:1", &[sub, "--help"], "");
        assert!(
            h.ok().stdout.contains("Usage: smdb-cli"),
            "{sub}: {}",
            h.stdout
        );
        assert!(h.stdout.contains("--addr"), "{sub}: global options shown");
    }
    for needle in ["SMDB_ADDR", "--json", "Exit status", "error: CODE: message"] {
        assert!(top.stdout.contains(needle), "--help mentions {needle}");
    }
    let v = cli_in("127.0.0.1:1", &["--version"], "");
    assert!(v.ok().stdout.starts_with("smdb-cli "));
}

#[test]
fn watch_streams_events_from_the_real_server() {
    let (s, _d) = Server::start("");
    cli_in(&dead_addr(), &["watch"], "").fails_with(3, "CONNECT_FAILED");
    let mut c = s.order_client();
    create_order(&mut c, "w1", 1);
    let mut watch = spawn_cli(
        &s.addr.to_string(),
        &["--json", "watch", "w1", "--count", "1"],
    );
    // Give the subscription a moment, then produce an event.
    std::thread::sleep(Duration::from_millis(500));
    c.call("APPLY_EVENT", json!({"instance_id":"w1","event":"cancel"}))
        .unwrap();
    let status = wait_timeout(&mut watch, Duration::from_secs(30)).expect("watch exits");
    let out = watch.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "{stderr}");
    let ev: Value = serde_json::from_str(stdout.lines().next().unwrap_or("")).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["event"].as_str()),
        (Some("event"), Some("cancel"))
    );
}

#[test]
fn repl_session_from_piped_stdin() {
    let (s, _d) = Server::start("");
    put_order_machine(&mut s.client());
    let session = r#"
# a comment, then a ping
PING
GET_INSTANCE {"id": "nope"}
CREATE_INSTANCE {
  "machine": "order", "version": 1,
  "id": "r1",
  "context": {"total": 5}
}
apply r1 pay --payload '{"amount": 5}'
get r1
bogus-command
GET_INSTANCE {"id": "r1"}
"#;
    let r = cli_in(&s.addr.to_string(), &["--json"], session);
    assert_eq!(
        r.code, 2,
        "the last failure was a usage error; stderr: {}",
        r.stderr
    );
    let results: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        results.len(),
        5,
        "one line per successful command: {}",
        r.stdout
    );
    assert_eq!(results[0], json!({"pong": true}));
    assert_eq!(results[1]["id"], "r1", "multi-line JSON ran as one command");
    assert_eq!(results[2]["to_state"], "paid");
    assert_eq!(results[3]["state"], "paid");
    assert_eq!(results[4]["context"], json!({"total": 5, "amount": 5}));
    assert!(
        r.stderr.contains("error: INSTANCE_NOT_FOUND: "),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("error: USAGE: "), "{}", r.stderr);

    // Human output, `help`, `exit` stops reading, and a clean session exits 0.
    let r = cli_in(
        &s.addr.to_string(),
        &[],
        "help\nhelp APPLY_EVENT\nget r1\nexit\nPING\n",
    );
    r.ok();
    assert!(r.stdout.contains("WATCH_ALL") && r.stdout.contains("put-machine"));
    assert!(
        r.stdout.contains("\"expected_state\""),
        "help OP shows params"
    );
    assert!(r.stdout.contains("state:        paid"), "{}", r.stdout);
    assert!(!r.stdout.contains("pong"), "nothing runs after exit");
}

/// Waits until `port` can be bound again: a killed server's listening socket lingers briefly
/// while the kernel tears down its io_uring instance.
fn wait_port_free(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while TcpListener::bind(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "port {port} still busy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads one stdout line of the REPL, failing (with what it said on stderr) after 30 s.
fn next_line(rx: &mpsc::Receiver<String>, err: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            let said: Vec<String> = err.try_iter().collect();
            panic!("no REPL output line; stderr: {said:?}")
        })
}

fn line_reader(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    rx
}

#[test]
fn repl_reconnects_after_the_server_restarts() {
    let (mut s, _d) = Server::start(&fixed_port(""));
    let port = s.addr.port();
    put_order_machine(&mut s.client());
    let mut repl: Child = Command::new(cli_bin())
        .args(["--addr", &s.addr.to_string(), "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = repl.stdin.take().unwrap();
    let rx = line_reader(repl.stdout.take().unwrap());
    let err = line_reader(repl.stderr.take().unwrap());
    let mut send = |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(r#"CREATE_INSTANCE {"machine":"order","version":1,"id":"k1","context":{}}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&next_line(&rx, &err)).unwrap()["id"],
        "k1"
    );

    s.kill();
    wait_port_free(port);
    s.restart_after_kill();
    assert_eq!(s.addr.port(), port, "same port after the restart");
    // Data survival is the WAL's business (tests/durability.rs); here only the connection.
    send("PING");
    let got: Value = serde_json::from_str(&next_line(&rx, &err)).unwrap();
    assert_eq!(got, json!({"pong": true}), "the same REPL reconnected");
    send("info");
    let info: Value = serde_json::from_str(&next_line(&rx, &err)).unwrap();
    assert_eq!(info["server_name"], "smdb");
    send("exit");
    drop(stdin);
    let status = wait_timeout(&mut repl, Duration::from_secs(30)).expect("REPL exits");
    let said: Vec<String> = err.try_iter().collect();
    assert!(status.success(), "no command failed: {said:?}");
}

/// A stand-in server for `watch` (lag notice and Ctrl-C timing are hard to provoke on demand
/// from the real server): answers HELLO, WATCH_*, UNWATCH
/// and BYE on one connection, sends `pushes` after the watch ack, and reports every op it got.
fn fake_watch_server(pushes: Vec<Value>) -> (String, mpsc::Receiver<String>) {
    use smdb::protocol::frame::{decode_frame, encode_frame};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut conn, _) = l.accept().unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let send = |conn: &mut std::net::TcpStream, v: &Value| {
            let mut out = Vec::new();
            encode_frame(&serde_json::to_vec(v).unwrap(), &mut out);
            conn.write_all(&out).is_ok()
        };
        loop {
            let Ok(Some((range, used))) = decode_frame(&buf, 1 << 20) else {
                match std::io::Read::read(&mut conn, &mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let req: Value = serde_json::from_slice(&buf[range]).unwrap();
            buf.drain(..used);
            let op = req["op"].as_str().unwrap_or("").to_string();
            let _ = tx.send(op.clone());
            let result = match op.as_str() {
                "HELLO" => json!({"protocol_version": 1, "server_name": "fake"}),
                "WATCH_ALL" | "WATCH_INSTANCE" => json!({"subscription_id": 7, "cursor": "c0"}),
                "UNWATCH" => json!({"removed": true}),
                _ => json!({}),
            };
            let resp = json!({"type": "response", "id": req["id"], "status": "ok",
                "result": result});
            if !send(&mut conn, &resp) || op == "BYE" {
                return;
            }
            if op.starts_with("WATCH") {
                for p in &pushes {
                    send(&mut conn, p);
                }
            }
        }
    });
    (addr, rx)
}

fn event(sub: u64, n: u64) -> Value {
    json!({"type": "event", "subscription_id": sub, "instance_id": format!("i{n}"),
        "machine": "order", "version": 1, "event": "pay", "from_state": "new",
        "to_state": "paid", "payload": {}, "shard": 0, "wal_offset": n, "cursor": format!("c{n}")})
}

#[test]
fn watch_prints_pushes_of_its_subscription_and_unwatches() {
    let pushes = vec![event(7, 1), event(8, 2), event(7, 3), event(7, 4)];
    let (addr, ops) = fake_watch_server(pushes);
    let r = cli_in(
        &addr,
        &["--json", "watch", "--machine", "order", "-n", "2"],
        "",
    );
    r.ok();
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines
        .iter()
        .filter_map(|e| e["instance_id"].as_str())
        .collect();
    assert_eq!(ids, ["i1", "i3"], "another subscription's push is skipped");
    let got: Vec<String> = ops.try_iter().collect();
    assert_eq!(got, ["HELLO", "WATCH_ALL", "UNWATCH", "BYE"]);
}

#[test]
fn watch_ends_with_the_resume_cursor_when_lagged() {
    let lagged = json!({"type": "subscription_lagged", "subscription_id": 7,
        "resume_cursor": "c9"});
    let (addr, _ops) = fake_watch_server(vec![event(7, 1), lagged]);
    let r = cli_in(&addr, &["watch", "o1"], "");
    r.fails_with(1, "SUBSCRIPTION_LAGGED");
    assert!(r.stderr.contains("--from-cursor c9"), "{}", r.stderr);
    assert!(r.stdout.starts_with("i1  pay  new -> paid"), "{}", r.stdout);
}

#[test]
fn watch_stops_cleanly_on_ctrl_c() {
    let (addr, ops) = fake_watch_server(vec![event(7, 1)]);
    let mut w = spawn_cli(&addr, &["--json", "watch"]);
    let rx = line_reader(w.stdout.take().unwrap());
    let err = line_reader(w.stderr.take().unwrap());
    let first: Value = serde_json::from_str(&next_line(&rx, &err)).unwrap();
    assert_eq!(first["instance_id"], "i1");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(w.id() as i32, libc::SIGINT) };
    let status = wait_timeout(&mut w, Duration::from_secs(30)).expect("watch exits");
    assert!(
        status.success(),
        "{status:?}: {:?}",
        err.try_iter().collect::<Vec<_>>()
    );
    let got: Vec<String> = ops.try_iter().collect();
    assert_eq!(got, ["HELLO", "WATCH_ALL", "UNWATCH", "BYE"]);
}

#[test]
fn batch_runs_ops_from_a_file_or_stdin() {
    let (s, dir) = Server::start("");
    put_order_machine(&mut s.client());
    let ops = json!([
        {"op": "CREATE_INSTANCE", "params": {"machine": "order", "version": 1, "id": "{c}:a",
            "context": {"total": 1}}},
        {"op": "APPLY_EVENT", "params": {"instance_id": "{c}:a", "event": "pay",
            "payload": {"amount": 1}}},
    ]);
    let file = write_file(dir.path(), "ops.json", &ops);
    let r = cli(&s, &["--json", "batch", &format!("@{file}")]);
    let v = r.ok().json();
    assert_eq!(v["results"][1]["result"]["to_state"], "paid");
    // Atomic: a failing op aborts the whole batch with the server's code.
    let again = serde_json::to_string(&ops).unwrap();
    cli_in(&s.addr.to_string(), &["batch", "-"], &again).fails_with(1, "BATCH_ABORTED");
    // Best effort: the batch succeeds, the human form shows one line per op.
    let r = cli_in(
        &s.addr.to_string(),
        &["batch", "--best-effort", "-"],
        &again,
    );
    let out = r.ok().stdout.clone();
    assert!(out.contains("0 error INSTANCE_EXISTS"), "{out}");
    assert!(out.contains("1 error INVALID_TRANSITION"), "{out}");
    cli(&s, &["batch", "{}"]).fails_with(2, "USAGE");
}

#[test]
fn replication_status_and_promote_call_their_ops() {
    let (s, _d) = Server::start("");
    let addr = s.addr.to_string();
    for args in [
        &["--json", "replication", "status"][..],
        &["--json", "promote"][..],
    ] {
        let out = cli_in(&addr, args, "");
        if out.code == 0 {
            assert!(out.json().is_object(), "{}", out.stdout);
            if args.contains(&"status") {
                assert!(out.json()["role"].is_string(), "{}", out.stdout);
            }
        } else {
            // A server built before replication answers its one refusal code.
            assert_eq!(out.code, 1, "{}", out.stderr);
            assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        }
    }
}

/// Writes `backup.json` listing every file under `dir` with its size and CRC32C, as a backup
/// would (the manifest format of docs/backup.md).
fn write_backup_manifest(dir: &Path) {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(dir)
                .expect("under dir")
                .to_string_lossy()
                .into_owned();
            if rel == "backup.json" || rel == "LOCK" {
                continue;
            }
            let bytes = std::fs::read(&p).expect("read file");
            files.push(json!({"path": rel, "bytes": bytes.len(),
                "crc32c": format!("{:08x}", crc32c::crc32c(&bytes))}));
        }
    }
    let m = json!({"created_at": "2026-11-27T23:00:00.000Z", "server_version": "0.1.0",
        "epoch": 0, "shards": 1, "positions": {"0": 21}, "files": files});
    std::fs::write(dir.join("backup.json"), m.to_string()).expect("manifest");
}

#[test]
fn backup_verify_checks_a_real_data_dir_and_names_a_flipped_byte() {
    let (mut s, tmp) = Server::start("[shards]\ncount = 1\n[storage]\nsegment_bytes = 1048576");
    let mut c = s.order_client();
    for i in 0..20 {
        let p = json!({"machine": "order", "version": 1, "id": format!("o-{i}"),
            "context": {"total": 1}});
        c.call("CREATE_INSTANCE", p).expect("create");
    }
    drop(c);
    assert!(s.terminate().success());
    let dir = tmp.path().join("data");
    let _ = std::fs::remove_file(dir.join("LOCK"));
    write_backup_manifest(&dir);
    let dir_arg = dir.to_string_lossy().into_owned();
    let ok = cli_in("127.0.0.1:1", &["backup", "--verify", &dir_arg], "");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("files verified"), "{}", ok.stdout);

    // A flipped byte inside a log record: named, exit 1.
    let seg = dir.join("shard-0/wal/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).expect("segment");
    bytes[4096 + 40] ^= 0x01;
    std::fs::write(&seg, bytes).expect("flip");
    let bad = cli_in("127.0.0.1:1", &["backup", "--verify", &dir_arg], "");
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("BACKUP_INVALID")
            && bad.stderr.contains("shard-0/wal/00000000000000000001.seg"),
        "{}",
        bad.stderr
    );
}

/// `job` v1 and v2 (`common::lifecycle`), and `n` instances of v1 in each of `new` (`n00`..),
/// `open` (`o00`..) and `paused` (`p00`..).
fn jobs_v1_v2(s: &Server, n: usize) {
    let mut c = s.client();
    lifecycle::put_job(&mut c, json!([]));
    lifecycle::place(
        &mut c,
        &[("n", n, &[]), ("o", n, &["go"]), ("p", n, &["go", "pause"])],
    );
}

/// `smdb-cli --json migrate job 1 2 --states <states>` and `extra`.
fn migrate_job(s: &Server, states: &str, extra: &[&str]) -> Out {
    let head = ["--json", "migrate", "job", "1", "2", "--states", states];
    cli(s, &[&head[..], extra].concat())
}

#[test]
fn migrate_and_delete_instances_run_to_the_end_and_resume_by_cursor() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    jobs_v1_v2(&s, 10);
    let mut c = s.client();
    let at = lifecycle::version_state;
    let dry = migrate_job(&s, "open=active", &["--dry-run"]);
    assert_eq!(
        dry.ok().json(),
        json!({"would_migrate": {"new": 10, "open": 10}, "skipped": {"no_state": 10},
               "examined": 30})
    );
    assert_eq!(at(&mut c, "o03"), (1, "open".into()));

    // 7 examined per call: one progress line per call on a stderr that is no terminal.
    let run = migrate_job(&s, "open=active", &["--limit", "7"]);
    assert_eq!(
        run.ok().json(),
        json!({"migrated": 20, "skipped": {"no_state": 10}, "examined": 30, "remaining": 0,
               "cursor": null})
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(lines.len() >= 30 / 7, "{}", run.stderr);
    assert!(
        lines.iter().all(|l| l.starts_with("migrated ")),
        "{}",
        run.stderr
    );
    assert!(
        lines.last().unwrap().ends_with("remaining ~0"),
        "{}",
        run.stderr
    );
    assert_eq!(at(&mut c, "o03"), (2, "active".into()));
    assert_eq!(at(&mut c, "n03"), (2, "new".into()));
    assert_eq!(at(&mut c, "p03"), (1, "paused".into()));

    // One instance by id, its state mapped.
    let one = migrate_job(&s, "paused=active", &["-w", "id=p05"]);
    assert_eq!(one.ok().json()["migrated"], 1);
    assert_eq!(at(&mut c, "p05"), (2, "active".into()));

    // Delete: a first call by hand, the rest from its cursor.
    let first = c
        .call(
            "DELETE_INSTANCES",
            json!({"machine": "job", "state": "paused", "limit": 2}),
        )
        .unwrap();
    let cursor = first["cursor"].as_str().expect("more to do").to_owned();
    let delete = |extra: &[&str]| {
        let head = ["--json", "delete-instances", "job"];
        cli(&s, &[&head[..], extra].concat())
    };
    let dry = delete(&["-s", "paused", "--dry-run"]);
    let left = 9 - first["deleted"].as_u64().unwrap();
    assert_eq!(dry.ok().json()["would_delete"], json!({"paused": left}));
    let rest = delete(&["-s", "paused", "--cursor", &cursor]);
    assert_eq!(rest.ok().json()["deleted"], left);
    assert_eq!(rest.json()["cursor"], Value::Null);
    let gone =
        |c: &mut common::Client, id: &str| c.call("GET_INSTANCE", json!({ "id": id })).is_err();
    assert!((0..10)
        .filter(|i| *i != 5)
        .all(|i| gone(&mut c, &format!("p{i:02}"))));
    assert!(!gone(&mut c, "p05") && !gone(&mut c, "o00"));

    // Nothing was updated before the epoch; a bad time is a usage error of the server's.
    let none = delete(&["--updated-before", "1970-01-02T00:00:00Z"]);
    assert_eq!(none.ok().json()["deleted"], 0);
    cli(&s, &["delete-instances", "job", "--updated-before", "soon"]).fails_with(1, "BAD_REQUEST");
    cli(&s, &["migrate", "job", "1", "2", "--states", "open"]).fails_with(2, "USAGE");
}

#[test]
fn migrate_stops_on_ctrl_c_between_calls_with_the_cursor_to_resume() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    jobs_v1_v2(&s, 100);
    let mut w = spawn_cli(
        &s.addr.to_string(),
        &[
            "--json",
            "migrate",
            "job",
            "1",
            "2",
            "--states",
            "open=active",
            "--limit",
            "1",
        ],
    );
    let rx = line_reader(w.stdout.take().unwrap());
    let err = line_reader(w.stderr.take().unwrap());
    let progress = err
        .recv_timeout(Duration::from_secs(30))
        .expect("a progress line");
    assert!(progress.starts_with("migrated "), "{progress}");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(w.id() as i32, libc::SIGINT) };
    let status = wait_timeout(&mut w, Duration::from_secs(30)).expect("migrate exits");
    assert_eq!(
        status.code(),
        Some(1),
        "{:?}",
        err.try_iter().collect::<Vec<_>>()
    );
    let stopped: Value = serde_json::from_str(&rx.recv().unwrap()).unwrap();
    let cursor = stopped["cursor"].as_str().expect("a cursor to resume from");
    let said: Vec<String> = err.try_iter().collect();
    assert!(
        said.iter()
            .any(|l| l.contains("INTERRUPTED") && l.contains(cursor)),
        "{said:?}"
    );
    let rest = migrate_job(&s, "open=active", &["--cursor", cursor]);
    let total =
        stopped["migrated"].as_u64().unwrap() + rest.ok().json()["migrated"].as_u64().unwrap();
    assert_eq!(total, 200);
}
