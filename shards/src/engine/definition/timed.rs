//! Timed transitions (docs/protocol.md, "Timed transitions"): `after_ms` and `at` on a transition,
//! their validation, and the deadline an instance's timer has in a given state.
//!
//! Pure: a deadline is computed from the time the instance entered its state (carried by the
//! log entry that moved it there) and its context, never from a clock.

use serde_json::Value;

use crate::engine::context::Fields;

use super::compile::StateSet;
use super::{CompiledMachine, DefinitionError, TransitionDef};
use crate::engine::rfc3339;

/// Largest `after_ms` accepted: 100 years. Keeps `entered + after_ms` far from overflow and
/// refuses delays that can only be typos.
pub const TIMER_DELAY_MS_MAX: u64 = 100 * 365 * 86_400_000;

/// Bytes in a context path (`at`, `indexes`): it is kept per definition and walked on every
/// arm or indexed write.
const CTX_PATH_BYTES_MAX: usize = 512;

/// When a timed transition fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delay {
    /// Milliseconds after the instance entered the state.
    After(u64),
    /// At the time held by the context field at this path (the segments after `ctx.`): an
    /// RFC 3339 string or epoch milliseconds.
    At(Vec<String>),
}

/// One timed transition of a compiled machine.
#[derive(Debug, Clone)]
pub(super) struct Timed {
    pub(super) from: StateSet,
    pub(super) event: String,
    pub(super) delay: Delay,
}

impl Delay {
    /// The delay `def` declares, None for an untimed transition.
    pub(super) fn of(def: &TransitionDef) -> Result<Option<Delay>, DefinitionError> {
        match (def.after_ms, &def.at) {
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err(DefinitionError::new(
                "`after_ms` and `at` cannot both be set",
            )),
            (Some(0), None) => Err(DefinitionError::new("`after_ms` must be positive")),
            (Some(ms), None) if ms > TIMER_DELAY_MS_MAX => Err(DefinitionError::new(format!(
                "`after_ms` above {TIMER_DELAY_MS_MAX} (100 years)"
            ))),
            (Some(ms), None) => Ok(Some(Delay::After(ms))),
            (None, Some(path)) => parse_ctx_path("`at`", path).map(|p| Some(Delay::At(p))),
        }
    }
}

/// `ctx.<segment>(.<segment>)*`, segments of letters, digits, `_` and `-`: the segments after
/// `ctx.`. `what` names the field in the refusal (`` `at` ``, an index).
pub(super) fn parse_ctx_path(what: &str, path: &str) -> Result<Vec<String>, DefinitionError> {
    let bad = || {
        DefinitionError::new(format!(
            "{what} must name a context field as `ctx.<path>`, got {path:?}"
        ))
    };
    if path.len() > CTX_PATH_BYTES_MAX {
        return Err(DefinitionError::new(format!(
            "{what} longer than {CTX_PATH_BYTES_MAX} bytes"
        )));
    }
    let rest = path.strip_prefix("ctx.").ok_or_else(bad)?;
    let segments: Vec<String> = rest.split('.').map(str::to_owned).collect();
    let valid = |s: &String| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if segments.iter().all(valid) {
        Ok(segments)
    } else {
        Err(bad())
    }
}

/// The deadline in epoch ms a context value gives: a non-negative integer (epoch ms) or an
/// RFC 3339 string. Anything else gives none.
fn deadline_of(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => rfc3339::parse_ms(s),
        _ => None,
    }
}

pub(super) fn lookup<'c>(ctx: &'c impl Fields, path: &[String]) -> Option<&'c Value> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(ctx.field(first)?, |v, seg| v.as_object()?.get(seg))
}

/// A definition's `retention.final_after_ms`, checked: positive, at most
/// `TIMER_DELAY_MS_MAX`, and only with a final state to apply to.
pub(super) fn retention_of(def: &super::Definition) -> Result<Option<u64>, DefinitionError> {
    let Some(retention) = &def.retention else {
        return Ok(None);
    };
    let why = match retention.final_after_ms {
        0 => "`retention.final_after_ms` must be positive",
        ms if ms > TIMER_DELAY_MS_MAX => "`retention.final_after_ms` above 100 years",
        _ if def.finals.is_empty() => "`retention` needs a final state",
        ms => return Ok(Some(ms)),
    };
    Err(DefinitionError::new(why))
}

impl CompiledMachine {
    /// True when some transition is timed, or finished instances expire.
    pub fn has_timers(&self) -> bool {
        !self.timed.is_empty() || self.retention_ms.is_some()
    }

    /// When an instance in `state`, entered at `entered_ms`, is deleted by the retention:
    /// only in a final state of a definition that has one.
    pub fn expiry(&self, state: &str, entered_ms: u64) -> Option<u64> {
        let ms = self.retention_ms?;
        self.is_final(state).then(|| entered_ms.saturating_add(ms))
    }

    /// The timer an instance in `state`, which it entered at `entered_ms`, with context `ctx`,
    /// has: (event, due epoch ms), the earliest of the state's timed transitions (definition
    /// order breaks ties). An `at` field that is missing or holds no time arms nothing.
    pub fn timer(&self, state: &str, entered_ms: u64, ctx: &impl Fields) -> Option<(&str, u64)> {
        if self.timed.is_empty() {
            return None;
        }
        let at = self.state_at(state)?;
        let mut best: Option<(&str, u64)> = None;
        for t in self.timed.iter().filter(|t| t.from.contains(at)) {
            let due = match &t.delay {
                Delay::After(ms) => entered_ms.saturating_add(*ms),
                Delay::At(path) => match lookup(ctx, path).and_then(deadline_of) {
                    Some(due) => due,
                    None => continue,
                },
            };
            if best.is_none_or(|(_, b)| due < b) {
                best = Some((t.event.as_str(), due));
            }
        }
        best
    }
}
