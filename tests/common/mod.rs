//! Test harness: starts the real `smdb-server` binary on a free port with a temp data dir,
//! speaks the wire protocol through the project's client, kills and restarts it.
#![allow(dead_code)]

pub mod balancer;
pub mod cdp;
pub mod cluster;
pub mod cluster_writes;
pub mod etcd;
pub mod ha;
pub mod http;
pub mod lifecycle;
pub mod pipeline;
pub mod replicas;
pub mod run;
pub mod scrape;
pub mod tokens;
pub mod tools;
pub mod writes;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde_json::{json, Value};
pub use smdb_client::{Client, ClientError};

pub const BIN: &str = env!("CARGO_BIN_EXE_smdb-server");

/// `smdb-cli` (crate `clients/cli`), built for this test run.
#[allow(dead_code)]
pub fn cli_bin() -> PathBuf {
    workspace_bin("smdb-cli", "smdb-cli")
}

/// `smdb-bench` (crate `benches/loadgen`), built for this test run.
#[allow(dead_code)]
pub fn bench_bin() -> PathBuf {
    workspace_bin("smdb-bench", "smdb-bench")
}

/// The binary `name` of another workspace package, in the profile this test was built in.
/// Cargo gives a test the path of its own package's binaries only, so this runs `cargo build
/// -p PACKAGE --bin NAME` once per test process (cargo holds no lock while tests run; after
/// `cargo test --workspace` it is up to date and returns at once): a test never runs a stale
/// CLI against a fresh server.
/// The server binary the tests start: this build's, or `SMDB_TEST_SERVER_BIN` (to run a test
/// binary against another build of the server, e.g. when bisecting a defect).
pub fn server_bin() -> PathBuf {
    std::env::var_os("SMDB_TEST_SERVER_BIN").map_or_else(|| BIN.into(), PathBuf::from)
}

fn workspace_bin(package: &str, name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let server = Path::new(BIN);
    let profile_dir = server.parent().expect("the server binary has a directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", package, "--bin", name])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    if profile != "debug" {
        cmd.args([
            "--profile",
            if profile == "release" {
                "release"
            } else {
                profile
            },
        ]);
    }
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = profile_dir.join(name);
    built.push((name.to_string(), path.clone()));
    path
}

/// A test's temp dir, shared by the test and the `Server` started in it.
pub type TestDir = Arc<tempfile::TempDir>;

pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// The metrics listener, when `metrics.enabled` (the stdout line's ` metrics=MADDR`).
    pub metrics_addr: Option<SocketAddr>,
    /// The HTTP API listener, when the test's config has an `[http]` section (the stdout
    /// line's ` http=HADDR`).
    pub http_addr: Option<SocketAddr>,
    pub dir: PathBuf,
    config: String,
    /// Extra environment variables for the server process (kept across restarts).
    env: Vec<(String, String)>,
    /// The temp dir `start` created, shared with the caller's guard: whichever of the two is
    /// dropped last deletes it, so a failing test's `Drop` still finds the server log (a
    /// `let (s, _d)` pattern drops `_d` first).
    owned_dir: Option<TestDir>,
}

/// A TCP port on 127.0.0.1 free now (bound and released; a test that needs a fixed port
/// across restarts, or several known in advance, takes one here). The one copy: tests/tidy.rs
/// keeps it so.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A `[network] bind_addr` on a port free now, then `extra`: a server started with it comes back
/// at the same address after a restart.
pub fn fixed_port(extra: &str) -> String {
    format!(
        "[network]\nbind_addr = \"127.0.0.1:{}\"\n{extra}",
        free_port()
    )
}

/// A fresh temp directory under /tmp (a real filesystem: tmpfs would hide O_DIRECT bugs).
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("smdb-test-")
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// The base config every test server gets: ephemeral port, data under `dir`, metrics and
/// the HTTP listener off unless a test has their section (HTTP then on an ephemeral port).
pub fn base_config(dir: &Path, extra: &str) -> String {
    let mut cfg = format!(
        "[network]\nbind_addr = \"127.0.0.1:0\"\n[storage]\ndata_dir = \"{}\"\n",
        dir.join("data").display()
    );
    if !extra.contains("[metrics]") {
        cfg.push_str("[metrics]\nenabled = false\n");
    }
    match extra.contains("[http]") {
        true => cfg.push_str("[http]\nbind_addr = \"127.0.0.1:0\"\n"),
        false => cfg.push_str("[http]\nenabled = false\n"),
    }
    merge_sections(&cfg, extra)
}

