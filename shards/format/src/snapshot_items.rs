//! The payload of a version-2 snapshot: a stream of items, each `tag u8 | body length
//! (LEB128) | body`, in this order: one `meta`, one `names`, a `machine` per stored machine
//! version, one `stats`, one `epochs`, an `instance` per instance (in no particular order),
//! and one `end`. docs/wal.md gives every body's fields; the engine (`shards::engine`) writes
//! and reads them with the primitives here.
//!
//! A reader takes the payload in chunks of any size ([`ItemSplitter`]): an item that crosses
//! a chunk boundary is carried over (one item is held whole at most, `SNAPSHOT_ITEM_BYTES_MAX`,
//! checked before anything is buffered); nothing else is buffered.
//!
//! Integers are unsigned LEB128 (at most 10 bytes); strings and byte strings are a LEB128
//! length and the bytes.

use crate::limits::SNAPSHOT_ITEM_BYTES_MAX;

/// `meta`: instance count, name count, machine count (what the rest holds).
pub const TAG_META: u8 = 1;
/// `names`: the engine's interned names, in id order.
pub const TAG_NAMES: u8 = 2;
/// `machine`: one stored machine version, as a binary log entry of kind 1 (docs/wal.md).
pub const TAG_MACHINE: u8 = 3;
/// `stats`: the engine's counters.
pub const TAG_STATS: u8 = 4;
/// `epochs`: the replication epoch history.
pub const TAG_EPOCHS: u8 = 5;
/// `instance`: one instance record with its history and idempotency records.
pub const TAG_INSTANCE: u8 = 6;
/// `end`: the number of instance items written; nothing follows.
pub const TAG_END: u8 = 7;

/// Appends `v` as unsigned LEB128.
pub fn put_uint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// Appends one item: tag, body length, body.
pub fn put_item(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    put_bytes(out, body);
}

/// Reads the fields of one item body in order. Errors name the byte where reading stopped.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} (byte {})", self.pos))
    }

    pub fn byte(&mut self) -> Result<u8, String> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => self.fail("unexpected end of item"),
        }
    }

    pub fn uint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return self.fail("integer overflows 64 bits");
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.fail("integer longer than 10 bytes")
    }

    pub fn u32(&mut self) -> Result<u32, String> {
        let v = self.uint()?;
        u32::try_from(v).or_else(|_| self.fail("integer does not fit 32 bits"))
    }

    /// A count or length that must fit `usize`.
    pub fn len(&mut self) -> Result<usize, String> {
        let v = self.uint()?;
        usize::try_from(v).or_else(|_| self.fail("length does not fit"))
    }

    /// `n` raw bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        match self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
        {
            Some(end) => {
                let b = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(b)
            }
            None => self.fail("length runs past the item"),
        }
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.len()?;
        self.take(n)
    }

    pub fn str(&mut self) -> Result<&'a str, String> {
        let b = self.bytes()?;
        std::str::from_utf8(b).or_else(|_| self.fail("string is not UTF-8"))
    }

    pub fn is_empty(&self) -> bool {
        self.pos == self.bytes.len()
    }

    /// Bytes not read yet (a bound on the items a count may announce: each takes a byte).
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Every byte was read.
    pub fn end(&self) -> Result<(), String> {
        match self.is_empty() {
            true => Ok(()),
            false => self.fail("bytes after the last field"),
        }
    }
}

/// What the head of an item says, once it is whole: tag, body length, head length.
fn head(buf: &[u8]) -> Result<Option<(u8, usize, usize)>, String> {
    let Some(&tag) = buf.first() else {
        return Ok(None);
    };
    if !(TAG_META..=TAG_END).contains(&tag) {
        return Err(format!("unknown snapshot item tag {tag}"));
    }
    let mut len: u64 = 0;
    for (i, &b) in buf[1..].iter().enumerate().take(10) {
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if len > SNAPSHOT_ITEM_BYTES_MAX as u64 {
                return Err(format!(
                    "snapshot item of {len} bytes is over the limit of {SNAPSHOT_ITEM_BYTES_MAX}"
                ));
            }
            return Ok(Some((tag, len as usize, i + 2)));
        }
    }
    match buf.len() > 11 {
        true => Err("snapshot item length longer than 10 bytes".into()),
        false => Ok(None),
    }
}

/// Cuts a payload fed in chunks of any size into whole items (see the module doc).
#[derive(Debug, Default)]
pub struct ItemSplitter {
    /// The start of an item the previous chunk ended inside.
    carry: Vec<u8>,
    ended: bool,
}

/// Called with each whole item: tag and body.
pub type OnItem<'f> = &'f mut dyn FnMut(u8, &[u8]) -> Result<(), String>;

impl ItemSplitter {
    /// Hands every item completed by `chunk` to `on`, in order; keeps an unfinished one.
    pub fn feed(&mut self, mut chunk: &[u8], on: OnItem<'_>) -> Result<(), String> {
        if !self.carry.is_empty() {
            chunk = self.finish_carried(chunk, on)?;
        }
        while !chunk.is_empty() {
            match head(chunk)? {
                Some((tag, len, hl)) if chunk.len() - hl >= len => {
                    self.item(tag, &chunk[hl..hl + len], on)?;
                    chunk = &chunk[hl + len..];
                }
                _ => {
                    self.carry.extend_from_slice(chunk);
                    break;
                }
            }
        }
        Ok(())
    }

