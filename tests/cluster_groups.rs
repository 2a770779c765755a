//! Three groups on a three-member etcd (docs/cluster.md): the deployment shape on
//! loopback, 3 etcd members and 3 groups x 2 members in sync mode, against real processes.
//!
//! - The map is created and every member's copy shows it within 1 s.
//! - 100,000 creates through the Rust client given ONE seed (best-effort batches, split by
//!   group) land 33% +- 3% on each group, with no `MOVED` once the map is loaded.
//! - One group's primary is SIGKILLed while writers keep applying events to instances of all
//!   three groups: the other two groups' writers never fail and keep being acknowledged while
//!   the killed group has no primary; the killed group's follower takes over, the killed
//!   member restarts and rejoins, and g1's writers resume; afterwards every acknowledged event
//!   is in its instance's history exactly once.

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
use serde_json::json;
use smdb_client::ops::{self, BatchMode, CreateOptions};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];
const CREATES: usize = 100_000;

/// Member `node` of `group`, sync mode (a failover loses nothing acknowledged).
fn member(etcd: &Etcd, node: &str, group: &str) -> String {
    common::ha::member_config(etcd, "three", node, "sync")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\n")
}

/// The group owning `slot` in a fresh map of three groups (Redis's split).
fn group_of(slot: u16) -> usize {
    match slot {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

/// The instances each member's group holds: the sum of INFO's per-shard counts on it.
fn held(s: &Server) -> u64 {
    let info = s.client().call("INFO", json!({})).expect("INFO");
    (info["shard_details"]
        .as_array()
        .expect("shard_details")
        .iter())
    .map(|d| d["instances"].as_u64().unwrap_or(0))
    .sum()
}

fn role(s: &Server) -> String {
    (s.client().call("REPLICATION_STATUS", json!({})))
        .map(|r| r["role"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|_| "down".into())
}

#[test]
fn three_groups_spread_creates_evenly_and_survive_one_primary_s_sigkill() {
    let _serial = serial();
    let etcd = Etcd::start(3);
    let dirs: Vec<_> = (0..6).map(|_| temp_dir()).collect();
    let mut members: Vec<Server> = (0..6)
        .map(|i| {
            let (group, node) = (GROUPS[i / 2], format!("{}-{}", GROUPS[i / 2], i % 2));
            Server::start_in(dirs[i].path(), &member(&etcd, &node, group)).expect("starts")
        })
        .collect();
    let primaries: Vec<usize> = (0..3)
        .map(|g| {
            let of: Vec<&Server> = members[2 * g..2 * g + 2].iter().collect();
            2 * g + common::ha::one_primary(&of, Duration::from_secs(20))
        })
        .collect();
    // Every member's copy shows the new map within 1 s of the answer.
    let created = cluster::create(&members, Duration::from_secs(1));
    assert_eq!(created["map_epoch"], 1, "{created}");
    // One PUT reaches every group (forwarded by the group primary it lands on).
    put_machine(&members[primaries[1]], &counter_machine());

    let seed = vec![members[3].addr.to_string()];
    let ids = create_spread(&seed, &members);
    sigkill_one_primary_under_writes(&mut members, &primaries, &ids);
}

/// 100k creates through one seed; checks the spread and that no request was redirected.
/// Returns the ids by group.
fn create_spread(seed: &[String], members: &[Server]) -> Vec<Vec<String>> {
    let mut c = cluster_client(seed);
    assert!(c.is_cluster());
    let began = Instant::now();
    let none = CreateOptions::default();
    let mut by_group: Vec<Vec<String>> = vec![Vec::new(); 3];
    for chunk in (0..CREATES).collect::<Vec<_>>().chunks(1000) {
        let ids: Vec<String> = chunk.iter().map(|i| format!("i-{i}")).collect();
        let batch: Vec<ops::BatchOp> = (ids.iter())
            .map(|id| ops::create_instance("counter", 1, id, &json!({}), &none).into())
            .collect();
        let r = c.batch(BatchMode::BestEffort, &batch).expect("a batch");
        for (id, e) in ids.iter().zip(&r.results) {
            assert_eq!(e.status, "ok", "{id}: {e:?}");
            by_group[group_of(smdb_protocol::slot::slot_of(id))].push(id.clone());
        }
    }
    let took = began.elapsed();
    assert_eq!(c.cluster_redirects(), 0, "the map was loaded: no MOVED");
    // What each group holds, counted by the servers: each member of a group holds its share.
    let mut shares = Vec::new();
    for (g, want) in by_group.iter().enumerate() {
        let primary_and_follower: Vec<u64> = members[2 * g..2 * g + 2].iter().map(held).collect();
        let share = primary_and_follower[0] as f64 / CREATES as f64;
        shares.push(share);
        assert!(
            (0.30..=0.36).contains(&share),
            "{}: {primary_and_follower:?} of {CREATES}",
            GROUPS[g]
        );
        // Sync mode: the follower acknowledged every create, so it holds them too.
        assert_eq!(
            primary_and_follower,
            vec![want.len() as u64; 2],
            "{}",
            GROUPS[g]
        );
    }
    eprintln!("{CREATES} creates in {took:?}; shares {shares:.4?}; 0 redirects");
    by_group
}

fn sigkill_one_primary_under_writes(
    members: &mut [Server],
    primaries: &[usize],
    ids: &[Vec<String>],
) {
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Two writers per group, each on 200 instances of its group only.
    let handles: Vec<_> = (0..6u64)
        .map(|w| {
            let g = w as usize / 2;
            let mine = ids[g][(w as usize % 2) * 200..(w as usize % 2 + 1) * 200].to_vec();
            writer(seeds.clone(), Arc::new(mine), w, stop.clone())
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let killed = primaries[0];
    let follower = if killed % 2 == 0 {
        killed + 1
    } else {
        killed - 1
    };
    let kill_at = Instant::now();
    members[killed].kill();
    // The follower of the killed group takes over within the lease and a campaign.
    let deadline = kill_at + Duration::from_secs(20);
    while role(&members[follower]) != "primary" {
        assert!(Instant::now() < deadline, "g1's follower never took over");
        std::thread::sleep(Duration::from_millis(50));
    }
    let took_over = Instant::now();
    // Sync mode with k = 1: the lone survivor acknowledges g1's writes once a replica is back
    // (docs/ha.md), so the killed member restarts, as its service manager would restart it.
    members[killed].restart_after_kill();
    let back = acknowledged_again(&seeds, &ids[0][400], took_over);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<Written> = handles
        .into_iter()
        .map(|h| h.join().expect("a writer"))
        .collect();

    eprintln!("g1 acknowledged writes again {back:?} after its follower took over");
    if std::env::var("SHOW_LOGS").is_ok() {
        eprintln!(
            "{}\n----\n{}",
            members[killed].log(),
            members[follower].log()
        );
    }
    for (w, (acked, failed)) in results.iter().enumerate() {
        let g = w / 2;
        let during = (acked.iter())
            .filter(|a| a.answered() > kill_at && a.answered() < took_over)
            .count();
        let after = (acked.iter()).filter(|a| a.answered() > took_over).count();
        eprintln!(
            "writer {w} ({}): {} acked, {during} while g1 had no primary ({:?}), {after} after, \
             {} failed",
            GROUPS[g],
            acked.len(),
            took_over - kill_at,
            failed.len()
        );
        if g == 0 {
            assert!(
                after > 0,
                "g1's writer {w} resumed on the new primary: {failed:?}"
            );
        } else {
            assert!(failed.is_empty(), "writer {w} ({}): {failed:?}", GROUPS[g]);
            assert!(during > 0, "writer {w} ({}) kept writing", GROUPS[g]);
        }
    }
    let acked: Vec<_> = results.iter().flat_map(|(a, _)| a).collect();
    let lost = lost_events(&seeds, &acked);
    assert!(lost.is_empty(), "acknowledged, lost: {lost:?}");
    eprintln!("{} acknowledged events, each once", acked.len());
}

/// Waits (at most 60 s) until a write to g1's `id` is acknowledged again (the restarted member
/// back as a replica); how long after `since` that was.
fn acknowledged_again(seeds: &[String], id: &str, since: Instant) -> Duration {
    let mut c = cluster_client(seeds);
    let deadline = since + Duration::from_secs(60);
    loop {
        let opts = ops::ApplyOptions {
            idempotency_key: Some("probe".into()),
            ..ops::ApplyOptions::default()
        };
        match c.apply_event_with(id, "tick", None, &opts) {
            Ok(_) => return since.elapsed(),
            Err(e) => assert!(
                Instant::now() < deadline,
                "g1 never acknowledged again: {e}"
            ),
        }
    }
}
