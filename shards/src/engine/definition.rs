//! Machine definitions: the serde form a client sends, its normalised and canonical JSON, its
//! checksum, and (in `compile`) validation into a `CompiledMachine`.
//!
//! Definition object: `{"states":[..], "initial":S, "final":[..]?, "transitions":[{"from":
//! S | [S,..] | "*", "event":E, "to":S, "guard":EXPR?, "after_ms":N?, "at":"ctx.<path>"?}]}`.
//! `"indexes": ["ctx.<path>", ..]` declares indexes (`definition::indexed`);
//! `"retention": {"final_after_ms": N}` deletes finished instances (docs/lifecycle.md). Unknown fields are
//! refused. `after_ms` / `at` make a transition timed (docs/protocol.md, "Timed transitions"; `definition::compile` validates them, `engine::timers` computes deadlines).
//!
//! The normalised form always has `final` (possibly empty) and omits absent guards, so two
//! definitions that differ only in those spellings are the same version. The canonical JSON is
//! the normalised form with object keys sorted and no whitespace; its CRC32C is the checksum.

mod compile;
mod indexed;
mod timed;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub use compile::{CompiledMachine, Resolution};
pub use indexed::IndexPath;
pub use timed::{Delay, TIMER_DELAY_MS_MAX};

/// The definition object as sent by a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    #[serde(default)]
    pub states: Vec<String>,
    #[serde(default)]
    pub initial: Option<String>,
    #[serde(default, rename = "final")]
    pub finals: Vec<String>,
    #[serde(default)]
    pub transitions: Vec<TransitionDef>,
    /// Context paths to index (docs/queries.md); omitted from the normalised form when empty,
    /// so definitions without indexes keep their checksums.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<String>,
    /// `{"final_after_ms": N}`: an instance in a final state is deleted N ms after it entered
    /// it (docs/lifecycle.md). Omitted from the normalised form when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// A definition's `retention` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    #[serde(deserialize_with = "final_after_ms")]
    pub final_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionDef {
    pub from: FromSpec,
    pub event: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    /// Timed: fires this many milliseconds after the instance entered `from`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "after_ms"
    )]
    pub after_ms: Option<u64>,
    /// Timed: fires at the time held by this context field (`ctx.<path>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// The `from` of a transition: one state, a list of states, or `"*"` (every non-final state).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FromSpec {
    One(String),
    Many(Vec<String>),
}

impl FromSpec {
    /// The wildcard spelling.
    pub const ANY: &'static str = "*";
}

impl<'de> Deserialize<'de> for FromSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let shape = "`from` must be a state, a list of states or \"*\"";
        match Value::deserialize(d)? {
            Value::String(s) => Ok(FromSpec::One(s)),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    _ => Err(D::Error::custom(shape)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(FromSpec::Many),
            _ => Err(D::Error::custom(shape)),
        }
    }
}

/// `after_ms`: a non-negative integer (zero is refused by `compile` with its own reason).
fn after_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Number(n) if n.as_u64().is_some() => Ok(n.as_u64()),
        other => Err(D::Error::custom(format!(
            "`after_ms` must be a positive integer of milliseconds, got {other}"
        ))),
    }
}

/// `retention.final_after_ms`: a non-negative integer (`compile` refuses zero and the too
/// large with their own reasons).
fn final_after_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Value::deserialize(d)? {
        Value::Number(n) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(0)),
        other => Err(D::Error::custom(format!(
            "`retention.final_after_ms` must be a positive integer of milliseconds, got {other}"
        ))),
    }
}

/// Why a definition was refused; becomes `INVALID_DEFINITION` with `details.reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionError {
    pub reason: String,
}

impl DefinitionError {
    pub fn new(reason: impl Into<String>) -> Self {
        DefinitionError {
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A validated definition in every form the engine stores or logs.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The normalised definition object (what `Entry::PutMachine` carries).
    pub normalised: Value,
    /// Lowercase hex CRC32C of the canonical JSON, 8 digits.
    pub checksum: String,
    pub compiled: CompiledMachine,
}

impl Definition {
    /// Reads the definition object, refusing unknown fields and wrong types.
    pub fn from_value(raw: &Value) -> Result<Definition, DefinitionError> {
        Definition::deserialize(raw).map_err(|e| DefinitionError::new(e.to_string()))
    }

    /// The normalised object: `final` always present, absent guards omitted.
    pub fn to_value(&self) -> Value {
        let transitions = self
            .transitions
            .iter()
            .map(TransitionDef::to_value)
            .collect();
        let mut map = Map::new();
        map.insert("states".into(), strings(&self.states));
        map.insert(
            "initial".into(),
            self.initial.clone().map_or(Value::Null, Value::String),
        );
        map.insert("final".into(), strings(&self.finals));
        map.insert("transitions".into(), Value::Array(transitions));
        if !self.indexes.is_empty() {
            map.insert("indexes".into(), strings(&self.indexes));
        }
        if let Some(retention) = &self.retention {
            let ms = Value::from(retention.final_after_ms);
            map.insert(
                "retention".into(),
                serde_json::json!({ "final_after_ms": ms }),
            );
        }
        Value::Object(map)
    }

    /// Validates and compiles the definition.
    pub fn compile(&self) -> Result<CompiledMachine, DefinitionError> {
        CompiledMachine::compile(self)
    }
}

impl TransitionDef {
    fn to_value(&self) -> Value {
        let from = match &self.from {
            FromSpec::One(s) => Value::String(s.clone()),
            FromSpec::Many(list) => strings(list),
        };
        let mut map = Map::new();
        map.insert("from".into(), from);
        map.insert("event".into(), Value::String(self.event.clone()));
        map.insert("to".into(), Value::String(self.to.clone()));
        if let Some(guard) = &self.guard {
            map.insert("guard".into(), Value::String(guard.clone()));
        }
        if let Some(after_ms) = self.after_ms {
            map.insert("after_ms".into(), Value::from(after_ms));
        }
        if let Some(at) = &self.at {
            map.insert("at".into(), Value::String(at.clone()));
        }
        Value::Object(map)
    }
}

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().cloned().map(Value::String).collect())
}

/// Reads, validates, normalises and checksums a raw definition object.
pub fn prepare(raw: &Value) -> Result<Prepared, DefinitionError> {
    let definition = Definition::from_value(raw)?;
    let compiled = definition.compile()?;
    let normalised = definition.to_value();
    let checksum = checksum(&canonical_json(&normalised));
    Ok(Prepared {
        normalised,
        checksum,
        compiled,
    })
}

/// JSON with object keys sorted (byte order) and no whitespace, whatever the map type's order.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Lowercase 8-digit hex CRC32C (Castagnoli) of `canonical`.
pub fn checksum(canonical: &str) -> String {
    format!("{:08x}", crc32c::crc32c(canonical.as_bytes()))
}

#[cfg(test)]
mod tests;
