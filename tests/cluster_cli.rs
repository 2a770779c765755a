//! `smdb-cli cluster ...` against real processes (docs/cli.md, "Cluster mode"): one etcd and
//! three groups of one member each, the CLI given every member as a seed. `create --groups
//! g1,g2` makes the map; `status` shows it; `check` passes; `add-group g3` adds the third
//! group with nothing; `rebalance --dry-run` prints the two moves that give g3 its share;
//! `move-slots` to an unknown group exits 1 with `error: CODE`; `rebalance` runs the plan
//! (the cluster is balanced after, `check` passes) and `move-slots` moves a range; after a
//! SIGKILL of g3's only member, `check` exits 1 naming group g3. And over two groups, `find`,
//! `scan`, `migrate` and `delete-instances` (and their dry runs) reach both groups' instances
//! through the client's fan-out (docs/cluster.md, "Clients").

mod common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::serial;
use common::run::{cli_at, output, Ran};
use common::*;
use serde_json::{json, Value};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];

fn cli(members: &[Server], args: &[&str]) -> Ran {
    let addrs: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    output(cli_at(&addrs.join(",")).args(args))
}

fn cli_ok(members: &[Server], args: &[&str]) -> String {
    let (code, out, err) = cli(members, args);
    assert_eq!(code, 0, "smdb-cli {args:?}: {err}\n{out}");
    out
}

/// `check` until it exits `code` (members' copies follow etcd within 1 s); its output.
fn check_until(members: &[Server], code: i32, within: Duration) -> Ran {
    let since = Instant::now();
    loop {
        let r = cli(members, &["cluster", "check"]);
        if r.0 == code || since.elapsed() > within {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn cluster_subcommands_create_show_check_and_plan() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, mut members, _) = cluster::start_groups(&etcd, "cli", &GROUPS, 1);

    let created = cli_ok(
        &members,
        &["--json", "cluster", "create", "--groups", "g1,g2"],
    );
    let created: Value = serde_json::from_str(created.trim()).expect("create --json");
    assert_eq!(created["map_epoch"], 1, "{created}");
    assert_eq!(
        created["shards"][0]["slots"],
        serde_json::json!([[0, 8191]])
    );

    let status = cli_ok(&members, &["cluster", "status"]);
    assert!(status.contains("map_epoch 1"), "{status}");
    let g1 = status
        .lines()
        .find(|l| l.starts_with("g1 "))
        .unwrap_or_default();
    assert!(g1.contains(" 8192 ") && g1.contains(" 0-8191 "), "{status}");
    let (code, out, err) = check_until(&members, 0, Duration::from_secs(3));
    assert_eq!(code, 0, "check on a healthy cluster: {out}{err}");
    assert!(out.starts_with("cluster ok: 2 groups, 2 members"), "{out}");

    let balanced = cli_ok(&members, &["cluster", "rebalance", "--dry-run"]);
    assert!(balanced.contains("nothing to move"), "{balanced}");
    let added = cli_ok(&members, &["cluster", "add-group", "g3"]);
    assert!(added.starts_with("group g3 added"), "{added}");
    let plan = cli_ok(&members, &["cluster", "rebalance", "--dry-run"]);
    assert!(plan.starts_with("2 moves planned"), "{plan}");
    let plan = cli_ok(&members, &["--json", "cluster", "rebalance", "--dry-run"]);
    let plan: Value = serde_json::from_str(plan.trim()).expect("rebalance --json");
    let want = serde_json::json!([
        {"slots": [5462, 8191], "from": "g1", "to": "g3", "count": 2730},
        {"slots": [13653, 16383], "from": "g2", "to": "g3", "count": 2731}]);
    assert_eq!(plan["plan"], want, "{plan}");
    let (code, out, err) = check_until(&members, 0, Duration::from_secs(3));
    assert_eq!(code, 0, "check after add-group: {out}{err}");

    let (code, _, err) = cli(&members, &["cluster", "move-slots", "0-9", "--to", "g9"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("error: BAD_REQUEST"), "{err}");

    // The plan, run: two moves, after which the cluster is balanced and checks out.
    let ran = cli_ok(&members, &["cluster", "rebalance"]);
    let again = cli_ok(&members, &["cluster", "rebalance", "--dry-run"]);
    assert!(again.contains("nothing to move"), "{ran}\n{again}");
    let status = cli_ok(&members, &["cluster", "status"]);
    assert!(status.contains("map_epoch 4"), "{ran}\n{status}");
    let (code, out, err) = check_until(&members, 0, Duration::from_secs(3));
    assert_eq!(code, 0, "check after rebalance: {out}{err}");
    let moved = cli_ok(&members, &["cluster", "move-slots", "0-9", "--to", "g2"]);
    assert!(moved.contains("done"), "{moved}");

    members[2].kill();
    let (code, out, err) = check_until(&members[..2], 1, Duration::from_secs(5));
    assert_eq!(code, 1, "check after g3's only member died: {out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 2, "{err}");
    assert!(lines.iter().any(|l| l.starts_with("group g3")), "{err}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("error: CLUSTER_CHECK_FAILED")),
        "{err}"
    );
}

#[test]
fn find_scan_migrate_and_delete_reach_every_group() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, _) = cluster::start_groups(&etcd, "cli-bulk", &GROUPS[..2], 1);
    cluster::create(&members, Duration::from_secs(2));
    let item = |v: u64| {
        json!({"machine": "item", "version": v, "definition": {
            "states": ["open"], "initial": "open",
            "transitions": [{"from": "open", "event": "tick", "to": "open"}],
            "indexes": ["ctx.kind"]}})
    };
    common::cluster_writes::put_machine(&members[0], &item(1));
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let mut c = common::cluster_writes::cluster_client(&seeds);
    let ids: Vec<String> = (0..60).map(|i| format!("c-{i}")).collect();
    for id in &ids {
        (c.create_instance("item", 1, id, &json!({"kind": "k"}))).expect("create");
    }
    // One seed only: the fan-out, not the seed list, reaches the other group.
    let json_of = |args: &[&str]| -> Value {
        let (code, out, err) = cli(&members[..1], args);
        assert_eq!(code, 0, "smdb-cli {args:?}: {err}\n{out}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    for op in ["find", "scan"] {
        let args = ["--json", op, "item", "-w", "ctx.kind=k", "-l", "7", "--all"];
        let page = json_of(&args);
        let mut got: Vec<&str> = (page["instances"].as_array().expect("instances").iter())
            .map(|i| i["id"].as_str().unwrap_or(""))
            .collect();
        let n = got.len();
        got.sort_unstable();
        got.dedup();
        assert_eq!(
            (got.len(), n),
            (ids.len(), ids.len()),
            "{op}: every instance once"
        );
        assert!(page["instances"][0].get("context").is_none(), "{page}");
    }
    common::cluster_writes::put_machine(&members[0], &item(2));
    let dry = json_of(&["--json", "migrate", "item", "1", "2", "--dry-run"]);
    assert_eq!(dry["would_migrate"]["open"], 60, "{dry}");
    let moved = json_of(&["--json", "migrate", "item", "1", "2", "-l", "10"]);
    assert_eq!(
        (&moved["migrated"], &moved["remaining"]),
        (&json!(60), &json!(0)),
        "{moved}"
    );
    let dry = json_of(&["--json", "delete-instances", "item", "--dry-run"]);
    assert_eq!(dry["would_delete"]["open"], 60, "{dry}");
    let gone = json_of(&["--json", "delete-instances", "item", "-l", "10"]);
    assert_eq!(gone["deleted"], 60, "{gone}");
}
