//! Subscriptions and positions across terms (docs/ha.md "Subscriptions across
//! terms") against real etcd and three real members:
//! * in sync mode a push leaves the primary only once its entry is sync-acknowledged (both
//!   followers stopped: the write waits and so does its push; continued: both arrive);
//! * a follower pushes (and replays) an entry only once its primary reports it
//!   sync-acknowledged (k = 2, one follower stopped: the other has it, and holds it);
//! * in sync mode a resumed subscription's replay delivers only acknowledged entries, and the
//!   rest once acknowledged, then the live pushes, with no gap and no duplicate;
//! * a cursor past the point where an old primary's log was cut resumes, on the new primary
//!   and on the old one after it rejoined and truncated, with a `diverged` lag notice naming
//!   where the logs agree, and from there with no gap;
//! * a follower that truncates its log (it followed a primary forced in without its last
//!   entries) ends its subscriptions that went past the cut the same way;
//! * HTTP `ETag`s carry the term's epoch, and `If-Match` with another epoch fails.

mod common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::{
    converge, create_paid, member_config, one_primary, serial, start_cluster, status, wait_status,
};
use common::http::Http;
use common::*;
use serde_json::{json, Value};

fn touch(c: &mut Client, id: &str, event: &str) -> Value {
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": id, "event": event, "payload": {"amount": 1}}),
    )
    .unwrap_or_else(|e| panic!("{event} {id}: {e}"))
}

/// The next push of `c`, within `wait`.
fn push_within(c: &mut Client, wait: Duration) -> Option<Value> {
    c.next_push(Some(wait)).expect("read")
}

/// The offset of shard 0 in a cursor (`c1-<o>` or `c2-<e>.<o>`), and its epoch (if any).
fn position(cursor: &str) -> (Option<u64>, u64) {
    let part = cursor.split('-').nth(1).expect("one shard");
    match part.split_once('.') {
        Some((e, o)) => (Some(e.parse().unwrap()), o.parse().unwrap()),
        None => (None, part.parse().unwrap()),
    }
}

#[test]
fn a_push_in_sync_mode_leaves_only_once_its_entry_is_acknowledged() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, p) = start_cluster(
        &etcd,
        "pushhold",
        "sync",
        "[replication]\nsync_timeout_ms = 20000\n",
    );
    let followers: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let mut w = members[p].order_client();
    create_paid(&mut w, "h");
    // Both followers in the sync set: acknowledgements count.
    wait_status(&members[p], Duration::from_secs(10), "S of 2", |st| {
        st["ha"]["sync_set"]
            .as_array()
            .is_some_and(|s| s.len() == 2)
    });
    let mut sub = members[p].client();
    let watching = sub.call("WATCH_ALL", json!({})).unwrap();
    assert!(
        watching["cursor"].as_str().unwrap().starts_with("c2-"),
        "{watching}"
    );
    touch(&mut w, "h", "touch");
    let first = push_within(&mut sub, Duration::from_secs(5)).expect("a push");
    assert_eq!(first["type"], "event", "{first}");

    for &f in &followers {
        members[f].signal(libc::SIGSTOP);
    }
    let addr = members[p].addr;
    let writer = std::thread::spawn(move || {
        let mut c = Client::connect_hello(addr, "held-write").unwrap();
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        let started = Instant::now();
        let r = c.call(
            "APPLY_EVENT",
            json!({"instance_id": "h", "event": "touch", "payload": {"held": true}}),
        );
        (r, started.elapsed())
    });
    // Shorter than a lease's renewal margin: the followers keep their etcd sessions.
    let early = push_within(&mut sub, Duration::from_millis(600));
    for &f in &followers {
        members[f].signal(libc::SIGCONT);
    }
    assert!(
        early.is_none(),
        "a push left before its entry was acknowledged: {early:?}"
    );
    let (r, took) = writer.join().unwrap();
    let result = r.unwrap_or_else(|e| {
        let tail = |s: String| s[s.len().saturating_sub(4000)..].to_string();
        let logs: Vec<String> = members.iter().map(|m| tail(m.log())).collect();
        panic!(
            "the write is acknowledged once the followers go on: {e}\n{}",
            logs.join("\n----\n")
        )
    });
    let held = push_within(&mut sub, Duration::from_secs(10)).expect("the held push");
    assert_eq!(held["wal_offset"], result["wal_offset"], "{held}");
    assert_eq!(held["payload"], json!({"held": true}));
    assert!(
        took >= Duration::from_millis(500),
        "the write waited: {took:?}"
    );
}

