//! The clients against a failover cluster (docs/ha.md "Clients"): a three-member
//! etcd on loopback and three smdb members. A Rust client given every member's address, a
//! follower's first, writes on the primary; after SIGKILL of the primary under its write load
//! it goes on by itself, every acknowledged create is on the new primary, and writes without
//! an idempotency key whose connection broke are reported, never resent. `smdb-cli --addr
//! <follower>,<primary>` writes. The async client follows the primary the same way, and a
//! subscription moves to another member and resumes from its cursor.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::{member_config, one_primary, serial, status};
use common::run::{cli_at, output_ok};
use common::*;
use serde_json::json;
use smdb_client::{ApplyOptions, ConnectOptions, CreateOptions, RetryPolicy};

/// Three members under one etcd, and the index of the primary once there is one.
fn cluster(name: &str) -> (Etcd, Vec<tempfile::TempDir>, Vec<Server>, usize) {
    let etcd = Etcd::start(3);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..3)
        .map(|i| {
            let cfg = member_config(&etcd, name, &format!("n{i}"), "sync");
            Server::start_in(dirs[i].path(), &cfg).unwrap()
        })
        .collect();
    let p = one_primary(&members.iter().collect::<Vec<_>>(), Duration::from_secs(20));
    (etcd, dirs, members, p)
}

/// The members' addresses, a follower's first: "f:port,p:port,o:port".
fn follower_first(members: &[Server], primary: usize) -> (usize, String) {
    let f = (primary + 1) % 3;
    let o = (primary + 2) % 3;
    let list = [f, primary, o]
        .iter()
        .map(|&i| members[i].addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    (f, list)
}

fn failover_opts() -> ConnectOptions {
    ConnectOptions {
        client_name: "ha-clients".into(),
        timeout: Some(Duration::from_secs(10)),
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    }
}

fn keyed(key: &str) -> CreateOptions {
    CreateOptions {
        idempotency_key: Some(key.into()),
    }
}

fn exists(s: &Server, id: &str) -> bool {
    s.client()
        .call("GET_INSTANCE", json!({"id": id}))
        .is_ok_and(|r| r["id"] == id)
}

#[test]
fn a_client_given_every_member_writes_on_the_primary_and_so_does_the_cli() {
    let _serial = serial();
    let (_etcd, _dirs, members, p) = cluster("route");
    let (f, list) = follower_first(&members, p);

    let mut c = Client::connect_with(&list, &failover_opts()).unwrap();
    assert_eq!(
        c.address(),
        Some(members[f].addr.to_string().as_str()),
        "the first address answers"
    );
    c.put_machine("order", 1, &order_definition()).unwrap();
    for i in 0..10 {
        let id = format!("r-{i}");
        let r = c
            .create_instance_with("order", 1, &id, &json!({"total": 1}), &keyed(&id))
            .unwrap();
        assert_eq!(r.id, id);
    }
    assert_eq!(
        c.address(),
        Some(members[p].addr.to_string().as_str()),
        "the follower's READ_ONLY_MODE sent the client to the primary"
    );
    for i in 0..10 {
        assert!(
            exists(&members[p], &format!("r-{i}")),
            "r-{i} on the primary"
        );
    }
    // A read may stay where it is; a write without a key follows the pointer too (a
    // READ_ONLY_MODE refusal was not executed).
    let mut only_f = Client::connect_any(&[members[f].addr.to_string()], &failover_opts()).unwrap();
    // The follower may not be the member whose acknowledgement released the PUT_MACHINE:
    // it serves the read once the stream has brought the definition.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while only_f.get_machine("order", Some(1)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the follower never received the definition"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(only_f.connects(), 1, "a read is served by the follower");
    only_f
        .create_instance("order", 1, "r-unkeyed", &json!({"total": 1}))
        .unwrap();
    assert!(exists(&members[p], "r-unkeyed"));

    // The CLI: the follower first, then the primary.
    let cli_list = format!("{},{}", members[f].addr, members[p].addr);
    output_ok(
        cli_at(&cli_list)
            .args(["--json", "create", "order", "cli-1"])
            .args(["--version", "1", "--context", "{\"total\": 1}"]),
    );
    assert!(
        exists(&members[p], "cli-1"),
        "the CLI's create on the primary"
    );
    // A dead first address is skipped too.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    output_ok(
        cli_at(&format!("{dead},{}", members[f].addr))
            .args(["--json", "create", "order", "cli-2", "--version", "1"])
            .args(["--idempotency-key", "cli-2"]),
    );
    assert!(exists(&members[p], "cli-2"));
}

