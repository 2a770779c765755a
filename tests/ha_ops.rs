//! Failover operations against real processes (docs/ha.md, "Switchover" and "Maintenance"):
//! a three-member etcd cluster on loopback and three smdb members, driven through `smdb-cli`
//! given every member's address. `SWITCHOVER` under write load in both replication modes hands
//! the primary role to the named member with every acknowledged write on it, and the old
//! primary follows; an ineligible target is refused over RCP1 and `POST /switchover`;
//! `ha pause` holds the election after a SIGKILL of the primary, `ha resume` lets one happen,
//! and `ha status` / `ha history` show it.

mod common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::{becomes_primary, converge, one_primary, serial, start_cluster, status, TTL_MS};
use common::http::Http;
use common::run::{cli_at, output, output_ok};
use common::scrape::scrape;
use common::writes::{assert_acked_present_once, Load};
use common::*;
use serde_json::{json, Value};

/// `smdb-cli --addr A,B,C ARGS...`: exit code, stdout, stderr.
fn cli(members: &[Server], args: &[&str]) -> (i32, String, String) {
    let addrs: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    output(cli_at(&addrs.join(",")).args(args))
}

/// `cli` that must succeed; its stdout.
fn cli_ok(members: &[Server], args: &[&str]) -> String {
    let (code, out, err) = cli(members, args);
    assert_eq!(code, 0, "smdb-cli {args:?}: {err}\n{out}");
    out
}

/// Polls `f` every 100 ms until it yields a value or `within` passes.
fn eventually<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A machine and `n` instances on `primary`, each paid once; their ids.
fn seed(primary: &Server, n: usize) -> Vec<String> {
    let mut w = primary.order_client();
    let ids: Vec<String> = (0..n).map(|i| format!("s-{i}")).collect();
    for id in &ids {
        let ctx = json!({"machine": "order", "version": 1, "id": id, "context": {"total": 1}});
        w.call("CREATE_INSTANCE", ctx).unwrap();
        w.call(
            "APPLY_EVENT",
            json!({"instance_id": id, "event": "pay", "payload": {"amount": 1}}),
        )
        .unwrap();
    }
    ids
}