/// Three members of `cluster` in sync mode with `extra` config, once the primary (its index is
/// the third value) counts both followers in its sync set.
fn sync_set_of_two(
    etcd: &Etcd,
    cluster: &str,
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Server>, usize) {
    let (dirs, members, p) = start_cluster(etcd, cluster, "sync", extra);
    wait_status(&members[p], Duration::from_secs(10), "S of 2", |st| {
        st["ha"]["sync_set"]
            .as_array()
            .is_some_and(|s| s.len() == 2)
    });
    (dirs, members, p)
}

/// Shard 0's durable head on `s` (`REPLICATION_STATUS` positions).
fn head(s: &Server) -> u64 {
    let st = status(s.addr).expect("status");
    st["positions"]["0"]
        .as_u64()
        .unwrap_or_else(|| panic!("{st}"))
}

#[test]
fn a_follower_pushes_only_what_its_primary_reports_acknowledged() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // Both followers must acknowledge (k = 2): with one stopped, the other has the entry
    // durable and acknowledged, and it is still not sync-acknowledged.
    let extra = "[replication]\nsync_replicas = 2\nsync_timeout_ms = 20000\n";
    let (_dirs, members, p) = sync_set_of_two(&etcd, "followhold", extra);
    let (f, g) = match p {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let mut w = members[p].order_client();
    create_paid(&mut w, "fh");
    // A subscriber on a follower, and a cursor to replay from there later.
    let mut sub = members[f].client();
    let watching = sub.call("WATCH_ALL", json!({})).unwrap();
    let from = watching["cursor"].as_str().unwrap().to_string();
    let first = touch(&mut w, "fh", "touch")["wal_offset"].as_u64().unwrap();
    let ev = push_within(&mut sub, Duration::from_secs(5)).expect("an acknowledged push");
    assert_eq!(ev["wal_offset"], first, "{ev}");

    members[g].signal(libc::SIGSTOP);
    let addr = members[p].addr;
    let writer = std::thread::spawn(move || {
        let mut c = Client::connect_hello(addr, "held-write").unwrap();
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        c.call(
            "APPLY_EVENT",
            json!({"instance_id": "fh", "event": "touch", "payload": {"held": true}}),
        )
    });
    // The follower has the write durable (and acknowledged it), but g has not: no push yet,
    // and a replay on the follower stops before it too.
    let since = Instant::now();
    while head(&members[f]) <= first && since.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let on_follower = head(&members[f]);
    let early = push_within(&mut sub, Duration::from_millis(300));
    let mut replay = members[f].client();
    replay
        .call("WATCH_ALL", json!({ "from_cursor": from }))
        .unwrap();
    let replayed = push_within(&mut replay, Duration::from_secs(2));
    let replayed_early = push_within(&mut replay, Duration::from_millis(200));
    members[g].signal(libc::SIGCONT);
    assert_eq!(on_follower, first + 1, "the follower has the write durable");
    assert!(
        early.is_none(),
        "a follower pushed an entry before it was acknowledged: {early:?}"
    );
    let replayed = replayed.expect("the acknowledged entry replays on the follower");
    assert_eq!(replayed["wal_offset"], first, "{replayed}");
    assert!(
        replayed_early.is_none(),
        "a follower replayed an entry before it was acknowledged: {replayed_early:?}"
    );

    let result = writer.join().unwrap().expect("acknowledged once g goes on");
    let held = push_within(&mut sub, Duration::from_secs(10)).expect("the held push");
    assert_eq!(held["wal_offset"], result["wal_offset"], "{held}");
    assert_eq!(held["payload"], json!({"held": true}));
    let rest = push_within(&mut replay, Duration::from_secs(10)).expect("the rest replays");
    assert_eq!(rest["wal_offset"], result["wal_offset"], "{rest}");
}

