//! The sync set against real processes (docs/ha.md "The sync set"): a
//! three-member etcd cluster on loopback and three smdb members in sync mode with
//! `sync_replicas = 1`. The primary keeps the sync set S = {A, B} in etcd; while A is stopped
//! (SIGSTOP) only B acknowledges, and the primary's writes go on. Then A continues and the
//! primary and B are killed together: A may lack writes answered `ok` (B alone held them),
//! so A must not become primary, and says why in `REPLICATION_STATUS.ha.blocked_reason`.
//! Once B is back, B wins and every `ok` is there.

mod common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::{
    converge, create_paid, one_primary, serial, start_cluster, status, wait_status, TTL_MS,
};
use common::writes::{acked_missing, assert_acked_present_once, Load};
use serde_json::Value;

fn sync_set(st: &Value) -> Vec<String> {
    (st["ha"]["sync_set"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

#[test]
fn a_member_that_may_lack_an_acknowledged_write_is_not_elected() {
    let _serial = serial();
    let etcd = Etcd::start(3);
    let (_dirs, mut members, p) = start_cluster(&etcd, "syncset", "sync", "");
    // B goes first among equals (the smaller node id), so "B wins" below never rests on who
    // happens to be further: A is never ahead of B.
    let followers: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let (b, a) = (followers[0], followers[1]);
    let (na, nb) = (format!("n{a}"), format!("n{b}"));

    let mut w = members[p].order_client();
    let ids: Vec<String> = (0..64).map(|i| format!("s-{i}")).collect();
    for id in &ids {
        create_paid(&mut w, id);
    }
    // Both followers caught up: the primary has handed the set to them.
    let st = wait_status(&members[p], Duration::from_secs(10), "S = {A, B}", |st| {
        sync_set(st) == vec![na.clone(), nb.clone()] || sync_set(st) == vec![nb.clone(), na.clone()]
    });
    eprintln!(
        "sync set of epoch {}: {:?}",
        st["ha"]["epoch"],
        sync_set(&st)
    );

    let load = Load::start(vec![members[p].addr], ids.clone());
    std::thread::sleep(Duration::from_millis(500));
    members[a].signal(libc::SIGSTOP);
    let stopped_at = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let acked = load.finish();
    let while_stopped = acked.iter().filter(|x| x.2 > stopped_at).count();
    assert!(
        while_stopped > 20,
        "B alone acknowledges while A is stopped (k = 1): {while_stopped} of {} writes",
        acked.len()
    );
    // B receives what was sent before the writer stopped.
    std::thread::sleep(Duration::from_millis(300));
    members[a].signal(libc::SIGCONT);
    members[p].signal(libc::SIGKILL);
    members[b].signal(libc::SIGKILL);
    members[p].kill();
    members[b].kill();
    let killed_at = Instant::now();

    // A alone: not elected for three lease TTLs, and it says why.
    let until = killed_at + Duration::from_millis(3 * TTL_MS);
    let mut reason = None;
    while Instant::now() < until {
        if let Some(st) = status(members[a].addr) {
            assert_ne!(st["role"], "primary", "A must not lead: {st}");
            if let Some(why) = st["ha"]["blocked_reason"].as_str() {
                reason = Some(why.to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let reason = reason.unwrap_or_else(|| panic!("no blocked_reason on A:\n{}", members[a].log()));
    assert!(reason.contains("sync set"), "{reason}");
    let lacks = acked_missing(&members[a], &acked).len();
    eprintln!(
        "A blocked ({reason}); it lacks {lacks} of {} acknowledged writes",
        acked.len()
    );

    // B comes back: B is elected, and every `ok` is there, on B and then on A.
    members[b].relaunch().unwrap();
    let pair = [&members[a], &members[b]];
    let leader = one_primary(&pair, Duration::from_secs(30));
    assert_eq!(leader, 1, "B wins:\n{}", members[b].log());
    assert_acked_present_once(&members[b], &acked);
    converge(&members[b], &members[a]);
    assert_acked_present_once(&members[a], &acked);
    let st = wait_status(&members[b], Duration::from_secs(10), "S = {A}", |st| {
        sync_set(st) == vec![na.clone()]
    });
    eprintln!("after the failover: {}", st["ha"]);
}