/// What a writer saw: acknowledged items and errors (text), and its client at the end.
struct Seen {
    acked: Vec<(u64, Instant)>,
    errors: Vec<String>,
    lost: usize,
    client: Client,
}

/// Runs `write(client, i)` for i = 0, 1, ... until `stop`, on one client that is never
/// replaced by the test.
fn writer(
    mut c: Client,
    stop: Arc<AtomicBool>,
    write: impl Fn(&mut Client, u64) -> smdb_client::Result<()> + Send + 'static,
) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let (mut acked, mut errors, mut lost) = (Vec::new(), Vec::new(), 0);
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            match write(&mut c, i) {
                Ok(()) => acked.push((i, Instant::now())),
                Err(e) => {
                    let maybe = e.details()["maybe_committed"] == true;
                    if e.is_connection_lost() || e.is_timeout() || maybe {
                        lost += 1;
                    }
                    errors.push(format!("{i}: {e}"));
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            i += 1;
        }
        Seen {
            acked,
            errors,
            lost,
            client: c,
        }
    })
}

#[test]
fn sigkill_of_the_primary_under_a_clients_writes_loses_no_acknowledged_create() {
    let _serial = serial();
    let (_etcd, _dirs, mut members, p) = cluster("follow");
    let (_f, list) = follower_first(&members, p);
    let mut setup = Client::connect_with(&list, &failover_opts()).unwrap();
    setup.put_machine("order", 1, &order_definition()).unwrap();
    let touched: Vec<String> = (0..8).map(|i| format!("t-{i}")).collect();
    for id in &touched {
        setup
            .create_instance_with("order", 1, id, &json!({"total": 1}), &keyed(id))
            .unwrap();
        let pay = ApplyOptions {
            idempotency_key: Some(format!("pay-{id}")),
            ..ApplyOptions::default()
        };
        setup
            .apply_event_with(id, "pay", Some(&json!({"amount": 1})), &pay)
            .unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    // Creates with idempotency keys: resent whenever the client sees fit.
    let creates = writer(
        Client::connect_with(&list, &failover_opts()).unwrap(),
        stop.clone(),
        |c, i| {
            let id = format!("c-{i}");
            c.create_instance_with("order", 1, &id, &json!({"total": 1}), &keyed(&id))
                .map(drop)
        },
    );
    // Touches without a key: never resent once written.
    let ids = touched.clone();
    let touches = writer(
        Client::connect_with(&list, &failover_opts()).unwrap(),
        stop.clone(),
        move |c, i| {
            let id = &ids[i as usize % ids.len()];
            c.apply_event(id, "touch", Some(&json!({"i": i}))).map(drop)
        },
    );
    std::thread::sleep(Duration::from_millis(1500));
    let killed_at = Instant::now();
    members[p].kill();
    let alive: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let second = alive[one_primary(
        &alive.iter().map(|&i| &members[i]).collect::<Vec<_>>(),
        Duration::from_secs(20),
    )];
    eprintln!("new primary after {:?}", killed_at.elapsed());
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let creates = creates.join().unwrap();
    let touches = touches.join().unwrap();
    eprintln!(
        "creates: {} acknowledged, {} errors {:?}; touches: {} acknowledged, {} errors {:?}",
        creates.acked.len(),
        creates.errors.len(),
        creates.errors,
        touches.acked.len(),
        touches.errors.len(),
        touches.errors
    );

    // The keyed writer went on by itself onto the new primary.
    let new_addr = members[second].addr.to_string();
    assert_eq!(creates.client.address(), Some(new_addr.as_str()));
    assert!(creates.client.connects() >= 2, "it reconnected");
    let mut check = members[second].client();
    let after = creates.acked.iter().filter(|a| a.1 > killed_at).count();
    assert!(
        creates.acked.len() > after + 20 && after > 20,
        "creates acknowledged before and after the kill: {after} of {}",
        creates.acked.len()
    );
    let on_new = |c: &mut Client, id: &str| {
        c.call("GET_INSTANCE", json!({"id": id}))
            .is_ok_and(|r| r["id"] == id)
    };
    for (i, _) in &creates.acked {
        assert!(
            on_new(&mut check, &format!("c-{i}")),
            "acknowledged c-{i} lost"
        );
    }
    let st = status(members[second].addr).unwrap();
    assert!(st["ha"]["epoch"].as_u64().unwrap() >= 2, "{st}");

    // Unkeyed touches: each acknowledged one present exactly once, none twice (a silent
    // resend of a write that had executed would show twice), and the broken ones reported.
    assert!(
        touches.lost >= 1,
        "the touch in flight at the kill is reported: {:?}",
        touches.errors
    );
    assert_eq!(touches.client.address(), Some(new_addr.as_str()));
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for id in &touched {
        let h = check
            .call("GET_HISTORY", json!({"instance_id": id, "limit": 1000}))
            .unwrap();
        for e in h["events"].as_array().unwrap() {
            if e["event"] == "touch" {
                *seen.entry(e["payload"]["i"].as_u64().unwrap()).or_default() += 1;
            }
        }
    }
    for (i, n) in &seen {
        assert_eq!(*n, 1, "touch {i} applied {n} times");
    }
    for (i, _) in &touches.acked {
        assert_eq!(seen.get(i), Some(&1), "acknowledged touch {i} lost");
    }
    assert!(
        touches.acked.iter().any(|a| a.1 > killed_at),
        "touches went on after the kill"
    );
}

/// The async client (tokio) given every member, a follower's first: its first write goes on to
/// the primary the follower names; after a SIGKILL of the primary under its keyed creates it
/// goes on by itself on the new primary, and every create it saw acknowledged is there.
#[test]
fn the_async_client_follows_the_primary_across_a_sigkill() {
    use smdb_client::asyncio::Client as AsyncClient;
    let _serial = serial();
    let (_etcd, _dirs, mut members, p) = cluster("async");
    let (f, list) = follower_first(&members, p);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt
        .block_on(AsyncClient::connect(&list, failover_opts()))
        .unwrap();
    assert_eq!(c.address(), members[f].addr.to_string());
    rt.block_on(c.put_machine("order", 1, &order_definition()))
        .unwrap();
    assert_eq!(
        c.address(),
        members[p].addr.to_string(),
        "the follower's READ_ONLY_MODE sent the client to the primary"
    );
    let mut acked = Vec::new();
    let mut killed_at = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        assert!(Instant::now() < deadline, "writes did not resume");
        let id = format!("a-{i}");
        let opts = keyed(&id);
        let ctx = json!({"total": 1});
        rt.block_on(c.create_instance("order", 1, &id, &ctx, &opts))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        acked.push(id);
        if acked.len() == 30 {
            members[p].kill();
            killed_at = Some(Instant::now());
        }
        if acked.len() == 60 {
            break;
        }
    }
    let gap = killed_at.unwrap().elapsed();
    let alive: Vec<&Server> = (0..3).filter(|&i| i != p).map(|i| &members[i]).collect();
    let second = alive[one_primary(&alive, Duration::from_secs(20))];
    assert_eq!(c.address(), second.addr.to_string(), "on the new primary");
    for id in &acked {
        assert!(
            exists(second, id),
            "acknowledged {id} is on the new primary"
        );
    }
    eprintln!("async client: 30 creates after the SIGKILL within {gap:?}");
}

