//! `cluster check`'s verdict (docs/cli.md, "Cluster mode"): a pure function of one
//! `CLUSTER_SHARDS` answer and each live member's `CLUSTER_INFO` (or why it could not be
//! read). Each problem is one line naming its group or member.

use serde_json::Value;
use smdb_protocol::slot::SLOT_COUNT;

/// A running move older than this is a problem.
pub const MOVE_TOO_LONG_MS: u64 = 10 * 60 * 1000;

/// Why a member's `CLUSTER_INFO` could not be read (the connection's or the server's error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoAnswer(pub String);

/// One live member of the map, as `CLUSTER_SHARDS` lists it, and what its `CLUSTER_INFO` said.
pub struct Member {
    pub group: String,
    pub node_id: String,
    pub addr: String,
    pub info: Result<Value, NoAnswer>,
}

/// Every member `CLUSTER_SHARDS` lists, info not read yet.
pub fn members(shards: &Value) -> Vec<Member> {
    let mut out = Vec::new();
    for g in shards["shards"].as_array().into_iter().flatten() {
        for n in g["nodes"].as_array().into_iter().flatten() {
            out.push(Member {
                group: text(&g["group"]),
                node_id: text(&n["node_id"]),
                addr: text(&n["addr"]),
                info: Err(NoAnswer("not asked".into())),
            });
        }
    }
    out
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Every problem found, one line each; empty when the cluster is healthy.
pub fn problems(shards: &Value, members: &[Member], now_ms: u64) -> Vec<String> {
    let mut out = coverage(shards);
    for g in shards["shards"].as_array().into_iter().flatten() {
        out.extend(primary(g));
    }
    for m in members {
        out.extend(member(shards, m));
    }
    for mv in shards["migrations"].as_array().into_iter().flatten() {
        let started = mv["started_at"].as_u64().unwrap_or(now_ms);
        if mv["state"] == "running" && now_ms.saturating_sub(started) > MOVE_TOO_LONG_MS {
            out.push(format!(
                "group {}: move {} of slots {} to {} running for {} s",
                text(&mv["from"]),
                text(&mv["id"]),
                range_text(&mv["slots"]),
                text(&mv["to"]),
                now_ms.saturating_sub(started) / 1000
            ));
        }
    }
    out
}

/// The map covers every slot exactly once.
fn coverage(shards: &Value) -> Vec<String> {
    if shards["map_epoch"].as_u64().unwrap_or(0) == 0 {
        return vec!["map: no slot map (map_epoch 0; run `cluster create`)".into()];
    }
    let mut owners: Vec<Vec<String>> = vec![Vec::new(); usize::from(SLOT_COUNT)];
    for g in shards["shards"].as_array().into_iter().flatten() {
        for r in g["slots"].as_array().into_iter().flatten() {
            let (lo, hi) = (r[0].as_u64().unwrap_or(1), r[1].as_u64().unwrap_or(0));
            for s in lo..=hi.min(u64::from(SLOT_COUNT) - 1) {
                owners[s as usize].push(text(&g["group"]));
            }
        }
    }
    let mut out = Vec::new();
    let mut s = 0;
    while s < owners.len() {
        let mut e = s;
        while e + 1 < owners.len() && owners[e + 1] == owners[s] {
            e += 1;
        }
        match owners[s].len() {
            0 => out.push(format!("map: slots {s}-{e} have no group")),
            1 => {}
            _ => out.push(format!(
                "map: slots {s}-{e} belong to several groups ({}); group {}",
                owners[s].join(", "),
                owners[s][0]
            )),
        }
        s = e + 1;
    }
    out
}

/// The group has exactly one primary.
fn primary(g: &Value) -> Option<String> {
    let name = text(&g["group"]);
    let primaries: Vec<String> = (g["nodes"].as_array().into_iter().flatten())
        .filter(|n| n["role"] == "primary")
        .map(|n| text(&n["node_id"]))
        .collect();
    match (g["primary"].is_null(), primaries.len()) {
        (true, _) => Some(format!("group {name}: no primary")),
        (false, 1) => None,
        (false, 0) => Some(format!(
            "group {name}: primary {} is not among its live members",
            text(&g["primary"])
        )),
        (false, _) => Some(format!(
            "group {name}: {} members say they are primary ({})",
            primaries.len(),
            primaries.join(", ")
        )),
    }
}

/// The member answers, with the map's epoch, in its group, owning what the map says.
fn member(shards: &Value, m: &Member) -> Vec<String> {
    let who = format!("group {} member {} ({})", m.group, m.node_id, m.addr);
    let info = match &m.info {
        Ok(i) => i,
        Err(NoAnswer(e)) => return vec![format!("{who}: CLUSTER_INFO failed: {e}")],
    };
    let mut out = Vec::new();
    if info["map_epoch"] != shards["map_epoch"] {
        out.push(format!(
            "{who}: map_epoch {}, the map's is {}",
            info["map_epoch"], shards["map_epoch"]
        ));
    }
    if info["my_group"].as_str() != Some(m.group.as_str()) {
        out.push(format!("{who}: says it is in group {}", info["my_group"]));
    }
    let of_group = (shards["shards"].as_array().into_iter().flatten())
        .find(|g| g["group"].as_str() == Some(m.group.as_str()))
        .map_or(Value::Null, |g| g["slots"].clone());
    if info["my_slots"] != of_group {
        out.push(format!(
            "{who}: owns {}, the map says {}",
            info["my_slots"], of_group
        ));
    }
    out
}

fn range_text(r: &Value) -> String {
    format!("{}-{}", r[0], r[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shards() -> Value {
        json!({"map_epoch": 2, "shards": [
            {"group": "g1", "slots": [[0, 8191]], "primary": "a",
             "nodes": [{"node_id": "a", "addr": "h:1", "role": "primary"}]},
            {"group": "g2", "slots": [[8192, 16383]], "primary": "b",
             "nodes": [{"node_id": "b", "addr": "h:2", "role": "primary"}]}],
            "migrations": []})
    }

    fn healthy(shards: &Value) -> Vec<Member> {
        let mut ms = members(shards);
        for m in &mut ms {
            let slots = if m.group == "g1" {
                json!([[0, 8191]])
            } else {
                json!([[8192, 16383]])
            };
            m.info = Ok(json!({"map_epoch": 2, "my_group": m.group, "my_slots": slots}));
        }
        ms
    }

    #[test]
    fn a_healthy_cluster_has_no_problem() {
        let s = shards();
        assert_eq!(problems(&s, &healthy(&s), 0), Vec::<String>::new());
    }

    #[test]
    fn each_problem_names_its_group_or_member() {
        let mut s = shards();
        s["shards"][1]["primary"] = Value::Null;
        s["shards"][0]["slots"] = json!([[0, 8000]]);
        s["migrations"] = json!([{"id": "m1", "slots": [5, 6], "from": "g1", "to": "g2",
                                 "state": "running", "started_at": 0}]);
        let mut ms = healthy(&s);
        ms[0].info = Ok(json!({"map_epoch": 1, "my_group": "g1", "my_slots": [[0, 8191]]}));
        ms[1].info = Err(NoAnswer("connection refused".into()));
        let p = problems(&s, &ms, MOVE_TOO_LONG_MS + 1000);
        assert_eq!(p.len(), 6, "{p:#?}");
        assert_eq!(p[0], "map: slots 8001-8191 have no group");
        assert_eq!(p[1], "group g2: no primary");
        assert!(
            p[2].starts_with("group g1 member a (h:1): map_epoch 1"),
            "{p:?}"
        );
        assert!(p[3].starts_with("group g1 member a (h:1): owns"), "{p:?}");
        assert!(p[4].starts_with("group g2 member b (h:2): CLUSTER_INFO failed"));
        assert!(
            p[5].starts_with("group g1: move m1 of slots 5-6 to g2"),
            "{p:?}"
        );
    }

    #[test]
    fn no_map_is_one_problem() {
        let p = problems(&json!({"map_epoch": 0, "shards": []}), &[], 0);
        assert_eq!(p.len(), 1);
    }
}
