//! FIND_INSTANCES on one shard: instances of a machine whose declared indexes match every
//! condition, in id order after a cursor (docs/queries.md).
//!
//! Each condition becomes key intervals of its index (`indexes::key`): an exact value or each
//! value of an `in` one interval whose entries are in id order; a range one interval ordered by
//! value. One condition drives the walk (an exact one first, then an `in`, then a range); the
//! others, the state and the version are checked on each candidate's record, by the same
//! encoded comparison the index uses. An id-ordered driver is merged by id and stops after
//! `limit + 1` matches: O((limit + rejected candidates) × log n). A range driver visits every
//! entry in its interval and keeps the `limit + 1` smallest ids: O(entries in the range).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::ops::Bound;

use serde_json::{Map, Value};
use smdb_protocol::codes::quote;

use super::context::Context;
use super::definition::IndexPath;
use super::indexes::{self, PAST_IDS};
use super::instance::InstanceRecord;
use super::names::NameId;
use super::ops::rejections;
use super::scan::trimmed;
use super::Engine;
use crate::{ErrorCode, Rejection};

/// Values in one `in` condition: each is one walk of its index per page.
pub const IN_VALUES_MAX: usize = 100;

/// A validated FIND_INSTANCES request as one shard runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct FindQuery {
    pub machine: String,
    /// (path as written, `ctx.<path>`, and its condition), at least one.
    pub conditions: Vec<(String, Condition)>,
    pub state: Option<String>,
    /// The last id of the previous page.
    pub after: Option<String>,
    pub limit: usize,
    pub include_context: bool,
}

/// One `where` condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Equal to a scalar (numbers as numbers: 1 equals 1.0).
    Eq(Value),
    /// Equal to one of these scalars.
    In(Vec<Value>),
    /// Between bounds of one type, number or string: (value, inclusive).
    Range {
        low: Option<(Value, bool)>,
        high: Option<(Value, bool)>,
    },
}

/// One shard's page of FIND_INSTANCES, in id order.
#[derive(Debug, Clone, PartialEq)]
pub struct FindPage {
    pub instances: Vec<Value>,
    /// True when more matches exist after the last one returned.
    pub more: bool,
    /// The machine's versions searched: those declaring every `where` key.
    pub versions: Vec<u32>,
}

fn bad(message: impl Into<String>) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

fn scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

impl Condition {
    /// A `where` member's value: a scalar, `{"in": [..]}`, or any of `gt`, `gte`, `lt`, `lte`.
    pub fn parse(path: &str, v: &Value) -> Result<Condition, Rejection> {
        let Value::Object(ops) = v else {
            return match scalar(v) {
                true => Ok(Condition::Eq(v.clone())),
                false => Err(bad(format!("where `{path}`: an array is not a condition"))),
            };
        };
        if let Some(list) = ops.get("in") {
            return Condition::parse_in(path, ops, list);
        }
        Condition::parse_range(path, ops)
    }

    fn parse_in(
        path: &str,
        ops: &Map<String, Value>,
        list: &Value,
    ) -> Result<Condition, Rejection> {
        let Value::Array(values) = list else {
            return Err(bad(format!("where `{path}`: `in` takes a list of values")));
        };
        if ops.len() > 1 {
            return Err(bad(format!("where `{path}`: `in` stands alone")));
        }
        if values.len() > IN_VALUES_MAX || !values.iter().all(scalar) {
            return Err(bad(format!(
                "where `{path}`: `in` takes 0 to {IN_VALUES_MAX} scalar values"
            )));
        }
        Ok(Condition::In(values.clone()))
    }

