//! The record codec: bytes in, bytes out, no I/O.
//!
//! Layout, little-endian: `len u32 | crc u32 | offset u64 | kind u8 | payload`, where `len` is
//! the length of the CRC-covered body `offset | kind | payload` (so at least 9) and `crc` is the
//! CRC32C of that body. A `len` of 0 is the end of the data (zero padding).

use std::ops::Range;

use crate::limits::{
    MARKER_BYTES, MARKER_PAYLOAD_BYTES, RECORD_BODY_OVERHEAD, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX,
};

/// An entry appended by the engine; consumes one offset.
pub const KIND_ENTRY: u8 = 1;
/// A sync marker: its offset field is the next entry's offset (it consumes none) and its payload
/// is `synced_through u64`: every entry up to that offset was covered by a completed fdatasync
/// before this record was written. Recovery uses it to tell a torn tail from lost synced data.
pub const KIND_SYNC_MARK: u8 = 2;

/// Bytes a record with a payload of `payload_len` bytes occupies.
pub const fn encoded_len(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// Appends one record to `out`. The caller has checked `payload.len()` against the limit.
pub fn encode(out: &mut Vec<u8>, offset: u64, kind: u8, payload: &[u8]) {
    assert!(
        payload.len() <= RECORD_PAYLOAD_BYTES_MAX,
        "record payload must be at most {RECORD_PAYLOAD_BYTES_MAX} bytes, got {}",
        payload.len()
    );
    let start = out.len();
    // Bounded by the assert above and the const assert in `limits`.
    let body_len = (RECORD_BODY_OVERHEAD + payload.len()) as u32;
    out.reserve(encoded_len(payload.len()));
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&offset.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A sync marker record saying every entry up to `synced_through` was synced; `next` is the
/// offset of the next entry.
pub fn encode_marker(next: u64, synced_through: u64) -> [u8; MARKER_BYTES] {
    let mut v = Vec::with_capacity(MARKER_BYTES);
    encode(&mut v, next, KIND_SYNC_MARK, &synced_through.to_le_bytes());
    let mut out = [0; MARKER_BYTES];
    out.copy_from_slice(&v);
    out
}

/// One decoded record; `payload` is relative to the slice given to `decode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub offset: u64,
    pub kind: u8,
    pub payload: Range<usize>,
    /// Bytes the whole record occupies.
    pub size: usize,
}

/// What the bytes at a position are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Record(Header),
    /// `len` is 0: the end of the data.
    End,
    /// A valid-looking start that needs this many bytes in total to decide.
    Incomplete(usize),
    /// Not a record: bad length, bad CRC or unknown kind.
    Bad(String),
}

/// Decodes the record at the start of `buf`, checking length bounds before asking for more
/// bytes and the CRC before trusting anything else.
pub fn decode(buf: &[u8]) -> Decoded {
    let Some(len_bytes) = buf.get(..4) else {
        return Decoded::Incomplete(4);
    };
    let body_len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    let body_len = body_len as usize;
    if body_len == 0 {
        return Decoded::End;
    }
    if !(RECORD_BODY_OVERHEAD..=RECORD_BODY_OVERHEAD + RECORD_PAYLOAD_BYTES_MAX).contains(&body_len)
    {
        return Decoded::Bad(format!("record length {body_len} out of range"));
    }
    let size = 8 + body_len;
    let Some(rec) = buf.get(..size) else {
        return Decoded::Incomplete(size);
    };
    let stored = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    let actual = crc32c::crc32c(&rec[8..]);
    if stored != actual {
        return Decoded::Bad(format!(
            "checksum mismatch (stored {stored:08x}, computed {actual:08x})"
        ));
    }
    let mut off = [0; 8];
    off.copy_from_slice(&rec[8..16]);
    let kind = rec[16];
    let payload = RECORD_HEADER_BYTES..size;
    match kind {
        KIND_ENTRY => {}
        KIND_SYNC_MARK if payload.len() == MARKER_PAYLOAD_BYTES => {}
        KIND_SYNC_MARK => return Decoded::Bad("sync marker with a bad payload length".into()),
        other => return Decoded::Bad(format!("unknown record kind {other}")),
    }
    Decoded::Record(Header {
        offset: u64::from_le_bytes(off),
        kind,
        payload,
        size,
    })
}

