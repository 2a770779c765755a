//! The nemesis's cluster: in each host namespace one etcd member (Debian etcd 3.4 with
//! `--pre-vote=true`, heartbeat 50 ms, election timeout 500 ms) and one smdb member bound to
//! the host's address. Members are queried from a thread inside their own host (over its
//! loopback path, which no fault touches), so a cut-off member still answers the harness.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::history::{Final, Mode, Term};
use super::net::{self, host_ip, Net, ETCD_CLIENT_PORT, ETCD_PEER_PORT, METRICS_PORT, SMDB_PORT};
use super::wire::http_get;
pub use super::wire::{call, connect, full_history};

/// The members' etcd lease (`ha.ttl_ms`): the unit of the availability figures.
pub const TTL_MS: u64 = 2000;
/// `replication.sync_timeout_ms`: short, so SYNC_TIMEOUTs appear within a scenario.
pub const SYNC_TIMEOUT_MS: u64 = 1500;

pub struct Member {
    pub node: String,
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
    stopped: bool,
    /// Entries truncated by this member's earlier processes (its counter restarts at 0).
    trunc_carry: u64,
}

pub struct Cluster<'n> {
    pub net: &'n Net,
    pub mode: Mode,
    pub members: Vec<Member>,
    etcd: Vec<Option<Child>>,
    dir: tempfile::TempDir,
}