/// Merges `extra` TOML into `base` by section, later keys replacing earlier ones, so a test can
/// override e.g. `[storage] fsync` without duplicating the table.
fn merge_sections(base: &str, extra: &str) -> String {
    let mut sections: Vec<(String, Vec<String>)> = vec![(String::new(), vec![])];
    let mut cur = 0;
    for line in base
        .lines()
        .chain(extra.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        if line.starts_with("[[") {
            // An array-of-tables entry (`[[auth.tokens]]`): each one is a table of its own.
            sections.push((line.to_string(), vec![]));
            cur = sections.len() - 1;
            continue;
        }
        if line.starts_with('[') {
            cur = match sections.iter().position(|(n, _)| n == line) {
                Some(i) => i,
                None => {
                    sections.push((line.to_string(), vec![]));
                    sections.len() - 1
                }
            };
            continue;
        }
        let key = |l: &str| l.split('=').next().unwrap_or("").trim().to_string();
        let k = key(line);
        sections[cur].1.retain(|l| key(l) != k);
        sections[cur].1.push(line.to_string());
    }
    let mut out = String::new();
    for (name, lines) in sections {
        if !name.is_empty() {
            out.push_str(&name);
            out.push('\n');
        }
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

impl Server {
    /// Starts a server in a new temp dir with `extra` config. The dir lives as long as the
    /// returned guard.
    pub fn start(extra: &str) -> (Server, TestDir) {
        Server::start_with_env(extra, &[])
    }

    /// Starts a server using (and keeping) `dir` for config, data and logs.
    pub fn start_in(dir: &Path, extra: &str) -> Result<Server, String> {
        Server::start_in_with_env(dir, extra, &[])
    }

    /// `start`, with extra environment variables for the server process (e.g. `RUST_LOG`); an
    /// empty value removes the variable from the inherited environment.
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> (Server, TestDir) {
        Server::start_owning(temp_dir(), extra, env)
    }

    /// `start_in_with_env` in `dir`, which the server then shares with the returned guard.
    pub fn start_owning(
        dir: tempfile::TempDir,
        extra: &str,
        env: &[(&str, &str)],
    ) -> (Server, TestDir) {
        let dir = Arc::new(dir);
        let mut s = Server::start_in_with_env(dir.path(), extra, env)
            .unwrap_or_else(|e| panic!("start: {e}"));
        s.owned_dir = Some(dir.clone());
        (s, dir)
    }

    /// `start_in`, with extra environment variables for the server process.
    pub fn start_in_with_env(
        dir: &Path,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let config = base_config(dir, extra);
        let mut s = Server {
            child: None,
            addr: "127.0.0.1:0".parse().unwrap(),
            metrics_addr: None,
            http_addr: None,
            dir: dir.into(),
            config,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            owned_dir: None,
        };
        s.launch()?;
        Ok(s)
    }

    fn launch(&mut self) -> Result<(), String> {
        let cfg_path = self.dir.join("smdb.toml");
        std::fs::write(&cfg_path, &self.config).map_err(|e| e.to_string())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(server_bin());
        for (k, v) in &self.env {
            match v.is_empty() {
                true => cmd.env_remove(k),
                false => cmd.env(k, v),
            };
        }
        let mut child = cmd
            .arg("--config")
            .arg(&cfg_path)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let copy = self.dir.join("server.stdout");
        std::thread::spawn(move || {
            use std::io::Write;
            let mut copy = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(copy)
                .ok();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(f) = copy.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                if let Some(found) = listening_addrs(&line) {
                    let _ = tx.send((found, http_addr_of(&line)));
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(((addr, metrics), http)) => {
                self.addr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
                self.http_addr = match http {
                    Some(h) => Some(h.parse().map_err(|e| format!("{h}: {e}"))?),
                    None => None,
                };
                self.metrics_addr = match metrics {
                    Some(m) => Some(m.parse().map_err(|e| format!("{m}: {e}"))?),
                    None => None,
                };
                self.child = Some(child);
                Ok(())
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                Err(format!(
                    "server did not start ({status:?}); log:\n{}",
                    self.log()
                ))
            }
        }
    }

    /// The server's stdout so far (every line, as written).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.stdout")).unwrap_or_default()
    }

    /// Sends `sig` to the server without waiting.
    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// Waits for the server to exit by itself (after `signal`), at most `t`.
    pub fn wait_exit(&mut self, t: Duration) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        wait_timeout(&mut c, t)
    }

    /// Starts the server again (same dir and config) after it exited or was killed.
    pub fn relaunch(&mut self) -> Result<(), String> {
        self.kill();
        self.launch()
    }

    /// The server's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A connected client that has done HELLO.
    pub fn client(&self) -> Client {
        let c = Client::connect_hello(self.addr, "smdb-tests").expect("connect + HELLO");
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    /// A client straight to a server that wants PROXY headers (`network.proxy_protocol`): a v2
    /// LOCAL header (as a balancer's own connection), then HELLO.
    pub fn proxied_client(&self) -> Client {
        use std::io::Write;
        let mut tcp = std::net::TcpStream::connect(self.addr).expect("connect");
        tcp.write_all(&smdb::proxy::V2_LOCAL_HEADER).unwrap();
        let mut c = Client::from_stream(tcp).unwrap();
        c.set_timeout(Some(Duration::from_secs(10))).unwrap();
        c.hello("smdb-tests").unwrap();
        c
    }

    /// A connected client (HELLO done) once the `order` machine is defined through it.
    pub fn order_client(&self) -> Client {
        let mut c = self.client();
        put_order_machine(&mut c);
        c
    }

    /// A client subscribed by `WATCH_ALL` with `params` (the reply is not needed).
    pub fn watcher(&self, params: Value) -> Client {
        let mut c = self.client();
        c.call("WATCH_ALL", params).expect("WATCH_ALL");
        c
    }

    /// A connected client without HELLO.
    pub fn raw_client(&self) -> Client {
        let c = Client::connect(self.addr).expect("connect");
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Replaces the config file with the base config merged with `extra` (a SIGHUP re-reads
    /// it; a restart uses it too).
    pub fn rewrite_config(&mut self, extra: &str) {
        self.config = base_config(&self.dir, extra);
        std::fs::write(self.dir.join("smdb.toml"), &self.config).expect("write config");
    }

    /// Waits (up to 10 s) until the server log holds `needle` at least `n` times.
    pub fn wait_for_log(&self, needle: &str, n: usize) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.matches(needle).count() >= n {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "log never showed {needle:?} {n} time(s):\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait for exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("server running");
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        wait_timeout(&mut c, Duration::from_secs(30)).expect("server exits after SIGTERM")
    }

    /// Kills (SIGKILL) and starts again on the same dir and config, on a new port.
    pub fn restart_after_kill(&mut self) {
        self.kill();
        self.launch().unwrap_or_else(|e| panic!("restart: {e}"));
    }
}

/// Lines of the server's log a failing test prints (the temp dir holding the whole log is
/// deleted with the test).
const LOG_LINES_ON_FAILURE: usize = 80;

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            // A failed assertion is unwinding: the server's side of it goes with the report
            // (a rare CI failure is otherwise gone with its temp dir).
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_LINES_ON_FAILURE)..];
            eprintln!(
                "--- last {} of {} lines of the server log ({}):\n{}\n---",
                tail.len(),
                lines.len(),
                self.dir.display(),
                tail.join("\n")
            );
        }
    }
}

