//! Starting and stopping an `smdb-server` for `--spawn` and `--scale`: a fresh data dir under
//! `--data-parent` (default /tmp: a real filesystem, never tmpfs, which hides O_DIRECT costs),
//! port 0, the shard count and cores asked for, and the address read from its stdout line
//! `smdb-server listening on ADDR shards=N`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toml::{Table, Value};

/// How long a server may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM before it is killed (it drains for at most
/// 10 s, see docs/architecture.md).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The `storage.fsync` of a spawned server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    Always,
    Interval,
    Never,
}

impl Fsync {
    pub fn as_str(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Interval => "interval",
            Fsync::Never => "never",
        }
    }
}

/// How to start servers.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub bin: PathBuf,
    /// Base TOML config; the keys below override it.
    pub base_config: Option<PathBuf>,
    /// `shards.cores`: shard i runs on `cores[i % len]`; empty keeps the server's placement.
    pub cores: Vec<usize>,
    pub fsync: Fsync,
    pub data_parent: PathBuf,
    /// Turn the HTTP listener on (an ephemeral port) for `--http`.
    pub http: bool,
}

/// A running server that this process started; stopped (SIGTERM) and its data dir removed
/// on drop.
pub struct SpawnedServer {
    child: Option<Child>,
    pub addr: String,
    /// The HTTP listener, when on.
    pub http_addr: Option<String>,
    pub shards: u32,
    pub pid: u32,
    pub dir: PathBuf,
    /// `shards.cores` as configured (empty: the server's default placement).
    pub cores: Vec<usize>,
    /// How it was started, for `kill_and_restart`.
    spec: ServerSpec,
    shards_arg: Option<u32>,
}

/// The `smdb-server` next to the running executable (cargo puts both bins in one directory).
pub fn default_server_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    Ok(exe.with_file_name("smdb-server"))
}

impl ServerSpec {
    /// The config text for a server with `shards` shards (None: the server's default) in `dir`.
    pub fn config(&self, shards: Option<u32>, dir: &Path) -> Result<(String, Vec<usize>), String> {
        let mut t: Table = match &self.base_config {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .parse()
                .map_err(|e| format!("{}: {e}", p.display()))?,
            None => Table::new(),
        };
        let has_metrics = t.contains_key("metrics");
        let has_http = t.contains_key("http");
        let has_logging = t.contains_key("logging");
        set(&mut t, "network", "bind_addr", Value::from("127.0.0.1:0"))?;
        let data = dir.join("data").to_string_lossy().into_owned();
        set(&mut t, "storage", "data_dir", Value::from(data))?;
        set(&mut t, "storage", "fsync", Value::from(self.fsync.as_str()))?;
        let mut cores = Vec::new();
        if let Some(n) = shards {
            set(&mut t, "shards", "count", Value::from(i64::from(n)))?;
            if !self.cores.is_empty() {
                cores = (0..n as usize)
                    .map(|i| self.cores[i % self.cores.len()])
                    .collect();
                let list = cores.iter().map(|c| Value::from(*c as i64)).collect();
                set(&mut t, "shards", "cores", Value::Array(list))?;
            }
        }
        if !has_metrics {
            set(&mut t, "metrics", "enabled", Value::from(false))?;
        }
        match (self.http, has_http) {
            (true, _) => {
                set(&mut t, "http", "enabled", Value::from(true))?;
                set(&mut t, "http", "bind_addr", Value::from("127.0.0.1:0"))?;
            }
            (false, false) => set(&mut t, "http", "enabled", Value::from(false))?,
            (false, true) => {}
        }
        if !has_logging {
            set(&mut t, "logging", "level", Value::from("warn"))?;
        }
        let text = toml::to_string(&t).map_err(|e| format!("server config: {e}"))?;
        Ok((text, cores))
    }

    /// Starts a server with `shards` shards (None: the server's default count).
    pub fn start(&self, shards: Option<u32>) -> Result<SpawnedServer, String> {
        if !self.bin.is_file() {
            return Err(format!(
                "server binary {} not found: build it (cargo build --release --bin smdb-server) \
                 or pass --server-bin",
                self.bin.display()
            ));
        }
        let dir = fresh_dir(&self.data_parent)?;
        let started = self.launch(shards, &dir);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        started
    }

    fn launch(&self, shards: Option<u32>, dir: &Path) -> Result<SpawnedServer, String> {
        let (config, cores) = self.config(shards, dir)?;
        let cfg_path = dir.join("smdb.toml");
        std::fs::write(&cfg_path, &config).map_err(|e| format!("write config: {e}"))?;
        let log = std::fs::File::create(dir.join("server.log"))
            .map_err(|e| format!("server log: {e}"))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--config")
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        kill_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.bin.display()))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err("server stdout was not captured".into());
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(found) = parse_listening(&line) {
                    let _ = tx.send((found, parse_http(&line)));
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(((addr, n), http_addr)) => Ok(SpawnedServer {
                pid: child.id(),
                child: Some(child),
                addr,
                http_addr,
                shards: n,
                dir: dir.to_path_buf(),
                cores,
                spec: self.clone(),
                shards_arg: shards,
            }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                Err(format!(
                    "server did not announce its address ({status:?}); log tail:\n{}",
                    tail(&log, 20)
                ))
            }
        }
    }
}