/// Switchover under load in `mode`: the named target becomes primary in a higher epoch, every
/// write acknowledged before, during and after is in its histories once, the old primary
/// follows and converges, and its demotion is counted under `reason="switchover"`.
fn switchover_under_load(mode: &str) {
    let _serial = serial();
    // Built (when stale) before the cluster starts, not under the load.
    let _ = cli_bin();
    let etcd = Etcd::start(3);
    let cluster = format!("switch-{mode}");
    let (_dirs, members, first) = start_cluster(&etcd, &cluster, mode, "[http]\n");
    let all: Vec<&Server> = members.iter().collect();
    let ids = seed(&members[first], 48);
    let old_epoch = status(members[first].addr).unwrap()["ha"]["epoch"]
        .as_u64()
        .unwrap();
    // The target must be following (its member key says so) before it is eligible.
    let target = (first + 2) % 3;
    converge(&members[first], &members[target]);

    let load = Load::start(members.iter().map(|m| m.addr).collect(), ids);
    std::thread::sleep(Duration::from_millis(1500));
    let before = load.acked().len();
    assert!(before > 20, "the load runs on the first primary: {before}");
    let started = Instant::now();
    let out = cli_ok(&members, &["switchover", "--to", &format!("n{target}")]);
    let took = started.elapsed();
    eprintln!("switchover ({mode}) took {took:?}: {out}");
    assert!(
        out.contains(&format!("n{first} -> n{target}")),
        "the CLI names both members: {out}"
    );
    // The named target leads (the old primary may show its role a moment after answering).
    becomes_primary(&all, target, Duration::from_secs(5));
    // The role flips at the win; the published `ha.primary` follows at the next poll.
    let st = eventually(Duration::from_secs(5), || {
        let st = status(members[target].addr).unwrap();
        (st["ha"]["primary"] == format!("n{target}")).then_some(st)
    })
    .unwrap_or_else(|| panic!("n{target} never names itself primary"));
    assert!(st["ha"]["epoch"].as_u64().unwrap() > old_epoch, "{st}");

    // Writes go on, on the new primary.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !load.acked().iter().any(|a| a.2 > started + took) {
        assert!(
            Instant::now() < deadline,
            "no write acknowledged after the switchover"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let acked = load.finish();
    assert_acked_present_once(&members[target], &acked);
    // The old primary follows the new one and holds the same writes.
    converge(&members[target], &members[first]);
    assert_acked_present_once(&members[first], &acked);
    let old = eventually(Duration::from_secs(5), || {
        let st = status(members[first].addr).unwrap();
        (st["ha"]["primary"] == format!("n{target}")).then_some(st)
    });
    assert!(old.is_some(), "n{first} never names n{target} primary");
    let m = scrape(&members[first]);
    let demoted = m.value("svc_ha_demotions_total", &[("reason", "switchover")]);
    assert_eq!(demoted, Some(1.0), "{}", m.text);

    // Refusals: an unknown member, the primary itself (over HTTP), and any member but the
    // primary answers for it (the CLI follows READ_ONLY_MODE there).
    let (code, _, err) = cli(&members, &["switchover", "--to", "nobody"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("BAD_REQUEST") && err.contains("not a live member"),
        "{err}"
    );
    let mut h = Http::connect(members[target].http_addr.unwrap());
    let r = h.post("/switchover", &json!({ "to": format!("n{target}") }));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["code"], "BAD_REQUEST", "{}", r.text());
    assert_eq!(
        one_primary(&all, Duration::from_secs(5)),
        target,
        "refusals change nothing"
    );
}

#[test]
fn switchover_under_async_load_hands_over_to_the_named_member_and_loses_no_ok() {
    switchover_under_load("async");
}

#[test]
fn switchover_under_sync_load_hands_over_to_the_named_member_and_loses_no_ok() {
    switchover_under_load("sync");
}

/// `ha pause` stops automatic failover cluster-wide: with the primary killed, nobody takes
/// over for three TTLs and `ha status` says why; `ha resume` on a survivor restarts it and one
/// is elected; `ha history` lists both terms. Without failover the ops are refused.
#[test]
fn ha_pause_holds_the_election_until_ha_resume() {
    let _serial = serial();
    let etcd = Etcd::start(3);
    let (_dirs, mut members, first) = start_cluster(&etcd, "pause-ops", "async", "");
    let out = cli_ok(&members, &["ha", "pause"]);
    assert_eq!(out.trim(), "automatic failover paused");
    // Every member sees the pause (the key is read at each poll).
    for m in &members {
        let deadline = Instant::now() + Duration::from_secs(5);
        while status(m.addr).unwrap()["ha"]["paused"] != true {
            assert!(
                Instant::now() < deadline,
                "{} does not show the pause",
                m.addr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    members[first].kill();
    let alive: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    // Well past the lease and an election's time: still nobody.
    std::thread::sleep(Duration::from_millis(3 * TTL_MS));
    for &i in &alive {
        let st = status(members[i].addr).unwrap();
        assert_ne!(st["role"], "primary", "paused: no election ({st})");
        let why = st["ha"]["blocked_reason"].as_str().unwrap_or("");
        assert!(why.contains("paused"), "the reason names the pause: {st}");
    }
    let live = |i: usize| members[i].addr.to_string();
    let one = |i: usize, args: &[&str]| output_ok(cli_at(&live(i)).args(args));
    let text = one(alive[0], &["ha", "status"]);
    assert!(
        text.contains("- (none)") && text.contains("paused"),
        "{text}"
    );
    let raw: Value = serde_json::from_str(&one(alive[0], &["ha", "status", "--json"])).unwrap();
    assert_eq!(raw["paused"], true, "{raw}");
    assert!(raw["primary"].is_null(), "{raw}");

    assert_eq!(
        one(alive[1], &["ha", "resume"]).trim(),
        "automatic failover resumed"
    );
    let survivors: Vec<&Server> = alive.iter().map(|&i| &members[i]).collect();
    let second = alive[one_primary(&survivors, Duration::from_secs(20))];
    // The new term's row is written at the win; a member's history is read from etcd.
    let history = eventually(Duration::from_secs(10), || {
        let text = one(alive[0], &["ha", "history"]);
        let last = text.lines().last().unwrap_or("").to_string();
        last.contains(&format!("n{second}")).then_some(text)
    })
    .unwrap_or_else(|| one(alive[0], &["ha", "history"]));
    let rows: Vec<&str> = history.lines().skip(1).collect();
    assert!(rows.len() >= 2, "both terms: {history}");
    assert!(
        rows[rows.len() - 2].contains(&format!("n{first}")),
        "{history}"
    );
    assert!(
        rows[rows.len() - 1].contains(&format!("n{second}")),
        "{history}"
    );

    // Failover off: refused, naming the setting.
    let (plain, _d) = Server::start("");
    let e = plain.client().call("HA_PAUSE", json!({})).unwrap_err();
    assert_eq!(e.code(), Some("BAD_REQUEST"), "{e:?}");
    let e = plain.client().call("SWITCHOVER", json!({})).unwrap_err();
    assert_eq!(e.code(), Some("BAD_REQUEST"), "{e:?}");
}
