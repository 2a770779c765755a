//! The binary batch record (kind 5: a count, then each entry as a length and its bytes), built
//! entry by entry as a batch is decided and read back with its APPLY entries borrowed: the live
//! BATCH path never builds owned `Entry`s for its events, as the single APPLY path does not.

use super::codec::{put_uint, Reader, KIND_APPLY, KIND_BATCH, KIND_CREATE, KIND_DELETE};
use super::{DecodeError, Entry, EventRef, Record};

/// A batch record being written: entries go in as they are decided; `finish` gives the record.
#[derive(Debug, Default)]
pub struct BatchRecord {
    body: Vec<u8>,
    inner: Vec<u8>,
    count: u64,
}

/// Bytes reserved per op for a batch record's body: an APPLY entry with short ids and a small
/// payload is ~100 bytes, so the body of the common batch is allocated once, not grown by
/// doubling (eight reallocations and copies for a batch of 10).
const BODY_BYTES_PER_OP_HINT: usize = 128;

/// Bytes reserved for the one entry being encoded (reused for every entry of the record).
const ENTRY_BYTES_HINT: usize = 256;

impl BatchRecord {
    pub fn new() -> BatchRecord {
        BatchRecord::default()
    }

    /// An empty record with room for about `ops` small entries.
    pub fn with_capacity(ops: usize) -> BatchRecord {
        BatchRecord {
            body: Vec::with_capacity(ops.saturating_mul(BODY_BYTES_PER_OP_HINT)),
            inner: Vec::with_capacity(ENTRY_BYTES_HINT),
            count: 0,
        }
    }

    /// Empties the record, keeping its buffers (a shard reuses one record for every batch).
    pub fn clear(&mut self) {
        self.body.clear();
        self.inner.clear();
        self.count = 0;
    }

    /// Bytes the record's buffers hold allocated.
    pub fn capacity(&self) -> usize {
        self.body.capacity() + self.inner.capacity()
    }

    /// Appends an APPLY entry, encoded straight from its borrowed fields.
    pub fn push_event(&mut self, ev: &EventRef<'_>) {
        self.inner.clear();
        ev.encode(&mut self.inner);
        self.seal();
    }

    /// Appends a CREATE, APPLY or DELETE entry (the decoder refuses other kinds in a batch).
    pub fn push_entry(&mut self, entry: &Entry) {
        self.inner.clear();
        entry.encode(&mut self.inner);
        self.seal();
    }

    fn seal(&mut self) {
        put_uint(&mut self.body, self.inner.len() as u64);
        self.body.extend_from_slice(&self.inner);
        self.count += 1;
    }

    /// Entries so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends the whole record (kind, count, entries) to `out`.
    pub fn finish_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.body.len() + 11);
        out.push(KIND_BATCH);
        put_uint(out, self.count);
        out.extend_from_slice(&self.body);
    }

    /// The whole record as a new buffer.
    pub fn finish(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 11);
        self.finish_into(&mut out);
        out
    }
}

/// The entries of a binary batch record in order, each APPLY borrowed from `bytes`
/// (`Record::Event`), the others owned. What `Entry::decode` accepts as a batch, this accepts.
pub fn batch_records(bytes: &[u8]) -> Result<Vec<Record<'_>>, DecodeError> {
    let mut r = Reader::new(bytes);
    if r.byte()? != KIND_BATCH {
        return Err(DecodeError {
            at: 0,
            what: "not a batch record".into(),
        });
    }
    let count = r.uint()?;
    if count > r.remaining() as u64 {
        return Err(r.error(format!("batch of {count} entries runs past the entry")));
    }
    let mut records = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let start = r.pos();
        let inner = r.bytes()?;
        if !matches!(
            inner.first(),
            Some(&(KIND_CREATE | KIND_APPLY | KIND_DELETE))
        ) {
            return Err(DecodeError {
                at: start,
                what: "a batch holds only create, apply and delete entries".into(),
            });
        }
        let record = Record::decode(inner).map_err(|e| DecodeError {
            at: r.pos() - inner.len() + e.at,
            what: format!("batch entry: {}", e.what),
        })?;
        records.push(record);
    }
    r.end()?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::JsonText;

    fn event(id: &str) -> Entry {
        Entry::Apply {
            instance_id: id.into(),
            event: "go".into(),
            from: "a".into(),
            to: "b".into(),
            payload: Some(JsonText::from_map(
                json!({"n": 1}).as_object().expect("object"),
            )),
            idempotency_key: Some("k".into()),
            at_ms: 7,
            machine: Some("m".into()),
            version: Some(2),
            timer: false,
        }
    }

    #[test]
    fn built_entry_by_entry_it_is_the_batch_entrys_bytes_and_reads_back() {
        let entries = vec![
            Entry::Create {
                id: "{t}:a".into(),
                machine: "m".into(),
                version: 1,
                state: "a".into(),
                context: json!({"x": "y"}).as_object().expect("object").clone(),
                idempotency_key: None,
                at_ms: 5,
            },
            event("{t}:a"),
            Entry::Delete {
                id: "{t}:b".into(),
                at_ms: 9,
                machine: None,
                reason: None,
            },
        ];
        let mut b = BatchRecord::new();
        b.push_entry(&entries[0]);
        b.push_event(&entries[1].as_event().expect("an event"));
        b.push_entry(&entries[2]);
        assert_eq!(b.len(), 3);
        let whole = Entry::Batch {
            entries: entries.clone(),
        };
        let bytes = b.finish();
        assert_eq!(bytes, whole.to_bytes());

        let read = batch_records(&bytes).expect("decodes");
        assert_eq!(read.len(), 3);
        assert_eq!(read[0], Record::Entry(entries[0].clone()));
        assert_eq!(
            read[1],
            Record::Event(entries[1].as_event().expect("event"))
        );
        assert_eq!(read[2], Record::Entry(entries[2].clone()));
    }

    #[test]
    fn damage_and_other_kinds_are_errors_not_panics() {
        let mut b = BatchRecord::new();
        b.push_entry(&event("x"));
        let good = b.finish();
        for cut in 0..good.len() {
            assert!(batch_records(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(batch_records(&longer).is_err());
        let mut huge_count = vec![KIND_BATCH];
        put_uint(&mut huge_count, u64::MAX);
        assert!(batch_records(&huge_count).is_err());
        let epoch = Entry::Epoch { epoch: 3 }.to_bytes();
        let mut nested = vec![KIND_BATCH, 1];
        put_uint(&mut nested, epoch.len() as u64);
        nested.extend_from_slice(&epoch);
        assert!(batch_records(&nested).is_err());
        assert!(batch_records(&Entry::Epoch { epoch: 3 }.to_bytes()).is_err());
    }
}
