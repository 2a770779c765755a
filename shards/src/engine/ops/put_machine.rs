//! PUT_MACHINE: store an immutable (machine, version) definition.
//!
//! decide validates and normalises the definition; the entry carries the normalised object and
//! its checksum. The same definition again is answered with `created:false` without a write; a
//! different one for a stored version is `MACHINE_VERSION_EXISTS`.

use serde_json::{json, Value};

use super::rejections::{bad_field, misrouted};
use crate::engine::catalog::StoredMachine;
use crate::engine::definition::{prepare, Definition, DefinitionError};
use crate::engine::limits::MACHINE_NAME_BYTES_MAX;
use crate::engine::{Command, Decision, Engine, Entry};
use crate::{ErrorCode, Rejection};

fn put_result(machine: &str, version: u32, created: bool, checksum: &str) -> Value {
    json!({"machine": machine, "version": version, "created": created, "checksum": checksum})
}

fn invalid_definition(e: DefinitionError) -> Rejection {
    Rejection::new(
        ErrorCode::InvalidDefinition,
        format!("invalid definition: {}", e.reason),
    )
    .with("reason", e.reason)
}

fn check_machine_name(name: &str) -> Result<(), Rejection> {
    if name.is_empty() {
        return Err(bad_field("machine", "must not be empty"));
    }
    if name.len() > MACHINE_NAME_BYTES_MAX {
        let reason = format!("is longer than {MACHINE_NAME_BYTES_MAX} bytes");
        return Err(bad_field("machine", &reason));
    }
    Ok(())
}

impl Engine {
    pub(crate) fn decide_put_machine(
        &self,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Decision, Rejection> {
        let Command::PutMachine {
            machine,
            version,
            definition,
        } = cmd
        else {
            return Err(misrouted("PUT_MACHINE"));
        };
        check_machine_name(machine)?;
        if *version == 0 {
            return Err(bad_field("version", "must be at least 1"));
        }
        let prepared = prepare(definition).map_err(invalid_definition)?;
        if let Some(existing) = self.catalog.get(machine, *version) {
            if existing.definition == prepared.normalised {
                let result = put_result(machine, *version, false, &existing.checksum);
                return Ok(Decision::Answer(result));
            }
            let message =
                format!("machine `{machine}` version {version} exists with another definition");
            return Err(Rejection::new(ErrorCode::MachineVersionExists, message)
                .with("machine", machine.as_str())
                .with("version", *version)
                .with("checksum", existing.checksum.as_str()));
        }
        Ok(Decision::Write(Entry::PutMachine {
            machine: machine.clone(),
            version: *version,
            definition: prepared.normalised,
            checksum: prepared.checksum,
            at_ms: now_ms,
        }))
    }

    /// Stores the version. A version already stored is left alone: identical gives
    /// `created:false`; different, or a definition that does not compile, is skipped and
    /// recorded as a divergence.
    pub(crate) fn apply_put_machine(&mut self, entry: Entry, offset: u64) -> Option<Value> {
        match self.store_machine(entry) {
            Ok(result) => Some(result),
            Err(reason) => {
                self.diverge(offset, reason);
                None
            }
        }
    }

    /// `apply_put_machine` without the divergence (a snapshot's machines: a failure there
    /// refuses the snapshot instead).
    pub(crate) fn store_machine(&mut self, entry: Entry) -> Result<Value, String> {
        let Entry::PutMachine {
            machine,
            version,
            definition,
            checksum,
            at_ms,
        } = entry
        else {
            return Err("not a machine entry".into()); // `Engine::apply` routes only these.
        };
        if let Some(existing) = self.catalog.get(&machine, version) {
            if existing.definition == definition {
                return Ok(put_result(&machine, version, false, &existing.checksum));
            }
            return Err(format!(
                "machine `{machine}` v{version} is stored with another definition"
            ));
        }
        let compiled = match Definition::from_value(&definition).and_then(|d| d.compile()) {
            Ok(compiled) => compiled,
            Err(e) => {
                return Err(format!(
                    "machine `{machine}` v{version} does not compile: {}",
                    e.reason
                ))
            }
        };
        let result = put_result(&machine, version, true, &checksum);
        let stored = StoredMachine {
            definition,
            checksum,
            created_at_ms: at_ms,
            compiled,
        };
        self.catalog.insert(machine, version, stored);
        Ok(result)
    }
}
