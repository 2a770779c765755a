//! A declared index's entry: the indexed value and the instance id in one byte string whose
//! byte order is the index's order (value, then id), kept inline when short.
//!
//! Encoding (order-preserving, after FoundationDB's tuple layer): a type tag, the value, then
//! the id's bytes.
//! * `null` `0x01`; `false` `0x02`; `true` `0x03`;
//! * a number `0x04` and its f64 as 8 big-endian bytes with the sign bit flipped (all bits
//!   when negative), so byte order is numeric order (`1` and `1.0` encode alike; -0 as 0);
//! * a string `0x05`, its UTF-8 bytes with each `0x00` written `0x00 0xFF`, then `0x00`.
//!
//! Types order null < false < true < numbers < strings, and a range is bounded to its bound's
//! type (`Bound::type_end`). An id is UTF-8, which never holds the byte `0xFF`: every entry of
//! a value `v` lies in `[enc(v), enc(v) ++ 0xFF)`.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// Bytes held inline (with the length and the variant tag, 24 bytes, as `SmallStr`).
const INLINE_MAX: usize = 22;

const TAG_NULL: u8 = 0x01;
const TAG_FALSE: u8 = 0x02;
const TAG_TRUE: u8 = 0x03;
const TAG_NUMBER: u8 = 0x04;
const TAG_STRING: u8 = 0x05;
/// Past every tag: the end of the string type.
const TAG_END: u8 = 0x06;

/// Greater than every byte of an id (UTF-8 never uses it).
pub(crate) const PAST_IDS: u8 = 0xFF;

/// One entry's bytes: inline up to `INLINE_MAX`, else one exact-size allocation. 24 bytes.
#[derive(Clone)]
pub(crate) enum IndexKey {
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    Heap(Box<[u8]>),
}

impl IndexKey {
    pub(crate) fn new(bytes: &[u8]) -> IndexKey {
        if bytes.len() <= INLINE_MAX {
            let mut inline = [0u8; INLINE_MAX];
            inline[..bytes.len()].copy_from_slice(bytes);
            // INLINE_MAX < 256.
            IndexKey::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            IndexKey::Heap(bytes.into())
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            IndexKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            IndexKey::Heap(b) => b,
        }
    }

    /// The instance id this entry names: the bytes after the encoded value.
    pub(crate) fn id(&self) -> Option<&str> {
        id_of(self.bytes())
    }
}

/// The instance id an entry's bytes name: the bytes after the encoded value.
pub(crate) fn id_of(b: &[u8]) -> Option<&str> {
    let value_len = encoded_len(b)?;
    std::str::from_utf8(b.get(value_len..)?).ok()
}

impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for IndexKey {}

impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IndexKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl std::borrow::Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IndexKey({:?}, id {:?})", self.bytes(), self.id())
    }
}

/// Appends the encoding of `value` to `out`; false (and nothing appended) for a value that is
/// not indexed (an object or an array).
pub(crate) fn encode_value(value: &Value, out: &mut Vec<u8>) -> bool {
    match value {
        Value::Null => out.push(TAG_NULL),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Number(n) => {
            out.push(TAG_NUMBER);
            // Every JSON number serde_json holds converts (u64 and i64 round to the nearest f64).
            out.extend_from_slice(&ordered_f64(n.as_f64().unwrap_or(0.0)));
        }
        Value::String(s) => {
            out.push(TAG_STRING);
            for &b in s.as_bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xFF);
                }
            }
            out.push(0);
        }
        Value::Array(_) | Value::Object(_) => return false,
    }
    true
}

/// The first byte past every encoding of `value`'s type (a range's open end stays in its type).
pub(crate) fn type_end(value: &Value) -> Vec<u8> {
    let tag = match value {
        Value::Null => TAG_NULL,
        Value::Bool(_) => TAG_TRUE,
        Value::Number(_) => TAG_NUMBER,
        _ => TAG_STRING,
    };
    vec![tag + 1]
}

/// The first byte of the number type (a range's open start stays in its type).
pub(crate) fn type_start(value: &Value) -> Vec<u8> {
    match value {
        Value::Number(_) => vec![TAG_NUMBER],
        Value::String(_) => vec![TAG_STRING],
        Value::Bool(_) => vec![TAG_FALSE],
        _ => vec![TAG_NULL],
    }
}

/// An f64's bytes in numeric byte order.
fn ordered_f64(x: f64) -> [u8; 8] {
    let x = if x == 0.0 { 0.0 } else { x };
    let bits = x.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    ordered.to_be_bytes()
}

/// The length of the encoded value at the start of `b`.
fn encoded_len(b: &[u8]) -> Option<usize> {
    match *b.first()? {
        TAG_NULL | TAG_FALSE | TAG_TRUE => Some(1),
        TAG_NUMBER => (b.len() >= 9).then_some(9),
        TAG_STRING => {
            let mut i = 1;
            loop {
                match (b.get(i)?, b.get(i + 1)) {
                    (0, Some(0xFF)) => i += 2,
                    (0, _) => return Some(i + 1),
                    _ => i += 1,
                }
            }
        }
        _ => None,
    }
}

const _: () = assert!(TAG_END > TAG_STRING && PAST_IDS > TAG_END);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(value: Value, id: &str) -> IndexKey {
        let mut b = Vec::new();
        assert!(encode_value(&value, &mut b));
        b.extend_from_slice(id.as_bytes());
        IndexKey::new(&b)
    }

    #[test]
    fn byte_order_is_value_order_then_id_order() {
        let ordered = [
            key(json!(null), "z"),
            key(json!(false), "a"),
            key(json!(true), "a"),
            key(json!(-1.5e300), "a"),
            key(json!(-2), "a"),
            key(json!(-0.5), "a"),
            key(json!(0), "a"),
            key(json!(0.0), "b"),
            key(json!(1), "a"),
            key(json!(1.0), "b"),
            key(json!(2), "a"),
            key(json!(u64::MAX), "a"),
            key(json!(""), "a"),
            key(json!("a"), "a"),
            key(json!("a"), "b"),
            key(json!("a\u{0}"), "a"),
            key(json!("ab"), "a"),
            key(json!("b"), "a"),
            key(json!("é"), "a"),
        ];
        for pair in ordered.windows(2) {
            assert!(pair[0] < pair[1], "{:?} < {:?}", pair[0], pair[1]);
        }
        assert_eq!(
            key(json!(1), "x").bytes()[..9],
            key(json!(1.0), "y").bytes()[..9]
        );
        assert_eq!(
            key(json!(-0.0), "x").bytes()[..9],
            key(json!(0), "x").bytes()[..9]
        );
    }

    #[test]
    fn the_id_reads_back_inline_and_on_the_heap() {
        for (value, id) in [
            (json!(null), "a"),
            (json!(7), "order-1"),
            (json!("c\u{0}-9"), "id"),
            (
                json!("a long customer name past the inline bytes"),
                "order-000001",
            ),
        ] {
            assert_eq!(key(value, id).id(), Some(id));
        }
        assert!(matches!(key(json!(1), "a"), IndexKey::Inline { .. }));
        assert_eq!(size_of::<IndexKey>(), 24);
        let mut b = Vec::new();
        assert!(!encode_value(&json!([1]), &mut b) && !encode_value(&json!({}), &mut b));
        assert!(b.is_empty());
    }
}
