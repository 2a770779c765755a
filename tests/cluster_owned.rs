//! A cluster member lists and counts only what its group owns (docs/cluster.md, "Moving
//! slots", "Listings after a move"), against real processes: one etcd, two groups of two
//! members. `cluster.move_purge_delay_ms` keeps the source's copies of moved slots on its
//! shards for ten minutes, so the window between the switch and the purge stays open for the
//! whole test: CLUSTER_INFO's `cleanup_pending` on the source shows that the data is still
//! there, while LIST_INSTANCES, FIND_INSTANCES and SCAN_INSTANCES on the source's primary and
//! follower show none of it (paged with a small limit, every owned instance once),
//! MACHINE_STATS, INFO's instance counts and `svc_instances_*` there leave it out (the
//! slots-moved-out entry, applied by both), and the Rust client's fan-out LIST gives every
//! instance exactly once; so do its fan-out FIND and SCAN (blocking and tokio, paged with a
//! small limit), and MIGRATE_INSTANCES and DELETE_INSTANCES through the client reach both
//! groups' instances, each once, with the counts summed over the groups (docs/cluster.md,
//! "Clients"). Subscriptions on the source hear `slots_moved` from every shard once, after
//! their last event of the slots: a follower's live WATCH_ALL, and a WATCH_ALL replayed across
//! the switch on the primary and on the follower.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster_writes::{cluster_client, put_machine};
use common::etcd::Etcd;
use common::ha::serial;
use common::lifecycle::wait_until;
use common::scrape::scrape;
use common::*;
use serde_json::{json, Value};
use smdb_client::ops::ListFilter;
use smdb_client::{
    asyncio, ConnectOptions, DeleteRequest, FindQuery, MigrateReply, MigrateRequest,
};
use smdb_protocol::slot::slot_of;

const GROUPS: [&str; 2] = ["g1", "g2"];
/// The moved range: the lower third of g1's half (g1 owns 0-8191 at first).
const MOVED: [u16; 2] = [0, 2730];
/// Instances created before the move, over every slot.
const INSTANCES: usize = 300;
/// Page size of every listing here: small, so pages straddle the moved instances.
const PAGE: u64 = 7;

/// A member of `group` in async mode whose settling waits ten minutes before it purges.
fn member(etcd: &Etcd, cluster: &str, node: &str, group: &str) -> String {
    common::ha::member_config(etcd, cluster, node, "async")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\nmove_purge_delay_ms = 600000\n")
        + "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n"
}

/// `item`, with an index on `ctx.kind` (for FIND_INSTANCES).
fn item_machine() -> Value {
    json!({"machine": "item", "version": 1, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}],
        "indexes": ["ctx.kind"]}})
}

/// Every id `op` lists on `server` with `params`, page after page of `PAGE`; fails on an id
/// listed twice.
fn every_page(server: &Server, op: &str, params: &Value) -> Result<Vec<String>, String> {
    let mut c = server.client();
    let (mut ids, mut cursor, mut pages) = (Vec::new(), Value::Null, 0);
    loop {
        let mut p = params.clone();
        p["limit"] = json!(PAGE);
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let page = c.call(op, p).map_err(|e| format!("{op}: {e}"))?;
        let items = page["instances"].as_array().cloned().unwrap_or_default();
        ids.extend(
            items
                .iter()
                .map(|i| i["id"].as_str().unwrap_or("").to_string()),
        );
        cursor = page["next_cursor"].clone();
        pages += 1;
        if cursor.is_null() || pages > 1000 {
            break;
        }
    }
    let unique: BTreeSet<&String> = ids.iter().collect();
    if unique.len() != ids.len() {
        return Err(format!("{op} on {}: an id twice: {ids:?}", server.addr));
    }
    Ok(ids)
}

/// `op` on `server` lists exactly `want`, in id order.
fn lists_exactly(server: &Server, op: &str, params: &Value, want: &[String]) -> Result<(), String> {
    let got = every_page(server, op, params)?;
    if got == want {
        return Ok(());
    }
    let stale: Vec<&String> = (got.iter()).filter(|id| slot_of(id) <= MOVED[1]).collect();
    Err(format!(
        "{op} on {}: {} listed, {} wanted; moved instances listed: {stale:?}",
        server.addr,
        got.len(),
        want.len()
    ))
}

/// Shards of a member (INFO's `shard_details`).
fn shard_count(s: &Server) -> usize {
    let info = s.client().call("INFO", json!({})).expect("INFO");
    info["shard_details"].as_array().map_or(0, Vec::len)
}

