//! `--cluster`: route every request to its slot's group primary, as smdb-client's cluster
//! mode does (docs/cluster.md, "Clients"), so the load measures a routing client.
//!
//! The map is read once, before the load, with `CLUSTER_SLOTS` from the seed (`--addr`), and
//! turned into a table of 16384 entries (slot -> primary). A request's slot is
//! `smdb_client::cluster::slot_of` of the id it names (smdb-client's routing function, the
//! server's too: both take it from `smdb_protocol::slot`). Each load connection is then one socket per group primary, opened
//! before the load like the plain driver's, and `--in-flight` bounds the requests
//! outstanding over all of them (smdb-client keeps one connection per primary the same way).
//! The map is not read again during a run: a run that meets `MOVED` counts it as an error
//! (no slot moves while measuring).
//!
//! A seed whose HELLO does not list the `"cluster"` feature gives no routes: the run loads the
//! seed alone, exactly as without `--cluster` (as the client behaves against a standalone
//! server).

use std::thread;

use serde_json::{json, Value};

use smdb_client::cluster::{slot_of, SLOT_COUNT};
use smdb_client::{Client, ClientTlsOptions};

use super::setup;
use super::workload::Plan;

/// Which group primary serves each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// The primaries' addresses, each once, in the order of their first range.
    pub addrs: Vec<String>,
    /// `by_slot[slot]` indexes `addrs`.
    by_slot: Vec<u16>,
    /// The map's epoch when it was read.
    pub map_epoch: u64,
}

impl Routes {
    /// The routes of a connected seed (HELLO done): `None` when the seed is not a cluster
    /// member, an error when its map does not give every slot a primary.
    pub fn load(seed: &mut Client) -> Result<Option<Routes>, String> {
        let is_cluster = seed
            .hello_result()
            .and_then(|h| h.get("features"))
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some("cluster")));
        if !is_cluster {
            return Ok(None);
        }
        let slots = seed
            .call("CLUSTER_SLOTS", json!({}))
            .map_err(|e| format!("CLUSTER_SLOTS: {e}"))?;
        Routes::from_slots(&slots).map(Some)
    }

    /// The routes of a `CLUSTER_SLOTS` result (`{map_epoch, slots: [[lo, hi, primary_addr |
    /// null, [replica_addr, ..]], ..]}`); every slot must have a primary.
    pub fn from_slots(result: &Value) -> Result<Routes, String> {
        let mut addrs: Vec<String> = Vec::new();
        let mut by_slot = vec![u16::MAX; usize::from(SLOT_COUNT)];
        for r in result["slots"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let bound = |i: usize| {
                r[i].as_u64()
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|s| *s < SLOT_COUNT)
            };
            let (Some(lo), Some(hi)) = (bound(0), bound(1)) else {
                return Err(format!("CLUSTER_SLOTS: a bad range {r}"));
            };
            let Some(addr) = r[2].as_str() else {
                return Err(format!("CLUSTER_SLOTS: slots {lo}-{hi} have no primary"));
            };
            let at = match addrs.iter().position(|a| a == addr) {
                Some(i) => i,
                None => {
                    addrs.push(addr.to_string());
                    addrs.len() - 1
                }
            };
            let at = u16::try_from(at).map_err(|_| "CLUSTER_SLOTS: too many primaries")?;
            for s in lo..=hi {
                by_slot[usize::from(s)] = at;
            }
        }
        if let Some(s) = by_slot.iter().position(|a| *a == u16::MAX) {
            return Err(format!(
                "CLUSTER_SLOTS: slot {s} belongs to no group (is the map created?)"
            ));
        }
        Ok(Routes {
            addrs,
            by_slot,
            map_epoch: result["map_epoch"].as_u64().unwrap_or(0),
        })
    }

    /// The index in `addrs` of the primary serving instance id `id`.
    pub fn index_of(&self, id: &str) -> usize {
        usize::from(self.by_slot[usize::from(slot_of(id))])
    }

    /// `index_of` for an id given as bytes (the driver's routing keys are ASCII); bytes that
    /// are not UTF-8 route as the empty id.
    pub fn index_of_key(&self, key: &[u8]) -> usize {
        self.index_of(std::str::from_utf8(key).unwrap_or(""))
    }
}

/// Pre-creates the plan's instances on their slots' primaries: one set-up connection and one
/// thread per primary, each pipelining its share (`setup::precreate_ids`).
pub fn precreate(
    routes: &Routes,
    token: Option<&str>,
    tls: Option<&ClientTlsOptions>,
    plan: &Plan,
) -> Result<(), String> {
    thread::scope(|s| {
        let workers: Vec<_> = (0..routes.addrs.len())
            .map(|g| {
                s.spawn(move || {
                    let addr = &routes.addrs[g];
                    let mut c = setup::connect(addr, token, tls, "smdb-bench-setup")?;
                    let mine =
                        (0..plan.instances).filter(|k| routes.index_of(&plan.instance_id(*k)) == g);
                    setup::precreate_ids(&mut c, plan, mine)
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| "a pre-create thread panicked".to_string())?
        })
    })
}

/// The shard count of every primary (INFO's `shards`), summed: the per-shard figure of a
/// cluster run.
pub fn shard_count(
    routes: &Routes,
    token: Option<&str>,
    tls: Option<&ClientTlsOptions>,
) -> Result<u32, String> {
    let mut total = 0;
    for addr in &routes.addrs {
        let mut c = setup::connect(addr, token, tls, "smdb-bench-setup")?;
        total += setup::shard_count(&mut c).map_err(|e| format!("{addr}: {e}"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_ranges() {
        let r = Routes::from_slots(&json!({"map_epoch": 4, "slots": [
            [0, 5460, "a:1", []], [5461, 10922, "b:2", ["c:3"]], [10923, 16383, "a:1", []]
        ]}))
        .unwrap();
        assert_eq!(r.addrs, ["a:1", "b:2"]);
        assert_eq!(r.map_epoch, 4);
        // docs/cluster.md's vectors: "hello" is slot 866, "foo" 12182, "123456789" 12739,
        // "{o-7}:pay" 340; slot 6000 is some id's.
        assert_eq!(r.index_of("hello"), 0);
        assert_eq!(r.index_of("foo"), 0);
        assert_eq!(r.index_of_key(b"{o-7}:pay"), 0);
        let in_b = (0..)
            .map(|k| format!("x{k}"))
            .find(|id| (5461..=10922).contains(&slot_of(id)))
            .unwrap();
        assert_eq!(r.index_of(&in_b), 1);
    }

    #[test]
    fn a_hole_or_a_group_without_primary_is_refused() {
        let hole = json!({"slots": [[0, 100, "a:1", []]]});
        assert!(Routes::from_slots(&hole).unwrap_err().contains("slot 101"));
        let none = json!({"slots": [[0, 16383, null, []]]});
        assert!(Routes::from_slots(&none)
            .unwrap_err()
            .contains("no primary"));
        assert!(Routes::from_slots(&json!({})).is_err());
    }
}
