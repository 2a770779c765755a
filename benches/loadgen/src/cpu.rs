//! Where the CPU went during the measurement window, from `/proc`: the generator itself, the
//! server (when its pid is known), every core, and so whatever else ran on the machine.
//!
//! This is what makes a figure trustworthy on a shared box: a run where `other_cores` is well
//! above zero was measured while something else (a compiler, say) stole CPU, and a run where
//! `bench_cores` is near 1.0 per `--threads` was limited by the generator, not the server.
//! Resolution is one clock tick (10 ms) per reading, negligible over a window of seconds.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// CPU times read at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    /// This process: utime + stime, in ticks.
    bench_ticks: u64,
    /// Per core: (busy ticks without steal, steal ticks).
    cores: Vec<(u64, u64)>,
    /// Server thread name group -> ticks; None when no pid is known or it is gone.
    server: Option<BTreeMap<String, u64>>,
}

/// CPU used over a window, in cores (1.0 = one core fully busy for the whole window).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub bench_cores: f64,
    /// None when the server's pid is unknown.
    pub server_cores: Option<f64>,
    /// Busy (user, system, irq; without steal) per core, 0.0..=1.0.
    pub busy_per_core: Vec<f64>,
    /// Time the hypervisor gave to others, summed over cores.
    pub steal_cores: f64,
    /// Machine busy minus generator minus server: CPU taken by anything else. Only known with
    /// the server's pid.
    pub other_cores: Option<f64>,
    /// Server CPU by thread name (`front0`, `shard0`, `iou-wrk`, ...).
    pub server_threads: BTreeMap<String, f64>,
}

/// Clock ticks per second of `/proc` times.
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

impl Snapshot {
    pub fn take(server_pid: Option<u32>) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            bench_ticks: read_stat_ticks("/proc/self/stat").unwrap_or(0),
            cores: read_cores().unwrap_or_default(),
            server: server_pid.and_then(read_threads),
        }
    }

    /// Usage between `self` (earlier) and `later`.
    pub fn usage_until(&self, later: &Snapshot) -> Usage {
        let secs = later.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let cores = |ticks: u64| ticks as f64 / ticks_per_sec() / secs;
        let bench_cores = cores(later.bench_ticks.saturating_sub(self.bench_ticks));
        let mut busy_per_core = Vec::new();
        let mut steal = 0;
        for (a, b) in self.cores.iter().zip(later.cores.iter()) {
            busy_per_core.push(cores(b.0.saturating_sub(a.0)));
            steal += b.1.saturating_sub(a.1);
        }
        let mut server_threads = BTreeMap::new();
        let server_cores = match (&self.server, &later.server) {
            (Some(a), Some(b)) => {
                for (name, t) in b {
                    let used = t.saturating_sub(a.get(name).copied().unwrap_or(0));
                    server_threads.insert(name.clone(), cores(used));
                }
                Some(server_threads.values().sum())
            }
            _ => None,
        };
        let machine: f64 = busy_per_core.iter().sum();
        Usage {
            bench_cores,
            server_cores,
            other_cores: server_cores.map(|s| (machine - bench_cores - s).max(0.0)),
            busy_per_core,
            steal_cores: cores(steal),
            server_threads,
        }
    }
}

/// utime + stime of a `/proc/.../stat` file, in ticks.
fn read_stat_ticks(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_stat(&text).map(|(_, t)| t)
}

/// (comm, utime + stime) from the text of a `stat` file. `comm` may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the comm: state is field 3 of proc(5); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// Per core (busy without steal, steal) from `/proc/stat`.
fn read_cores() -> Option<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    Some(parse_proc_stat(&text))
}

fn parse_proc_stat(text: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        if !name.starts_with("cpu") || name == "cpu" {
            continue;
        }
        let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal ...
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        let busy = get(0) + get(1) + get(2) + get(5) + get(6);
        out.push((busy, get(7)));
    }
    out
}

/// Server threads grouped by name: per-thread io_uring workers (`iou-wrk-1234`) and glommio's
/// blocking-pool twins share their group.
fn read_threads(pid: u32) -> Option<BTreeMap<String, u64>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = BTreeMap::new();
    for entry in dir.flatten() {
        let path = entry.path().join("stat");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Some((comm, ticks)) = parse_stat(&text) {
            *out.entry(thread_group(&comm)).or_insert(0) += ticks;
        }
    }
    Some(out)
}

fn thread_group(comm: &str) -> String {
    match comm.strip_prefix("iou-wrk-") {
        Some(_) => "iou-wrk".to_string(),
        None => comm.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let line = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some(("a b) c".to_string(), 10)));
    }

    #[test]
    fn proc_stat_lines_per_core() {
        let text = "cpu  1 1 1 1 1 1 1 1 0 0\ncpu0 10 1 5 100 2 1 1 3 0 0\ncpu1 4 0 0 9 0 0 0 0\n\
                    intr 5\n";
        assert_eq!(parse_proc_stat(text), vec![(18, 3), (4, 0)]);
    }

    #[test]
    fn own_process_is_readable() {
        let a = Snapshot::take(Some(std::process::id()));
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        let u = a.usage_until(&Snapshot::take(Some(std::process::id())));
        assert!(u.server_cores.is_some());
        assert!(!u.busy_per_core.is_empty());
    }

    #[test]
    fn iou_workers_are_grouped() {
        assert_eq!(thread_group("iou-wrk-991"), "iou-wrk");
        assert_eq!(thread_group("shard0"), "shard0");
    }
}