    /// Completes the carried item from the front of `chunk`; returns the rest of the chunk.
    fn finish_carried<'c>(
        &mut self,
        mut chunk: &'c [u8],
        on: OnItem<'_>,
    ) -> Result<&'c [u8], String> {
        loop {
            match head(&self.carry)? {
                Some((tag, len, hl)) => {
                    let want = hl + len - self.carry.len();
                    let take = want.min(chunk.len());
                    self.carry.reserve_exact(want);
                    self.carry.extend_from_slice(&chunk[..take]);
                    if take < want {
                        return Ok(&[]);
                    }
                    let carried = std::mem::take(&mut self.carry);
                    self.item(tag, &carried[hl..], on)?;
                    return Ok(&chunk[take..]);
                }
                // The head itself is cut: one more byte of it.
                None => match chunk.split_first() {
                    Some((&b, rest)) => {
                        self.carry.push(b);
                        chunk = rest;
                    }
                    None => return Ok(&[]),
                },
            }
        }
    }

    fn item(&mut self, tag: u8, body: &[u8], on: OnItem<'_>) -> Result<(), String> {
        if self.ended {
            return Err("snapshot item after the end item".into());
        }
        self.ended = tag == TAG_END;
        on(tag, body)
    }

    /// The payload is over: no item may be left unfinished, and the last was the end item.
    pub fn finish(&self) -> Result<(), String> {
        if !self.carry.is_empty() {
            return Err(format!(
                "the snapshot ends inside an item ({} bytes of it)",
                self.carry.len()
            ));
        }
        match self.ended {
            true => Ok(()),
            false => Err("the snapshot has no end item".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn integers_round_trip_at_their_edges() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_uint(&mut out, v);
            let mut c = Cursor::new(&out);
            assert_eq!(c.uint(), Ok(v));
            assert!(c.end().is_ok());
        }
        let mut c = Cursor::new(&[0xff; 10]);
        assert!(c.uint().unwrap_err().contains("overflows"));
        let mut c = Cursor::new(&[0x80]);
        assert!(c.uint().unwrap_err().contains("end of item"));
    }

    #[test]
    fn strings_check_utf8_and_length() {
        let mut out = Vec::new();
        put_str(&mut out, "héllo");
        put_bytes(&mut out, &[0xff]);
        let mut c = Cursor::new(&out);
        assert_eq!(c.str(), Ok("héllo"));
        assert!(c.str().unwrap_err().contains("UTF-8"));
        let mut c = Cursor::new(&[5, b'a']);
        assert!(c.bytes().unwrap_err().contains("past the item"));
    }

    fn items(n: usize) -> (Vec<u8>, Vec<(u8, Vec<u8>)>) {
        let mut out = Vec::new();
        let mut want = Vec::new();
        for i in 0..n {
            let body: Vec<u8> = (0..(i * 37) % 300).map(|b| b as u8).collect();
            put_item(&mut out, TAG_INSTANCE, &body);
            want.push((TAG_INSTANCE, body));
        }
        put_item(&mut out, TAG_END, &[n as u8]);
        want.push((TAG_END, vec![n as u8]));
        (out, want)
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_items(cuts in prop::collection::vec(0usize..4000, 0..12)) {
            let (payload, want) = items(20);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % payload.len()).collect();
            cuts.sort_unstable();
            let mut got = Vec::new();
            let mut s = ItemSplitter::default();
            let mut at = 0;
            for cut in cuts.into_iter().chain([payload.len()]) {
                s.feed(&payload[at..cut], &mut |t, b| { got.push((t, b.to_vec())); Ok(()) }).unwrap();
                at = cut;
            }
            s.finish().unwrap();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn damage_is_named() {
        let mut s = ItemSplitter::default();
        assert!(s
            .feed(&[9, 0], &mut |_, _| Ok(()))
            .unwrap_err()
            .contains("tag 9"));
        let mut s = ItemSplitter::default();
        let mut huge = vec![TAG_INSTANCE];
        put_uint(&mut huge, SNAPSHOT_ITEM_BYTES_MAX as u64 + 1);
        assert!(s
            .feed(&huge, &mut |_, _| Ok(()))
            .unwrap_err()
            .contains("over the limit"));
        let (payload, _) = items(3);
        let mut s = ItemSplitter::default();
        s.feed(&payload[..payload.len() - 1], &mut |_, _| Ok(()))
            .unwrap();
        assert!(s.finish().unwrap_err().contains("inside an item"));
        let mut s = ItemSplitter::default();
        let mut twice = payload.clone();
        twice.extend_from_slice(&payload);
        assert!(s
            .feed(&twice, &mut |_, _| Ok(()))
            .unwrap_err()
            .contains("after the end"));
        let mut s = ItemSplitter::default();
        s.feed(&payload[..payload.len() - 3], &mut |_, _| Ok(()))
            .unwrap();
        assert!(s.finish().is_err());
    }
}