    fn parse_range(path: &str, ops: &Map<String, Value>) -> Result<Condition, Rejection> {
        let (mut low, mut high) = (None, None);
        for (op, bound) in ops {
            let (slot, inclusive) = match op.as_str() {
                "gt" => (&mut low, false),
                "gte" => (&mut low, true),
                "lt" => (&mut high, false),
                "lte" => (&mut high, true),
                _ => {
                    return Err(bad(format!(
                        "where `{path}`: unknown operator `{op}` (in, gt, gte, lt, lte)"
                    )))
                }
            };
            if !matches!(bound, Value::Number(_) | Value::String(_)) {
                return Err(bad(format!(
                    "where `{path}`: `{op}` takes a number or a string"
                )));
            }
            if slot.replace((bound.clone(), inclusive)).is_some() {
                return Err(bad(format!(
                    "where `{path}`: two lower or two upper bounds"
                )));
            }
        }
        let same_type = match (&low, &high) {
            (Some((a, _)), Some((b, _))) => a.is_number() == b.is_number(),
            (None, None) => return Err(bad(format!("where `{path}`: an empty condition"))),
            _ => true,
        };
        if !same_type {
            return Err(bad(format!(
                "where `{path}`: both bounds must be numbers or strings"
            )));
        }
        Ok(Condition::Range { low, high })
    }

    /// The key intervals `[low, high)` of the index entries this condition matches.
    fn intervals(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let exact = |v: &Value| {
            let low = indexes::encoded(v)?;
            let mut high = low.clone();
            high.push(PAST_IDS);
            Some((low, high))
        };
        match self {
            Condition::Eq(v) => exact(v).into_iter().collect(),
            Condition::In(values) => {
                let mut runs: Vec<_> = values.iter().filter_map(exact).collect();
                runs.sort();
                runs.dedup();
                runs
            }
            Condition::Range { low, high } => {
                let typed = low.as_ref().or(high.as_ref()).map(|(v, _)| v);
                let Some(typed) = typed else {
                    return Vec::new();
                };
                let from = match low {
                    Some((v, inclusive)) => past(v, !inclusive),
                    None => indexes::type_start(typed),
                };
                let to = match high {
                    Some((v, inclusive)) => past(v, *inclusive),
                    None => indexes::type_end(typed),
                };
                vec![(from, to)]
            }
        }
    }

    /// Whether its intervals' entries come in id order (one value each).
    fn by_id(&self) -> bool {
        !matches!(self, Condition::Range { .. })
    }
}

/// The key where entries of values above `v` begin (`past_v`) or where those of `v` begin.
fn past(v: &Value, past_v: bool) -> Vec<u8> {
    let mut key = indexes::encoded(v).unwrap_or_default();
    if past_v {
        key.push(PAST_IDS);
    }
    key
}

/// A condition ready to run: its index path and intervals.
pub(super) struct Compiled {
    path: IndexPath,
    intervals: Vec<(Vec<u8>, Vec<u8>)>,
    by_id: bool,
}

impl Compiled {
    /// `conditions` compiled; `BAD_REQUEST` for a path that is not `ctx.<path>`.
    pub(super) fn all(conditions: &[(String, Condition)]) -> Result<Vec<Compiled>, Rejection> {
        (conditions.iter())
            .map(|(path, condition)| {
                Ok(Compiled {
                    path: IndexPath::parse(path).map_err(|e| bad(e.reason))?,
                    intervals: condition.intervals(),
                    by_id: condition.by_id(),
                })
            })
            .collect()
    }

    fn matches(&self, key: &[u8]) -> bool {
        (self.intervals.iter()).any(|(low, high)| key >= low.as_slice() && key < high.as_slice())
    }

    /// Whether instance `id` with context `ctx` meets the condition (its entry, as the index
    /// would hold it, lies in an interval).
    pub(super) fn holds(&self, ctx: &Context, id: &str) -> bool {
        indexes::entry_of(&self.path, ctx, id).is_some_and(|key| self.matches(key.bytes()))
    }
}

/// `where` conditions compiled once for a walk over any context path (SCAN_INSTANCES,
/// MIGRATE_INSTANCES, DELETE_INSTANCES): the comparison FIND's indexes make.
pub struct Matcher(Vec<Compiled>);

