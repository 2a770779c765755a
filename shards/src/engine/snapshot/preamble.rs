//! The items of a version-2 snapshot before its instances, and the `end` item: the state that
//! is not per instance, written whole when a walk begins (it is bounded by the definitions,
//! not by the instances).
//!
//! | item | body |
//! |---|---|
//! | `meta` | instance count, name count, machine count |
//! | `names` | count, then each name (a string), in id order |
//! | `machine` | one stored machine version as a binary log entry of kind 1 (docs/wal.md) |
//! | `stats` | four lists, each a count then its rows: events applied `(machine, n)`, transitions `(machine, from, to, n)`, instances by state `(machine, state, n)`, timer fires `(machine, n)`; then, only when either is not empty, migrations `(machine, n)` and retention deletions `(machine, n)`; names as strings |
//! | `epochs` | count, then `(epoch, offset)` pairs, ascending; then, only when some slot was moved in, count and `(lo, hi, offset)` triples, ascending |
//! | `end` | the number of instance items written |

use smdb_format::snapshot_items::{
    put_item, put_str, put_uint, Cursor, TAG_END, TAG_EPOCHS, TAG_MACHINE, TAG_META, TAG_NAMES,
    TAG_STATS,
};

use crate::engine::moves::MovedIn;
use crate::engine::names::{Interner, Name};
use crate::engine::{Engine, EngineStats, Entry};

/// What the `meta` item announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) instances: u64,
    pub(crate) names: u64,
    pub(crate) machines: u64,
}

impl Meta {
    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<Meta, String> {
        let meta = Meta {
            instances: c.uint()?,
            names: c.uint()?,
            machines: c.uint()?,
        };
        c.end()?;
        Ok(meta)
    }
}

/// Appends every item before the instances, for the state `engine` holds now.
pub(crate) fn put_preamble(out: &mut Vec<u8>, engine: &Engine, scratch: &mut Vec<u8>) {
    let machines = engine.machine_entries();
    scratch.clear();
    put_uint(scratch, engine.instances.len() as u64);
    put_uint(scratch, engine.names.len() as u64);
    put_uint(scratch, machines.len() as u64);
    put_item(out, TAG_META, scratch);

    scratch.clear();
    put_uint(scratch, engine.names.len() as u64);
    for name in engine.names.names() {
        put_str(scratch, name);
    }
    put_item(out, TAG_NAMES, scratch);

    for machine in &machines {
        scratch.clear();
        machine.encode(scratch);
        put_item(out, TAG_MACHINE, scratch);
    }

    scratch.clear();
    put_stats(scratch, &engine.stats);
    put_item(out, TAG_STATS, scratch);

    scratch.clear();
    put_uint(scratch, engine.epochs.len() as u64);
    for &(epoch, offset) in &engine.epochs {
        put_uint(scratch, epoch);
        put_uint(scratch, offset);
    }
    // The slots' latest move-ins (`engine::moves::MovedIn`) follow the epochs only when there
    // are any, so a snapshot of an engine that never moved a slot in is what it was before.
    let moved_in = engine.moved_in.ranges();
    if !moved_in.is_empty() {
        put_uint(scratch, moved_in.len() as u64);
        for &(lo, hi, offset) in moved_in {
            put_uint(scratch, u64::from(lo));
            put_uint(scratch, u64::from(hi));
            put_uint(scratch, offset);
        }
    }
    put_item(out, TAG_EPOCHS, scratch);
}

pub(crate) fn put_end(out: &mut Vec<u8>, instances: u64) {
    let mut body = Vec::with_capacity(10);
    put_uint(&mut body, instances);
    put_item(out, TAG_END, &body);
}

