//! Cluster mode's etcd side against real processes (docs/cluster.md): one etcd on loopback
//! and members of two groups of one cluster. Each group's failover keys land under
//! `/smdb/<cluster>/groups/<group>/`, each group elects its own primary, and member keys carry
//! `group`, `map_epoch` and `http_addr`. The map created (`cluster::admin::create_in_etcd`, the
//! function the HA thread runs for `CLUSTER_CREATE`) or written by an operator with `etcdctl`
//! reaches every member's copy within 1 s (INFO's `cluster` and `REPLICATION_STATUS.ha`); a
//! map that breaks a rule is reported, never served; a name that is a standalone group's is
//! refused; a group without a primary is named. A second live process with a node id of
//! another group exits 1.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::{member_config, one_primary, serial, status};
use common::*;
use serde_json::{json, Value};
use smdb::cluster::admin::{add_group_in_etcd, create_in_etcd};
use smdb::cluster::keys::ClusterKeys;
use smdb::cluster::{ClusterError, ClusterMap};

/// How soon every member's copy must show a change of the map.
const COPY_WITHIN: Duration = Duration::from_secs(1);

fn cluster_member(etcd: &Etcd, cluster: &str, node: &str, group: &str, http: bool) -> String {
    let http = if http { "[http]\n" } else { "" };
    member_config(etcd, cluster, node, "async")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\n{http}")
}

fn etcdctl(etcd: &Etcd, args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoints.join(",")])
        .args(args)
        .output()
        .expect("etcdctl");
    assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn info(s: &Server) -> Value {
    let mut c = Client::connect_hello(s.addr, "cluster-test").unwrap();
    c.call("INFO", json!({})).unwrap()
}

