//! The nemesis's network (issue 48): four network namespaces per run, a switch holding a Linux
//! bridge and three hosts joined to it by veth pairs, addresses of one /24 on the hosts' ends
//! only (no default route, nothing in the root namespace: nothing leaves), and faults as
//! nftables rules inside a namespace (`table inet nemesis` in a host, `table bridge nemesis` in
//! the switch), flushed to heal. Leftovers of killed runs are removed at start; this run's
//! namespaces and every process in them go at the end, on a panic (Drop) and on SIGTERM/SIGINT.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// The hosts' /24 (an address block unlikely to be used by anything else on the machine; it
/// exists only inside this run's namespaces anyway).
pub const SUBNET: &str = "10.213.77";
/// The bridge's own address, in the switch namespace, for the clients and the monitor there.
pub const SWITCH_IP: &str = "10.213.77.254";
const PREFIX: &str = "smdbnem";
/// Ports a member's processes listen on: smdb's clients (and replication), metrics, etcd.
pub const SMDB_PORT: u16 = 7401;
pub const METRICS_PORT: u16 = 9401;
pub const ETCD_CLIENT_PORT: u16 = 2379;
pub const ETCD_PEER_PORT: u16 = 2380;

/// The address of host `i` (0-based).
pub fn host_ip(i: usize) -> String {
    format!("{SUBNET}.{}", i + 1)
}

/// A fault, applied by `Net::apply` and removed by `Net::heal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Host `i` neither sends nor receives anything on its link.
    Isolate(usize),
    /// Host `i` receives nothing on its link (it still sends): a one-way link.
    DropInput(usize),
    /// Host `i` sends nothing on its link (it still receives).
    DropOutput(usize),
    /// Nothing on host `i` reaches any etcd client port (etcd's peers on 2380 still talk):
    /// the member there is cut from etcd only.
    CutEtcd(usize),
    /// smdb's client port between host `i` and the other hosts, both ways: replication between
    /// the member there and the others (the switch's clients still reach it).
    CutReplication(usize),
    /// The bridge drops what goes between hosts `a` and `b`; both still see the third.
    Bridge(usize, usize),
    /// Host `i` loses `pct` percent of its packets, each way.
    Loss(usize, u32),
}

/// This run's namespaces.
pub struct Net {
    pub prefix: String,
    /// Packet loss by `tc netem` (false: this kernel lacks sch_netem; nftables numgen instead).
    netem: bool,
}

impl Net {
    /// Builds the network: requires root; removes leftovers of dead runs first.
    pub fn create() -> Net {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert!(
            uid == 0,
            "the nemesis tests need root (CAP_NET_ADMIN, network namespaces): run them as root \
             (CI does), e.g. `sudo -E cargo test --test nemesis`"
        );
        crate::common::tools::require_tool("nft", "nftables");
        remove_leftovers();
        install_signal_handler();
        let prefix = format!("{PREFIX}{}", std::process::id());
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(prefix.clone());
        let mut net = Net {
            prefix,
            netem: false,
        };
        net.build();
        net.netem = net.probe_netem();
        net.probe_links();
        net
    }

