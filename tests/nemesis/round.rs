//! One round of the nemesis: fresh instances, the workload and the monitor started, a fault
//! script run under load, the faults healed and the members revived, the cluster converged, the
//! final state read, the checker's verdict and the round's own expectations.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checker;
use super::cluster::{Cluster, TTL_MS};
use super::history::History;
use super::workload::{Monitor, Shared, Target, Workload};

/// Two members answering 200 on `/health/primary` for longer than this fail the round: the
/// monitor polls each every 100 ms, so a shorter overlap may be an artefact of its sampling.
const OVERLAP_MAX: Duration = Duration::from_millis(250);

/// What a fault script expects of the primary during its fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Another member becomes primary during the fault.
    Failover,
    /// The primary stays, with no interval without a primary longer than one TTL.
    SamePrimary,
    /// Nothing about the primary.
    Any,
}

/// A round's outcome, one line of the report.
pub struct Report {
    pub name: String,
    /// The checker's summary line, and its anomalies (one per line).
    pub verdict: String,
    pub anomalies: String,
    pub clean: bool,
    /// The longest interval without a primary, from the fault to the cluster healed.
    pub no_primary: Duration,
    /// The round's own expectations that failed (besides the checker's verdict).
    pub problems: Vec<String>,
    pub elapsed: Duration,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.clean && self.problems.is_empty()
    }

    pub fn line(&self) -> String {
        format!(
            "{:<34} {} | no primary for {:.2} s ({:.1} TTL) | round {:.0} s | {}{}",
            self.name,
            if self.ok() { "PASS" } else { "FAIL" },
            self.no_primary.as_secs_f64(),
            self.no_primary.as_secs_f64() * 1000.0 / TTL_MS as f64,
            self.elapsed.as_secs_f64(),
            self.verdict,
            match self.problems.is_empty() {
                true => String::new(),
                false => format!(" | problems: {}", self.problems.join("; ")),
            },
        ) + &match self.anomalies.is_empty() {
            true => String::new(),
            false => format!("\n{}", self.anomalies),
        }
    }
}

/// The state shared by the rounds on one cluster.
pub struct Rounds {
    pub start: Instant,
    pub seed: u64,
    n: u64,
    next_token: u64,
}

impl Rounds {
    pub fn new(seed: u64) -> Rounds {
        Rounds {
            start: Instant::now(),
            seed,
            n: 0,
            next_token: 1,
        }
    }

    /// Fresh instance ids and a fresh shared record for a round.
    pub fn fresh(&mut self, instances: usize) -> (Vec<String>, Arc<Shared>) {
        self.n += 1;
        let ids: Vec<String> = (0..instances)
            .map(|k| format!("r{}-i{k}", self.n))
            .collect();
        let shared = Shared::new(self.start, ids.clone(), self.next_token);
        self.next_token += 1_000_000;
        (ids, shared)
    }
}

pub fn targets(c: &Cluster) -> Vec<Target> {
    c.members.iter().map(|m| (m.node.clone(), m.addr)).collect()
}

