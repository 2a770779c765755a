//! How `apply` moves the counters of `EngineStats`, and their snapshot form.
//!
//! `by_state` entries that fall to zero stay in the map at 0, so a metrics gauge reads 0 rather
//! than keeping a stale value for a label that vanished.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use super::state::EngineStats;

/// Adds one to `map[key]`, starting from zero.
fn bump<K: Hash + Eq>(map: &mut HashMap<K, u64>, key: K) {
    *map.entry(key).or_insert(0) += 1;
}

impl EngineStats {
    /// An instance was created in `state`.
    pub(crate) fn count_create(&mut self, machine: &str, state: &str) {
        bump(&mut self.by_state, (machine.to_string(), state.to_string()));
    }

    /// An event was applied; `from == to` counts as an event but not as a transition.
    pub(crate) fn count_event(&mut self, machine: &str, from: &str, to: &str) {
        match self.events_applied.get_mut(machine) {
            Some(n) => *n += 1,
            None => {
                self.events_applied.insert(machine.to_string(), 1);
            }
        }
        if from == to {
            return;
        }
        let (m, f, t) = (machine.to_string(), from.to_string(), to.to_string());
        bump(&mut self.transitions, (m.clone(), f.clone(), t.clone()));
        self.leave(m.clone(), f);
        bump(&mut self.by_state, (m, t));
    }

    /// An instance in `state` was deleted.
    pub(crate) fn count_delete(&mut self, machine: &str, state: &str) {
        self.leave(machine.to_string(), state.to_string());
    }

    fn leave(&mut self, machine: String, state: String) {
        if let Some(n) = self.by_state.get_mut(&(machine, state)) {
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
}

impl From<&EngineStats> for StatsForm {
    fn from(s: &EngineStats) -> Self {
        let mut form = StatsForm {
            events_applied: s
                .events_applied
                .iter()
                .map(|(m, n)| (m.clone(), *n))
                .collect(),
            transitions: (s.transitions.iter())
                .map(|((m, f, t), n)| (m.clone(), f.clone(), t.clone(), *n))
                .collect(),
            by_state: (s.by_state.iter())
                .map(|((m, st), n)| (m.clone(), st.clone(), *n))
                .collect(),
        };
        form.events_applied.sort();
        form.transitions.sort();
        form.by_state.sort();
        form
    }
}

impl From<StatsForm> for EngineStats {
    fn from(f: StatsForm) -> Self {
        EngineStats {
            events_applied: f.events_applied.into_iter().collect(),
            transitions: f
                .transitions
                .into_iter()
                .map(|(m, a, b, n)| ((m, a, b), n))
                .collect(),
            by_state: f
                .by_state
                .into_iter()
                .map(|(m, s, n)| ((m, s), n))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_count(s: &EngineStats, m: &str, st: &str) -> Option<u64> {
        s.by_state.get(&(m.to_string(), st.to_string())).copied()
    }

    #[test]
    fn self_loop_counts_an_event_but_no_transition() {
        let mut s = EngineStats::default();
        s.count_create("m", "a");
        s.count_event("m", "a", "a");
        assert_eq!(s.events_applied.get("m"), Some(&1));
        assert!(s.transitions.is_empty());
        assert_eq!(state_count(&s, "m", "a"), Some(1));
    }

    #[test]
    fn move_and_delete_keep_by_state_at_zero_not_missing() {
        let mut s = EngineStats::default();
        s.count_create("m", "a");
        s.count_event("m", "a", "b");
        assert_eq!(state_count(&s, "m", "a"), Some(0));
        assert_eq!(state_count(&s, "m", "b"), Some(1));
        s.count_delete("m", "b");
        assert_eq!(state_count(&s, "m", "b"), Some(0));
        let key = ("m".to_string(), "a".to_string(), "b".to_string());
        assert_eq!(s.transitions.get(&key), Some(&1));
    }

    #[test]
    fn stats_form_round_trips() {
        let mut s = EngineStats::default();
        s.count_create("m", "a");
        s.count_event("m", "a", "b");
        s.count_create("n", "x");
        let back = EngineStats::from(StatsForm::from(&s));
        assert_eq!(back, s);
    }
}