    pub fn switch(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    pub fn host(&self, i: usize) -> String {
        format!("{}-h{}", self.prefix, i + 1)
    }

    fn build(&self) {
        let sw = self.switch();
        sh(&["ip", "netns", "add", &sw]);
        sh(&["ip", "-n", &sw, "link", "set", "lo", "up"]);
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"]);
        let bridge_ip = format!("{SWITCH_IP}/24");
        sh(&["ip", "-n", &sw, "addr", "add", &bridge_ip, "dev", "br0"]);
        for i in 0..3 {
            let (h, port) = (self.host(i), format!("v{}", i + 1));
            sh(&["ip", "netns", "add", &h]);
            sh(&["ip", "-n", &h, "link", "set", "lo", "up"]);
            let peer = ["peer", "name", "eth0", "netns", &h];
            sh(&[
                &["ip", "-n", &sw, "link", "add", &port, "type", "veth"],
                &peer[..],
            ]
            .concat());
            sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0"]);
            sh(&["ip", "-n", &sw, "link", "set", &port, "up"]);
            let addr = format!("{}/24", host_ip(i));
            sh(&["ip", "-n", &h, "addr", "add", &addr, "dev", "eth0"]);
            sh(&["ip", "-n", &h, "link", "set", "eth0", "up"]);
            nft(
                &h,
                "table inet nemesis {\n\
                 chain nem_in { type filter hook input priority 0; }\n\
                 chain nem_out { type filter hook output priority 0; }\n}\n",
            );
        }
        nft(
            &sw,
            "table bridge nemesis {\n chain nem_fwd { type filter hook forward priority 0; }\n}\n",
        );
    }

    /// Whether `tc qdisc ... netem` works here (it needs the sch_netem module).
    fn probe_netem(&self) -> bool {
        let h = self.host(0);
        let add = [
            "ip", "netns", "exec", &h, "tc", "qdisc", "add", "dev", "eth0", "root",
        ];
        let ok = run(&[&add[..], &["netem", "loss", "0%"]].concat()).is_ok();
        if ok {
            let _ = run(&[
                "ip", "netns", "exec", &h, "tc", "qdisc", "del", "dev", "eth0", "root",
            ]);
        }
        eprintln!(
            "nemesis: packet loss by {}",
            if ok {
                "tc netem"
            } else {
                "nftables numgen (no sch_netem)"
            }
        );
        ok
    }

    /// TCP connects between every pair of hosts and from the switch until all succeed: the
    /// bridge forwards only once its ports have left the learning state.
    fn probe_links(&self) {
        let listeners: Vec<TcpListener> = (0..3)
            .map(|i| {
                let at: SocketAddr = format!("{}:7999", host_ip(i)).parse().unwrap();
                in_ns(&self.host(i), move || TcpListener::bind(at)).expect("probe listener")
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let froms: Vec<String> = (0..3)
            .map(|i| self.host(i))
            .chain([self.switch()])
            .collect();
        for from in &froms {
            for to in 0..3 {
                let at: SocketAddr = format!("{}:7999", host_ip(to)).parse().unwrap();
                while in_ns(from, move || {
                    TcpStream::connect_timeout(&at, Duration::from_millis(300))
                })
                .is_err()
                {
                    assert!(Instant::now() < deadline, "no link from {from} to {at}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        drop(listeners);
    }

    /// Applies `f` (on top of faults already applied).
    pub fn apply(&self, f: Fault) {
        let rule = |i: usize, chain: &str, r: &str| {
            nft(
                &self.host(i),
                &format!("add rule inet nemesis {chain} {r}\n"),
            );
        };
        let peers = |i: usize| {
            let others: Vec<String> = (0..3).filter(|&j| j != i).map(host_ip).collect();
            format!("{{ {} }}", others.join(", "))
        };
        match f {
            Fault::Isolate(i) => {
                rule(i, "nem_in", "iifname \"eth0\" drop");
                rule(i, "nem_out", "oifname \"eth0\" drop");
            }
            Fault::DropInput(i) => rule(i, "nem_in", "iifname \"eth0\" drop"),
            Fault::DropOutput(i) => rule(i, "nem_out", "oifname \"eth0\" drop"),
            Fault::CutEtcd(i) => rule(i, "nem_out", &format!("tcp dport {ETCD_CLIENT_PORT} drop")),
            Fault::CutReplication(i) => {
                let p = peers(i);
                for port in ["dport", "sport"] {
                    rule(
                        i,
                        "nem_in",
                        &format!("ip saddr {p} tcp {port} {SMDB_PORT} drop"),
                    );
                    rule(
                        i,
                        "nem_out",
                        &format!("ip daddr {p} tcp {port} {SMDB_PORT} drop"),
                    );
                }
            }
            Fault::Bridge(a, b) => {
                for (x, y) in [(a, b), (b, a)] {
                    let (x, y) = (host_ip(x), host_ip(y));
                    let r =
                        format!("add rule bridge nemesis nem_fwd ip saddr {x} ip daddr {y} drop\n");
                    nft(&self.switch(), &r);
                }
            }
            Fault::Loss(i, pct) => self.loss(i, pct),
        }
    }

    fn loss(&self, i: usize, pct: u32) {
        let h = self.host(i);
        if self.netem {
            let loss = format!("{pct}%");
            let add = [
                "ip", "netns", "exec", &h, "tc", "qdisc", "add", "dev", "eth0", "root",
            ];
            sh(&[&add[..], &["netem", "loss", &loss]].concat());
            return;
        }
        let r = |chain: &str, dir: &str| {
            format!(
                "add rule inet nemesis {chain} {dir} \"eth0\" numgen random mod 100 < {pct} drop\n"
            )
        };
        nft(&h, &r("nem_in", "iifname"));
        nft(&h, &r("nem_out", "oifname"));
    }

    /// Removes every fault.
    pub fn heal(&self) {
        for i in 0..3 {
            let h = self.host(i);
            nft(&h, "flush table inet nemesis\n");
            if self.netem {
                let _ = run(&[
                    "ip", "netns", "exec", &h, "tc", "qdisc", "del", "dev", "eth0", "root",
                ]);
            }
        }
        nft(&self.switch(), "flush table bridge nemesis\n");
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        remove_run(&self.prefix);
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != self.prefix);
    }
}

/// Prefixes of the runs of this process still up (for the signal handler).
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// On SIGTERM or SIGINT: remove this process's namespaces (and their processes), then exit.
fn install_signal_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).expect("signals");
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let live = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
                for prefix in live {
                    eprintln!("nemesis: signal {sig}: removing {prefix}-*");
                    remove_run(&prefix);
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Namespaces of runs whose process is gone: their processes killed, the namespaces deleted.
fn remove_leftovers() {
    let Ok(list) = run(&["ip", "netns", "list"]) else {
        return;
    };
    let mut dead: Vec<String> = Vec::new();
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        let prefix = format!("{PREFIX}{pid}");
        if !alive && !dead.contains(&prefix) {
            dead.push(prefix);
        }
    }
    for prefix in dead {
        eprintln!("nemesis: removing the leftovers of a dead run: {prefix}-*");
        remove_run(&prefix);
    }
}

/// Kills every process in the namespaces `prefix-*` (SIGCONT first, for stopped ones), then
/// deletes them.
fn remove_run(prefix: &str) {
    let names: Vec<String> = ["sw", "h1", "h2", "h3"]
        .iter()
        .map(|s| format!("{prefix}-{s}"))
        .filter(|n| std::path::Path::new(&format!("/var/run/netns/{n}")).exists())
        .collect();
    for _ in 0..20 {
        let pids: Vec<i32> = names
            .iter()
            .filter_map(|n| run(&["ip", "netns", "pids", n]).ok())
            .flat_map(|out| {
                out.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: signals to processes this run (or a dead earlier run) started in its
            // own namespaces.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGCONT);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for n in names.iter().rev() {
        let _ = run(&["ip", "netns", "del", n]);
    }
    // The cluster's data and logs (`cluster.rs` names its temp dir after the run).
    let data = format!("{prefix}-data-");
    for e in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&data) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Moves the calling thread into the namespace `ns`: sockets it creates from now on live there
/// (and may be used from any thread); processes and threads it starts inherit it.
pub fn enter(ns: &str) -> std::io::Result<()> {
    let f = File::open(format!("/var/run/netns/{ns}"))?;
    // SAFETY: setns on a namespace file this thread opened; it changes only this thread.
    match unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Runs `f` on a new thread inside `ns` and returns its result.
pub fn in_ns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns).unwrap_or_else(|e| panic!("enter {ns}: {e}"));
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Starts a thread inside `ns`.
pub fn spawn_in<R: Send + 'static>(
    ns: &str,
    name: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<R> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            enter(&ns).unwrap_or_else(|e| panic!("enter {ns}: {e}"));
            f()
        })
        .expect("spawn")
}

/// Loads an nft script into `ns`; panics on failure.
fn nft(ns: &str, script: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nft");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft in {ns} failed on\n{script}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command; its stdout, or its stderr as the error.
fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Runs a command that must succeed.
fn sh(args: &[&str]) {
    if let Err(e) = run(args) {
        panic!("{}: {e}", args.join(" "));
    }
}