/// A write of `touch` on `id` from its own connection, on a thread: the thread gives the
/// offset it was written at, acknowledged or answered `SYNC_TIMEOUT` (committed).
fn touch_in_background(
    addr: std::net::SocketAddr,
    id: &'static str,
    n: u64,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut c = Client::connect_hello(addr, "held-write").unwrap();
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = c.call(
            "APPLY_EVENT",
            json!({"instance_id": id, "event": "touch", "payload": {"n": n}}),
        );
        match r {
            Ok(v) => v["wal_offset"].as_u64().unwrap(),
            Err(ClientError::Server { details, .. }) if details["committed"] == true => {
                details["wal_offset"].as_u64().unwrap()
            }
            Err(e) => panic!("touch {n}: {e}"),
        }
    })
}

#[test]
fn a_replay_in_sync_mode_delivers_only_acknowledged_entries() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // Writes answer SYNC_TIMEOUT soon: a reply waiting for acknowledgement would hold up the
    // replay's replies on the same front, which would hide what the replay reads.
    let extra = "[replication]\nsync_timeout_ms = 400\n";
    let (_dirs, members, p) = sync_set_of_two(&etcd, "replayhold", extra);
    let followers: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let mut w = members[p].order_client();
    create_paid(&mut w, "r");
    // The cursor to resume from, before every touch below; one touch acknowledged.
    let start = members[p].client().call("WATCH_ALL", json!({})).unwrap();
    let from = start["cursor"].as_str().unwrap().to_string();
    let acked = touch(&mut w, "r", "touch")["wal_offset"].as_u64().unwrap();

    // Three writes reach the primary's log but no replica: both followers are stopped.
    for &f in &followers {
        members[f].signal(libc::SIGSTOP);
    }
    let addr = members[p].addr;
    let writers: Vec<_> = (0..3).map(|n| touch_in_background(addr, "r", n)).collect();
    let mut written: Vec<u64> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    let mut sub = members[p].client();
    sub.call("WATCH_ALL", json!({ "from_cursor": from }))
        .unwrap();
    let first = push_within(&mut sub, Duration::from_secs(5));
    // Shorter than a lease's renewal margin: the followers keep their etcd sessions.
    let early = push_within(&mut sub, Duration::from_millis(400));
    for &f in &followers {
        members[f].signal(libc::SIGCONT);
    }
    let first = first.expect("the acknowledged entry replays at once");
    assert_eq!(first["wal_offset"], acked, "{first}");
    assert_eq!(first["replayed"], true, "{first}");
    assert!(
        early.is_none(),
        "the replay delivered an entry before it was acknowledged: {early:?}"
    );

    // Acknowledged once the followers go on: each entry once, in order, then live pushes.
    written.sort_unstable();
    assert_eq!(written, (acked + 1..=acked + 3).collect::<Vec<_>>());
    let mut got = Vec::new();
    while got.len() < written.len() {
        let ev = push_within(&mut sub, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the rest after {got:?}"));
        assert_eq!(ev["type"], "event", "{ev}");
        assert_eq!(ev["replayed"], true, "{ev}");
        got.push(ev["wal_offset"].as_u64().unwrap());
    }
    assert_eq!(got, written, "no gap, no duplicate, in order");
    let live = touch(&mut w, "r", "touch")["wal_offset"].as_u64().unwrap();
    let next = push_within(&mut sub, Duration::from_secs(5)).expect("a live push");
    assert_eq!(next["wal_offset"], live, "nothing twice: {next}");
    assert!(next.get("replayed").is_none(), "{next}");
}