/// The addresses in the start-up announcement, text (`smdb-server listening on ADDR shards=N[
/// metrics=MADDR]`) or JSON (`{"message":"smdb-server listening","addr":..,"metrics_addr":..}`).
pub fn listening_addrs(line: &str) -> Option<(String, Option<String>)> {
    if let Some(rest) = line.strip_prefix("smdb-server listening on ") {
        let mut words = rest.split_whitespace();
        let addr = words.next().unwrap_or("").to_string();
        let metrics = words
            .find_map(|w| w.strip_prefix("metrics="))
            .map(str::to_string);
        return Some((addr, metrics));
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v["message"] != "smdb-server listening" {
        return None;
    }
    let addr = v["addr"].as_str()?.to_string();
    Some((addr, v["metrics_addr"].as_str().map(str::to_string)))
}

/// The HTTP listener in the start-up announcement (` http=HADDR`, or JSON `http_addr`).
pub fn http_addr_of(line: &str) -> Option<String> {
    if let Some(rest) = line.strip_prefix("smdb-server listening on ") {
        return rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http="))
            .map(str::to_string);
    }
    let v: Value = serde_json::from_str(line).ok()?;
    v["http_addr"].as_str().map(str::to_string)
}

/// Reads `out` (a child's stdout or stderr) line by line on a thread; the first `f(line)` that
/// is `Some`, if one comes within `limit`. The thread reads on to the end, so the child never
/// blocks on a full pipe.
pub fn first_line<T: Send + 'static>(
    out: impl std::io::Read + Send + 'static,
    limit: Duration,
    f: impl Fn(&str) -> Option<T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(found) = f(&line) {
                let _ = tx.send(found);
            }
        }
    });
    rx.recv_timeout(limit).ok()
}