/// The `synced_through` value of a decoded sync marker.
pub fn marker_synced_through(payload: &[u8]) -> u64 {
    let mut b = [0; 8];
    let n = payload.len().min(8);
    b[..n].copy_from_slice(&payload[..n]);
    u64::from_le_bytes(b)
}

/// Finds the greatest `synced_through` among valid sync markers that start in `buf[..limit]`
/// and lie wholly inside `buf`. Used on the damaged tail of the newest segment.
pub fn max_marker_in(buf: &[u8], limit: usize) -> Option<(usize, u64)> {
    let mut best: Option<(usize, u64)> = None;
    let marker_len = (RECORD_BODY_OVERHEAD + MARKER_PAYLOAD_BYTES) as u8;
    let end = limit.min(buf.len().saturating_sub(MARKER_BYTES - 1));
    let mut i = 0;
    while i < end {
        // A marker starts with its body length, then 3 zero bytes.
        match buf[i..end].iter().position(|&b| b == marker_len) {
            None => break,
            Some(p) => i += p,
        }
        let cand = &buf[i..i + MARKER_BYTES];
        if cand[1..4] == [0, 0, 0] && cand[16] == KIND_SYNC_MARK {
            if let Decoded::Record(h) = decode(cand) {
                let synced = marker_synced_through(&cand[h.payload]);
                if best.is_none_or(|(_, s)| synced > s) {
                    best = Some((i, synced));
                }
            }
        }
        i += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wal_record_roundtrip_and_end() {
        let mut buf = Vec::new();
        encode(&mut buf, 41, KIND_ENTRY, b"hello");
        encode(&mut buf, 42, KIND_ENTRY, b"");
        buf.extend_from_slice(&[0; 8]);
        let Decoded::Record(a) = decode(&buf) else {
            panic!("first record")
        };
        assert_eq!(
            (a.offset, a.kind, &buf[a.payload.clone()]),
            (41, KIND_ENTRY, &b"hello"[..])
        );
        let Decoded::Record(b) = decode(&buf[a.size..]) else {
            panic!("second record")
        };
        assert_eq!((b.offset, b.payload.len()), (42, 0));
        assert_eq!(decode(&buf[a.size + b.size..]), Decoded::End);
    }

    #[test]
    fn wal_record_detects_flip_truncation_and_huge_length() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, KIND_ENTRY, b"payload");
        assert!(matches!(decode(&buf[..buf.len() - 1]), Decoded::Incomplete(n) if n == buf.len()));
        let mut flipped = buf.clone();
        flipped[20] ^= 1;
        assert!(matches!(decode(&flipped), Decoded::Bad(_)));
        let mut huge = buf.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&huge), Decoded::Bad(_)));
    }

    #[test]
    fn wal_marker_found_in_noise() {
        let mut buf = vec![0x11; 100];
        buf.extend_from_slice(&encode_marker(10, 9));
        buf.extend_from_slice(&[0x11, 0, 0, 0, 5]);
        buf.extend_from_slice(&encode_marker(12, 11));
        assert_eq!(
            max_marker_in(&buf, buf.len()),
            Some((100 + MARKER_BYTES + 5, 11))
        );
        assert_eq!(max_marker_in(&buf, 101), Some((100, 9)));
    }

    proptest! {
        #[test]
        fn wal_record_codec_roundtrips(offset in any::<u64>(),
                                       payload in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut buf = Vec::new();
            encode(&mut buf, offset, KIND_ENTRY, &payload);
            prop_assert_eq!(buf.len(), encoded_len(payload.len()));
            match decode(&buf) {
                Decoded::Record(h) => {
                    prop_assert_eq!(h.offset, offset);
                    prop_assert_eq!(&buf[h.payload], &payload[..]);
                }
                other => prop_assert!(false, "decoded {:?}", other),
            }
        }

        #[test]
        fn wal_record_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
            let _ = max_marker_in(&bytes, bytes.len());
        }
    }
}