/// MACHINE_STATS of `item`, INFO's `instances` and the `svc_instances_*` gauges on `m` all
/// count `want`.
fn counts_only(m: &Server, want: u64) -> Result<(), String> {
    let mut c = m.client();
    let stats = (c.call("MACHINE_STATS", json!({"machine": "item"}))).map_err(|e| e.to_string())?;
    let info = c.call("INFO", json!({})).map_err(|e| e.to_string())?;
    let e = scrape(m);
    let by_state = &[("machine", "item"), ("state", "open")];
    let got = (
        stats["states"]["open"].as_u64(),
        info["instances"].as_u64(),
        e.value("svc_instances_total", &[]),
        e.value("svc_instances_by_state", by_state),
    );
    let w = Some(want as f64);
    match got {
        (Some(a), Some(b), t, s) if a == want && b == want && t == w && s == w => Ok(()),
        got => Err(format!(
            "{}: (stats, info, total, by_state) {got:?}, want {want}",
            m.addr
        )),
    }
}

/// The pushes `c` gets until it has heard `slots_moved` from `shards` shards, and for a
/// second more (a second `slots_moved` from one shard would come then). Fails after 10 s
/// without them; `which` names the subscription in the message.
fn pushes_until_moved(c: &mut Client, shards: usize, which: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let moved_from = |got: &[Value]| {
        let s: BTreeSet<u64> = (got.iter())
            .filter(|p| p["type"] == "slots_moved")
            .filter_map(|p| p["shard"].as_u64())
            .collect();
        s.len()
    };
    while moved_from(&got) < shards {
        assert!(
            std::time::Instant::now() < deadline,
            "subscription {which}: no slots_moved from every shard: {got:?}"
        );
        if let Some(p) = c.next_push(Some(Duration::from_millis(200))).unwrap() {
            got.push(p);
        }
    }
    let more = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < more {
        if let Some(p) = c.next_push(Some(Duration::from_millis(200))).unwrap() {
            got.push(p);
        }
    }
    got
}

/// `heard` holds one `slots_moved` per shard, each naming the move, and the event of
/// `ticked` comes before its shard's.
fn moved_once_after_events(heard: &[Value], shards: usize, ticked: &str) -> Result<(), String> {
    let notices: Vec<(usize, &Value)> = (heard.iter().enumerate())
        .filter(|(_, p)| p["type"] == "slots_moved")
        .collect();
    if notices.len() != shards {
        return Err(format!(
            "{} slots_moved for {shards} shards: {heard:?}",
            notices.len()
        ));
    }
    for (_, p) in &notices {
        if p["slots"] != json!(MOVED) || p["to"] != "g2" {
            return Err(format!("not this move: {p}"));
        }
    }
    let event = (heard.iter().position(|p| p["instance_id"] == ticked))
        .ok_or_else(|| format!("no event of {ticked}: {heard:?}"))?;
    let shard = &heard[event]["shard"];
    match notices.iter().find(|(_, p)| &p["shard"] == shard) {
        Some((at, _)) if *at > event => Ok(()),
        _ => Err(format!(
            "slots_moved of shard {shard} before the event: {heard:?}"
        )),
    }
}