pub fn wait_timeout(c: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = std::time::Instant::now() + t;
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        if std::time::Instant::now() > deadline {
            let _ = c.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the binary with `args` expecting it to exit by itself; returns (code, stderr).
pub fn run_to_exit(args: &[&str]) -> (i32, String, String) {
    run::output(Command::new(server_bin()).args(args))
}

/// Writes `config` to `path` and runs the server on it, expecting it to exit by itself (a
/// config or start-up error); returns (code, stdout, stderr).
pub fn run_config_to_exit(path: &Path, config: &str) -> (i32, String, String) {
    std::fs::write(path, config).expect("write the config");
    run_to_exit(&["--config", path.to_str().expect("a UTF-8 path")])
}

/// Writes `config` to `path` and starts the server on it, expecting it to exit by itself
/// within `limit` (killed past it): its exit code (None when killed) and its stderr.
pub fn exit_within(path: &Path, config: &str, limit: Duration) -> (Option<i32>, String) {
    std::fs::write(path, config).expect("write the config");
    let mut child = Command::new(server_bin())
        .arg("--config")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let code = wait_timeout(&mut child, limit).and_then(|s| s.code());
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (code, err)
}

/// An order workflow used across tests: guarded payment, final states.
pub fn order_definition() -> Value {
    json!({
        "states": ["new", "paid", "shipped", "cancelled"],
        "initial": "new",
        "final": ["shipped", "cancelled"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "paid", "event": "ship", "to": "shipped"},
            {"from": ["new", "paid"], "event": "cancel", "to": "cancelled"},
            {"from": "paid", "event": "touch", "to": "paid"}
        ]
    })
}

/// Defines the `order` machine, version 1.
pub fn put_order_machine(c: &mut Client) {
    let def = order_definition();
    c.call(
        "PUT_MACHINE",
        json!({"machine": "order", "version": 1, "definition": def}),
    )
    .expect("PUT_MACHINE order");
}

/// Creates `order` instance `id` (version 1) with context `{"total": total}`; the reply.
pub fn create_order(c: &mut Client, id: &str, total: i64) -> Value {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": id, "context": {"total": total}}),
    )
    .unwrap_or_else(|e| panic!("create {id}: {e}"))
}

/// The error code of a failed call (panics on success).
/// A failed call's code and details (a server error expected).
pub fn refusal(r: Result<Value, ClientError>) -> (String, Value) {
    match r {
        Err(ClientError::Server { code, details, .. }) => (code.to_string(), details),
        other => panic!("expected a server error, got {other:?}"),
    }
}

pub fn err_code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> String {
    let r = r.map(|v| format!("{v:?}"));
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.code().unwrap_or("not a server error").to_string(),
    }
}