#[test]
fn a_cursor_past_a_truncated_tail_resumes_where_the_logs_agree() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let http = "[http]\nenabled = true\n";
    let (_dirs, mut members, p) = start_cluster(&etcd, "diverge", "async", http);
    let followers: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let mut w = members[p].order_client();
    create_paid(&mut w, "d");
    for &f in &followers {
        converge(&members[p], &members[f]);
    }
    let mut sub = members[p].client();
    let start = sub.call("WATCH_ALL", json!({})).unwrap();
    let agreed = position(start["cursor"].as_str().unwrap());
    eprintln!("watching from {start}");

    // The followers stop; the primary writes on alone and its subscriber sees every event.
    for &f in &followers {
        members[f].signal(libc::SIGSTOP);
    }
    let mut cursor = String::new();
    for _ in 0..5 {
        touch(&mut w, "d", "touch");
        let ev = push_within(&mut sub, Duration::from_secs(5)).expect("push");
        cursor = ev["cursor"].as_str().unwrap().to_string();
    }
    drop(sub);
    let (epoch1, past) = position(&cursor);
    assert!(past > agreed.1, "{cursor} past {start}");
    // The primary stops past its lease; the followers lose what it sent them (SIGKILL) and
    // come back: one of them leads a new term without the primary's last five entries.
    members[p].signal(libc::SIGSTOP);
    for &f in &followers {
        members[f].kill();
        members[f].relaunch().unwrap();
    }
    let pair: Vec<&Server> = followers.iter().map(|&f| &members[f]).collect();
    let q = followers[one_primary(&pair, Duration::from_secs(30))];
    let mut w2 = members[q].client();
    for _ in 0..8 {
        touch(&mut w2, "d", "touch");
    }
    members[p].signal(libc::SIGCONT);

    // On the new primary: the old cursor ends at once, diverged, where the logs agree.
    let diverged = |c: &mut Client| {
        let r = c
            .call("WATCH_ALL", json!({ "from_cursor": cursor }))
            .unwrap();
        let notice = push_within(c, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("a lag notice after {r} (from {cursor})"));
        assert_eq!(notice["type"], "subscription_lagged", "{notice}");
        assert_eq!(notice["subscription_id"], r["subscription_id"]);
        assert_eq!(notice["details"]["diverged"], true, "{notice}");
        notice["resume_cursor"].as_str().unwrap().to_string()
    };
    let mut c = members[q].client();
    let resume = diverged(&mut c);
    let (e, agree) = position(&resume);
    eprintln!("cursor {cursor} (epoch {epoch1:?}) resumes from {resume}");
    assert_eq!(e, epoch1, "the agreeing point is of the old term");
    assert_eq!(
        agree, agreed.1,
        "the logs agree where the followers stopped"
    );
    // The same over HTTP: an event stream resumed from the old cursor ends at once.
    let h = Http::connect(members[q].http_addr.expect("http listener"));
    let mut sse = h
        .stream("/stream", &[("Last-Event-ID", &cursor)])
        .unwrap_or_else(|r| panic!("stream refused: {}", r.text()));
    assert_eq!(sse.next().expect("subscribed").event, "subscribed");
    let lag = sse.next().expect("lagged");
    assert_eq!(lag.event, "lagged", "{}", lag.data);
    assert_eq!(lag.json()["details"]["diverged"], true, "{}", lag.data);
    assert_eq!(lag.json()["resume_cursor"], resume.as_str());
    // From there: the new term's events, from the next offset on, no gap.
    c.call("WATCH_ALL", json!({ "from_cursor": resume }))
        .unwrap();
    let mut offsets = Vec::new();
    while let Some(ev) = push_within(&mut c, Duration::from_secs(2)) {
        assert_eq!(ev["type"], "event", "{ev}");
        offsets.push(ev["wal_offset"].as_u64().unwrap());
    }
    assert_eq!(offsets.len(), 8, "{offsets:?}");
    assert!(offsets[0] > agree && offsets.windows(2).all(|w| w[0] < w[1]));

    // The old primary rejoins, truncates its tail and takes the new term's entries: the same.
    converge(&members[q], &members[p]);
    let mut old = members[p].client();
    assert_eq!(diverged(&mut old), resume);
}

