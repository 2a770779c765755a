//! How `apply` moves the counters of `EngineStats`, and their snapshot form.
//!
//! `by_state` entries that fall to zero stay in the map at 0, so a metrics gauge reads 0 rather
//! than keeping a stale value for a label that vanished.

use std::hash::{Hash, Hasher};

use hashbrown::Equivalent;
use serde::{Deserialize, Serialize};

use super::names::{CountMap, Name};
use super::ops::rejections::machine_not_found;
use super::state::EngineStats;
use super::Engine;
use crate::Rejection;

/// `(machine, state)` borrowed: hashes and compares like the `(Name, Name)` key it finds
/// (a tuple hashes its fields in order, and `Arc<str>` hashes as its `str`).
struct Pair<'a>(&'a str, &'a str);

/// `(machine, from, to)` borrowed, likewise for `(Name, Name, Name)`.
struct Triple<'a>(&'a str, &'a str, &'a str);

impl Hash for Pair<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self.0, self.1).hash(h);
    }
}

impl Equivalent<(Name, Name)> for Pair<'_> {
    fn equivalent(&self, key: &(Name, Name)) -> bool {
        self.0 == &*key.0 && self.1 == &*key.1
    }
}

impl Hash for Triple<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self.0, self.1, self.2).hash(h);
    }
}

impl Equivalent<(Name, Name, Name)> for Triple<'_> {
    fn equivalent(&self, key: &(Name, Name, Name)) -> bool {
        self.0 == &*key.0 && self.1 == &*key.1 && self.2 == &*key.2
    }
}

/// Adds one to the counter `find` finds in `map`, else inserts `key()` at one: the key is
/// built (its names cloned) only the first time it is counted.
fn bump<K, Q>(map: &mut CountMap<K>, find: &Q, key: impl FnOnce() -> K)
where
    K: Hash + Eq,
    Q: Hash + Equivalent<K> + ?Sized,
{
    match map.get_mut(find) {
        Some(n) => *n += 1,
        None => {
            map.insert(key(), 1);
        }
    }
}

/// Counting never allocates once a name has been seen, and clones no name: each counter is
/// found by a borrowed key (`Pair`, `Triple`, `str`); only a first count stores interned names.
impl EngineStats {
    /// An instance was created in `state`.
    pub(crate) fn count_create(&mut self, machine: &Name, state: &Name) {
        bump(&mut self.by_state, &Pair(machine, state), || {
            (machine.clone(), state.clone())
        });
    }

    /// An event was applied; `from == to` counts as an event but not as a transition.
    pub(crate) fn count_event(&mut self, machine: &Name, from: &Name, to: &Name) {
        bump(&mut self.events_applied, &**machine, || machine.clone());
        if from == to {
            return;
        }
        bump(&mut self.transitions, &Triple(machine, from, to), || {
            (machine.clone(), from.clone(), to.clone())
        });
        self.leave(machine, from);
        bump(&mut self.by_state, &Pair(machine, to), || {
            (machine.clone(), to.clone())
        });
    }

    /// A timer applied its event.
    pub(crate) fn count_timer_fired(&mut self, machine: &Name) {
        bump(&mut self.timers_fired, &**machine, || machine.clone());
    }

    /// An instance in `state` was deleted (by its retention: `expired`).
    pub(crate) fn count_delete(&mut self, machine: &Name, state: &Name, expired: bool) {
        self.leave(machine, state);
        if expired {
            bump(&mut self.expired, &**machine, || machine.clone());
        }
    }

    /// An instance was migrated from state `from` to `to`.
    pub(crate) fn count_migrated(&mut self, machine: &Name, from: &Name, to: &Name) {
        bump(&mut self.migrated, &**machine, || machine.clone());
        if from != to {
            self.leave(machine, from);
            bump(&mut self.by_state, &Pair(machine, to), || {
                (machine.clone(), to.clone())
            });
        }
    }