fn put_stats(out: &mut Vec<u8>, s: &EngineStats) {
    put_uint(out, s.events_applied.len() as u64);
    for (m, n) in &s.events_applied {
        put_str(out, m);
        put_uint(out, *n);
    }
    put_uint(out, s.transitions.len() as u64);
    for ((m, from, to), n) in &s.transitions {
        for name in [m, from, to] {
            put_str(out, name);
        }
        put_uint(out, *n);
    }
    put_uint(out, s.by_state.len() as u64);
    for ((m, state), n) in &s.by_state {
        put_str(out, m);
        put_str(out, state);
        put_uint(out, *n);
    }
    put_uint(out, s.timers_fired.len() as u64);
    for (m, n) in &s.timers_fired {
        put_str(out, m);
        put_uint(out, *n);
    }
    // Written only when counted, so snapshots without migrations keep their old bytes.
    if !s.migrated.is_empty() || !s.expired.is_empty() {
        for list in [&s.migrated, &s.expired] {
            put_uint(out, list.len() as u64);
            for (m, n) in list {
                put_str(out, m);
                put_uint(out, *n);
            }
        }
    }
}

/// Reads the `names` item into `names` (an empty interner): each name gets its position as id.
pub(crate) fn read_names(c: &mut Cursor<'_>, names: &mut Interner) -> Result<(), String> {
    let n = c.len()?;
    for i in 0..n {
        let (_, id) = names.intern_with_id(c.str()?);
        if id as usize != i {
            return Err(format!("name {i} repeats name {id}"));
        }
    }
    c.end()
}

/// Reads a `machine` item into `engine` (compiled, as `apply` stores one).
pub(crate) fn read_machine(body: &[u8], engine: &mut Engine) -> Result<(), String> {
    let entry = Entry::decode(body).map_err(|e| format!("machine item: {e}"))?;
    let Entry::PutMachine {
        machine, version, ..
    } = &entry
    else {
        return Err("a machine item holds another kind of entry".into());
    };
    let what = format!("machine `{machine}` v{version}");
    match engine.store_machine(entry) {
        Ok(_) => Ok(()),
        Err(reason) => Err(format!("snapshot {what}: {reason}")),
    }
}

/// Reads the `stats` item; names already interned in `names` are shared with it.
pub(crate) fn read_stats(c: &mut Cursor<'_>, names: &Interner) -> Result<EngineStats, String> {
    let name = |c: &mut Cursor<'_>| -> Result<Name, String> {
        let s = c.str()?;
        Ok(match names.get_id(s) {
            Some(id) => names.name(id).clone(),
            None => Name::from(s),
        })
    };
    let mut stats = EngineStats::default();
    for _ in 0..c.len()? {
        let m = name(c)?;
        stats.events_applied.insert(m, c.uint()?);
    }
    for _ in 0..c.len()? {
        let key = (name(c)?, name(c)?, name(c)?);
        stats.transitions.insert(key, c.uint()?);
    }
    for _ in 0..c.len()? {
        let key = (name(c)?, name(c)?);
        stats.by_state.insert(key, c.uint()?);
    }
    for _ in 0..c.len()? {
        let m = name(c)?;
        stats.timers_fired.insert(m, c.uint()?);
    }
    if c.remaining() > 0 {
        for list in [&mut stats.migrated, &mut stats.expired] {
            for _ in 0..c.len()? {
                let m = name(c)?;
                list.insert(m, c.uint()?);
            }
        }
    }
    c.end()?;
    Ok(stats)
}

/// The `epochs` item: the epoch history, then, when any, the slots' latest move-ins.
pub(crate) fn read_epochs(c: &mut Cursor<'_>) -> Result<(Vec<(u64, u64)>, MovedIn), String> {
    let n = c.len()?;
    let mut epochs = Vec::with_capacity(n.min(c.remaining()));
    for _ in 0..n {
        epochs.push((c.uint()?, c.uint()?));
    }
    let mut moved_in = Vec::new();
    if c.remaining() > 0 {
        let n = c.len()?;
        moved_in.reserve(n.min(c.remaining()));
        let slot = |c: &mut Cursor<'_>| {
            u16::try_from(c.uint()?).map_err(|_| "snapshot moved-in slot out of range".to_string())
        };
        for _ in 0..n {
            moved_in.push((slot(c)?, slot(c)?, c.uint()?));
        }
    }
    c.end()?;
    let moved_in =
        MovedIn::from_ranges(moved_in).ok_or("snapshot moved-in slots are not sorted ranges")?;
    Ok((epochs, moved_in))
}

pub(crate) fn read_end(c: &mut Cursor<'_>) -> Result<u64, String> {
    let n = c.uint()?;
    c.end()?;
    Ok(n)
}