#[test]
fn etags_carry_the_epoch_and_if_match_checks_it() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, p) = start_cluster(&etcd, "etags", "async", "[http]\nenabled = true\n");
    let epoch = status(members[p].addr).unwrap()["ha"]["epoch"]
        .as_u64()
        .unwrap();
    assert!(epoch >= 1);
    let mut w = members[p].order_client();
    create_paid(&mut w, "t");
    let mut h = Http::connect(members[p].http_addr.expect("http listener"));
    let tag = h.get("/instances/t").header("etag").unwrap().to_string();
    let (e, offset) = tag.trim_matches('"').split_once('.').unwrap();
    assert_eq!(e.parse::<u64>().unwrap(), epoch, "{tag}");
    let body = br#"{"event":"touch"}"#;
    for other in [
        format!("\"{}.{offset}\"", epoch - 1),
        format!("\"{}.{offset}\"", epoch + 1),
        format!("\"{offset}\""),
    ] {
        let r = h.request(
            "POST",
            "/instances/t/events",
            &[("If-Match", &other)],
            Some(body),
        );
        assert_eq!(
            (r.status, r.code()),
            (412, "CONFLICT".into()),
            "{other}: {}",
            r.text()
        );
    }
    let ok = h.request(
        "POST",
        "/instances/t/events",
        &[("If-Match", &tag)],
        Some(body),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let new_tag = ok.header("etag").unwrap();
    assert!(new_tag.starts_with(&format!("\"{epoch}.")), "{new_tag}");
}

#[test]
fn a_member_that_truncates_ends_its_subscriptions_that_went_past_the_cut() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // n2 never campaigns: it is the follower that will be ahead of the forced new primary.
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let mut members: Vec<Server> = (0..3)
        .map(|i| {
            let mut cfg = member_config(&etcd, "truncate", &format!("n{i}"), "async");
            if i == 2 {
                cfg.push_str("nofailover = true\n"); // the [ha] section is the config's last
            }
            Server::start_in(dirs[i].path(), &cfg).unwrap()
        })
        .collect();
    let p = one_primary(&members.iter().collect::<Vec<_>>(), Duration::from_secs(20));
    let (a, b) = (2, 1 - p);
    let mut w = members[p].order_client();
    create_paid(&mut w, "t");
    converge(&members[p], &members[a]);
    converge(&members[p], &members[b]);
    let mut sub = members[a].client();
    let start = sub.call("WATCH_ALL", json!({})).unwrap();
    let agreed = position(start["cursor"].as_str().unwrap());

    // B stops; the primary writes five events that reach A (and A's subscriber) only.
    members[b].signal(libc::SIGSTOP);
    let mut cursor = String::new();
    for _ in 0..5 {
        touch(&mut w, "t", "touch");
        let ev = push_within(&mut sub, Duration::from_secs(5)).expect("push on A");
        cursor = ev["cursor"].as_str().unwrap().to_string();
    }
    // The primary stops past its lease; B loses what was in flight to it and comes back; A
    // may not lead: B is forced to, without the five events.
    members[p].signal(libc::SIGSTOP);
    members[b].kill();
    members[b].relaunch().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = members[b].client().call("PROMOTE", json!({"force": true}));
        match r {
            Ok(v) if v["role"] == "primary" => break,
            other => {
                assert!(Instant::now() < deadline, "B never led: {other:?}");
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
    // A follows B and truncates its tail: its subscriber hears where the logs agree.
    let notice = push_within(&mut sub, Duration::from_secs(20)).expect("a notice from A");
    members[p].signal(libc::SIGCONT);
    assert_eq!(notice["type"], "subscription_lagged", "{notice}");
    assert_eq!(notice["details"]["diverged"], true, "{notice}");
    let resume = notice["resume_cursor"].as_str().unwrap().to_string();
    eprintln!("A's subscriber at {cursor} resumes from {resume}");
    assert_eq!(position(&resume), agreed, "the cut is where B stopped");
}
