//! The binary form of a log entry (what the WAL stores since entry format 2) and the decoder
//! that also reads format 1, the JSON form of `Entry`.
//!
//! Layout: one kind byte, then the fields of that kind in a fixed order:
//!
//! | kind | fields |
//! |---|---|
//! | 1 machine | version, at_ms, machine, checksum, definition |
//! | 2 create  | version, at_ms, id, machine, state, ?idempotency_key, context |
//! | 3 apply   | at_ms, instance_id, event, from, to, ?idempotency_key, ?machine, ?version, ?payload, [flags] |
//! | 4 delete  | at_ms, id, [machine, reason] |
//! | 5 batch   | count, then `count` times: length, entry (kinds 2-4, no nesting) |
//! | 6 epoch   | epoch |
//! | 7 migrate | at_ms, from_version, to_version, id, machine, from_state, to_state |
//! | 8 import  | at_ms, move_id, lo, hi, id, ?image |
//! | 9 move_in | at_ms, move_id, lo, hi, map_epoch |
//! | 10 drop_staged | at_ms, move_id |
//! | 11 slots_moved_out | at_ms, map_epoch, lo, hi, to |
//!
//! Integers are unsigned LEB128; strings are a LEB128 byte length and UTF-8; JSON values
//! (definition, context, payload) are a length and compact JSON text; `?x` is a presence byte
//! (0 or 1) followed by x when 1. `[flags]` is an optional trailing integer, written only when
//! non-zero (bit 0: applied by a timer), so entries without flags keep their old bytes and old
//! records read as flags 0. A delete's `[machine, reason]` is likewise written only when it has
//! them (reason 1: DELETE_INSTANCES, 2: retention, 3: moved; a reason without a machine is
//! written with an empty machine, which reads back as none). A JSON entry starts with `{`, which no kind byte equals, so
//! one decoder reads logs of either format. See docs/wal.md.

use std::fmt;

use serde_json::{Map, Value};

use super::{batch_records, BatchRecord, DeleteReason, Entry, EventRef};

const KIND_MACHINE: u8 = 1;
pub(super) const KIND_CREATE: u8 = 2;
pub(super) const KIND_APPLY: u8 = 3;
pub(super) const KIND_DELETE: u8 = 4;
pub(super) const KIND_BATCH: u8 = 5;
const KIND_EPOCH: u8 = 6;
const KIND_MIGRATE: u8 = 7;
const KIND_IMPORT: u8 = 8;
const KIND_MOVE_IN: u8 = 9;
const KIND_DROP_STAGED: u8 = 10;
const KIND_SLOTS_MOVED_OUT: u8 = 11;
/// A delete's reason byte.
const REASON_DELETE: u8 = 1;
const REASON_RETENTION: u8 = 2;
const REASON_MOVED: u8 = 3;
/// APPLY flags bit: the event was applied by a timer.
const APPLY_FLAG_TIMER: u64 = 1;
/// First byte of a format-1 (JSON) entry.
const JSON_OPEN: u8 = b'{';
/// How a format-1 APPLY entry starts (serde writes the tag first).
const JSON_APPLY_PREFIX: &[u8] = br#"{"k":"apply""#;
/// How a JSON slots-moved-out entry starts.
const JSON_SLOTS_MOVED_OUT_PREFIX: &[u8] = br#"{"k":"slots_moved_out""#;
/// How a JSON batch entry starts.
const JSON_BATCH_PREFIX: &[u8] = br#"{"k":"batch""#;

/// Why a log record is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte position in the record where decoding stopped.
    pub at: usize,
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (byte {})", self.what, self.at)
    }
}

impl std::error::Error for DecodeError {}

/// A decoded log record: binary APPLY entries borrow from the record (the replay hot path);
/// everything else is an owned `Entry`.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    Event(EventRef<'a>),
    Entry(Entry),
}

