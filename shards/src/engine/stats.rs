//! How `apply` moves the counters of `EngineStats`, and their snapshot form.
//!
//! `by_state` entries that fall to zero stay in the map at 0, so a metrics gauge reads 0 rather
//! than keeping a stale value for a label that vanished.

use std::hash::Hash;

use serde::{Deserialize, Serialize};

use super::names::{Name, NameMap};
use super::state::EngineStats;

/// Adds one to `map[key]`, starting from zero.
fn bump<K: Hash + Eq>(map: &mut NameMap<K, u64>, key: K) {
    *map.entry(key).or_insert(0) += 1;
}

/// Counting never allocates once a name has been seen: keys are interned names, so a key is
/// three reference-count increments, not three strings.
impl EngineStats {
    /// An instance was created in `state`.
    pub(crate) fn count_create(&mut self, machine: &Name, state: &Name) {
        bump(&mut self.by_state, (machine.clone(), state.clone()));
    }

    /// An event was applied; `from == to` counts as an event but not as a transition.
    pub(crate) fn count_event(&mut self, machine: &Name, from: &Name, to: &Name) {
        match self.events_applied.get_mut(&**machine) {
            Some(n) => *n += 1,
            None => {
                self.events_applied.insert(machine.clone(), 1);
            }
        }
        if from == to {
            return;
        }
        bump(
            &mut self.transitions,
            (machine.clone(), from.clone(), to.clone()),
        );
        self.leave(machine, from);
        bump(&mut self.by_state, (machine.clone(), to.clone()));
    }

    /// A timer applied its event.
    pub(crate) fn count_timer_fired(&mut self, machine: &Name) {
        bump(&mut self.timers_fired, machine.clone());
    }

    /// An instance in `state` was deleted.
    pub(crate) fn count_delete(&mut self, machine: &Name, state: &Name) {
        self.leave(machine, state);
    }

    fn leave(&mut self, machine: &Name, state: &Name) {
        if let Some(n) = self.by_state.get_mut(&(machine.clone(), state.clone())) {
            *n = n.saturating_sub(1);
        }
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
        s.count_delete(&n("m"), &n("b"));
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