/// Runs one round: `script(cluster, primary)` applies its faults and waits them out.
pub fn run(
    c: &mut Cluster,
    rounds: &mut Rounds,
    name: &str,
    script: &mut dyn FnMut(&mut Cluster, usize) -> Expect,
) -> Report {
    let began = Instant::now();
    let p = c.wait_healed(Duration::from_secs(60));
    let (ids, shared) = rounds.fresh(12);
    c.create_instances(&ids);
    let trunc0 = c.truncated_total();
    let hosts: Vec<String> = (0..3).map(|i| c.net.host(i)).collect();
    let metrics: Vec<SocketAddr> = c.members.iter().map(|m| m.metrics).collect();
    let mut monitor = Monitor::start(&hosts, &metrics, &shared);
    let sw = c.net.switch();
    let places = [
        sw.clone(),
        sw.clone(),
        sw,
        hosts[0].clone(),
        hosts[1].clone(),
        hosts[2].clone(),
    ];
    let load = Workload::start(
        &places,
        targets(c),
        shared.clone(),
        rounds.seed,
        Duration::from_secs(120),
    );
    std::thread::sleep(Duration::from_secs(1));
    let t0 = shared.now_ns();
    let expect = script(c, p);
    let t1 = shared.now_ns();
    c.net.heal();
    c.revive();
    let p2 = c.wait_healed(Duration::from_secs(60));
    let t2 = shared.now_ns();
    std::thread::sleep(Duration::from_secs(1));
    let ops = load.finish();
    monitor.stop();
    c.wait_healed(Duration::from_secs(30));
    let fin = c.read_final(&ids, trunc0);
    let mut problems = expectations(&monitor, expect, p, (t0, t1, t2));
    let (overlap, since) = monitor.longest_overlap(t0, t2);
    if !overlap.is_zero() {
        eprintln!(
            "nemesis: {name}: two members answered 200 on /health/primary for {}",
            monitor.around(overlap, since)
        );
    }
    if overlap > OVERLAP_MAX {
        problems.push(format!(
            "two members answered 200 on /health/primary for {:.2} s",
            overlap.as_secs_f64()
        ));
    }
    let named = shared.self_named.lock().unwrap().clone();
    if !named.is_empty() {
        problems.push(format!(
            "{} answer(s) naming the member itself as primary (first: {})",
            named.len(),
            named[0]
        ));
    }
    let _ = p2;
    judge(
        name,
        History {
            mode: c.mode,
            ops,
            fin,
        },
        monitor.longest_gap(t0, t2).0,
        problems,
        began,
    )
}

/// The checker's verdict on `h`, as a report.
pub fn judge(
    name: &str,
    h: History,
    no_primary: Duration,
    problems: Vec<String>,
    began: Instant,
) -> Report {
    let verdict = checker::check(&h);
    let text = format!("{verdict}");
    let (summary, anomalies) = text.split_once('\n').unwrap_or((&text, ""));
    let report = Report {
        name: name.to_string(),
        verdict: summary.to_string(),
        anomalies: anomalies.to_string(),
        clean: verdict.is_clean(),
        no_primary,
        problems,
        elapsed: began.elapsed(),
    };
    if !report.ok() {
        dump(name, &h);
    }
    report
}

/// The round's expectations of the primary over the fault `(t0, t1)`, healed at `t2`.
fn expectations(
    m: &Monitor,
    expect: Expect,
    p: usize,
    (t0, t1, t2): (u64, u64, u64),
) -> Vec<String> {
    let during = m.primaries(t0, t1);
    match expect {
        Expect::Failover if !during.iter().any(|&q| q != p) => {
            vec![format!("no other member became primary during the fault (primaries seen {during:?}, was {p})")]
        }
        Expect::SamePrimary => {
            let mut v = Vec::new();
            if during.iter().any(|&q| q != p) {
                v.push(format!(
                    "the primary changed although only a replica was cut: {during:?}, was {p}"
                ));
            }
            let (gap, since) = m.longest_gap(t0, t2);
            if gap > Duration::from_millis(TTL_MS) {
                eprintln!("nemesis: no primary for {}", m.around(gap, since));
                v.push(format!(
                    "{:.2} s without a primary, over one TTL",
                    gap.as_secs_f64()
                ));
            }
            v
        }
        _ => Vec::new(),
    }
}

/// Writes a failed round's history (ops by send time, then the terms and the final lengths)
/// to a file under /tmp for the post-mortem, and says where.
fn dump(name: &str, h: &History) {
    let path = format!(
        "/tmp/nemesis-{}-{}.history",
        std::process::id(),
        name.replace(['/', ':'], "-")
    );
    let mut ops = h.ops.clone();
    ops.sort_by_key(|o| o.invoke_ns);
    let mut text: Vec<String> = ops.iter().map(|o| format!("{o:?}")).collect();
    text.extend(h.fin.terms.iter().map(|t| format!("{t:?}")));
    for (node, held) in &h.fin.members {
        let lens: Vec<String> = held
            .iter()
            .map(|(i, t)| format!("{i}:{}", t.len()))
            .collect();
        text.push(format!("final {node}: {}", lens.join(" ")));
    }
    text.push(format!("truncated {}", h.fin.truncated));
    if std::fs::write(&path, text.join("\n")).is_ok() {
        eprintln!("nemesis: {name}: the round's history is in {path}");
    }
}