    fn leave(&mut self, machine: &Name, state: &Name) {
        if let Some(n) = self.by_state.get_mut(&Pair(machine, state)) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Engine {
    /// MACHINE_STATS on this shard: instances of `machine` (every version) per state, every
    /// state of every stored version listed (at 0 when none is there). Reads the counters and
    /// the catalog only: its cost grows with the definitions, never with the instances.
    pub fn state_counts(&self, machine: &str) -> Result<Vec<(String, u64)>, Rejection> {
        let versions =
            (self.catalog.versions(machine)).ok_or_else(|| machine_not_found(machine, None))?;
        let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
        for stored in versions {
            let states = stored.definition["states"].as_array().into_iter().flatten();
            for state in states.filter_map(serde_json::Value::as_str) {
                counts.entry(state.to_string()).or_insert(0);
            }
        }
        for ((m, state), n) in &self.stats.by_state {
            if &**m == machine {
                *counts.entry(state.to_string()).or_insert(0) += n;
            }
        }
        Ok(counts.into_iter().collect())
    }
}

/// `EngineStats` with its tuple-keyed maps as sorted lists (JSON maps need string keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StatsForm {
    events_applied: Vec<(String, u64)>,
    transitions: Vec<(String, String, String, u64)>,
    by_state: Vec<(String, String, u64)>,
    timers_fired: Vec<(String, u64)>,
    /// Absent from snapshots written before migration and retention (and while all zero).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    migrated: Vec<(String, u64)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    expired: Vec<(String, u64)>,
}

/// A per-machine counter map as a sorted list.
fn listed(map: &CountMap<Name>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = map.iter().map(|(m, n)| (m.to_string(), *n)).collect();
    out.sort();
    out
}

/// A sorted list back as a per-machine counter map.
fn counted(list: Vec<(String, u64)>) -> CountMap<Name> {
    list.into_iter().map(|(m, n)| (Name::from(m), n)).collect()
}

impl From<&EngineStats> for StatsForm {
    fn from(s: &EngineStats) -> Self {
        let mut form = StatsForm {
            events_applied: s
                .events_applied
                .iter()
                .map(|(m, n)| (m.to_string(), *n))
                .collect(),
            transitions: (s.transitions.iter())
                .map(|((m, f, t), n)| (m.to_string(), f.to_string(), t.to_string(), *n))
                .collect(),
            by_state: (s.by_state.iter())
                .map(|((m, st), n)| (m.to_string(), st.to_string(), *n))
                .collect(),
            timers_fired: (s.timers_fired.iter())
                .map(|(m, n)| (m.to_string(), *n))
                .collect(),
            migrated: listed(&s.migrated),
            expired: listed(&s.expired),
        };
        form.timers_fired.sort();
        form.events_applied.sort();
        form.transitions.sort();
        form.by_state.sort();
        form
    }
}

impl From<StatsForm> for EngineStats {
    fn from(f: StatsForm) -> Self {
        EngineStats {
            events_applied: (f.events_applied.into_iter())
                .map(|(m, n)| (Name::from(m), n))
                .collect(),
            transitions: f
                .transitions
                .into_iter()
                .map(|(m, a, b, n)| ((m.into(), a.into(), b.into()), n))
                .collect(),
            by_state: f
                .by_state
                .into_iter()
                .map(|(m, s, n)| ((m.into(), s.into()), n))
                .collect(),
            timers_fired: (f.timers_fired.into_iter())
                .map(|(m, n)| (Name::from(m), n))
                .collect(),
            migrated: counted(f.migrated),
            expired: counted(f.expired),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_count(s: &EngineStats, m: &str, st: &str) -> Option<u64> {
        s.by_state.get(&(m.into(), st.into())).copied()
    }

    fn n(s: &str) -> Name {
        s.into()
    }

    #[test]
    fn self_loop_counts_an_event_but_no_transition() {
        let mut s = EngineStats::default();
        s.count_create(&n("m"), &n("a"));
        s.count_event(&n("m"), &n("a"), &n("a"));
        assert_eq!(s.events_applied.get("m"), Some(&1));
        assert!(s.transitions.is_empty());
        assert_eq!(state_count(&s, "m", "a"), Some(1));
    }

    #[test]
    fn move_and_delete_keep_by_state_at_zero_not_missing() {
        let mut s = EngineStats::default();
        s.count_create(&n("m"), &n("a"));
        s.count_event(&n("m"), &n("a"), &n("b"));
        assert_eq!(state_count(&s, "m", "a"), Some(0));
        assert_eq!(state_count(&s, "m", "b"), Some(1));
        s.count_delete(&n("m"), &n("b"), false);
        assert_eq!(state_count(&s, "m", "b"), Some(0));
        let key = (n("m"), n("a"), n("b"));
        assert_eq!(s.transitions.get(&key), Some(&1));
    }

    #[test]
    fn stats_form_round_trips() {
        let mut s = EngineStats::default();
        s.count_create(&n("m"), &n("a"));
        s.count_event(&n("m"), &n("a"), &n("b"));
        s.count_create(&n("n"), &n("x"));
        let back = EngineStats::from(StatsForm::from(&s));
        assert_eq!(back, s);
    }
}
