//! Atomic batches: several ops decided together, logged as one `Entry::Batch`, applied whole.
//!
//! `decide_batch` stays pure: it decides each op in order with the ordinary `decide_*` code,
//! against a scratch view of the instances the batch has touched so far (`Overlay`: a copy of
//! each touched instance, as the earlier ops of the batch leave it, or "gone" after a delete).
//! The engine itself does not change; the first op that fails aborts the whole batch. If every
//! op succeeds, the runtime logs the write entries as one record and `apply`s it (`apply_batch`
//! below), which leaves the engine exactly as the overlay predicted.

use std::collections::HashMap;

use serde_json::Value;

use super::index::prefetch;
use super::instance::{CreatedWithKey, Instance, InstanceRecord, InstanceView};
use super::json_text::JsonText;
use super::{BatchRecord, Command, Decision, Engine, Entry, EventCommand};
use crate::{ErrorCode, Rejection};

/// Cache lines of an `InstanceRecord` prefetched before deciding (all of it).
const RECORD_LINES: usize = size_of::<InstanceRecord>().div_ceil(64);

/// Context members per instance whose string value is prefetched before applying (a merge
/// overwrites a value in place).
const CONTEXT_KEYS_PREFETCHED: usize = 4;

/// One op of an atomic batch, as the engine sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchOp<'a> {
    /// CREATE_INSTANCE, APPLY_EVENT or DELETE_INSTANCE.
    Write(Command),
    /// APPLY_EVENT with its params borrowed from the request (the server's form).
    Event(EventCommand<'a>),
    /// GET_INSTANCE: the instance as the earlier ops of the batch leave it.
    Get { id: String },
}

/// A decided atomic batch: the record to log and, per op in order, its answer where it needs
/// no write (an idempotent replay, or a GET_INSTANCE); `None` where the op's entry is in the
/// record and its result is what applying that entry gives.
#[derive(Debug)]
pub struct DecidedBatch {
    pub record: BatchRecord,
    pub answers: Vec<Option<Value>>,
}

/// Why an atomic batch was refused: the first failing op and its own error.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchAbort {
    pub index: usize,
    pub error: Rejection,
}

/// A touched instance as the batch's earlier ops leave it.
struct Scratch {
    /// None: deleted by the batch (or never there).
    instance: Option<Instance>,
    created: Option<CreatedWithKey>,
    /// Whether the engine's APPLY_EVENT keys still belong to this instance (false once the
    /// batch deleted it).
    base_keys: bool,
    keys: Vec<(String, Value)>,
}

/// The scratch view: touched instances by id, the engine for the rest.
struct Overlay<'e> {
    engine: &'e Engine,
    touched: HashMap<String, Scratch>,
}