impl SpawnedServer {
    /// SIGTERM, then SIGKILL after `STOP_TIMEOUT`. Returns a note when the exit was not clean.
    pub fn stop(&mut self) -> Option<String> {
        let mut child = self.child.take()?;
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signalling our own child process, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return None,
                Ok(Some(status)) => return Some(format!("server exited with {status}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Some("server did not stop after SIGTERM; killed".into());
                }
            }
        }
    }
}

impl SpawnedServer {
    /// SIGKILLs the server and starts it again on the same data dir; returns the seconds from
    /// the restart to its `listening` line (printed once every shard has recovered).
    pub fn kill_and_restart(&mut self) -> Result<f64, String> {
        let mut child = self.child.take().ok_or("server already stopped")?;
        let _ = child.kill();
        let _ = child.wait();
        let started = Instant::now();
        let mut fresh = self.spec.launch(self.shards_arg, &self.dir)?;
        let secs = started.elapsed().as_secs_f64();
        self.child = fresh.child.take();
        self.pid = fresh.pid;
        self.addr = std::mem::take(&mut fresh.addr);
        self.http_addr = fresh.http_addr.take();
        // The dir stays this server's: `fresh` (now without a child) must not remove it.
        fresh.dir = PathBuf::new();
        Ok(secs)
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        if let Some(note) = self.stop() {
            eprintln!("smdb-bench: {note}");
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Asks the kernel to SIGKILL the server if this process dies first, so an interrupted bench
/// leaves no server behind.
fn kill_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; prctl is async-signal-safe
    // and the closure touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// (address, shard count) from the server's announcement line.
fn parse_listening(line: &str) -> Option<(String, u32)> {
    let rest = line.strip_prefix("smdb-server listening on ")?;
    let mut words = rest.split_whitespace();
    let addr = words.next()?.to_string();
    let shards = words
        .find_map(|w| w.strip_prefix("shards="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Some((addr, shards))
}

/// The ` http=ADDR` of the announcement line.
fn parse_http(line: &str) -> Option<String> {
    let rest = line.strip_prefix("smdb-server listening on ")?;
    rest.split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .map(str::to_string)
}

fn set(t: &mut Table, section: &str, key: &str, value: Value) -> Result<(), String> {
    let entry = t
        .entry(section.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    match entry.as_table_mut() {
        Some(tbl) => {
            tbl.insert(key.to_string(), value);
            Ok(())
        }
        None => Err(format!("server config: `{section}` is not a table")),
    }
}

/// A new empty directory under `parent`, unique to this process and moment.
fn fresh_dir(parent: &Path) -> Result<PathBuf, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = parent.join(format!("smdb-bench-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cores: Vec<usize>, base: Option<PathBuf>) -> ServerSpec {
        ServerSpec {
            bin: PathBuf::from("/nonexistent/smdb-server"),
            base_config: base,
            cores,
            fsync: Fsync::Always,
            data_parent: PathBuf::from("/tmp"),
            http: false,
        }
    }

    #[test]
    fn config_sets_count_cores_and_keeps_base_keys() {
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let base = dir.path().join("base.toml");
        std::fs::write(
            &base,
            "[network]\nacceptor_cores = 1\n[logging]\nlevel = \"info\"\n",
        )
        .unwrap();
        let (text, cores) = spec(vec![1, 0], Some(base))
            .config(Some(3), Path::new("/tmp/x"))
            .unwrap();
        let t: Table = text.parse().unwrap();
        assert_eq!(cores, vec![1, 0, 1]);
        assert_eq!(t["shards"]["count"].as_integer(), Some(3));
        assert_eq!(t["network"]["acceptor_cores"].as_integer(), Some(1));
        assert_eq!(t["network"]["bind_addr"].as_str(), Some("127.0.0.1:0"));
        assert_eq!(t["logging"]["level"].as_str(), Some("info"));
        assert_eq!(t["metrics"]["enabled"].as_bool(), Some(false));
        assert_eq!(t["storage"]["fsync"].as_str(), Some("always"));
        assert_eq!(t["storage"]["data_dir"].as_str(), Some("/tmp/x/data"));
    }

    #[test]
    fn default_count_leaves_placement_to_the_server() {
        let (text, cores) = spec(vec![1], None).config(None, Path::new("/d")).unwrap();
        let t: Table = text.parse().unwrap();
        assert!(cores.is_empty());
        assert!(t.get("shards").is_none());
    }

    #[test]
    fn announcement_is_parsed() {
        assert_eq!(
            parse_listening("smdb-server listening on 127.0.0.1:4000 shards=2"),
            Some(("127.0.0.1:4000".into(), 2))
        );
        assert_eq!(parse_listening("something else"), None);
        let line = "smdb-server listening on 127.0.0.1:4000 shards=2 http=127.0.0.1:4001";
        assert_eq!(parse_http(line).as_deref(), Some("127.0.0.1:4001"));
    }

    #[test]
    fn missing_binary_is_a_clear_error() {
        let err = spec(vec![], None).start(Some(1)).err().unwrap();
        assert!(err.contains("--server-bin"), "{err}");
    }
}
