//! CREATE_INSTANCE: a new instance of a stored machine version, in its initial state.
//!
//! An existing id is `INSTANCE_EXISTS`, unless the request repeats the idempotency key the
//! instance was created with: then the first result comes back with `applied:false`.

use serde_json::Value;

use super::rejections::{bad_field, check_idempotency_key, machine_not_found, misrouted, replayed};
use crate::engine::divergence;
use crate::engine::indexes::Group;
use crate::engine::instance::{CreatedWithKey, InstanceRecord, InstanceView, Keys};
use crate::engine::limits::INSTANCE_ID_BYTES_MAX;
use crate::engine::{Command, Decision, Engine, Entry, Instance};
use crate::{ErrorCode, Rejection};

/// Checks an instance id: non-empty, at most `INSTANCE_ID_BYTES_MAX` bytes.
pub(crate) fn check_instance_id(id: &str) -> Result<(), Rejection> {
    if id.is_empty() {
        return Err(bad_field("id", "must not be empty"));
    }
    if id.len() > INSTANCE_ID_BYTES_MAX {
        let reason = format!("is longer than {INSTANCE_ID_BYTES_MAX} bytes");
        return Err(bad_field("id", &reason));
    }
    Ok(())
}

/// `Command::CreateInstance::version` when the request named none: the machine's latest
/// version as the deciding shard holds it (no version is 0: PUT_MACHINE refuses it).
pub const LATEST_VERSION: u32 = 0;

impl Engine {
    /// Decides on `cmd`; `existing` is the instance with its id as this decision sees it.
    pub(crate) fn decide_create(
        &self,
        existing: Option<InstanceView<'_>>,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Decision, Rejection> {
        let Command::CreateInstance {
            id,
            machine,
            version,
            context,
            idempotency_key,
        } = cmd
        else {
            return Err(misrouted("CREATE_INSTANCE"));
        };
        check_instance_id(id)?;
        check_idempotency_key(idempotency_key.as_deref())?;
        let (version, stored) = match *version {
            LATEST_VERSION => {
                (self.catalog.latest(machine)).ok_or_else(|| machine_not_found(machine, None))?
            }
            v => (
                v,
                (self.catalog.get(machine, v))
                    .ok_or_else(|| machine_not_found(machine, Some(v)))?,
            ),
        };
        if let Some(existing) = existing {
            return match (idempotency_key, existing.created) {
                (Some(key), Some(created)) if created.key == *key => {
                    Ok(Decision::Answer(replayed(&created.result)))
                }
                _ => Err(Rejection::new(
                    ErrorCode::InstanceExists,
                    format!("instance `{id}` already exists"),
                )
                .with("id", id.as_str())),
            };
        }
        Ok(Decision::Write(Entry::Create {
            id: id.clone(),
            machine: machine.clone(),
            version,
            state: stored.compiled.initial().to_string(),
            context: context.clone(),
            idempotency_key: idempotency_key.clone(),
            at_ms: now_ms,
        }))
    }

    /// Inserts the instance. An id already present is skipped with a warning. An unknown
    /// machine is only warned about: the entry is self-contained, and during recovery the
    /// definition may arrive from another log.
    pub(crate) fn apply_create(
        &mut self,
        entry: Entry,
        offset: u64,
        want_result: bool,
    ) -> Option<Value> {
        let Entry::Create {
            id,
            machine,
            version,
            state,
            context,
            idempotency_key,
            at_ms,
        } = entry
        else {
            return None; // `Engine::apply` routes only Create entries here.
        };
        let (machine_name, machine_id) = self.names.intern_with_id(&machine);
        let (state_name, state_id) = self.names.intern_with_id(&state);
        let instance = Instance {
            id: id.as_str().into(),
            machine: machine_name,
            version,
            state: state_name,
            context: context.into(),
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            event_count: 0,
            wal_offset: offset,
        };
        // One probe: the insert itself finds an existing id.
        let Ok(record) = (self.instances).insert(Box::new(InstanceRecord::new(instance))) else {
            let reason = format!("create of existing instance `{id}`");
            divergence::record(&mut self.divergence, offset, reason);
            return None;
        };
        let group = Group::unarmed(machine_id, state_id);
        (self.indexes).created(&self.catalog, group, record);
        if self.catalog.get(&machine, version).is_none() {
            // Created as logged (the state follows the log), but no decide would have allowed it.
            let reason =
                format!("instance `{id}` created for unknown machine `{machine}` v{version}");
            divergence::record(&mut self.divergence, offset, reason);
        }
        if self.departed.holds(&id) {
            self.departed.arrived(); // a slot moved out: counted nowhere
        } else {
            self.stats
                .count_create(&record.instance.machine, &record.instance.state);
        }
        let result =
            (want_result || idempotency_key.is_some()).then(|| record.instance.create_result());
        if let (Some(key), Some(result)) = (idempotency_key, &result) {
            let result = result.clone();
            record.keys = Some(Box::new(Keys {
                created: Some(CreatedWithKey { key, result }),
                ..Keys::default()
            }));
        }
        result
    }
}
