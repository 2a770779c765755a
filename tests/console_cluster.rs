//! The console's cluster view (docs/http.md, "Console"; docs/cluster.md) in a real headless
//! Chromium against real processes: one etcd and three groups of two members each, the map
//! created (Redis's split: 0–5460, 5461–10922, 10923–16383). The nav offers the view; its slot
//! bar has one segment per group with that group's slot count, the legend names the three, each
//! group's card names its primary and both members, a finished move shows with its slots and
//! time, and the 2 s refresh drops a follower that died once
//! its member key is gone. A standalone server's console has no cluster nav entry.
//! The screenshot goes to `target/tmp/console/cluster.png`.
//!
//! Without Chromium or etcd this test fails with the line that installs them: it never passes
//! silently.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::cdp::Browser;
use common::etcd::Etcd;
use common::ha::{one_primary, serial};
use common::http::Http;
use common::{cluster, temp_dir, Server};
use serde_json::{json, Value};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];
const PER_GROUP: usize = 2;
const WAIT: Duration = Duration::from_secs(15);

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console")
}

/// `cluster::start_groups` with the HTTP listener on (and the console) on every member.
fn start_groups(etcd: &Etcd) -> (Vec<tempfile::TempDir>, Vec<Server>, Vec<usize>) {
    let n = GROUPS.len() * PER_GROUP;
    let dirs: Vec<_> = (0..n).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..n)
        .map(|i| {
            let group = GROUPS[i / PER_GROUP];
            let node = format!("{group}{}", i % PER_GROUP);
            let cfg = cluster::member(etcd, "console", &node, group) + "[http]\n";
            Server::start_in(dirs[i].path(), &cfg).expect("a member starts")
        })
        .collect();
    let primaries = (0..GROUPS.len())
        .map(|g| {
            let of: Vec<&Server> = members[g * PER_GROUP..(g + 1) * PER_GROUP].iter().collect();
            g * PER_GROUP + one_primary(&of, Duration::from_secs(20))
        })
        .collect();
    (dirs, members, primaries)
}

fn node_of(i: usize) -> String {
    format!("{}{}", GROUPS[i / PER_GROUP], i % PER_GROUP)
}

fn origin(s: &Server) -> String {
    format!("http://{}", s.http_addr.expect("the HTTP listener"))
}

/// The bar's segments as the page draws them: `[group, lo, hi, count]`, left to right.
const SEGMENTS: &str = "[...document.querySelectorAll('#slot-bar > div')].map(d => \
    [d.dataset.group || null, +d.dataset.lo, +d.dataset.hi, +d.dataset.count])";

/// The members listed on `group`'s card: `[node, role]` each.
fn members_shown(b: &mut Browser, group: &str) -> Value {
    b.eval(&format!(
        "[...document.querySelectorAll('.group-card[data-group=\"{group}\"] tr[data-node]')]\
         .map(r => [r.dataset.node, r.children[1].textContent])"
    ))
}

