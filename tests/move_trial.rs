//! The move trial (issue 51; run by `tuning/move-trial.sh`, not by the test suite): a
//! three-member etcd and two groups of two members on loopback in sync mode, `TRIAL_INSTANCES`
//! instances with `TRIAL_HISTORY` events each, `TRIAL_WRITERS` writers applying `tick` with
//! idempotency keys through the Rust cluster client, and `TRIAL_MOVES` moves of a third of a
//! group's slots (`[0, 2730]`, g1 -> g2, then back, and so on), one after another.
//!
//! Per move it prints the move's own figures (instances, entries and bytes shipped, the
//! freeze, attempts, duration) and the writers' worst request while it ran; at the end one
//! `TRIAL` line: acknowledged writes and those lost (goal 0), the freeze p50 / max (goal
//! <= 100 ms / <= 500 ms), the writers' worst request during moves, entries and bytes moved
//! per second, and the duration per 1,000 instances moved. It asserts nothing about the
//! figures (speed is measured, not asserted); it fails when a move does not end `done` or an
//! acknowledged write is lost or doubled.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_writes::{
    cluster_client, counter_machine, lost_events, put_machine, writer, Written,
};
use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::{json, Value};
use smdb_client::ops::{self, BatchMode, CreateOptions};

const GROUPS: [&str; 2] = ["g1", "g2"];
/// A third of g1's slots in a fresh map of two groups (g1 owns 0..=8191).
const RANGE: [u16; 2] = [0, 2730];

fn knob(name: &str, default: usize) -> usize {
    (std::env::var(name).ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn member(etcd: &Etcd, node: &str, group: &str) -> String {
    common::ha::member_config(etcd, "trial", node, "sync")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\n")
}

/// `n` instances `t-<i>`, each given `history` ticks, in best-effort batches of 1000.
fn load(seeds: &[String], n: usize, history: usize) -> Vec<String> {
    let mut c = cluster_client(seeds);
    let ids: Vec<String> = (0..n).map(|i| format!("t-{i}")).collect();
    let none = CreateOptions::default();
    for chunk in ids.chunks(1000) {
        let creates: Vec<ops::BatchOp> = (chunk.iter())
            .map(|id| ops::create_instance("counter", 1, id, &json!({}), &none).into())
            .collect();
        check(c.batch(BatchMode::BestEffort, &creates));
        for h in 0..history {
            let ticks: Vec<ops::BatchOp> = (chunk.iter())
                .map(|id| {
                    let p = json!({"preload": h, "pad": "x".repeat(64)});
                    let o = ops::ApplyOptions::default();
                    ops::apply_event(id, "tick", Some(&p), &o).into()
                })
                .collect();
            check(c.batch(BatchMode::BestEffort, &ticks));
        }
    }
    ids
}

fn check(r: smdb_client::Result<ops::BatchResults>) {
    let r = r.expect("a batch");
    let bad: Vec<_> = r.results.iter().filter(|e| e.status != "ok").collect();
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(3)]);
}