impl<'a> Record<'a> {
    /// Reads a record in either format.
    pub fn decode(bytes: &'a [u8]) -> Result<Record<'a>, DecodeError> {
        if bytes.first() == Some(&KIND_APPLY) {
            let mut r = Reader { bytes, pos: 1 };
            let event = r.event()?;
            r.end()?;
            return Ok(Record::Event(event));
        }
        Entry::decode(bytes).map(Record::Entry)
    }

    /// The epoch an encoded record begins, when it is an epoch entry (binary format; other
    /// records are told apart by their first byte, without decoding). The log starts a
    /// segment at each (docs/wal.md "Epoch segments").
    pub fn epoch_begun(bytes: &[u8]) -> Option<u64> {
        if bytes.first() != Some(&KIND_EPOCH) {
            return None;
        }
        match Entry::decode(bytes) {
            Ok(Entry::Epoch { epoch }) => Some(epoch),
            _ => None,
        }
    }

    /// The owned entry this record holds.
    pub fn into_entry(self) -> Entry {
        match self {
            Record::Event(ev) => ev.to_entry(),
            Record::Entry(entry) => entry,
        }
    }
}

/// The instance a binary CREATE, APPLY or DELETE record is about, read without decoding the
/// `bytes` as text: ASCII after a plain byte check, the rest by `from_utf8`. Names, ids and
/// most payloads are ASCII; this skips `from_utf8`'s general path for them (the log's reader
/// and the front's byte scans both read such strings).
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    if bytes.is_ascii() {
        // SAFETY: every byte is ASCII (checked just above), and ASCII is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes)
}

/// rest; None for a machine entry, a JSON (format 1) entry, or bytes that do not get that far.
pub(crate) fn record_instance_id(bytes: &[u8]) -> Option<&str> {
    let mut r = Reader { bytes, pos: 1 };
    match *bytes.first()? {
        KIND_CREATE => {
            r.uint().ok()?;
            r.uint().ok()?;
        }
        KIND_APPLY | KIND_DELETE => {
            r.uint().ok()?;
        }
        KIND_MIGRATE => {
            r.uint().ok()?;
            r.uint().ok()?;
            r.uint().ok()?;
        }
        _ => return None,
    }
    r.str().ok()
}

impl EventRef<'_> {
    /// Appends the binary form of the APPLY entry this event is (`Entry::encode`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(KIND_APPLY);
        put_uint(out, self.at_ms);
        put_str(out, self.instance_id);
        put_str(out, self.event);
        put_str(out, self.from);
        put_str(out, self.to);
        put_opt(out, self.idempotency_key, put_str);
        put_opt(out, self.machine, put_str);
        put_opt(out, self.version.map(u64::from), put_uint);
        put_opt(out, self.payload, put_str);
        if self.timer {
            put_uint(out, APPLY_FLAG_TIMER);
        }
    }
}

