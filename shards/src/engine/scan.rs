//! SCAN_INSTANCES on one shard, one slice at a time: a machine's instances in id order after a
//! cursor (from the placement index), each tested against `where` conditions on any context
//! path, by the same comparison FIND uses (docs/queries.md). A slice examines at most the
//! budget the caller gives; the shard runtime runs slices with a yield between them.

use serde_json::Value;

use super::find::Matcher;
use super::Engine;
use crate::Rejection;

/// A SCAN_INSTANCES request takes FIND's params: `conditions` may be empty (every instance
/// matches) and name any context path; `after` is the last id the previous call examined,
/// `limit` the matches per call.
pub type ScanQuery = super::FindQuery;

/// One slice of a scan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanSlice {
    /// Matching instances, in id order.
    pub instances: Vec<Value>,
    /// Instances examined.
    pub examined: usize,
    /// The last id examined, when instances past it remain to examine (None: the walk is done).
    pub through: Option<String>,
}

impl Engine {
    /// Examines at most `budget` instances of `q.machine` after `after` (and `q.state`),
    /// stopping early once `want` of them match.
    pub fn scan_slice(
        &self,
        q: &ScanQuery,
        after: Option<&str>,
        budget: usize,
        want: usize,
    ) -> Result<ScanSlice, Rejection> {
        let matcher = Matcher::new(&q.conditions)?;
        let mut slice = ScanSlice::default();
        let Some(filter) = self.machine_groups(&q.machine, q.state.as_deref()) else {
            return Ok(slice);
        };
        let (ids, more) = self.indexes.placement.page(filter, after, budget);
        let listed = ids.len();
        let mut last = None;
        for id in ids {
            slice.examined += 1;
            last = Some(id);
            let Some(record) = self.instances.get(id) else {
                continue;
            };
            let instance = &record.instance;
            if matcher.holds(&instance.context, id) {
                if let Some(json) = self.instance_json(id) {
                    slice.instances.push(trimmed(json, q.include_context));
                }
                if slice.instances.len() >= want {
                    break;
                }
            }
        }
        if more || slice.examined < listed {
            slice.through = last.map(str::to_owned);
        }
        Ok(slice)
    }
}

/// An instance's JSON without its context unless asked for.
pub(crate) fn trimmed(mut json: Value, include_context: bool) -> Value {
    if let (false, Some(map)) = (include_context, json.as_object_mut()) {
        map.remove("context");
    }
    json
}