/// One move's answer and the writers' worst request that started while it ran.
struct Moved {
    answer: Value,
    began: Instant,
    ended: Instant,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

#[test]
#[ignore = "the move trial: run by tuning/move-trial.sh"]
fn move_trial() {
    let _serial = serial();
    let (moves, n) = (knob("TRIAL_MOVES", 10), knob("TRIAL_INSTANCES", 10_000));
    let (history, writers) = (knob("TRIAL_HISTORY", 5), knob("TRIAL_WRITERS", 4));
    let etcd = Etcd::start(3);
    let dirs: Vec<_> = (0..4).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..4)
        .map(|i| {
            let (group, node) = (GROUPS[i / 2], format!("{}-{}", GROUPS[i / 2], i % 2));
            Server::start_in(dirs[i].path(), &member(&etcd, &node, group)).expect("starts")
        })
        .collect();
    let primaries: Vec<usize> = (0..2)
        .map(|g| {
            let of: Vec<&Server> = members[2 * g..2 * g + 2].iter().collect();
            2 * g + common::ha::one_primary(&of, Duration::from_secs(20))
        })
        .collect();
    cluster::create(&members, Duration::from_secs(2));
    put_machine(&members[primaries[0]], &counter_machine());
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let began = Instant::now();
    let ids = Arc::new(load(&seeds, n, history));
    eprintln!(
        "loaded {n} instances x {history} events in {:?}",
        began.elapsed()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..writers as u64)
        .map(|w| writer(seeds.clone(), ids.clone(), w, stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let mut done = Vec::new();
    for i in 0..moves {
        let to = GROUPS[(i + 1) % 2];
        let began = Instant::now();
        let answer = (members[i % 4].client())
            .call("CLUSTER_MOVE_SLOTS", json!({"slots": RANGE, "to": to}))
            .unwrap_or_else(|e| panic!("move {i} to {to}: {e}"));
        assert_eq!(answer["state"], "done", "move {i}: {answer}");
        done.push(Moved {
            answer,
            began,
            ended: Instant::now(),
        });
        // The source's purge of the moved slots runs between moves, under the writers.
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<Written> = (handles.into_iter())
        .map(|h| h.join().expect("a writer"))
        .collect();
    report(&seeds, &results, &done);
}

/// Prints each move and the `TRIAL` line; fails on a lost write or a failed writer request.
fn report(seeds: &[String], results: &[Written], done: &[Moved]) {
    let acked: Vec<_> = results.iter().flat_map(|(a, _)| a).collect();
    let failed: Vec<&String> = results.iter().flat_map(|(_, f)| f).collect();
    let mut freezes = Vec::new();
    let mut worst_overall = Duration::ZERO;
    let (mut entries, mut bytes, mut instances, mut busy) = (0u64, 0u64, 0u64, Duration::ZERO);
    for (i, m) in done.iter().enumerate() {
        let a = &m.answer;
        let worst = (acked.iter())
            .filter(|x| x.sent >= m.began && x.sent <= m.ended)
            .map(|x| x.took)
            .max()
            .unwrap_or_default();
        worst_overall = worst_overall.max(worst);
        let took = m.ended - m.began;
        let f = |k: &str| a[k].as_u64().unwrap_or(0);
        freezes.push(f("freeze_ms"));
        (entries, bytes, instances) = (
            entries + f("entries"),
            bytes + f("bytes"),
            instances + f("instances"),
        );
        busy += took;
        eprintln!(
            "move {i}: {} -> {}: {} instances, {} entries, {} bytes, freeze {} ms, {} attempt(s), \
             {} ms (answer {:?}); writers' worst request {:?}",
            a["from"],
            a["to"],
            f("instances"),
            f("entries"),
            f("bytes"),
            f("freeze_ms"),
            f("attempts"),
            f("duration_ms"),
            took,
            worst
        );
    }
    freezes.sort_unstable();
    let lost = lost_events(seeds, &acked);
    let secs = busy.as_secs_f64().max(1e-9);
    eprintln!(
        "TRIAL moves {} acked {} lost {} failed {} freeze_ms p50 {} max {} worst_request_ms {} \
         entries_per_s {:.0} bytes_per_s {:.0} ms_per_1k_instances {:.0}",
        done.len(),
        acked.len(),
        lost.len(),
        failed.len(),
        percentile(&freezes, 0.5),
        freezes.last().copied().unwrap_or(0),
        worst_overall.as_millis(),
        entries as f64 / secs,
        bytes as f64 / secs,
        busy.as_millis() as f64 * 1000.0 / instances.max(1) as f64,
    );
    for f in failed.iter().take(5) {
        eprintln!("  failed: {f}");
    }
    assert!(
        lost.is_empty(),
        "acknowledged, lost: {:?}",
        &lost[..lost.len().min(10)]
    );
    assert!(failed.is_empty(), "writer requests failed: {failed:?}");
}