/// A subscription opened through a client given every member moves when its member dies: it
/// reconnects to another member and resumes from its cursor. Events acknowledged before the
/// SIGKILL (replicated: sync mode) and after it on the new primary arrive once each, in order.
#[test]
fn a_subscription_moves_to_another_member_and_resumes_from_its_cursor() {
    use smdb_client::WatchAllFilter;
    let _serial = serial();
    let (_etcd, _dirs, mut members, p) = cluster("subs");
    let mut w = Client::connect_with(&follower_first(&members, p).1, &failover_opts()).unwrap();
    w.put_machine("order", 1, &order_definition()).unwrap();
    let ctx = json!({"total": 1});
    w.create_instance_with("order", 1, "s-1", &ctx, &keyed("s-1"))
        .unwrap();
    // The subscriber starts on the primary, the others after it.
    let list = [p, (p + 1) % 3, (p + 2) % 3]
        .iter()
        .map(|&i| members[i].addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let sub_client = Client::connect_with(&list, &failover_opts()).unwrap();
    let mut sub = sub_client.subscribe_all(WatchAllFilter::default()).unwrap();
    let touch = |w: &mut Client, i: u64| {
        let opts = ApplyOptions {
            idempotency_key: Some(format!("touch-{i}")),
            ..ApplyOptions::default()
        };
        let event = if i == 0 { "pay" } else { "touch" };
        w.apply_event_with("s-1", event, Some(&json!({"amount": 1, "i": i})), &opts)
            .unwrap_or_else(|e| panic!("event {i}: {e}"));
    };
    for i in 0..10 {
        touch(&mut w, i);
    }
    let mut seen = Vec::new();
    let next = |sub: &mut smdb_client::Subscription, seen: &mut Vec<u64>| {
        let ev = sub
            .next_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("after {seen:?}: {e}"))
            .unwrap_or_else(|| panic!("no event within 30 s after {seen:?}"));
        seen.push(ev.payload["i"].as_u64().unwrap());
    };
    while seen.len() < 10 {
        next(&mut sub, &mut seen);
    }
    members[p].kill();
    for i in 10..20 {
        touch(&mut w, i);
    }
    while seen.len() < 20 {
        next(&mut sub, &mut seen);
    }
    assert_eq!(seen, (0..20).collect::<Vec<u64>>(), "once each, in order");
    assert!(sub.reconnects >= 1, "the subscription moved");
}