impl Matcher {
    /// `BAD_REQUEST` for a path that is not `ctx.<path>`.
    pub fn new(conditions: &[(String, Condition)]) -> Result<Matcher, Rejection> {
        Compiled::all(conditions).map(Matcher)
    }

    /// Whether instance `id` with context `ctx` meets every condition.
    pub(super) fn holds(&self, ctx: &Context, id: &str) -> bool {
        self.0.iter().all(|c| c.holds(ctx, id))
    }
}

impl Engine {
    /// FIND_INSTANCES on this shard (module doc).
    pub fn find_instances(&self, q: &FindQuery) -> Result<FindPage, Rejection> {
        let versions = self.searched_versions(q)?;
        let mut page = FindPage {
            instances: Vec::new(),
            more: false,
            versions: versions.iter().copied().collect(),
        };
        let (Some(machine), state) = (self.names.get_id(&q.machine), q.state.as_deref()) else {
            return Ok(page);
        };
        let state = match state.map(|s| self.names.get_id(s)) {
            Some(None) => return Ok(page),
            Some(Some(id)) => Some(id),
            None => None,
        };
        let mut compiled = Compiled::all(&q.conditions)?;
        if compiled.is_empty() {
            return Err(bad("where needs at least one condition"));
        }
        // The driver: an id-ordered condition with the fewest intervals, else the first range.
        compiled.sort_by_key(|c| (!c.by_id, c.intervals.len()));
        let filter = Filter {
            engine: self,
            versions: &versions,
            state,
            others: &compiled[1..],
        };
        let keep = q.limit.saturating_add(1);
        let ids = match compiled[0].by_id {
            true => self.walk_by_id(machine, &compiled[0], q.after.as_deref(), keep, &filter),
            false => self.walk_range(machine, &compiled[0], q.after.as_deref(), keep, &filter),
        };
        page.more = ids.len() > q.limit;
        for id in ids.into_iter().take(q.limit) {
            if let Some(json) = self.instance_json(id) {
                page.instances.push(trimmed(json, q.include_context));
            }
        }
        Ok(page)
    }

    /// The versions of `q.machine` that declare every `where` key; `BAD_REQUEST` naming the
    /// index to declare when none does, `MACHINE_NOT_FOUND` for an unknown machine.
    fn searched_versions(&self, q: &FindQuery) -> Result<BTreeSet<u32>, Rejection> {
        let Some(versions) = self.catalog.numbered_versions(&q.machine) else {
            return Err(rejections::machine_not_found(&q.machine, None));
        };
        let mut searched = BTreeSet::new();
        let mut missing = None;
        for (version, stored) in versions {
            let declared = stored.compiled.indexes();
            let lacking = (q.conditions.iter())
                .find(|(path, _)| !declared.iter().any(|d| d.declared == *path));
            match lacking {
                None => {
                    searched.insert(version);
                }
                Some((path, _)) => missing = Some(path.clone()),
            }
        }
        if searched.is_empty() {
            let missing = missing.unwrap_or_default();
            let (machine, index) = (quote(&q.machine), quote(&missing));
            let message = format!(
                "no version of machine `{machine}` declares the index `{index}`: add it to the \
                 definition's \"indexes\", or use SCAN_INSTANCES"
            );
            return Err(bad(message).with("machine", machine).with("index", index));
        }
        Ok(searched)
    }

