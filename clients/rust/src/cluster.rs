//! Cluster mode on the client side (docs/cluster.md, "Clients"): which ops route by slot, the
//! slot map a client keeps (read from `CLUSTER_SHARDS`), and what a cluster refusal asks of it.
//! No socket here: the blocking client (`blocking::cluster`) drives it.

use std::time::{Duration, Instant};

use serde_json::Value;
use smdb_protocol::op::{Op, Route};
pub use smdb_protocol::slot::{crc16_xmodem, routing_key, slot_of, SLOT_COUNT};

use crate::error::{Code, Error};
use crate::ops::Retry;
use crate::retry::{next_step, Next, RetryPolicy, Stage};

/// A request follows at most this many `MOVED` (or map changes) before it fails with the last
/// error (docs/cluster.md, "Clients").
pub const MAX_REDIRECTS: u32 = 5;
/// The map is read again at most once per this long.
pub const REFRESH_EVERY: Duration = Duration::from_millis(100);
/// The first wait of a routed request that backs off (`TRYAGAIN`, a group without a primary,
/// a lost primary); it doubles up to the policy's `max_backoff`.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The id an instance op routes by, as the server picks it (`ops::route::route_key`):
/// `instance_id`, else `id`. `None` for ops that do not route by instance (they go to the
/// seed connection).
pub fn route_key(op: &str, params: &Value) -> Option<String> {
    let op = Op::parse(op)?;
    if op.facts().route != Route::Instance {
        return None;
    }
    params
        .get("instance_id")
        .or_else(|| params.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Which group primary serves each slot, as one `CLUSTER_SHARDS` answer had it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotMap {
    /// 0 before a map was read.
    pub map_epoch: u64,
    /// `(lo, hi, primary address)` ranges by `lo`; no address when the group has no primary.
    ranges: Vec<(u16, u16, Option<String>)>,
    /// Every member's address, of every group: where the map is read when the seed is gone.
    nodes: Vec<String>,
}

impl SlotMap {
    /// The map of a `CLUSTER_SHARDS` result (`shards: [{group, slots, primary, nodes}]`; the
    /// primary is a node id, its address the node's `addr`).
    pub fn from_shards(shards: &Value) -> SlotMap {
        let (mut ranges, mut nodes) = (Vec::new(), Vec::new());
        for g in shards["shards"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let each = g["nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            nodes.extend(
                each.iter()
                    .filter_map(|n| n["addr"].as_str().map(str::to_string)),
            );
            let primary = g["primary"].as_str().and_then(|p| {
                g["nodes"]
                    .as_array()?
                    .iter()
                    .find(|n| n["node_id"].as_str() == Some(p))?["addr"]
                    .as_str()
                    .map(str::to_string)
            });
            for r in g["slots"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                let bound = |i: usize| r[i].as_u64().and_then(|s| u16::try_from(s).ok());
                if let (Some(lo), Some(hi)) = (bound(0), bound(1)) {
                    ranges.push((lo, hi, primary.clone()));
                }
            }
        }
        ranges.sort_by_key(|r| r.0);
        SlotMap {
            map_epoch: shards["map_epoch"].as_u64().unwrap_or(0),
            ranges,
            nodes,
        }
    }

    /// The address of the primary serving `slot`, when the map names one.
    pub fn primary_of(&self, slot: u16) -> Option<&str> {
        let i = self
            .ranges
            .partition_point(|r| r.0 <= slot)
            .checked_sub(1)?;
        let (_, hi, addr) = &self.ranges[i];
        (slot <= *hi).then_some(addr.as_deref()).flatten()
    }

    /// Every primary address of the map, each once.
    pub fn primaries(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.ranges.iter().filter_map(|r| r.2.as_deref()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl SlotMap {
    /// Every member's address the map named (live members of every group).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

/// Rate limit of map reads: at most one per `REFRESH_EVERY`.
#[derive(Debug, Default)]
pub struct Refresh {
    last: Option<Instant>,
}

impl Refresh {
    /// True (and the clock restarts) when a read is due.
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < REFRESH_EVERY => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

/// What a failed routed request asks of a cluster client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `MOVED`: resend at once to this address, and refresh the map.
    Moved(String),
    /// `READ_ONLY_MODE` naming the group's primary: resend there at once.
    Follow(String),
    /// Nothing executed (`TRYAGAIN`, another retryable refusal): back off, resend to the same
    /// primary.
    Wait,
    /// The group's primary is gone or unknown (`CLUSTERDOWN`, `NO_PRIMARY`, a lost or refused
    /// connection): back off, forget the connection, read the map again and resend to the
    /// primary it names.
    Refresh,
    /// Report the error.
    Fail,
}

/// The cluster step for error `e` of a request of safety `retry` that failed at `stage` (the
/// primaries' connections retry nothing themselves: the routing paces every retry, so a lost
/// primary is left for the map's next one instead of being retried in place).
pub fn step(e: &Error, retry: Retry, stage: Stage) -> Step {
    if let Error::Server { code, details, .. } = e {
        if code.known() == Some(Code::Moved) {
            return match details["addr"].as_str() {
                Some(a) if !a.is_empty() => Step::Moved(a.to_string()),
                _ => Step::Fail,
            };
        }
    }
    match next_step(e, retry, stage) {
        Next::Fail => Step::Fail,
        Next::Redirect(p) => Step::Follow(p),
        Next::Again => Step::Wait,
        Next::Elsewhere => Step::Refresh,
    }
}

/// The wait before routed try `attempt + 1`: `FIRST_BACKOFF` doubling, capped at the
/// policy's `max_backoff`.
pub fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let shift = attempt.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1u32 << shift)
        .min(policy.max_backoff)
}

/// The options of one group primary's connection: the seed's, retrying nothing (the routing
/// paces retries, see `step`).
pub fn member_policy() -> RetryPolicy {
    RetryPolicy::none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instance_ops_route_by_instance_id_then_id() {
        let k = |op, p| route_key(op, &p);
        assert_eq!(k("GET_INSTANCE", json!({"id": "a"})), Some("a".into()));
        assert_eq!(
            k("APPLY_EVENT", json!({"instance_id": "b", "event": "go"})),
            Some("b".into())
        );
        assert_eq!(k("PUT_MACHINE", json!({"machine": "m"})), None);
        assert_eq!(k("LIST_INSTANCES", json!({})), None);
        assert_eq!(k("NO_SUCH_OP", json!({"id": "a"})), None);
    }

    #[test]
    fn the_map_names_each_slot_s_primary() {
        let shards = json!({"map_epoch": 3, "shards": [
            {"group": "g1", "slots": [[0, 99], [200, 16383]], "primary": "n1",
             "nodes": [{"node_id": "n1", "addr": "h1:1"}, {"node_id": "n2", "addr": "h2:1"}]},
            {"group": "g2", "slots": [[100, 199]], "primary": null, "nodes": []}]});
        let m = SlotMap::from_shards(&shards);
        assert_eq!(m.map_epoch, 3);
        assert_eq!(m.primary_of(0), Some("h1:1"));
        assert_eq!(m.primary_of(99), Some("h1:1"));
        assert_eq!(m.primary_of(100), None);
        assert_eq!(m.primary_of(16383), Some("h1:1"));
        assert_eq!(m.primaries(), vec!["h1:1"]);
        assert_eq!(SlotMap::from_shards(&json!({})).primary_of(5), None);
    }

    #[test]
    fn a_lost_primary_rereads_the_map_and_only_safe_writes_resend_after_sending() {
        let w = |v| Error::from_wire(&v);
        let moved = w(json!({"code":"MOVED","retryable":false,"details":{"addr":"h:2"}}));
        assert_eq!(
            step(&moved, Retry::Unsafe, Stage::Sent),
            Step::Moved("h:2".into())
        );
        let frozen = w(json!({"code":"TRYAGAIN","retryable":true,"details":{"slot":3}}));
        assert_eq!(step(&frozen, Retry::Unsafe, Stage::Sent), Step::Wait);
        let down = w(json!({"code":"CLUSTERDOWN","retryable":true,"details":{}}));
        assert_eq!(step(&down, Retry::Unsafe, Stage::Sent), Step::Refresh);
        let ro = w(json!({"code":"READ_ONLY_MODE","retryable":false,"details":{"primary":"p:1"}}));
        assert_eq!(
            step(&ro, Retry::Unsafe, Stage::Sent),
            Step::Follow("p:1".into())
        );
        // A refused connection sent nothing; a lost one may have executed the request.
        let lost = Error::eof("gone");
        assert_eq!(step(&lost, Retry::Unsafe, Stage::BeforeSend), Step::Refresh);
        assert_eq!(step(&lost, Retry::Safe, Stage::Sent), Step::Refresh);
        assert_eq!(step(&lost, Retry::Unsafe, Stage::Sent), Step::Fail);
        let conflict = w(json!({"code":"CONFLICT","retryable":false}));
        assert_eq!(step(&conflict, Retry::Safe, Stage::Sent), Step::Fail);
        let p = RetryPolicy::failover();
        let waits: Vec<u128> = (1..10).map(|a| backoff(&p, a).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    #[test]
    fn refreshes_are_rate_limited() {
        let mut r = Refresh::default();
        assert!(r.due());
        assert!(!r.due());
    }
}