/// etcd loses quorum under a subscriber: the primary cannot renew its lease and stops taking
/// writes (nobody can be elected), the subscription stays usable or moves, and when quorum
/// returns a primary takes writes again; the subscriber sees every acknowledged event once, in
/// order, with no gap.
#[test]
fn losing_etcd_quorum_pauses_writes_and_a_subscriber_resumes_with_no_gap() {
    use smdb_client::WatchAllFilter;
    let _serial = serial();
    let (mut etcd, _dirs, members, p) = cluster("quorum");
    let list = [p, (p + 1) % 3, (p + 2) % 3]
        .iter()
        .map(|&i| members[i].addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut w = Client::connect_with(&list, &failover_opts()).unwrap();
    w.put_machine("order", 1, &order_definition()).unwrap();
    let ctx = json!({"total": 1});
    w.create_instance_with("order", 1, "q-1", &ctx, &keyed("q-1"))
        .unwrap();
    let mut sub = Client::connect_with(&list, &failover_opts())
        .unwrap()
        .subscribe_all(WatchAllFilter::default())
        .unwrap();
    let touch = |w: &mut Client, i: u64| {
        let opts = ApplyOptions {
            idempotency_key: Some(format!("q-touch-{i}")),
            ..ApplyOptions::default()
        };
        let event = if i == 0 { "pay" } else { "touch" };
        w.apply_event_with("q-1", event, Some(&json!({"amount": 1, "i": i})), &opts)
    };
    for i in 0..10 {
        touch(&mut w, i).unwrap();
    }
    // Two of three etcd members go: no quorum, no lease renewal.
    etcd.kill_member(1);
    etcd.kill_member(2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut acked_probes = 0;
    let refused = loop {
        let mut once = Client::connect_any(
            &[members[p].addr.to_string()],
            &ConnectOptions {
                retry: RetryPolicy::none(),
                ..failover_opts()
            },
        )
        .unwrap();
        let r = once.apply_event_with(
            "q-1",
            "touch",
            Some(&json!({"i": 1000})),
            &ApplyOptions::default(),
        );
        match r {
            Err(e) => break e,
            Ok(_) => {
                acked_probes += 1;
                assert!(
                    Instant::now() < deadline,
                    "writes go on without etcd quorum"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let code = refused.error_code().map(|c| c.as_str().to_string());
    assert!(
        matches!(code.as_deref(), Some("NO_PRIMARY" | "READ_ONLY_MODE")),
        "without quorum the primary refuses writes: {refused}"
    );
    etcd.start_member(1);
    etcd.start_member(2);
    for i in 10..20 {
        touch(&mut w, i).unwrap_or_else(|e| panic!("event {i} after quorum returned: {e}"));
    }
    // Probes that slipped in before the lease ran out are events too: count them in the log
    // the primary holds once writes are acknowledged again. Counting on the old primary at the
    // refusal is wrong: a probe it wrote but never acknowledged is truncated when another
    // member wins the next term.
    let extra = w
        .call("GET_HISTORY", json!({"instance_id": "q-1", "limit": 1000}))
        .unwrap()["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["i"] == 1000)
        .count();
    assert!(
        extra >= acked_probes,
        "{acked_probes} probes were acknowledged, {extra} are in the log"
    );
    let mut seen = Vec::new();
    while seen.len() < 20 + extra {
        let ev = match sub.next_timeout(Duration::from_secs(30)) {
            // In sync mode the probes' pushes waited for acknowledgements the lost lease never
            // brought: the demotion ended the subscription (docs/ha.md "Subscriptions across terms"), and the next call
            // resumes it from its cursor.
            Err(ClientError::Lagged { resume_cursor, .. }) => {
                eprintln!("lagged at the demotion; resuming from {resume_cursor}");
                continue;
            }
            other => other.unwrap_or_else(|e| panic!("after {seen:?}: {e}")),
        };
        let ev = ev.unwrap_or_else(|| panic!("no event within 30 s after {seen:?}"));
        seen.push(ev.payload["i"].as_u64().unwrap());
    }
    seen.retain(|i| *i != 1000);
    assert_eq!(
        seen,
        (0..20).collect::<Vec<u64>>(),
        "no gap, once each, in order"
    );
}