    /// Merges the driver's id-ordered intervals by id, keeping the first `keep` ids that pass.
    fn walk_by_id<'a>(
        &'a self,
        machine: NameId,
        driver: &'a Compiled,
        after: Option<&str>,
        keep: usize,
        filter: &Filter<'a>,
    ) -> Vec<&'a str> {
        let fields = &self.indexes.fields;
        let path = driver.path.declared.as_str();
        let starts: Vec<Vec<u8>> = (driver.intervals.iter())
            .map(|(low, _)| [low.as_slice(), after.unwrap_or("").as_bytes()].concat())
            .collect();
        let mut runs: Vec<_> = (driver.intervals.iter())
            .zip(&starts)
            .map(|((_, high), start)| {
                let low = match after {
                    Some(_) => Bound::Excluded(start.as_slice()),
                    None => Bound::Included(start.as_slice()),
                };
                fields.range(machine, path, low, Bound::Excluded(high.as_slice()))
            })
            .collect();
        // Each run's next instance by id (the table's copy: a run lends its key only until it
        // moves on), its record in `heads`.
        let mut heap: BinaryHeap<Reverse<(&'a str, usize)>> = BinaryHeap::new();
        let mut heads = Vec::with_capacity(runs.len());
        for (i, run) in runs.iter_mut().enumerate() {
            let head = next_record(run, filter);
            heap.extend(head.map(|r| Reverse((r.instance.id.as_str(), i))));
            heads.push(head);
        }
        let mut ids = Vec::new();
        while let Some(Reverse((id, i))) = heap.pop() {
            if heads[i].is_some_and(|record| filter.holds(record)) {
                ids.push(id);
                if ids.len() == keep {
                    break;
                }
            }
            heads[i] = next_record(&mut runs[i], filter);
            heap.extend(heads[i].map(|r| Reverse((r.instance.id.as_str(), i))));
        }
        ids
    }

    /// Visits every entry of the driver's range, keeping the `keep` smallest passing ids.
    fn walk_range<'a>(
        &'a self,
        machine: NameId,
        driver: &'a Compiled,
        after: Option<&str>,
        keep: usize,
        filter: &Filter<'a>,
    ) -> Vec<&'a str> {
        let fields = &self.indexes.fields;
        let mut heap: BinaryHeap<&str> = BinaryHeap::new();
        for (low, high) in &driver.intervals {
            let mut range = fields.range(
                machine,
                &driver.path.declared,
                Bound::Included(low.as_slice()),
                Bound::Excluded(high.as_slice()),
            );
            while let Some(key) = range.next_key() {
                let Some(id) = indexes::id_of(key) else {
                    continue;
                };
                let wanted = after.is_none_or(|a| id > a)
                    && (heap.len() < keep || heap.peek().is_some_and(|max| id < *max));
                if let Some(id) = wanted.then(|| filter.passing(id)).flatten() {
                    heap.push(id);
                    if heap.len() > keep {
                        heap.pop();
                    }
                }
            }
        }
        heap.into_sorted_vec()
    }
}

/// The instance of `run`'s next entry (None at the run's end). An entry always has its
/// instance; one without would be passed over.
fn next_record<'a>(
    run: &mut indexes::Range<'_>,
    filter: &Filter<'a>,
) -> Option<&'a InstanceRecord> {
    loop {
        let id = indexes::id_of(run.next_key()?)?;
        if let Some(record) = filter.engine.instances.get(id) {
            return Some(record);
        }
    }
}

/// What a candidate must also hold: a searched version, the state, the other conditions.
struct Filter<'a> {
    engine: &'a Engine,
    versions: &'a BTreeSet<u32>,
    state: Option<NameId>,
    others: &'a [Compiled],
}

impl<'a> Filter<'a> {
    /// The table's copy of `id` when its instance passes.
    fn passing(&self, id: &str) -> Option<&'a str> {
        let record = self.engine.instances.get(id)?;
        self.holds(record).then_some(record.instance.id.as_str())
    }

    fn holds(&self, record: &InstanceRecord) -> bool {
        let instance = &record.instance;
        let names = &self.engine.names;
        self.versions.contains(&instance.version)
            && self
                .state
                .is_none_or(|s| names.get_id(&instance.state) == Some(s))
            && self
                .others
                .iter()
                .all(|c| c.holds(&instance.context, &instance.id))
    }
}