impl Entry {
    /// Appends the binary form of this entry to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Entry::PutMachine {
                machine,
                version,
                definition,
                checksum,
                at_ms,
            } => {
                out.push(KIND_MACHINE);
                put_uint(out, u64::from(*version));
                put_uint(out, *at_ms);
                put_str(out, machine);
                put_str(out, checksum);
                put_json(out, definition);
            }
            Entry::Create {
                id,
                machine,
                version,
                state,
                context,
                idempotency_key,
                at_ms,
            } => {
                out.push(KIND_CREATE);
                put_uint(out, u64::from(*version));
                put_uint(out, *at_ms);
                put_str(out, id);
                put_str(out, machine);
                put_str(out, state);
                put_opt(out, idempotency_key.as_deref(), put_str);
                put_json(out, context);
            }
            Entry::Apply { .. } => {
                if let Some(ev) = self.as_event() {
                    ev.encode(out);
                }
            }
            Entry::Delete {
                id,
                at_ms,
                machine,
                reason,
            } => {
                out.push(KIND_DELETE);
                put_uint(out, *at_ms);
                put_str(out, id);
                if machine.is_some() || reason.is_some() {
                    put_str(out, machine.as_deref().unwrap_or(""));
                    out.push(match reason {
                        Some(DeleteReason::Retention) => REASON_RETENTION,
                        Some(DeleteReason::Moved) => REASON_MOVED,
                        _ => REASON_DELETE,
                    });
                }
            }
            Entry::Migrate {
                id,
                machine,
                from_version,
                to_version,
                from_state,
                to_state,
                at_ms,
            } => {
                out.push(KIND_MIGRATE);
                put_uint(out, *at_ms);
                put_uint(out, u64::from(*from_version));
                put_uint(out, u64::from(*to_version));
                put_str(out, id);
                put_str(out, machine);
                put_str(out, from_state);
                put_str(out, to_state);
            }
            Entry::Batch { entries } => {
                let mut batch = BatchRecord::new();
                for entry in entries {
                    batch.push_entry(entry);
                }
                batch.finish_into(out);
            }
            Entry::Epoch { epoch } => {
                out.push(KIND_EPOCH);
                put_uint(out, *epoch);
            }
            Entry::Import { .. }
            | Entry::MoveIn { .. }
            | Entry::DropStaged { .. }
            | Entry::SlotsMovedOut { .. } => self.encode_move(out),
        }
    }

    /// The binary form of a slot move's entry (kinds 8-11).
    fn encode_move(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Import {
                move_id,
                lo,
                hi,
                id,
                image,
                at_ms,
            } => {
                out.push(KIND_IMPORT);
                put_uint(out, *at_ms);
                put_uint(out, *move_id);
                put_uint(out, u64::from(*lo));
                put_uint(out, u64::from(*hi));
                put_str(out, id);
                put_opt(out, image.as_deref(), put_str);
            }
            Entry::MoveIn {
                move_id,
                lo,
                hi,
                map_epoch,
                at_ms,
            } => {
                out.push(KIND_MOVE_IN);
                put_uint(out, *at_ms);
                put_uint(out, *move_id);
                put_uint(out, u64::from(*lo));
                put_uint(out, u64::from(*hi));
                put_uint(out, *map_epoch);
            }
            Entry::DropStaged { move_id, at_ms } => {
                out.push(KIND_DROP_STAGED);
                put_uint(out, *at_ms);
                put_uint(out, *move_id);
            }
            Entry::SlotsMovedOut {
                lo,
                hi,
                to,
                map_epoch,
                at_ms,
            } => {
                out.push(KIND_SLOTS_MOVED_OUT);
                put_uint(out, *at_ms);
                put_uint(out, *map_epoch);
                put_uint(out, u64::from(*lo));
                put_uint(out, u64::from(*hi));
                put_str(out, to);
            }
            _ => {} // `encode` routes only the move kinds here.
        }
    }

    /// The binary form as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.encode(&mut out);
        out
    }

    /// Reads an entry in either format (binary, or the JSON of format 1).
    pub fn decode(bytes: &[u8]) -> Result<Entry, DecodeError> {
        match bytes.first() {
            Some(&JSON_OPEN) => serde_json::from_slice(bytes).map_err(|e| DecodeError {
                at: e.column(),
                what: format!("JSON entry: {e}"),
            }),
            Some(_) => {
                let mut r = Reader { bytes, pos: 0 };
                let entry = r.entry()?;
                r.end()?;
                Ok(entry)
            }
            None => Err(DecodeError {
                at: 0,
                what: "empty entry".into(),
            }),
        }
    }

    /// True when the record holds an atomic batch (binary or JSON), without decoding it.
    pub fn record_is_batch(bytes: &[u8]) -> bool {
        bytes.first() == Some(&KIND_BATCH) || bytes.starts_with(JSON_BATCH_PREFIX)
    }

    /// True when the record may push to subscriptions (an APPLY, a migration, a delete or a
    /// slots-moved-out entry, in either format), without decoding it.
    pub fn record_may_push(bytes: &[u8]) -> bool {
        matches!(
            bytes.first(),
            Some(&(KIND_APPLY | KIND_MIGRATE | KIND_DELETE | KIND_SLOTS_MOVED_OUT))
        ) || bytes.starts_with(JSON_APPLY_PREFIX)
            || bytes.starts_with(JSON_SLOTS_MOVED_OUT_PREFIX)
    }

    /// True when the record holds an APPLY entry (either format), without decoding it.
    pub fn record_is_event(bytes: &[u8]) -> bool {
        bytes.first() == Some(&KIND_APPLY) || bytes.starts_with(JSON_APPLY_PREFIX)
    }
}

