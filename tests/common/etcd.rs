//! A loopback etcd cluster for failover tests (docs/ha.md): `n` members of the Debian
//! `etcd-server` on free ports with a temp data dir, fast elections (heartbeat 50 ms, election
//! timeout 500 ms, so the smallest lease TTL is 1 s). Every member is killed when the guard
//! drops, a failing test included.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, tools};

pub struct Etcd {
    children: Vec<Option<Child>>,
    pub endpoints: Vec<String>,
    peers: Vec<String>,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Etcd {
    /// Starts `n` members and waits until the cluster answers.
    pub fn start(n: usize) -> Etcd {
        let bin = tools::etcd();
        let dir = super::temp_dir();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let mut e = Etcd {
            children: (0..n).map(|_| None).collect(),
            endpoints: ports
                .iter()
                .map(|(c, _)| format!("127.0.0.1:{c}"))
                .collect(),
            peers: ports
                .iter()
                .map(|(_, p)| format!("http://127.0.0.1:{p}"))
                .collect(),
            dir,
            bin,
        };
        for i in 0..n {
            e.start_member(i);
        }
        e.wait_healthy(Duration::from_secs(30));
        e
    }

    /// (Re)starts member `i` with its old data dir.
    pub fn start_member(&mut self, i: usize) {
        let cluster: Vec<String> = (0..self.peers.len())
            .map(|j| format!("e{j}={}", self.peers[j]))
            .collect();
        let client = format!("http://{}", self.endpoints[i]);
        let log = std::fs::File::create(self.dir.path().join(format!("e{i}.log"))).expect("log");
        let child = Command::new(&self.bin)
            .args(["--name", &format!("e{i}")])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("e{i}")))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args(["--listen-peer-urls", &self.peers[i]])
            .args(["--initial-advertise-peer-urls", &self.peers[i]])
            .args(["--initial-cluster", &cluster.join(",")])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "smdb-test",
            ])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.children[i] = Some(child);
    }

    /// SIGKILLs member `i`.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` to member `i` (SIGSTOP: a silent member, whose accepted connections and
    /// dropped packets look alike to a client: nothing is refused, nothing answers).
    #[allow(dead_code)]
    pub fn signal_member(&self, i: usize, sig: i32) {
        if let Some(c) = &self.children[i] {
            // SAFETY: kill(2) on a child this guard owns and has not reaped.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// The index of the member that leads etcd's raft now (`etcdctl endpoint status`), if
    /// every member answers and one of them leads.
    #[allow(dead_code)]
    pub fn leader(&self) -> Option<usize> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoints.join(",")])
            .args([
                "--command-timeout=1s",
                "endpoint",
                "status",
                "--write-out=json",
            ])
            .output()
            .ok()?;
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let all = all.as_array()?;
        let member = |v: &serde_json::Value| v["Status"]["header"]["member_id"].as_u64();
        let leader = all.first()?["Status"]["leader"].as_u64()?;
        let at = all.iter().find(|v| member(v) == Some(leader))?["Endpoint"].as_str()?;
        let at = at.trim_start_matches("http://");
        self.endpoints.iter().position(|e| e == at)
    }

    /// etcd's raft leader now and the other members (its followers), by index; panics when
    /// etcd has no leader.
    #[allow(dead_code)]
    pub fn leader_and_followers(&self) -> (usize, Vec<usize>) {
        let leader = self.leader().expect("etcd has a leader");
        let followers = (0..self.endpoints.len()).filter(|&i| i != leader).collect();
        (leader, followers)
    }

    /// The `[ha]` endpoints list as TOML.
    pub fn toml_endpoints(&self) -> String {
        let quoted: Vec<String> = self.endpoints.iter().map(|e| format!("\"{e}\"")).collect();
        format!("[{}]", quoted.join(", "))
    }

    /// Waits until every member answers on its own endpoint (a write through the cluster
    /// succeeds once two of three run; a member still starting then would make the members'
    /// etcd clients fail calls on it, which the tests would read as an etcd outage).
    pub fn wait_healthy(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let answers = |endpoints: &str, args: &[&str]| {
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", endpoints, "--command-timeout=1s"])
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        loop {
            let written = answers(&self.endpoints.join(","), &["put", "/smdb-test/ready", "1"]);
            let each = written
                && (self.endpoints.iter())
                    .all(|e| answers(e, &["get", "--consistency=l", "/smdb-test/ready"]));
            if each {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy on every member: {:?}",
                self.endpoints
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill_member(i);
        }
    }
}
