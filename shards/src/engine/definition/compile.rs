//! Validation of a definition into a `CompiledMachine`: states indexed, `from` lists and `*`
//! expanded into state sets, guards compiled once. Also the lookup `decide` uses to pick a
//! transition.
//!
//! Transitions are grouped by event and keep definition order; each holds a bitset of the
//! states it leaves from, so a `*` costs 128 bytes at most, not one entry per state.

use std::collections::HashMap;

use crate::engine::context::Fields;

use super::indexed::{parse_indexes, IndexPath};
use super::timed::{Delay, Timed};
use super::{Definition, DefinitionError, FromSpec, TransitionDef};
use crate::engine::guard::Guard;
use crate::engine::limits::{NAME_BYTES_MAX, STATES_MAX, TRANSITIONS_MAX};
use crate::engine::names::NameMap;

/// A validated machine, ready for `resolve`.
#[derive(Debug, Clone)]
pub struct CompiledMachine {
    states: Vec<String>,
    index: NameMap<String, u16>,
    initial: u16,
    finals: StateSet,
    /// event -> transitions on that event, in definition order.
    by_event: NameMap<String, Vec<Transition>>,
    /// The timed transitions (`after_ms` / `at`), in definition order.
    pub(super) timed: Vec<Timed>,
    /// The declared indexes, in definition order.
    indexes: Vec<IndexPath>,
    /// `retention.final_after_ms`: how long an instance stays in a final state.
    pub(super) retention_ms: Option<u64>,
}

#[derive(Debug, Clone)]
struct Transition {
    from: StateSet,
    to: u16,
    guard: Option<Guard>,
}

/// What an event does to an instance in some state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution<'m> {
    /// The first transition whose guard holds; move to this state.
    Move(&'m str),
    /// Transitions exist for (state, event) but every guard was false.
    GuardFailed,
    /// No transition leaves this state on this event.
    NoTransition,
}

/// A set of state indexes, one bit each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StateSet(Vec<u64>);

impl StateSet {
    fn empty(states: usize) -> Self {
        StateSet(vec![0; states.div_ceil(64)])
    }

    fn insert(&mut self, i: u16) {
        if let Some(word) = self.0.get_mut(usize::from(i) / 64) {
            *word |= 1 << (i % 64);
        }
    }

    pub(super) fn contains(&self, i: u16) -> bool {
        self.0
            .get(usize::from(i) / 64)
            .is_some_and(|word| word & (1 << (i % 64)) != 0)
    }

    /// The lowest index in both sets.
    fn first_common(&self, other: &StateSet) -> Option<u16> {
        let (w, both) = self
            .0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| a & b)
            .enumerate()
            .find(|(_, both)| *both != 0)?;
        u16::try_from(w * 64 + both.trailing_zeros() as usize).ok()
    }

    fn union_with(&mut self, other: &StateSet) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