pub(super) fn put_uint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_opt<T>(out: &mut Vec<u8>, v: Option<T>, put: fn(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put(out, v);
        }
    }
}

/// Writes `v` as length-prefixed compact JSON. Values of `serde_json` always serialize.
fn put_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let text = serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
    put_uint(out, text.len() as u64);
    out.extend_from_slice(&text);
}

pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(super) fn error(&self, what: impl Into<String>) -> DecodeError {
        DecodeError {
            at: self.pos,
            what: what.into(),
        }
    }

    fn entry(&mut self) -> Result<Entry, DecodeError> {
        let kind = self.byte()?;
        Ok(match kind {
            KIND_MACHINE => Entry::PutMachine {
                version: self.u32()?,
                at_ms: self.uint()?,
                machine: self.string()?,
                checksum: self.string()?,
                definition: self.json()?,
            },
            KIND_CREATE => Entry::Create {
                version: self.u32()?,
                at_ms: self.uint()?,
                id: self.string()?,
                machine: self.string()?,
                state: self.string()?,
                idempotency_key: self.opt(Self::string)?,
                context: self.json::<Map<String, Value>>()?,
            },
            KIND_APPLY => self.event()?.to_entry(),
            KIND_DELETE => self.delete()?,
            KIND_MIGRATE => Entry::Migrate {
                at_ms: self.uint()?,
                from_version: self.u32()?,
                to_version: self.u32()?,
                id: self.string()?,
                machine: self.string()?,
                from_state: self.string()?,
                to_state: self.string()?,
            },
            KIND_BATCH => self.batch()?,
            KIND_EPOCH => Entry::Epoch {
                epoch: self.uint()?,
            },
            KIND_IMPORT | KIND_MOVE_IN | KIND_DROP_STAGED => self.move_entry(kind)?,
            KIND_SLOTS_MOVED_OUT => Entry::SlotsMovedOut {
                at_ms: self.uint()?,
                map_epoch: self.uint()?,
                lo: self.u16()?,
                hi: self.u16()?,
                to: self.string()?,
            },
            other => {
                self.pos -= 1;
                return Err(self.error(format!("unknown entry kind {other}")));
            }
        })
    }

    /// The fields of a slot move's entry (kinds 8-10, after the kind byte).
    fn move_entry(&mut self, kind: u8) -> Result<Entry, DecodeError> {
        let (at_ms, move_id) = (self.uint()?, self.uint()?);
        if kind == KIND_DROP_STAGED {
            return Ok(Entry::DropStaged { move_id, at_ms });
        }
        let (lo, hi) = (self.u16()?, self.u16()?);
        Ok(if kind == KIND_IMPORT {
            Entry::Import {
                move_id,
                lo,
                hi,
                id: self.string()?,
                image: self.opt(Self::string)?,
                at_ms,
            }
        } else {
            Entry::MoveIn {
                move_id,
                lo,
                hi,
                map_epoch: self.uint()?,
                at_ms,
            }
        })
    }

    /// The fields of a DELETE entry (after its kind byte): its trailing machine and reason
    /// when written.
    fn delete(&mut self) -> Result<Entry, DecodeError> {
        let (at_ms, id) = (self.uint()?, self.string()?);
        let (mut machine, mut reason) = (None, None);
        if self.remaining() > 0 {
            // A damaged tail is reported where it starts.
            let tail = self.pos;
            let at_tail = |mut e: DecodeError| {
                e.at = tail;
                e
            };
            machine = Some(self.string().map_err(at_tail)?).filter(|m| !m.is_empty());
            reason = Some(match self.byte().map_err(at_tail)? {
                REASON_DELETE => DeleteReason::Delete,
                REASON_RETENTION => DeleteReason::Retention,
                REASON_MOVED => DeleteReason::Moved,
                other => {
                    return Err(at_tail(
                        self.error(format!("unknown delete reason {other}")),
                    ))
                }
            });
        }
        Ok(Entry::Delete {
            id,
            at_ms,
            machine,
            reason,
        })
    }

    /// The entries of a batch (after its kind byte, at `pos`), owned: `batch_records` over the
    /// whole record, each borrowed event copied out.
    fn batch(&mut self) -> Result<Entry, DecodeError> {
        let records = batch_records(&self.bytes[self.pos - 1..])?;
        self.pos = self.bytes.len();
        let entries = records.into_iter().map(Record::into_entry).collect();
        Ok(Entry::Batch { entries })
    }

    /// The fields of an APPLY entry (after its kind byte).
    fn event(&mut self) -> Result<EventRef<'a>, DecodeError> {
        let mut event = EventRef {
            at_ms: self.uint()?,
            instance_id: self.str()?,
            event: self.str()?,
            from: self.str()?,
            to: self.str()?,
            idempotency_key: self.opt(Self::str)?,
            machine: self.opt(Self::str)?,
            version: self.opt(Self::u32)?,
            payload: self.opt(Self::str)?,
            timer: false,
        };
        if self.pos < self.bytes.len() {
            let at = self.pos;
            match self.uint()? {
                APPLY_FLAG_TIMER => event.timer = true,
                other => {
                    return Err(DecodeError {
                        at,
                        what: format!("unknown apply flags {other}"),
                    })
                }
            }
        }
        Ok(event)
    }

    /// Fails when bytes remain after the entry.
    pub(super) fn end(&self) -> Result<(), DecodeError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            n => Err(self.error(format!("{n} bytes after the entry"))),
        }
    }

    pub(super) fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *(self.bytes.get(self.pos)).ok_or_else(|| self.error("entry ends early"))?;
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn uint(&mut self) -> Result<u64, DecodeError> {
        // Most integers here (lengths, presence, versions) fit one byte.
        if let Some(&b) = self.bytes.get(self.pos).filter(|b| **b < 0x80) {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7F);
            if shift == 63 && bits > 1 {
                return Err(self.error("integer overflows 64 bits"));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error("integer longer than 10 bytes"))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let v = self.uint()?;
        u32::try_from(v).map_err(|_| self.error(format!("{v} does not fit 32 bits")))
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let v = self.uint()?;
        u16::try_from(v).map_err(|_| self.error(format!("{v} does not fit 16 bits")))
    }

    pub(super) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.uint()?;
        let rest = self.bytes.len() - self.pos;
        let len = usize::try_from(len)
            .ok()
            .filter(|l| *l <= rest)
            .ok_or_else(|| self.error(format!("length {len} runs past the entry")))?;
        let out = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let start = self.pos;
        let b = self.bytes()?;
        utf8(b).map_err(|e| DecodeError {
            at: start,
            what: format!("string is not UTF-8: {e}"),
        })
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        self.str().map(str::to_owned)
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, DecodeError> {
        let start = self.pos;
        let b = self.bytes()?;
        serde_json::from_slice(b).map_err(|e| DecodeError {
            at: start,
            what: format!("JSON field: {e}"),
        })
    }

    fn opt<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        match self.byte()? {
            0 => Ok(None),
            1 => read(self).map(Some),
            other => {
                self.pos -= 1;
                Err(self.error(format!("presence byte {other} is neither 0 nor 1")))
            }
        }
    }
}

#[cfg(test)]
mod tests;
