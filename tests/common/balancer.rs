//! HAProxy in front of a failover cluster (tests/ha.rs, tests/failover_trial.rs): the balancer
//! with tuning/haproxy-ha.cfg, the health checks it uses, and the options of a client that
//! rides out what happens behind it (tests/haproxy.rs too).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use smdb_client::{ConnectOptions, RetryPolicy};

use super::scrape::{http_get, metrics_addr};
use super::Server;

/// The HTTP status of `GET path` on `s`'s metrics listener.
pub fn health(s: &Server, path: &str) -> u16 {
    http_get(metrics_addr(s), path, &[]).status
}

/// Waits until exactly one of `members` answers 200 on `/health/primary`; returns its index.
pub fn primary_by_health(members: &[&Server], limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let up: Vec<usize> = (0..members.len())
            .filter(|&i| health(members[i], "/health/primary") == 200)
            .collect();
        if up.len() == 1 {
            return up[0];
        }
        assert!(
            Instant::now() < deadline,
            "no single healthy primary within {limit:?}: {up:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// HAProxy with tuning/haproxy-ha.cfg in front of `members` (PROXY v2 on); stops on drop.
pub struct Balancer {
    child: Child,
    pub writes: String,
}

impl Balancer {
    pub fn start(members: &[&Server], log: &Path) -> Balancer {
        let free = || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/haproxy-ha.cfg");
        let writes = free();
        let mut cmd = Command::new(super::tools::haproxy());
        cmd.arg("-db").arg("-f").arg(cfg);
        cmd.env("SMDB_LB_WRITES", &writes)
            .env("SMDB_LB_READS", free());
        for (i, m) in members.iter().enumerate() {
            cmd.env(format!("SMDB{}_ADDR", i + 1), m.addr.to_string());
            let port = metrics_addr(m).port().to_string();
            cmd.env(format!("SMDB{}_METRICS_PORT", i + 1), port);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Balancer { child, writes }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Options of a client named `name` through a balancer: each call times out after 10 s, and a
/// failed connection or call is tried again `attempts` times, backing off from 20 ms up to
/// `max_backoff`.
pub fn retrying(name: String, attempts: u32, max_backoff: Duration) -> ConnectOptions {
    ConnectOptions {
        client_name: name,
        timeout: Some(Duration::from_secs(10)),
        retry: RetryPolicy {
            attempts,
            initial_backoff: Duration::from_millis(20),
            max_backoff,
        },
        ..ConnectOptions::default()
    }
}
