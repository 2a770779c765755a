//! The result of a run and its three renderings: text for people, one JSON line for machines,
//! and markdown tables (scaling curve, `--report` summaries) for benches/RESULTS.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::cpu::Usage;
use super::stats::{Latency, RunCounts};
use super::workload::OpKind;

/// One measured run. Field names are the `--json` format: add fields, never rename.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunReport {
    pub label: String,
    pub workload: String,
    pub mix: String,
    pub addr: String,
    pub connections: usize,
    pub in_flight: usize,
    pub threads: usize,
    pub payload_bytes: usize,
    pub instances: u64,
    /// Measured window, seconds (actual, not requested).
    pub duration_s: f64,
    pub warmup_s: f64,
    pub setup_s: f64,
    pub shards: u32,
    /// Set when smdb-bench started the server itself.
    pub server: Option<SpawnInfo>,
    pub pin_cpu: Vec<usize>,
    pub host: Host,
    /// Successful responses in the window.
    pub ops: u64,
    pub ops_per_sec: f64,
    pub ops_per_sec_per_shard: f64,
    pub latency_us: Latency,
    /// Errors in the window by code.
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    pub errors_outside_window: u64,
    pub per_op: BTreeMap<String, OpReport>,
    pub cpu: Usage,
    /// Ops per BATCH (0: not a batch run). Then `ops` counts batches, and
    /// `batch_ops_per_sec` is the instance changes per second (batches/s x size).
    pub batch_size: u64,
    pub batch_ops_per_sec: f64,
    /// `--cluster` against a cluster: the group primaries the load was routed to (0: one
    /// server, no routing).
    pub cluster_groups: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpawnInfo {
    pub fsync: String,
    /// shards.cores (empty: the server's default placement).
    pub shard_cores: Vec<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Host {
    pub cpus: usize,
    pub kernel: String,
}

impl Host {
    pub fn current() -> Host {
        Host {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OpReport {
    pub ops: u64,
    pub ops_per_sec: f64,
    pub errors: u64,
    pub latency_us: Latency,
}

impl RunReport {
    /// Fills the counted fields from merged counts over a window of `secs`.
    pub fn fill_counts(&mut self, counts: &RunCounts, secs: f64) {
        let secs = secs.max(1e-9);
        let total = counts.total();
        self.duration_s = secs;
        self.ops = total.ok;
        self.ops_per_sec = total.ok as f64 / secs;
        self.ops_per_sec_per_shard = self.ops_per_sec / f64::from(self.shards.max(1));
        self.latency_us = Latency::of(&total.hist);
        self.errors = counts.errors.clone();
        self.errors_total = counts.error_count();
        self.errors_outside_window = counts.errors_outside_window;
        self.per_op.clear();
        for op in OpKind::ALL {
            let s = &counts.per_op[op.index()];
            if s.ok + s.errors == 0 {
                continue;
            }
            self.per_op.insert(
                op.op_name().to_string(),
                OpReport {
                    ops: s.ok,
                    ops_per_sec: s.ok as f64 / secs,
                    errors: s.errors,
                    latency_us: Latency::of(&s.hist),
                },
            );
        }
    }

    /// Marks a batch run: ops inside batches per second, from the batches counted.
    pub fn set_batch_size(&mut self, size: u64) {
        self.batch_size = size;
        self.batch_ops_per_sec = self.ops_per_sec * size as f64;
    }

    pub fn to_json_line(&self) -> String {
        // A struct of numbers, strings and maps with string keys always serialises.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The text report of one run.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "smdb-bench: {} ({}), {} connections x {} in flight, {} thread(s), payload {} B, \
             {} instances{}",
            self.workload,
            self.mix,
            self.connections,
            self.in_flight,
            self.threads,
            self.payload_bytes,
            self.instances,
            pins(&self.pin_cpu)
        );
        let spawned = match &self.server {
            Some(sp) => format!(
                ", spawned, fsync={}, shard cores {}",
                sp.fsync,
                cores_text(&sp.shard_cores)
            ),
            None => String::new(),
        };
        let _ = writeln!(s, "server {}: {} shard(s){spawned}", self.addr, self.shards);
        if self.cluster_groups > 0 {
            let _ = writeln!(
                s,
                "cluster      routed by slot to {} group primaries",
                self.cluster_groups
            );
        }
        let _ = writeln!(
            s,
            "window {:.2} s after {:.2} s warm-up (set-up {:.2} s); host {} CPUs, Linux {}",
            self.duration_s, self.warmup_s, self.setup_s, self.host.cpus, self.host.kernel
        );
        let _ = writeln!(
            s,
            "ops          {} = {} ops/s ({} ops/s per shard)",
            self.ops,
            thousands(self.ops_per_sec),
            thousands(self.ops_per_sec_per_shard)
        );
        if self.batch_size > 0 {
            let _ = writeln!(
                s,
                "batches      {} batches/s of {} = {} ops/s (instance changes)",
                thousands(self.ops_per_sec),
                self.batch_size,
                thousands(self.batch_ops_per_sec)
            );
        }
        let _ = writeln!(s, "latency us   {}", latency_text(&self.latency_us));
        let _ = writeln!(
            s,
            "errors       {} (outside the window: {})",
            errors_text(&self.errors),
            self.errors_outside_window
        );
        let _ = writeln!(s, "cpu (cores)  {}", cpu_text(&self.cpu));
        if self.per_op.len() > 1 {
            let _ = writeln!(s, "per op:");
            for (name, op) in &self.per_op {
                let _ = writeln!(
                    s,
                    "  {name:<16} {:>10} ops/s  errors {:<6} {}",
                    thousands(op.ops_per_sec),
                    op.errors,
                    latency_text(&op.latency_us)
                );
            }
        }
        s
    }
}

fn pins(p: &[usize]) -> String {
    if p.is_empty() {
        String::new()
    } else {
        format!(", load pinned to CPU {}", cores_text(p))
    }
}

fn cores_text(c: &[usize]) -> String {
    if c.is_empty() {
        return "default".into();
    }
    c.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

pub fn latency_text(l: &Latency) -> String {
    format!(
        "p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}  mean {:.0}",
        l.p50, l.p90, l.p99, l.p999, l.max, l.mean
    )
}

fn errors_text(e: &BTreeMap<String, u64>) -> String {
    if e.is_empty() {
        return "none".into();
    }
    e.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_text(u: &Usage) -> String {
    let mut s = format!("bench {:.2}", u.bench_cores);
    if let Some(server) = u.server_cores {
        let threads: Vec<String> = u
            .server_threads
            .iter()
            .filter(|(_, v)| **v >= 0.005)
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        let _ = write!(s, "  server {server:.2} [{}]", threads.join(", "));
    }
    if let Some(other) = u.other_cores {
        let _ = write!(s, "  other {other:.2}");
    }
    let per: Vec<String> = u.busy_per_core.iter().map(|b| format!("{b:.2}")).collect();
    let _ = write!(
        s,
        "  steal {:.2}  busy per core [{}]",
        u.steal_cores,
        per.join(", ")
    );
    s
}

/// 1234567.8 -> "1,234,568".
pub fn thousands(v: f64) -> String {
    let n = v.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn opt_cores(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.2}"))
}

/// The scaling curve of `--scale`: one row per shard count.
pub fn scale_table(runs: &[RunReport]) -> String {
    let mut s = String::from(
        "| shards | ops/s | ops/s per shard | p50 us | p99 us | errors | server cores | \
         bench cores | other cores |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {:.2} | {} |",
            r.shards,
            thousands(r.ops_per_sec),
            thousands(r.ops_per_sec_per_shard),
            r.latency_us.p50,
            r.latency_us.p99,
            r.errors_total,
            opt_cores(r.cpu.server_cores),
            r.cpu.bench_cores,
            opt_cores(r.cpu.other_cores),
        );
    }
    s
}

/// The `--report` table: runs grouped by label (in first-seen order); each row shows the run
/// with the median ops/s of its group, and the group's min-max.
pub fn summary_table(runs: &[RunReport]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&RunReport>> = BTreeMap::new();
    for r in runs {
        if !groups.contains_key(r.label.as_str()) {
            order.push(&r.label);
        }
        groups.entry(&r.label).or_default().push(r);
    }
    let mut s = String::from(
        "| run | shards | runs | ops/s (median) | min - max | per shard | p50 us | p99 us | \
         p99.9 us | errors | server cores | bench cores | other cores |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut disturbed = Vec::new();
    let mut saturated = Vec::new();
    for label in order {
        let mut g = groups.remove(label).unwrap_or_default();
        g.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let Some(m) = g.get(g.len() / 2) else {
            continue;
        };
        let (lo, hi) = (g[0].ops_per_sec, g[g.len() - 1].ops_per_sec);
        let errors: u64 = g.iter().map(|r| r.errors_total).sum();
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} - {} | {} | {:.0} | {:.0} | {:.0} | {errors} | {} | \
             {:.2} | {} |",
            m.shards,
            g.len(),
            thousands(m.ops_per_sec),
            thousands(lo),
            thousands(hi),
            thousands(m.ops_per_sec_per_shard),
            m.latency_us.p50,
            m.latency_us.p99,
            m.latency_us.p999,
            opt_cores(m.cpu.server_cores),
            m.cpu.bench_cores,
            opt_cores(m.cpu.other_cores),
        );
        if let Some(other) = m.cpu.other_cores.filter(|o| *o > OTHER_CORES_MAX) {
            disturbed.push(format!("{label} ({other:.2})"));
        }
        if m.cpu.bench_cores >= BENCH_SATURATED * m.threads.max(1) as f64 {
            saturated.push(format!(
                "{label} ({:.2} cores, {} thread(s))",
                m.cpu.bench_cores, m.threads
            ));
        }
    }
    if !disturbed.is_empty() {
        let _ = writeln!(
            s,
            "\n> Not a quiet machine: other processes used more than {OTHER_CORES_MAX:.2} cores \
             during the window of {}. Re-run these.",
            disturbed.join(", ")
        );
    }
    if !saturated.is_empty() {
        let _ = writeln!(
            s,
            "\n> The load generator may have been the bottleneck (>= {BENCH_SATURATED:.2} core per \
             thread): {}. Try --threads.",
            saturated.join(", ")
        );
    }
    s
}

/// Share of a core that other processes may take before a run counts as disturbed.
const OTHER_CORES_MAX: f64 = 0.10;
/// Load generator CPU, per thread, above which it may have limited the run.
const BENCH_SATURATED: f64 = 0.90;

/// Reads JSON Lines files written by `--json` (blank lines and non-JSON lines are skipped,
/// so a file may also hold the text of other tools).
pub fn read_reports(paths: &[std::path::PathBuf]) -> Result<Vec<RunReport>, String> {
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for line in text.lines().map(str::trim).filter(|l| l.starts_with('{')) {
            match serde_json::from_str::<RunReport>(line) {
                Ok(r) => out.push(r),
                Err(e) => return Err(format!("{}: not a smdb-bench report: {e}", p.display())),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, ops: f64) -> RunReport {
        RunReport {
            label: label.into(),
            shards: 1,
            ops_per_sec: ops,
            ops_per_sec_per_shard: ops,
            ..RunReport::default()
        }
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.8), "1,234,568");
    }

    #[test]
    fn summary_takes_the_median_per_label_in_order() {
        let runs = [
            run("b", 10.0),
            run("a", 3.0),
            run("b", 30.0),
            run("b", 20.0),
        ];
        let t = summary_table(&runs);
        let rows: Vec<&str> = t.lines().skip(2).collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].starts_with("| b | 1 | 3 | 20 | 10 - 30 |"), "{t}");
        assert!(rows[1].starts_with("| a | 1 | 1 | 3 |"), "{t}");
    }

    #[test]
    fn disturbed_or_saturated_runs_get_a_note() {
        let mut r = run("x", 5.0);
        r.threads = 1;
        r.cpu.other_cores = Some(0.5);
        r.cpu.bench_cores = 0.95;
        let t = summary_table(&[r]);
        assert!(
            t.contains("> Not a quiet machine") && t.contains("of x (0.50)"),
            "{t}"
        );
        assert!(
            t.contains("bottleneck") && t.contains("x (0.95 cores, 1 thread(s))"),
            "{t}"
        );
        let quiet = summary_table(&[run("y", 1.0)]);
        assert!(!quiet.contains('>'), "{quiet}");
    }

    #[test]
    fn json_round_trips() {
        let mut r = run("x", 5.0);
        r.errors.insert("E".into(), 1);
        let back: RunReport = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(back, r);
    }
}
