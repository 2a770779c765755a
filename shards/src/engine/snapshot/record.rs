//! One instance in a version-2 snapshot: the body of an `instance` item.
//!
//! Fields in order (integers LEB128, strings length-prefixed, names by their id in the
//! snapshot's `names` item, values as in `value.rs`):
//! `id`, `machine`, `version`, `state`, `created_at_ms`, `updated_at_ms`, `event_count`,
//! `wal_offset`, `entered_at_ms`, `entered_offset`; the context (member count, then each name
//! and value in name order); the history (item count, then when not zero the items' bytes as
//! the instance's ring stores them: per item a 28-byte header and its payload text, docs/wal.md);
//! the idempotency records (a flags integer: bit 0 a creation key follows as key and result,
//! bit 1 APPLY keys follow as a count and (key, result) pairs, oldest first).
//!
//! `timer_due_ms` is not written: timers are rebuilt from the state (as in format 1).

use serde_json::Value;
use smdb_format::snapshot_items::{put_str, put_uint, Cursor};

use super::value::{put_value, value};
use crate::engine::context::Context;
use crate::engine::history::History;
use crate::engine::idempotency::IdempotencyStore;
use crate::engine::instance::{CreatedWithKey, InstanceRecord, Keys};
use crate::engine::names::{Interner, Name};
use crate::engine::{Instance, SmallStr};

const KEYS_CREATED: u64 = 1;
const KEYS_EVENTS: u64 = 2;

/// Appends the item body of `r` to `out`; its names are ids of `names` (the engine's).
pub(crate) fn put_record(out: &mut Vec<u8>, r: &InstanceRecord, names: &Interner) {
    let i = &r.instance;
    put_str(out, &i.id);
    put_name(out, &i.machine, names);
    put_uint(out, u64::from(i.version));
    put_name(out, &i.state, names);
    for n in [
        i.created_at_ms,
        i.updated_at_ms,
        i.event_count,
        i.wal_offset,
    ] {
        put_uint(out, n);
    }
    put_uint(out, r.entered_at_ms);
    put_uint(out, r.entered_offset);
    put_uint(out, i.context.len() as u64);
    for (k, v) in i.context.iter() {
        put_str(out, k);
        put_value(out, v);
    }
    put_history(out, r.history.as_deref());
    put_keys(out, r.keys.as_deref());
}

/// A name by its id. Every name an instance holds was interned by `apply` or a restore, so
/// the id exists; were one missing, the id past the end makes the snapshot fail to load (a
/// loud error on restart) instead of naming another state.
fn put_name(out: &mut Vec<u8>, name: &Name, names: &Interner) {
    let id = names.get_id(name).map_or(u64::MAX, u64::from);
    put_uint(out, id);
}

fn put_history(out: &mut Vec<u8>, history: Option<&History>) {
    let Some((items, a, b)) = history.map(History::raw).filter(|(n, _, _)| *n > 0) else {
        put_uint(out, 0);
        return;
    };
    put_uint(out, items as u64);
    put_uint(out, (a.len() + b.len()) as u64);
    out.extend_from_slice(a);
    out.extend_from_slice(b);
}

fn put_keys(out: &mut Vec<u8>, keys: Option<&Keys>) {
    let created = keys.and_then(|k| k.created.as_ref());
    let events = keys.map(|k| &k.events).filter(|e| e.len() > 0);
    let flags =
        u64::from(created.is_some()) * KEYS_CREATED + u64::from(events.is_some()) * KEYS_EVENTS;
    put_uint(out, flags);
    if let Some(c) = created {
        put_str(out, &c.key);
        put_value(out, &c.result);
    }
    if let Some(events) = events {
        put_uint(out, events.len() as u64);
        for (k, v) in events.iter() {
            put_str(out, k);
            put_value(out, v);
        }
    }
}

/// Reads an instance item body; `names` are the snapshot's names by id.
pub(crate) fn record(c: &mut Cursor<'_>, names: &[Name]) -> Result<InstanceRecord, String> {
    let name = |c: &mut Cursor<'_>| -> Result<Name, String> {
        let id = c.uint()?;
        (usize::try_from(id).ok().and_then(|i| names.get(i)))
            .cloned()
            .ok_or_else(|| format!("unknown name id {id}"))
    };
    let id = SmallStr::from(c.str()?);
    let machine = name(c)?;
    let version = c.u32()?;
    let state = name(c)?;
    let instance = Instance {
        id,
        machine,
        version,
        state,
        created_at_ms: c.uint()?,
        updated_at_ms: c.uint()?,
        event_count: c.uint()?,
        wal_offset: c.uint()?,
        context: Context::new(),
    };
    let entered_at_ms = c.uint()?;
    let entered_offset = c.uint()?;
    let context = context(c)?;
    let history = history(c, names.len())?;
    let keys = keys(c)?;
    c.end()?;
    Ok(InstanceRecord {
        instance: Instance {
            context,
            ..instance
        },
        history,
        keys,
        entered_at_ms,
        entered_offset,
        timer_due_ms: 0,
    })
}

fn context(c: &mut Cursor<'_>) -> Result<Context, String> {
    let n = c.len()?;
    let mut members = Vec::with_capacity(n.min(c.remaining()));
    for _ in 0..n {
        let k = SmallStr::from(c.str()?);
        members.push((k, value(c)?));
    }
    Context::from_sorted(members)
}

fn history(c: &mut Cursor<'_>, names: usize) -> Result<Option<Box<History>>, String> {
    let items = c.len()?;
    if items == 0 {
        return Ok(None);
    }
    let bytes = c.bytes()?;
    Ok(Some(Box::new(History::from_raw(items, bytes, names)?)))
}

fn keys(c: &mut Cursor<'_>) -> Result<Option<Box<Keys>>, String> {
    let flags = c.uint()?;
    if flags & !(KEYS_CREATED | KEYS_EVENTS) != 0 {
        return Err(format!("unknown idempotency flags {flags}"));
    }
    if flags == 0 {
        return Ok(None);
    }
    let mut keys = Keys::default();
    if flags & KEYS_CREATED != 0 {
        let key = c.str()?.to_owned();
        let result = value(c)?;
        keys.created = Some(CreatedWithKey { key, result });
    }
    if flags & KEYS_EVENTS != 0 {
        keys.events = events(c)?;
    }
    Ok(Some(Box::new(keys)))
}

fn events(c: &mut Cursor<'_>) -> Result<IdempotencyStore, String> {
    let n = c.len()?;
    let mut store = IdempotencyStore::default();
    for _ in 0..n {
        let key = c.str()?.to_owned();
        let result: Value = value(c)?;
        store.insert(key, result);
    }
    if store.len() != n {
        return Err("idempotency keys repeat or exceed the limit".into());
    }
    Ok(store)
}