impl<'n> Cluster<'n> {
    /// Starts etcd and the three members, waits for a healed cluster, defines the machine.
    pub fn start(net: &'n Net, mode: Mode) -> Cluster<'n> {
        crate::common::tools::etcd();
        // Named after the run, so a killed run's data goes with its namespaces.
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-data-", net.prefix))
            .tempdir_in("/tmp")
            .expect("temp dir");
        let members = (0..3)
            .map(|i| Member {
                node: format!("n{}", i + 1),
                addr: format!("{}:{SMDB_PORT}", host_ip(i)).parse().unwrap(),
                metrics: format!("{}:{METRICS_PORT}", host_ip(i)).parse().unwrap(),
                dir: dir.path().join(format!("m{}", i + 1)),
                child: None,
                stopped: false,
                trunc_carry: 0,
            })
            .collect();
        let mut c = Cluster {
            net,
            mode,
            members,
            etcd: (0..3).map(|_| None).collect(),
            dir,
        };
        for i in 0..3 {
            c.start_etcd(i);
        }
        c.wait_etcd(Duration::from_secs(30));
        for i in 0..3 {
            c.write_config(i);
            c.launch(i);
        }
        let p = c.wait_healed(Duration::from_secs(60));
        let def = json!({"states": ["s"], "initial": "s", "final": [],
            "transitions": [{"from": "s", "event": "add", "to": "s"}]});
        c.ask(p, move |a| {
            call(
                a,
                "PUT_MACHINE",
                json!({"machine": "nem", "version": 1, "definition": def}),
            )
        })
        .expect("PUT_MACHINE nem");
        c
    }

    fn start_etcd(&mut self, i: usize) {
        let ns = self.net.host(i);
        let peer = |j: usize| format!("http://{}:{ETCD_PEER_PORT}", host_ip(j));
        let client = format!("http://{}:{ETCD_CLIENT_PORT}", host_ip(i));
        let cluster: Vec<String> = (0..3).map(|j| format!("e{}={}", j + 1, peer(j))).collect();
        let log =
            std::fs::File::create(self.dir.path().join(format!("etcd{}.log", i + 1))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(crate::common::tools::etcd())
            .args(["--name", &format!("e{}", i + 1)])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("etcd{}", i + 1)))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer(i),
                "--initial-advertise-peer-urls",
                &peer(i),
            ])
            .args(["--initial-cluster", &cluster.join(",")])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "smdb-nemesis",
            ])
            .args([
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
                "--pre-vote=true",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.etcd[i] = Some(child);
    }

    /// Waits until a write through etcd succeeds and every member serves a linearizable read.
    fn wait_etcd(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let all: Vec<String> = (0..3)
            .map(|i| format!("{}:{ETCD_CLIENT_PORT}", host_ip(i)))
            .collect();
        let sw = self.net.switch();
        let ctl = |eps: &str, args: &[&str]| {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &sw,
                    "etcdctl",
                    "--endpoints",
                    eps,
                    "--command-timeout=1s",
                ])
                .args(args)
                .env("ETCDCTL_API", "3")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        while !(ctl(&all.join(","), &["put", "/nemesis/ready", "1"])
            && all
                .iter()
                .all(|e| ctl(e, &["get", "--consistency=l", "/nemesis/ready"])))
        {
            assert!(Instant::now() < deadline, "etcd did not become healthy");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn write_config(&self, i: usize) {
        let m = &self.members[i];
        let mode = match self.mode {
            Mode::Sync => "sync",
            Mode::Async => "async",
        };
        let eps: Vec<String> = (0..3)
            .map(|j| format!("\"{}:{ETCD_CLIENT_PORT}\"", host_ip(j)))
            .collect();
        let cfg = format!(
            "[network]\nbind_addr = \"{addr}\"\n\
             [storage]\ndata_dir = \"{data}\"\nsegment_bytes = 1048576\n\
             [shards]\ncount = 1\n\
             [metrics]\nenabled = true\nbind_addr = \"{metrics}\"\n\
             [http]\nenabled = false\n\
             [replication]\nmode = \"{mode}\"\nsync_replicas = 1\nsync_timeout_ms = {SYNC_TIMEOUT_MS}\n\
             heartbeat_ms = 200\nreconnect_max_ms = 500\n\
             [ha]\nenabled = true\nnode_id = \"{node}\"\ncluster = \"nem\"\nadvertise_addr = \"{addr}\"\n\
             etcd_endpoints = [{eps}]\nttl_ms = {TTL_MS}\nsafety_margin_ms = 500\n",
            addr = m.addr,
            data = m.dir.join("data").display(),
            metrics = m.metrics,
            node = m.node,
            eps = eps.join(", "),
        );
        std::fs::create_dir_all(&m.dir).unwrap();
        std::fs::write(m.dir.join("smdb.toml"), cfg).unwrap();
    }

    /// Starts member `i`'s process in its host and waits for its start-up line.
    fn launch(&mut self, i: usize) {
        let ns = self.net.host(i);
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(m.dir.join("server.log"))
            .unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(crate::common::server_bin())
            .arg("--config")
            .arg(m.dir.join("smdb.toml"))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start smdb-server");
        let stdout = child.stdout.take().unwrap();
        let listening = |line: &str| line.contains("listening").then_some(());
        if crate::common::first_line(stdout, Duration::from_secs(60), listening).is_none() {
            let _ = child.kill();
            let log = std::fs::read_to_string(m.dir.join("server.log")).unwrap_or_default();
            panic!("{} did not start; log:\n{log}", m.node);
        }
        m.child = Some(child);
        m.stopped = false;
    }

    /// Member `i`'s server log.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.members[i].dir.join("server.log")).unwrap_or_default()
    }

    /// The last `n` lines of every member's log.
    pub fn log_tails(&self, n: usize) -> String {
        (0..3)
            .map(|i| {
                let log = self.log(i);
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(n)..].join("\n");
                format!("--- {} ---\n{tail}", self.members[i].node)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Copies the members' and etcd's logs to a directory of their own under /tmp (a failed
    /// run's temp dir goes with the cluster); returns it.
    pub fn save_logs(&self) -> PathBuf {
        let to = PathBuf::from(format!("/tmp/nemesis-{}-logs", std::process::id()));
        let _ = std::fs::create_dir_all(&to);
        for i in 0..3 {
            let n = i + 1;
            let _ = std::fs::copy(
                self.members[i].dir.join("server.log"),
                to.join(format!("n{n}.log")),
            );
            let _ = std::fs::copy(
                self.dir.path().join(format!("etcd{n}.log")),
                to.join(format!("etcd{n}.log")),
            );
        }
        to
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].child.is_some() && !self.members[i].stopped
    }

    /// SIGKILL of member `i` (its truncation counter read first, when it answers).
    pub fn kill(&mut self, i: usize) {
        if self.members[i].child.is_some() && !self.members[i].stopped {
            self.members[i].trunc_carry += self.truncated_now(i).unwrap_or(0);
        }
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.members[i].stopped = false;
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) of member `i`.
    pub fn pause(&mut self, i: usize, stop: bool) {
        let m = &mut self.members[i];
        if let Some(c) = &m.child {
            let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: a signal to our own child (`ip netns exec` execs the server).
            unsafe { libc::kill(c.id() as i32, sig) };
            m.stopped = stop;
        }
    }

    /// Continues stopped members and starts killed ones.
    pub fn revive(&mut self) {
        for i in 0..3 {
            if self.members[i].stopped {
                self.pause(i, false);
            }
            if self.members[i].child.is_none() {
                self.launch(i);
            }
        }
    }

    /// Runs `f(addr)` for member `i` on a thread inside its host.
    pub fn ask<R: Send>(&self, i: usize, f: impl FnOnce(SocketAddr) -> R + Send) -> R {
        let addr = self.members[i].addr;
        net::in_ns(&self.net.host(i), move || f(addr))
    }

    /// Member `i`'s REPLICATION_STATUS (None: it does not answer within 2 s).
    pub fn status(&self, i: usize) -> Option<Value> {
        self.ask(i, |a| call(a, "REPLICATION_STATUS", json!({})).ok())
    }

    /// Whether member `i` answers 200 on `/health/primary`.
    pub fn healthy_primary(&self, i: usize) -> bool {
        let m = self.members[i].metrics;
        net::in_ns(&self.net.host(i), move || http_get(m, "/health/primary"))
            .is_some_and(|(code, _)| code == 200)
    }

    /// The member answering 200 on `/health/primary`, when exactly one does.
    pub fn primary(&self) -> Option<usize> {
        let up: Vec<usize> = (0..3)
            .filter(|&i| self.is_up(i) && self.healthy_primary(i))
            .collect();
        (up.len() == 1).then(|| up[0])
    }

    /// Waits until one member is primary and the others follow it at its positions; returns
    /// the primary. Panics with the statuses and log tails after `limit`.
    pub fn wait_healed(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let st: Vec<Option<Value>> = (0..3).map(|i| self.status(i)).collect();
            if let Some(p) = healed(&st) {
                if self.healthy_primary(p) {
                    return p;
                }
            }
            if Instant::now() > deadline {
                let shown: Vec<String> = st.iter().map(|s| format!("{s:?}")).collect();
                panic!(
                    "not healed within {limit:?}:\n{}\n{}",
                    shown.join("\n"),
                    self.log_tails(30)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Member `i`'s `svc_replication_truncated_entries_total` now (this process's).
    fn truncated_now(&self, i: usize) -> Option<u64> {
        let m = self.members[i].metrics;
        let (_, body) = net::in_ns(&self.net.host(i), move || http_get(m, "/metrics"))?;
        body.lines()
            .find(|l| l.starts_with("svc_replication_truncated_entries_total"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
    }

    /// Entries truncated by every member over its life, all processes included.
    pub fn truncated_total(&self) -> u64 {
        (0..3)
            .map(|i| self.members[i].trunc_carry + self.truncated_now(i).unwrap_or(0))
            .sum()
    }

    /// What the members hold of `instances`, and the terms (call once healed).
    pub fn read_final(&self, instances: &[String], truncated_since: u64) -> Final {
        let mut members = BTreeMap::new();
        for i in 0..3 {
            let ids = instances.to_vec();
            let held = self.ask(i, move |a| {
                let mut c = connect(a).expect("connect for the final read");
                ids.iter()
                    .map(|id| (id.clone(), full_history(&mut c, id)))
                    .collect::<BTreeMap<_, _>>()
            });
            members.insert(self.members[i].node.clone(), held);
        }
        let p = self.primary().unwrap_or(0);
        let st = self.status(p).expect("the primary's status");
        let terms = (st["ha"]["history"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter())
        .map(|h| Term {
            epoch: h["epoch"].as_u64().unwrap_or(0),
            node_id: h["node_id"].as_str().unwrap_or("").to_string(),
            start_offsets: (h["start_offsets"].as_array().cloned().unwrap_or_default())
                .iter()
                .filter_map(Value::as_u64)
                .collect(),
        })
        .collect();
        Final {
            members,
            truncated: self.truncated_total().saturating_sub(truncated_since),
            terms,
        }
    }

    /// Creates `ids` on the primary (keyed, retried while the cluster settles).
    pub fn create_instances(&self, ids: &[String]) {
        for id in ids {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let p = self.primary().unwrap_or(0);
                let params = json!({"machine": "nem", "version": 1, "id": id, "context": {},
                    "idempotency_key": format!("create-{id}")});
                match self.ask(p, move |a| call(a, "CREATE_INSTANCE", params)) {
                    Ok(_) => break,
                    Err(e) if Instant::now() > deadline => panic!("create {id}: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        }
    }
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for e in self.etcd.iter_mut().filter_map(Option::take) {
            let mut e = e;
            let _ = e.kill();
            let _ = e.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails(40));
        }
    }
}

/// The primary when `st` shows one primary, two followers of it at its positions, and both
/// live in its replica list.
fn healed(st: &[Option<Value>]) -> Option<usize> {
    let st: Vec<&Value> = st.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let prim: Vec<usize> = (0..st.len())
        .filter(|&i| st[i]["role"] == "primary")
        .collect();
    let &[p] = prim.as_slice() else {
        return None;
    };
    let follows = |s: &Value| {
        s["positions"] == st[p]["positions"] && s["ha"]["primary"] == st[p]["ha"]["node_id"]
    };
    let replicas = st[p]["replicas"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let live = replicas.iter().filter(|r| r["live"] == true).count();
    ((0..st.len()).filter(|&i| i != p).all(|i| follows(st[i])) && live >= 2).then_some(p)
}