#[test]
fn the_source_lists_no_moved_instance_before_its_purge_and_the_fan_out_lists_each_once() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let dirs: Vec<_> = (0..4).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..4)
        .map(|i| {
            let group = GROUPS[i / 2];
            let cfg = member(&etcd, "owned", &format!("{group}-{}", i % 2), group);
            Server::start_in(dirs[i].path(), &cfg).expect("a member starts")
        })
        .collect();
    let primary = [0, 1].map(|g| {
        2 * g
            + ha::one_primary(
                &[&members[2 * g], &members[2 * g + 1]],
                Duration::from_secs(20),
            )
    });
    cluster::create(&members, Duration::from_secs(2));
    put_machine(&members[primary[0]], &item_machine());
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let mut client = cluster_client(&seeds);
    let mut all: Vec<String> = (0..INSTANCES).map(|i| format!("i-{i}")).collect();
    all.sort();
    for id in &all {
        (client.create_instance("item", 1, id, &json!({"kind": "k"})))
            .unwrap_or_else(|e| panic!("create {id}: {e}"));
    }
    let moved: Vec<&String> = all.iter().filter(|id| slot_of(id) <= MOVED[1]).collect();
    let kept: Vec<String> = (all.iter())
        .filter(|id| (MOVED[1] + 1..=8191).contains(&slot_of(id)))
        .cloned()
        .collect();
    assert!(
        moved.len() > 20 && kept.len() > 40,
        "{} {}",
        moved.len(),
        kept.len()
    );

    // A live WATCH_ALL on g1's follower sees an event of a moved instance before the move.
    let follower = 1 - primary[0];
    let mut live = members[follower].watcher(json!({"machines": ["item"]}));
    let ticked = moved[0].clone();
    (members[primary[0]].client())
        .call(
            "APPLY_EVENT",
            json!({"instance_id": ticked, "event": "tick"}),
        )
        .expect("tick");
    let first = (live.next_push(Some(Duration::from_secs(10))).unwrap()).expect("the event");
    assert_eq!(first["instance_id"], json!(ticked), "{first}");
    let shards = shard_count(&members[primary[0]]);

    let done = (members[primary[0]].client())
        .call("CLUSTER_MOVE_SLOTS", json!({"slots": MOVED, "to": "g2"}))
        .expect("the move switches");
    assert_eq!(done["state"], "done", "{done}");
    let g1 = [&members[0], &members[1]];
    for m in g1 {
        wait_until(Duration::from_secs(5), || {
            let info = m.client().call("CLUSTER_INFO", json!({})).unwrap();
            match info["map_epoch"] == done["map_epoch"] {
                true => Ok(()),
                false => Err(format!("{}: {info}", m.addr)),
            }
        });
    }

    // The window is open: g1's primary has not purged (its shards still count the moved
    // instances, and its settling has slots to delete).
    let mut source = members[primary[0]].client();
    wait_until(Duration::from_secs(5), || {
        let info = source.call("CLUSTER_INFO", json!({})).unwrap();
        match info["cleanup_pending"] == 2731 {
            true => Ok(()),
            false => Err(format!("the settling has not seen the switch: {info}")),
        }
    });
    // Not purged, yet counted nowhere on g1: MACHINE_STATS and INFO on its primary and
    // follower leave the moved instances out from the slots-moved-out entry on.
    for m in g1 {
        wait_until(Duration::from_secs(5), || counts_only(m, kept.len() as u64));
    }

    // The follower's live WATCH_ALL hears slots_moved from every shard, after the event.
    let mut heard = vec![first];
    heard.extend(pushes_until_moved(&mut live, shards, 0));
    moved_once_after_events(&heard, shards, &ticked).unwrap();
    // A WATCH_ALL resumed from before the switch, on the primary and on the follower: the
    // replay delivers slots_moved where the switch is, once per shard.
    for m in g1 {
        let mut resumed = m.watcher(json!({"machines": ["item"], "from_cursor": "0"}));
        let heard = pushes_until_moved(&mut resumed, shards, 1);
        moved_once_after_events(&heard, shards, &ticked)
            .unwrap_or_else(|e| panic!("replay on {}: {e}", m.addr));
    }

    // g1's primary and follower list, find and scan only what g1 owns, each once.
    let find = json!({"machine": "item", "where": {"ctx.kind": "k"}});
    for m in g1 {
        wait_until(Duration::from_secs(5), || {
            lists_exactly(m, "LIST_INSTANCES", &json!({"machine": "item"}), &kept)?;
            lists_exactly(m, "FIND_INSTANCES", &find, &kept)?;
            lists_exactly(m, "SCAN_INSTANCES", &find, &kept)
        });
    }

    // The Rust client's fan-out over both groups: every instance exactly once.
    let mut listed = Vec::new();
    let mut filter = ListFilter {
        machine: Some("item".into()),
        limit: Some(PAGE),
        ..ListFilter::default()
    };
    loop {
        let page = client
            .list_instances(&filter)
            .expect("LIST_INSTANCES fan-out");
        listed.extend(page.instances.into_iter().map(|i| i.id));
        match page.next_cursor {
            Some(c) => filter.cursor = Some(c),
            None => break,
        }
    }
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "an instance listed twice");
    listed.sort();
    assert_eq!(listed, all, "every instance once");
    let still = source.call("CLUSTER_INFO", json!({})).unwrap();
    assert!(
        still["cleanup_pending"].as_u64() > Some(0),
        "purged meanwhile: {still}"
    );

    // FIND and SCAN through the client fan out as LIST does: every instance once, from both
    // groups (the seed's group alone holds about half), at most PAGE per group a page.
    let q = FindQuery {
        limit: Some(PAGE),
        ..FindQuery::new("item", "ctx.kind", json!("k"))
    };
    let found = found_ids(client.find_pages(q.clone()).map(|p| p.map(check_page)));
    assert_eq!(found, all, "FIND through one client: every instance once");
    let mut scanned = Vec::new();
    let mut sq = q.clone();
    loop {
        let page = client.scan_instances(&sq).expect("SCAN_INSTANCES fan-out");
        scanned.push(Ok(check_page(page.clone())));
        match page.next_cursor {
            Some(c) => sq.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(
        found_ids(scanned.into_iter()),
        all,
        "SCAN: every instance once"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let opts = ConnectOptions {
        retry: smdb_client::RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    let seed = members[primary[1]].addr.to_string();
    let tokio_client = rt
        .block_on(asyncio::Client::connect(&seed, opts))
        .expect("tokio client");
    let mut pages = Vec::new();
    let mut tq = q.clone();
    loop {
        let page = rt.block_on(tokio_client.find_instances(&tq));
        let page = page.expect("FIND_INSTANCES fan-out (tokio)");
        tq.cursor.clone_from(&page.next_cursor);
        pages.push(Ok(check_page(page)));
        if tq.cursor.is_none() {
            break;
        }
    }
    assert_eq!(
        found_ids(pages.into_iter()),
        all,
        "FIND (tokio): every instance once"
    );

    // MIGRATE_INSTANCES through the blocking client: every group called until done, 50 at a
    // time each; the summed counts are the whole machine's, the moved instances once (at g2).
    let mut v2 = item_machine();
    v2["version"] = json!(2);
    put_machine(&members[primary[0]], &v2);
    let req = MigrateRequest {
        limit: Some(50),
        ..MigrateRequest::new("item", 1, 2)
    };
    let mut total = MigrateReply::default();
    let mut calls = 0;
    for reply in client.migrate_pages(req) {
        total.add(reply.expect("MIGRATE_INSTANCES fan-out"));
        calls += 1;
    }
    assert_eq!(
        (total.migrated, total.remaining, total.cursor.as_deref()),
        (INSTANCES as u64, 0, None),
        "{total:?}"
    );
    assert!(total.skipped.values().all(|n| *n == 0), "{total:?}");
    assert!(calls >= 3, "paged: {calls} calls");
    let at_v2 = (client.list_instances(&ListFilter {
        machine: Some("item".into()),
        limit: Some(1000),
        ..ListFilter::default()
    }))
    .expect("list")
    .instances;
    assert_eq!(at_v2.len(), INSTANCES);
    assert!(at_v2.iter().all(|i| i.version == 2), "every instance moved");

    // DELETE_INSTANCES through the tokio client: a dry run sums both groups, then the walk
    // deletes every instance once.
    let dry = DeleteRequest {
        dry_run: true,
        ..DeleteRequest::new("item")
    };
    let dry = rt
        .block_on(tokio_client.delete_instances(&dry))
        .expect("dry run");
    assert_eq!(
        dry.would_delete.get("open"),
        Some(&(INSTANCES as u64)),
        "{dry:?}"
    );
    let req = DeleteRequest {
        limit: Some(40),
        ..DeleteRequest::new("item")
    };
    let mut calls = 0;
    let deleted = rt
        .block_on(tokio_client.delete_to_end(req, |_| calls += 1))
        .expect("DELETE_INSTANCES fan-out");
    assert_eq!(
        (deleted.deleted, deleted.remaining),
        (INSTANCES as u64, 0),
        "{deleted:?}"
    );
    assert!(calls >= 3, "paged: {calls} calls");
    let left = (client.list_instances(&ListFilter {
        machine: Some("item".into()),
        ..ListFilter::default()
    }))
    .expect("list");
    assert!(left.instances.is_empty(), "{left:?}");
}

/// A fan-out page holds at most PAGE items per group (two groups).
fn check_page(page: smdb_client::FoundPage) -> smdb_client::FoundPage {
    assert!(
        page.instances.len() <= 2 * PAGE as usize,
        "{}",
        page.instances.len()
    );
    page
}

/// The ids of every page, in id order; fails on an id found twice.
fn found_ids(
    pages: impl Iterator<Item = Result<smdb_client::FoundPage, smdb_client::Error>>,
) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for page in pages {
        ids.extend(page.expect("a page").instances.into_iter().map(|i| i.id));
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "an instance found twice");
    ids
}
