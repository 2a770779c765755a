//! Cluster mode on the client side (docs/cluster.md, "Clients"): which ops route by slot, the
//! slot map a client keeps (read from `CLUSTER_SHARDS`), and what a cluster refusal asks of it.
//! No socket here: the blocking client (`blocking::cluster`) drives it.

use std::time::{Duration, Instant};

use serde_json::Value;
use smdb_protocol::op::{self, Op};
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
    if op.facts().route != op::Route::Instance {
        return None;
    }
    params
        .get("instance_id")
        .or_else(|| params.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The address of a `CLUSTER_SHARDS` group's primary (its `primary` node id's `addr`), when
/// it has one.
pub fn primary_addr(g: &Value) -> Option<String> {
    let p = g["primary"].as_str()?;
    (g["nodes"].as_array()?.iter()).find(|n| n["node_id"].as_str() == Some(p))?["addr"]
        .as_str()
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
    /// Each group (by name, in order): its primary's address, and its members' addresses.
    groups: Vec<(String, Option<String>, Vec<String>)>,
}

impl SlotMap {
    /// The map of a `CLUSTER_SHARDS` result (`shards: [{group, slots, primary, nodes}]`; the
    /// primary is a node id, its address the node's `addr`).
    pub fn from_shards(shards: &Value) -> SlotMap {
        let (mut ranges, mut nodes, mut groups) = (Vec::new(), Vec::new(), Vec::new());
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
            let primary = primary_addr(g);
            let members = (each.iter())
                .filter_map(|n| n["addr"].as_str().map(str::to_string))
                .collect();
            let name = g["group"].as_str().unwrap_or_default().to_string();
            groups.push((name, primary.clone(), members));
            for r in g["slots"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                let bound = |i: usize| r[i].as_u64().and_then(|s| u16::try_from(s).ok());
                if let (Some(lo), Some(hi)) = (bound(0), bound(1)) {
                    ranges.push((lo, hi, primary.clone()));
                }
            }
        }
        ranges.sort_by_key(|r| r.0);
        groups.sort();
        SlotMap {
            map_epoch: shards["map_epoch"].as_u64().unwrap_or(0),
            ranges,
            nodes,
            groups,
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

    /// One address per group, for a call to every group: its primary's, or (no primary now)
    /// a member's, so the call waits for the group's next primary instead of leaving the group
    /// out.
    pub fn group_addrs(&self) -> Vec<&str> {
        let mut out: Vec<&str> = (self.groups.iter())
            .filter_map(|(_, p, m)| p.as_deref().or(m.first().map(String::as_str)))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The group that `addr` is a member of (its primary or another member).
    pub fn group_of(&self, addr: &str) -> Option<&str> {
        (self.groups.iter())
            .find(|(_, p, m)| p.as_deref() == Some(addr) || m.iter().any(|a| a == addr))
            .map(|(g, _, _)| g.as_str())
    }

    /// The address of `group`'s primary, when the map names one.
    pub fn primary_of_group(&self, group: &str) -> Option<&str> {
        (self.groups.iter())
            .find(|(g, _, _)| g == group)
            .and_then(|(_, p, _)| p.as_deref())
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
    /// `MOVED`: resend at once to this address (the answering member's copy was at this
    /// `map_epoch`), and refresh the map.
    Moved(String, u64),
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
                Some(a) if !a.is_empty() => {
                    Step::Moved(a.to_string(), details["map_epoch"].as_u64().unwrap_or(0))
                }
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

/// What a routed request does next, after a failure (`Route::after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Report the error.
    Fail,
    /// Resend at once to this address, after a `MOVED` (count it, refresh the map).
    Moved(String),
    /// Resend at once to this address, the primary a follower named.
    Follow(String),
    /// Back off this long, then resend to the same primary, or to the one named.
    Wait(Duration, Option<String>),
    /// Back off this long, forget the connection, read the map again, resend to its primary.
    Refresh(Duration),
}

/// One routed request's retries and redirects under the client's policy: at most
/// `MAX_REDIRECTS` `MOVED` and as many follower pointers; `policy.attempts` tries of the
/// backing-off kind. A `MOVED` from a member whose copy is older than one already heard from
/// is not followed: right after a move's switch the two groups' copies can disagree for a
/// moment, each sending the client to the other, so the request backs off and goes to the
/// owner the newer copy named.
#[derive(Debug)]
pub struct Route {
    policy: RetryPolicy,
    attempt: u32,
    redirects: u32,
    /// The newest `MOVED` heard: its copy's `map_epoch` and the owner it named.
    newest: Option<(u64, String)>,
}

impl Route {
    pub fn new(policy: RetryPolicy) -> Route {
        Route {
            policy,
            attempt: 1,
            redirects: 0,
            newest: None,
        }
    }

    /// Whether another backing-off try is allowed (a slot without a known primary waits for
    /// the map while it is).
    pub fn may_wait(&self) -> bool {
        self.attempt < self.policy.attempts
    }

    /// What follows error `e` of a request of safety `retry` that failed at `stage`.
    pub fn after(&mut self, e: &Error, retry: Retry, stage: Stage) -> Action {
        let step = step(e, retry, stage);
        if let Step::Moved(to, epoch) = &step {
            if let Some((newest, at)) = &self.newest {
                if epoch < newest && at != to {
                    let at = at.clone();
                    return self
                        .backoff()
                        .map_or(Action::Fail, |d| Action::Wait(d, Some(at)));
                }
            }
        }
        match step {
            Step::Fail => Action::Fail,
            Step::Moved(..) | Step::Follow(_) if self.redirects >= MAX_REDIRECTS => Action::Fail,
            Step::Moved(to, epoch) => {
                self.redirects += 1;
                self.newest = Some((epoch, to.clone()));
                Action::Moved(to)
            }
            Step::Follow(to) => {
                self.redirects += 1;
                Action::Follow(to)
            }
            Step::Wait => self
                .backoff()
                .map_or(Action::Fail, |d| Action::Wait(d, None)),
            Step::Refresh => self.backoff().map_or(Action::Fail, Action::Refresh),
        }
    }

    /// The next backoff, counted as a try; None when the tries are spent.
    fn backoff(&mut self) -> Option<Duration> {
        if !self.may_wait() {
            return None;
        }
        let d = backoff(&self.policy, self.attempt);
        self.attempt += 1;
        Some(d)
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
        // A call to every group: g2, with no primary and no member named, has no address.
        assert_eq!(m.group_addrs(), vec!["h1:1"]);
        assert_eq!(m.group_of("h2:1"), Some("g1"));
        assert_eq!(m.group_of("h9:1"), None);
        assert_eq!(m.primary_of_group("g1"), Some("h1:1"));
        assert_eq!(m.primary_of_group("g2"), None);
    }

    #[test]
    fn a_lost_primary_rereads_the_map_and_only_safe_writes_resend_after_sending() {
        let w = |v| Error::from_wire(&v);
        let moved = w(json!({"code":"MOVED","retryable":false,
                             "details":{"addr":"h:2","map_epoch":4}}));
        assert_eq!(
            step(&moved, Retry::Unsafe, Stage::Sent),
            Step::Moved("h:2".into(), 4)
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
    fn a_moved_from_an_older_copy_than_one_heard_is_not_followed() {
        let moved = |addr: &str, epoch: u64| {
            Error::from_wire(&json!({"code":"MOVED","retryable":false,
                                     "details":{"addr":addr,"map_epoch":epoch}}))
        };
        let mut r = Route::new(RetryPolicy::failover());
        let after = |r: &mut Route, e: &Error| r.after(e, Retry::Unsafe, Stage::Sent);
        assert_eq!(
            after(&mut r, &moved("target:1", 5)),
            Action::Moved("target:1".into())
        );
        // The target's copy still shows epoch 4: it names the source, which gave the slot up.
        assert_eq!(
            after(&mut r, &moved("source:1", 4)),
            Action::Wait(FIRST_BACKOFF, Some("target:1".into()))
        );
        assert_eq!(
            after(&mut r, &moved("other:1", 6)),
            Action::Moved("other:1".into())
        );
        // At most MAX_REDIRECTS followed.
        for i in 0..3 {
            assert!(matches!(
                after(&mut r, &moved("x:1", 7 + i)),
                Action::Moved(_)
            ));
        }
        assert_eq!(after(&mut r, &moved("y:1", 20)), Action::Fail);
    }

    #[test]
    fn refreshes_are_rate_limited() {
        let mut r = Refresh::default();
        assert!(r.due());
        assert!(!r.due());
    }
}