#[test]
fn the_console_shows_a_cluster_of_three_groups() {
    if let Err(e) = common::cdp::chromium() {
        panic!("the console's browser test needs Chromium: {e}");
    }
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, mut members, primaries) = start_groups(&etcd);
    let created = cluster::create(&members, Duration::from_secs(5));
    assert_eq!(created["map_epoch"], 1, "{created}");

    let mut b = Browser::launch();
    let at = origin(&members[0]);
    b.navigate(&format!("{at}/#/machines"));
    b.wait_for(
        "document.querySelector('#view-title')?.textContent === 'Machines'",
        WAIT,
    );
    b.wait_for("!document.querySelector('#nav-cluster').hidden", WAIT);
    b.eval("document.querySelector('#nav-cluster').click()");
    b.wait_for(
        "document.querySelectorAll('#slot-bar .slot-seg').length === 3",
        WAIT,
    );

    // One segment per group, Redis's split, no gap.
    let expected = json!([
        ["g1", 0, 5460, 5461],
        ["g2", 5461, 10922, 5462],
        ["g3", 10923, 16383, 5461]
    ]);
    assert_eq!(b.eval(SEGMENTS), expected);
    let total: u64 = (expected.as_array().unwrap().iter())
        .map(|s| s[3].as_u64().unwrap())
        .sum();
    assert_eq!(total, 16384);
    // The same as the server's own answer.
    let mut h = Http::connect(members[0].http_addr.unwrap());
    let shards = h.get("/cluster/shards").json();
    let served: Vec<Value> = (shards["shards"].as_array().unwrap().iter())
        .map(|g| json!([g["group"], g["slots"]]))
        .collect();
    assert_eq!(
        served,
        vec![
            json!(["g1", [[0, 5460]]]),
            json!(["g2", [[5461, 10922]]]),
            json!(["g3", [[10923, 16383]]])
        ]
    );
    let legend =
        b.eval("[...document.querySelectorAll('#slot-legend li')].map(l => l.dataset.group)");
    assert_eq!(legend, json!(GROUPS));
    assert_eq!(
        b.eval("[document.querySelector('#cluster-state').textContent, document.querySelector('#cluster-epoch').textContent]"),
        json!(["ok", "1"])
    );

    // Each group's primary is named, and both its members are listed with their roles.
    for (g, group) in GROUPS.iter().enumerate() {
        let primary = node_of(primaries[g]);
        let shown = b.eval(&format!(
            "document.querySelector('.group-card[data-group=\"{group}\"] .group-primary')?.textContent"
        ));
        assert_eq!(shown, json!(primary), "{group}");
        let mut rows = members_shown(&mut b, group).as_array().unwrap().clone();
        rows.sort_by_key(|r| r[0].as_str().unwrap().to_string());
        let want: Vec<Value> = (0..PER_GROUP)
            .map(|i| {
                let node = node_of(g * PER_GROUP + i);
                let role = if node == primary {
                    "primary"
                } else {
                    "replica"
                };
                json!([node, role])
            })
            .collect();
        assert_eq!(rows, want, "{group}");
    }
    assert_eq!(
        b.eval("document.querySelector('#moves-none') !== null"),
        json!(true)
    );

    // A move of slots 100–199 from g1 to g2 (empty slots: it switches at once) shows among
    // the finished ones with its slots, groups, state and time; the map epoch moves to 2.
    let done = members[0]
        .client()
        .call(
            "CLUSTER_MOVE_SLOTS",
            json!({"slots": [100, 199], "to": "g2"}),
        )
        .expect("the move switches");
    assert_eq!(done["state"], "done", "{done}");
    let id = done["id"].as_str().unwrap().to_string();
    let row =
        format!("document.querySelector('#moves tr[data-move=\"{id}\"][data-state=\"done\"]')");
    b.wait_for(&format!("{row} !== null"), WAIT);
    let cells = b.eval(&format!(
        "[...{row}.children].slice(0, 5).map(c => c.textContent)"
    ));
    assert_eq!(cells[1], json!("100–199 (100)"));
    assert_eq!(cells[2], json!("g1 → g2"));
    assert_eq!(cells[3], json!("done"));
    let took = cells[4].as_str().unwrap();
    assert!(took.starts_with("took "), "{took}");
    b.wait_for(
        "document.querySelector('#cluster-epoch').textContent === '2'",
        WAIT,
    );
    b.screenshot(&shots().join("cluster.png"));

    // The view refreshes itself: a follower of g3 that dies leaves its card once its member
    // key's lease is gone (TTL 2 s), with no reload.
    let follower = (2 * PER_GROUP..3 * PER_GROUP)
        .find(|i| *i != primaries[2])
        .unwrap();
    let gone = node_of(follower);
    members[follower].kill();
    b.wait_for(
        &format!("document.querySelectorAll('.group-card[data-group=\"g3\"] tr[data-node]').length === 1 && !document.querySelector('tr[data-node=\"{gone}\"]')"),
        Duration::from_secs(20),
    );
    // The bar shows the moved range as g2's.
    let moved = json!([
        ["g1", 0, 99, 100],
        ["g2", 100, 199, 100],
        ["g1", 200, 5460, 5261],
        ["g2", 5461, 10922, 5462],
        ["g3", 10923, 16383, 5461]
    ]);
    assert_eq!(b.eval(SEGMENTS), moved, "the bar after the move");
}

#[test]
fn a_standalone_console_has_no_cluster_entry() {
    if let Err(e) = common::cdp::chromium() {
        panic!("the console's browser test needs Chromium: {e}");
    }
    let (s, _d) = Server::start("[http]\n");
    let at = origin(&s);
    let mut b = Browser::launch();
    b.navigate(&format!("{at}/#/machines"));
    b.wait_for(
        "document.querySelector('#view-title')?.textContent === 'Machines'",
        WAIT,
    );
    // The server's INFO has been read (the title shows) and hid the entry.
    assert_eq!(
        b.eval("document.querySelector('#nav-cluster').hidden"),
        json!(true)
    );
    let visible = b.eval(
        "[...document.querySelectorAll('nav a')].filter(a => !a.hidden).map(a => a.dataset.view)",
    );
    assert_eq!(visible, json!(["machines", "instances", "feed", "server"]));
    // Addressed by hand, the view says why there is nothing to show.
    b.navigate(&format!("{at}/#/cluster"));
    b.wait_for("document.querySelector('#not-cluster') !== null", WAIT);
}