fn check_name(what: &str, name: &str) -> Result<(), DefinitionError> {
    if name.is_empty() {
        return Err(DefinitionError::new(format!("{what} must not be empty")));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(DefinitionError::new(format!(
            "{what} longer than {NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

impl CompiledMachine {
    /// Validates `def` (every rule of docs/protocol.md, "Machine definitions") and compiles its guards.
    pub fn compile(def: &Definition) -> Result<CompiledMachine, DefinitionError> {
        let (states, index) = index_states(&def.states)?;
        let lookup = |what: &str, name: &str| {
            index.get(name).copied().ok_or_else(|| {
                DefinitionError::new(format!("{what} `{name}` is not a declared state"))
            })
        };
        let initial = match &def.initial {
            Some(name) => lookup("initial state", name)?,
            None => return Err(DefinitionError::new("missing initial state")),
        };
        let mut finals = StateSet::empty(states.len());
        for name in &def.finals {
            let i = lookup("final state", name)?;
            if finals.contains(i) {
                return Err(DefinitionError::new(format!(
                    "duplicate final state `{name}`"
                )));
            }
            finals.insert(i);
        }
        let mut machine = CompiledMachine {
            states,
            index,
            initial,
            finals,
            by_event: NameMap::default(),
            timed: Vec::new(),
            indexes: parse_indexes(&def.indexes)?,
            retention_ms: super::timed::retention_of(def)?,
        };
        machine.add_transitions(&def.transitions)?;
        Ok(machine)
    }

    fn add_transitions(&mut self, defs: &[TransitionDef]) -> Result<(), DefinitionError> {
        if defs.len() > TRANSITIONS_MAX {
            return Err(DefinitionError::new(format!(
                "more than {TRANSITIONS_MAX} transitions"
            )));
        }
        // event -> states already left by an unguarded transition on that event.
        let mut unguarded: HashMap<&str, StateSet> = HashMap::new();
        for (i, def) in defs.iter().enumerate() {
            let at = |reason: String| DefinitionError::new(format!("transitions[{i}]: {reason}"));
            let transition = self.compile_transition(def).map_err(|e| at(e.reason))?;
            if let Some(delay) = Delay::of(def).map_err(|e| at(e.reason))? {
                self.timed.push(Timed {
                    from: transition.from.clone(),
                    event: def.event.clone(),
                    delay,
                });
            }
            if transition.guard.is_none() {
                let seen = unguarded
                    .entry(def.event.as_str())
                    .or_insert_with(|| StateSet::empty(self.states.len()));
                if let Some(state) = seen.first_common(&transition.from) {
                    let state = self.name(state);
                    return Err(at(format!(
                        "duplicate unguarded transition from `{state}` on `{}`",
                        def.event
                    )));
                }
                seen.union_with(&transition.from);
            }
            self.by_event
                .entry(def.event.clone())
                .or_default()
                .push(transition);
        }
        Ok(())
    }

    fn compile_transition(&self, def: &TransitionDef) -> Result<Transition, DefinitionError> {
        check_name("event name", &def.event)?;
        let to = self.state_index("`to` state", &def.to)?;
        let from = self.departures(&def.from)?;
        let guard = match &def.guard {
            None => None,
            Some(src) => Some(
                Guard::compile(src)
                    .map_err(|e| DefinitionError::new(format!("guard does not parse {e}")))?,
            ),
        };
        Ok(Transition { from, to, guard })
    }

    fn departures(&self, spec: &FromSpec) -> Result<StateSet, DefinitionError> {
        let mut set = StateSet::empty(self.states.len());
        let names: &[String] = match spec {
            FromSpec::One(any) if any == FromSpec::ANY => {
                let open = (0..self.states.len()).filter_map(|i| u16::try_from(i).ok());
                open.filter(|i| !self.finals.contains(*i))
                    .for_each(|i| set.insert(i));
                return Ok(set);
            }
            FromSpec::One(name) => std::slice::from_ref(name),
            FromSpec::Many(names) if names.is_empty() => {
                return Err(DefinitionError::new("`from` list is empty"));
            }
            FromSpec::Many(names) => names,
        };
        for name in names {
            let i = self.state_index("`from` state", name)?;
            if self.finals.contains(i) {
                return Err(DefinitionError::new(format!(
                    "transition out of final state `{name}`"
                )));
            }
            set.insert(i);
        }
        Ok(set)
    }

    fn state_index(&self, what: &str, name: &str) -> Result<u16, DefinitionError> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| DefinitionError::new(format!("{what} `{name}` is not a declared state")))
    }

    pub(super) fn name(&self, i: u16) -> &str {
        self.states.get(usize::from(i)).map_or("?", String::as_str)
    }

    /// The state a new instance starts in.
    pub fn initial(&self) -> &str {
        self.name(self.initial)
    }

    /// The declared states, in definition order.
    pub fn states(&self) -> &[String] {
        &self.states
    }

    /// The declared indexes (docs/queries.md), in definition order.
    pub fn indexes(&self) -> &[IndexPath] {
        &self.indexes
    }

    /// The index of `state`, if declared.
    pub(super) fn state_at(&self, state: &str) -> Option<u16> {
        self.index.get(state).copied()
    }

    pub fn is_final(&self, state: &str) -> bool {
        self.index
            .get(state)
            .is_some_and(|i| self.finals.contains(*i))
    }

    /// Picks the transition for `event` in `state`: the first, in definition order, whose guard
    /// holds over `ctx` (before the merge) and `payload`.
    pub fn resolve(
        &self,
        state: &str,
        event: &str,
        ctx: &impl Fields,
        payload: &impl Fields,
    ) -> Resolution<'_> {
        let (Some(&at), Some(candidates)) = (self.index.get(state), self.by_event.get(event))
        else {
            return Resolution::NoTransition;
        };
        let mut matched = false;
        for t in candidates.iter().filter(|t| t.from.contains(at)) {
            matched = true;
            if t.guard.as_ref().is_none_or(|g| g.holds(ctx, payload)) {
                return Resolution::Move(self.name(t.to));
            }
        }
        if matched {
            Resolution::GuardFailed
        } else {
            Resolution::NoTransition
        }
    }
}

/// Checks state names and gives each an index.
fn index_states(names: &[String]) -> Result<(Vec<String>, NameMap<String, u16>), DefinitionError> {
    if names.is_empty() {
        return Err(DefinitionError::new("states must not be empty"));
    }
    if names.len() > STATES_MAX {
        return Err(DefinitionError::new(format!(
            "more than {STATES_MAX} states"
        )));
    }
    let mut index = NameMap::with_capacity_and_hasher(names.len(), Default::default());
    for (i, name) in names.iter().enumerate() {
        check_name("state name", name)?;
        if name == FromSpec::ANY {
            return Err(DefinitionError::new(
                "`*` is reserved and cannot name a state",
            ));
        }
        // Cannot fail: names.len() <= STATES_MAX <= u16::MAX (asserted in limits).
        let i = u16::try_from(i).map_err(|_| DefinitionError::new("too many states"))?;
        if index.insert(name.clone(), i).is_some() {
            return Err(DefinitionError::new(format!("duplicate state `{name}`")));
        }
    }
    Ok((names.to_vec(), index))
}