impl<'e> Overlay<'e> {
    fn view(&self, id: &str) -> Option<InstanceView<'_>> {
        let Some(s) = self.touched.get(id) else {
            return self.engine.view(id);
        };
        let base = (self.engine.instances.get(id)).filter(|_| s.base_keys);
        Some(InstanceView {
            instance: s.instance.as_ref()?,
            created: s.created.as_ref(),
            keys: base.and_then(|record| record.keys.as_ref().map(|k| &k.events)),
            batch_keys: &s.keys,
        })
    }

    /// The scratch copy of `id`, made from the engine's record on first touch.
    fn scratch(&mut self, id: &str) -> &mut Scratch {
        let engine = self.engine;
        self.touched.entry(id.to_owned()).or_insert_with(|| {
            let record = engine.instances.get(id);
            Scratch {
                instance: record.map(|r| r.instance.clone()),
                created: record
                    .and_then(|r| r.keys.as_ref())
                    .and_then(|k| k.created.clone()),
                base_keys: record.is_some(),
                keys: Vec::new(),
            }
        })
    }

    /// Does to the scratch view what `Engine::apply` will do to the engine.
    fn apply(&mut self, entry: &Entry, offset: u64) {
        match entry {
            Entry::Create {
                id,
                machine,
                version,
                state,
                context,
                idempotency_key,
                at_ms,
            } => {
                let instance = Instance {
                    id: id.as_str().into(),
                    machine: machine.as_str().into(),
                    version: *version,
                    state: state.as_str().into(),
                    context: context.clone().into(),
                    created_at_ms: *at_ms,
                    updated_at_ms: *at_ms,
                    event_count: 0,
                    wal_offset: offset,
                };
                let created = idempotency_key.as_ref().map(|key| CreatedWithKey {
                    key: key.clone(),
                    result: instance.create_result(),
                });
                let scratch = self.scratch(id);
                *scratch = Scratch {
                    instance: Some(instance),
                    created,
                    base_keys: false,
                    keys: Vec::new(),
                };
            }
            Entry::Apply {
                instance_id,
                from,
                to,
                payload,
                idempotency_key,
                at_ms,
                ..
            } => {
                let scratch = self.scratch(instance_id);
                let Some(instance) = scratch.instance.as_mut() else {
                    return; // decide wrote this entry for an instance it saw: unreachable
                };
                if let Some(payload) = payload {
                    // A decided payload is a serialized map: merging cannot fail.
                    let _ = JsonText::merge_str_into(payload.as_str(), &mut instance.context);
                }
                instance.state = to.as_str().into();
                instance.event_count += 1;
                instance.updated_at_ms = *at_ms;
                instance.wal_offset = offset;
                if let Some(key) = idempotency_key {
                    let result = instance.event_result(from, offset);
                    scratch.keys.push((key.clone(), result));
                }
            }
            Entry::Delete { id, .. } => {
                *self.scratch(id) = Scratch {
                    instance: None,
                    created: None,
                    base_keys: false,
                    keys: Vec::new(),
                };
            }
            Entry::PutMachine { .. }
            | Entry::Batch { .. }
            | Entry::Epoch { .. }
            | Entry::Migrate { .. }
            | Entry::Import { .. }
            | Entry::MoveIn { .. }
            | Entry::DropStaged { .. }
            | Entry::SlotsMovedOut { .. } => {}
        }
    }
}