/// Waits until every member's INFO `cluster` satisfies `f`; each must within `limit` of
/// `since`. Returns the time the last one took.
fn copies(members: &[&Server], since: Instant, limit: Duration, f: impl Fn(&Value) -> bool) {
    for m in members {
        loop {
            let c = info(m)["cluster"].clone();
            if f(&c) {
                break;
            }
            assert!(
                since.elapsed() < limit,
                "{}'s copy after {:?}: {c}",
                m.addr,
                since.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client_of(etcd: &Etcd) -> std::sync::Arc<smdb::control::ha::etcd::Etcd> {
    let cfg = smdb::config::ha::Ha {
        etcd_endpoints: etcd.endpoints.clone(),
        ..Default::default()
    };
    smdb::control::ha::etcd::Etcd::new(&cfg).unwrap()
}

#[test]
fn two_groups_elect_their_own_primaries_and_every_copy_follows_the_map_within_1s() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let plan = [("a1", "g1", true), ("a2", "g1", false), ("b1", "g2", false)];
    let members: Vec<Server> = (plan.iter().zip(&dirs))
        .map(|((node, group, http), dir)| {
            let cfg = cluster_member(&etcd, "cm", node, group, *http);
            Server::start_in(dir.path(), &cfg).unwrap()
        })
        .collect();
    let g1 = one_primary(&[&members[0], &members[1]], Duration::from_secs(20));
    one_primary(&[&members[2]], Duration::from_secs(20));

    // The group's keys live under groups/<group>/; nothing at the standalone places.
    let keys = etcdctl(&etcd, &["get", "--prefix", "--keys-only", "/smdb/cm/"]);
    for k in [
        "/smdb/cm/groups/g1/leader",
        "/smdb/cm/groups/g1/epoch",
        "/smdb/cm/groups/g1/members/a1",
        "/smdb/cm/groups/g1/members/a2",
        "/smdb/cm/groups/g2/leader",
        "/smdb/cm/groups/g2/members/b1",
    ] {
        assert!(keys.lines().any(|l| l == k), "{k} missing in:\n{keys}");
    }
    assert!(!keys
        .lines()
        .any(|l| l == "/smdb/cm/leader" || l.starts_with("/smdb/cm/members/")));
    let leader = etcdctl(
        &etcd,
        &["get", "--print-value-only", "/smdb/cm/groups/g1/leader"],
    );
    let leader: Value = serde_json::from_str(leader.trim()).unwrap();
    assert_eq!(leader["node_id"], plan[g1].0);
    let a1 = etcdctl(
        &etcd,
        &["get", "--print-value-only", "/smdb/cm/groups/g1/members/a1"],
    );
    let a1: Value = serde_json::from_str(a1.trim()).unwrap();
    assert_eq!(a1["group"], "g1");
    assert_eq!(a1["map_epoch"], 0);
    let http = members[0].http_addr.expect("a1 serves HTTP");
    assert_eq!(a1["http_addr"], http.to_string());
    let b1 = etcdctl(
        &etcd,
        &["get", "--print-value-only", "/smdb/cm/groups/g2/members/b1"],
    );
    let b1: Value = serde_json::from_str(b1.trim()).unwrap();
    assert_eq!(b1["http_addr"], Value::Null, "HTTP off: null");

    // No map yet: the copy says so.
    let all: Vec<&Server> = members.iter().collect();
    let st = status(members[2].addr).unwrap();
    assert_eq!(st["ha"]["group"], "g2");
    assert_eq!(st["ha"]["map_epoch"], 0);
    let c = info(&members[0])["cluster"].clone();
    assert_eq!(
        c,
        json!({"name": "cm", "group": "g1", "map_epoch": 0, "slots_owned": 0, "state": "fail"})
    );

    // CLUSTER_CREATE's etcd work: every group with a primary, in name order.
    let rt = runtime();
    let client = client_of(&etcd);
    let ck = ClusterKeys::new("cm");
    let created = rt
        .block_on(create_in_etcd(&client, &ck, None, Duration::from_secs(5)))
        .unwrap();
    let since = Instant::now();
    assert_eq!(created.map.groups, vec!["g1", "g2"]);
    assert_eq!(created.map.map_epoch, 1);
    copies(&all, since, COPY_WITHIN, |c| {
        c["map_epoch"] == 1 && c["slots_owned"] == 8192 && c["state"] == "ok"
    });
    let st = status(members[1].addr).unwrap();
    assert_eq!(
        (st["ha"]["group"].clone(), st["ha"]["map_epoch"].clone()),
        (json!("g1"), json!(1))
    );
    let again = rt.block_on(create_in_etcd(&client, &ck, None, Duration::from_secs(1)));
    assert!(
        matches!(again, Err(ClusterError::Exists { map_epoch: 1 })),
        "{again:?}"
    );

    // An operator's write of the map reaches every copy within 1 s too.
    let moved = created.map.with_range_moved(0, 99, "g2").unwrap();
    let text = String::from_utf8(moved.to_bytes()).unwrap();
    etcdctl(&etcd, &["put", "/smdb/cm/map", &text]);
    let since = Instant::now();
    copies(&all[..2], since, COPY_WITHIN, |c| {
        c["map_epoch"] == 2 && c["slots_owned"] == 8092
    });
    copies(&all[2..], since, COPY_WITHIN, |c| c["slots_owned"] == 8292);

    // A map that breaks a rule (a gap) is reported, never served.
    let broken = r#"{"map_epoch":3,"groups":["g1","g2"],"slots":[[0,99,"g2"],[200,16383,"g1"]]}"#;
    etcdctl(&etcd, &["put", "/smdb/cm/map", broken]);
    let since = Instant::now();
    copies(&all, since, COPY_WITHIN, |c| {
        c["map_epoch"] == 0 && c["state"] == "fail"
    });
    assert!(members[0].log().contains("the map in etcd is refused"));
    etcdctl(&etcd, &["put", "/smdb/cm/map", &text]);

    // Adding a group waits for its primary and names it when there is none.
    let no = rt.block_on(add_group_in_etcd(
        &client,
        &ck,
        "g3",
        Duration::from_millis(300),
    ));
    assert!(
        matches!(&no, Err(ClusterError::NoPrimary { groups }) if groups == &["g3".to_string()]),
        "{no:?}"
    );
    let same = rt
        .block_on(add_group_in_etcd(
            &client,
            &ck,
            "g2",
            Duration::from_secs(1),
        ))
        .unwrap();
    assert!(!same.added, "g2 is in the map already");
    assert_eq!(same.map.map_epoch, 2);
}

#[test]
fn create_refuses_a_standalone_group_s_name_and_names_groups_without_a_primary() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let rt = runtime();
    let client = client_of(&etcd);
    etcdctl(&etcd, &["put", "/smdb/solo/leader", "{}"]);
    let solo = rt.block_on(create_in_etcd(
        &client,
        &ClusterKeys::new("solo"),
        Some(vec!["g1".into()]),
        Duration::from_secs(1),
    ));
    assert!(
        matches!(solo, Err(ClusterError::NotACluster { .. })),
        "{solo:?}"
    );
    let ck = ClusterKeys::new("empty");
    let started = Instant::now();
    let groups = Some(vec!["gb".into(), "ga".into()]);
    let none = rt.block_on(create_in_etcd(
        &client,
        &ck,
        groups,
        Duration::from_millis(300),
    ));
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    match none {
        Err(ClusterError::NoPrimary { groups }) => assert_eq!(groups, vec!["ga", "gb"]),
        other => panic!("{other:?}"),
    }
    let got = etcdctl(&etcd, &["get", "--prefix", "--keys-only", "/smdb/empty/"]);
    assert!(got.trim().is_empty(), "nothing written: {got}");
    let bad = rt.block_on(create_in_etcd(&client, &ck, Some(vec![]), Duration::ZERO));
    assert!(matches!(bad, Err(ClusterError::Map(_))), "{bad:?}");
    assert!(ClusterMap::create(&["x".into()]).is_ok());
}

#[test]
fn a_second_live_process_with_a_node_id_of_another_group_exits_1() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (first, _d) = Server::start(&cluster_member(&etcd, "dupc", "same", "g1", false));
    one_primary(&[&first], Duration::from_secs(20));
    let dir = temp_dir();
    let path = dir.path().join("smdb.toml");
    let cfg = cluster_member(&etcd, "dupc", "same", "g2", false);
    let config = base_config(dir.path(), &cfg);
    let (code, err) = exit_within(&path, &config, Duration::from_secs(20));
    assert_eq!(code, Some(1), "the duplicate exits 1: {err}");
    assert!(err.contains("group \"g1\""), "it names the group: {err}");
    let st = status(first.addr).unwrap();
    assert_eq!(st["role"], "primary", "the first process goes on");
}
