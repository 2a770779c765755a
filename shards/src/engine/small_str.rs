//! `SmallStr`: an immutable string kept inline when short (instance ids, context member names).
//!
//! 24 bytes, the size of a `String`: up to `INLINE_MAX` bytes live in the value itself, longer
//! texts in one exact-size heap allocation. Most ids and nearly all member names are short, so
//! they cost no allocation (a `String` of one byte costs a 32-byte heap chunk plus its 24).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest text kept inline.
const INLINE_MAX: usize = 22;

/// A string, inline up to `INLINE_MAX` bytes. Hashes, compares and orders as the `str` it
/// holds, so maps keyed by it are queried with `&str`.
#[derive(Clone)]
pub struct SmallStr(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    Boxed(Box<str>),
}

impl SmallStr {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                let bytes = &bytes[..usize::from(*len)];
                // SAFETY: `bytes` is only ever written by `From<&str>`, which copies exactly
                // `len` bytes of a `str`, all of it: the slice is that whole string, valid
                // UTF-8. (Checking it again cost every lookup and member search a validation.)
                unsafe { std::str::from_utf8_unchecked(bytes) }
            }
            Repr::Boxed(s) => s,
        }
    }

    /// Whether the text lives inline (no heap allocation).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl From<&str> for SmallStr {
    fn from(s: &str) -> Self {
        if s.len() <= INLINE_MAX {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            SmallStr(Repr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            SmallStr(Repr::Boxed(s.into()))
        }
    }
}

impl From<String> for SmallStr {
    fn from(s: String) -> Self {
        if s.len() <= INLINE_MAX {
            SmallStr::from(s.as_str())
        } else {
            SmallStr(Repr::Boxed(s.into_boxed_str()))
        }
    }
}

impl From<&String> for SmallStr {
    fn from(s: &String) -> Self {
        SmallStr::from(s.as_str())
    }
}

impl Deref for SmallStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SmallStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SmallStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for SmallStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SmallStr {}

impl PartialEq<str> for SmallStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SmallStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SmallStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for SmallStr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallStr {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SmallStr {
    /// Exactly `str`'s hash, as `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SmallStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SmallStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(SmallStr::from(&*s))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn texts_of_every_length_round_trip_and_hash_as_str() {
        let rs = RandomState::new();
        for len in [0, 1, 21, 22, 23, 200] {
            let s: String = "é".repeat(len / 2) + &"x".repeat(len % 2);
            let key = SmallStr::from(s.as_str());
            assert_eq!(key.as_str(), s);
            assert_eq!(SmallStr::from(s.clone()), key);
            assert_eq!(rs.hash_one(&key), rs.hash_one(s.as_str()));
            assert_eq!(key.is_inline(), s.len() <= INLINE_MAX);
            let json = serde_json::to_string(&key).unwrap();
            assert_eq!(json, serde_json::to_string(&s).unwrap());
            assert_eq!(serde_json::from_str::<SmallStr>(&json).unwrap(), key);
        }
        let mut map: HashMap<SmallStr, u32> = HashMap::new();
        map.insert("short".into(), 1);
        map.insert("a-much-longer-instance-identifier".into(), 2);
        assert_eq!(map.get("short"), Some(&1));
        assert_eq!(map.get("a-much-longer-instance-identifier"), Some(&2));
        assert_eq!(map.get("shor"), None);
        let (a, b) = (SmallStr::from("a"), SmallStr::from("b"));
        assert!(a < b);
        assert_eq!(size_of::<SmallStr>(), 24);
    }
}