impl Engine {
    /// Decides every op of an atomic batch in order, each seeing the effects of the ones
    /// before it, without changing the engine. `offset` is the log offset the batch record
    /// will get (results of later ops name it). The first op that fails aborts the batch.
    /// Each write goes straight into the batch record; an APPLY_EVENT on an instance no other
    /// op names is encoded from its borrowed decision, as a lone APPLY_EVENT is.
    pub fn decide_batch(
        &self,
        ops: &[BatchOp<'_>],
        now_ms: u64,
        offset: u64,
    ) -> Result<DecidedBatch, BatchAbort> {
        self.decide_batch_into(ops, now_ms, offset, BatchRecord::with_capacity(ops.len()))
    }

    /// `decide_batch`, writing the record into `record` (emptied first), whose buffers the
    /// caller may have kept from an earlier batch: the shard's way, so that a batch's record
    /// (over a kilobyte for 10 ops, beyond the allocator's per-thread cache) is not a fresh
    /// allocation each time. The decided batch owns `record` again.
    pub fn decide_batch_into(
        &self,
        ops: &[BatchOp<'_>],
        now_ms: u64,
        offset: u64,
        mut record: BatchRecord,
    ) -> Result<DecidedBatch, BatchAbort> {
        let now_ms = self.entry_time(now_ms);
        record.clear();
        let mut overlay = Overlay {
            engine: self,
            touched: HashMap::new(),
        };
        // The records of all ops load together instead of one miss after another. Each id is
        // hashed once for that, for `repeated_ids` and for `prefetch_apply`.
        let hashes: Vec<u64> = ops
            .iter()
            .map(|op| self.instances.hash(op_id(op)))
            .collect();
        // Only an instance that a later op reads again needs a scratch copy: the common batch
        // (each op on its own instance) decides straight against the engine.
        let repeated = repeated_ids(ops, &hashes);
        for &hash in &hashes {
            self.instances.prefetch_hashed(hash, RECORD_LINES);
        }
        let mut decided = DecidedBatch {
            record,
            answers: Vec::with_capacity(ops.len()),
        };
        for (index, op) in ops.iter().enumerate() {
            let abort = |error| BatchAbort { index, error };
            let again = repeated[index];
            let decision = match op {
                BatchOp::Get { id } => match overlay.view(id) {
                    Some(view) => Ok(Some(Decision::Answer(view.instance.to_json()))),
                    None => Err(get_not_found(id)),
                },
                BatchOp::Event(ev) => {
                    self.decide_batch_event(&overlay, ev, again, &mut decided.record, now_ms)
                }
                BatchOp::Write(cmd) => match cmd.event() {
                    Some(ev) => {
                        self.decide_batch_event(&overlay, &ev, again, &mut decided.record, now_ms)
                    }
                    None => self.decide_batch_write(&overlay, cmd, now_ms).map(Some),
                },
            };
            match decision.map_err(abort)? {
                None => decided.answers.push(None),
                Some(Decision::Answer(v)) => decided.answers.push(Some(v)),
                Some(Decision::Write(entry)) => {
                    if again {
                        overlay.apply(&entry, offset);
                    }
                    decided.record.push_entry(&entry);
                    decided.answers.push(None);
                }
            }
        }
        self.prefetch_apply(ops, &hashes);
        Ok(decided)
    }

    /// Starts loading what applying the batch writes beyond the records deciding read (they
    /// are in cache now): each history, then the end of its ring, and the context members a
    /// merge overwrites, all ops' at once. The history boxes of all ops load in parallel
    /// while the contexts are prefetched, so reading them for the ring ends waits about once.
    /// `hashes[i]` is the hash of op i's id.
    fn prefetch_apply(&self, ops: &[BatchOp<'_>], hashes: &[u64]) {
        let records: Vec<&InstanceRecord> = (ops.iter().zip(hashes))
            .filter_map(|(op, &hash)| self.instances.get_hashed(hash, op_id(op)))
            .collect();
        for record in &records {
            if let Some(history) = &record.history {
                prefetch(&**history);
            }
            for (_, value) in record.instance.context.iter().take(CONTEXT_KEYS_PREFETCHED) {
                if let Value::String(s) = value {
                    prefetch(s.as_ptr());
                }
            }
        }
        for history in records.iter().filter_map(|r| r.history.as_ref()) {
            history.prefetch_end();
        }
    }

    /// One APPLY_EVENT of a batch: an event on an instance no other op names goes straight
    /// into `record` from its borrowed decision, as a lone APPLY_EVENT's does (None); one on
    /// a repeated instance is decided as an owned entry, for the overlay.
    fn decide_batch_event(
        &self,
        overlay: &Overlay<'_>,
        ev: &EventCommand<'_>,
        again: bool,
        record: &mut BatchRecord,
        now_ms: u64,
    ) -> Result<Option<Decision>, Rejection> {
        let view = overlay.view(&ev.instance_id);
        if again {
            return self.decide_apply_event(view, ev, now_ms).map(Some);
        }
        Ok(
            match self.decide_event(view, ev, now_ms, |ev| record.push_event(&ev))? {
                Ok(()) => None,
                Err(answer) => Some(Decision::Answer(answer)),
            },
        )
    }

    /// A batched CREATE_INSTANCE or DELETE_INSTANCE (APPLY_EVENT: `decide_batch_event`).
    fn decide_batch_write(
        &self,
        overlay: &Overlay<'_>,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Decision, Rejection> {
        match cmd {
            Command::CreateInstance { id, .. } => self.decide_create(overlay.view(id), cmd, now_ms),
            Command::DeleteInstance { id } => self.decide_delete(overlay.view(id), cmd, now_ms),
            Command::ApplyEvent { .. } | Command::PutMachine { .. } => Err(Rejection::new(
                ErrorCode::BadRequest,
                "PUT_MACHINE cannot be part of a batch",
            )),
        }
    }

    /// Applies a batch's entries in order at one `offset`; returns their results as an array
    /// (null where `want_result` is false).
    pub(crate) fn apply_batch(
        &mut self,
        entries: Vec<Entry>,
        offset: u64,
        want_result: bool,
    ) -> Value {
        let mut results = Vec::with_capacity(if want_result { entries.len() } else { 0 });
        for entry in entries {
            if matches!(
                entry,
                Entry::Batch { .. } | Entry::PutMachine { .. } | Entry::Epoch { .. }
            ) || entry.is_move()
            {
                // The codec refuses these inside a batch; a JSON entry could still hold one.
                let reason =
                    "a nested batch, machine, epoch or slot move entry inside a batch".to_string();
                self.diverge(offset, reason);
                continue;
            }
            let result = self.apply(entry, offset, want_result);
            if want_result {
                results.push(result.unwrap_or(Value::Null));
            }
        }
        Value::Array(results)
    }
}

/// Ops up to this many find their repeated ids by comparing every pair (cheaper than hashing
/// for the usual small batch); larger batches count ids in a map.
const PAIRWISE_OPS_MAX: usize = 32;

/// For each op, whether another op of the batch names the same instance. `hashes[i]` is the
/// hash of op i's id: ids are compared only where their hashes are equal.
fn repeated_ids(ops: &[BatchOp<'_>], hashes: &[u64]) -> Vec<bool> {
    if ops.len() <= PAIRWISE_OPS_MAX {
        let same = |i: usize, j: usize| hashes[j] == hashes[i] && op_id(&ops[j]) == op_id(&ops[i]);
        return (0..ops.len())
            .map(|i| (0..ops.len()).any(|j| j != i && same(i, j)))
            .collect();
    }
    let mut counts: HashMap<&str, usize> = HashMap::with_capacity(ops.len());
    for op in ops {
        *counts.entry(op_id(op)).or_default() += 1;
    }
    ops.iter()
        .map(|op| counts.get(op_id(op)).is_some_and(|n| *n > 1))
        .collect()
}

/// The instance an op names.
fn op_id<'o>(op: &'o BatchOp<'_>) -> &'o str {
    match op {
        BatchOp::Event(ev) => &ev.instance_id,
        BatchOp::Get { id }
        | BatchOp::Write(Command::CreateInstance { id, .. })
        | BatchOp::Write(Command::DeleteInstance { id })
        | BatchOp::Write(Command::ApplyEvent {
            instance_id: id, ..
        }) => id,
        BatchOp::Write(Command::PutMachine { machine, .. }) => machine,
    }
}

/// GET_INSTANCE's not-found error (the same as the shard runtime's for a lone GET_INSTANCE).
fn get_not_found(id: &str) -> Rejection {
    Rejection::new(
        ErrorCode::InstanceNotFound,
        format!("no instance with id {id:?}"),
    )
    .with("id", id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn get(id: &str) -> BatchOp<'static> {
        BatchOp::Get { id: id.into() }
    }

    #[test]
    fn repeated_ids_agree_pairwise_and_counted() {
        for n in [1, 2, 10, PAIRWISE_OPS_MAX, PAIRWISE_OPS_MAX + 1, 100] {
            // Ids i % 7 for the first half, unique ones after: both kinds at every size.
            let ops: Vec<BatchOp> = (0..n)
                .map(|i| match i < n / 2 {
                    true => get(&format!("{{t}}:{}", i % 7)),
                    false => get(&format!("{{t}}:u{i}")),
                })
                .collect();
            let naive: Vec<bool> = (ops.iter())
                .map(|a| ops.iter().filter(|b| op_id(a) == op_id(b)).count() > 1)
                .collect();
            let state = std::collections::hash_map::RandomState::new();
            let hashes: Vec<u64> = ops.iter().map(|op| state.hash_one(op_id(op))).collect();
            assert_eq!(repeated_ids(&ops, &hashes), naive, "n = {n}");
            // Every hash colliding: the ids themselves decide.
            assert_eq!(repeated_ids(&ops, &vec![7; n]), naive, "n = {n}, colliding");
        }
    }
}
