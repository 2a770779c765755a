//! The instance index: id -> record, laid out so that replaying a log stays in cache.
//!
//! A bucket holds the id inline when it is short (`IdKey`, 24 bytes) and the record boxed, so
//! the table itself is ~32 bytes per instance: with tens of thousands of instances it fits
//! the L2/L3 caches, and a lookup touches no heap memory until the record itself. Replay then
//! prefetches the records of the next few entries before applying them (`prefetch`), which
//! overlaps the cache misses that would otherwise be paid one after another.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::instance::InstanceRecord;

/// id -> record.
pub(crate) type InstanceMap = HashMap<IdKey, Box<InstanceRecord>>;

/// Longest id kept inline in the bucket.
const INLINE_MAX: usize = 22;

/// An instance id as a map key: inline up to `INLINE_MAX` bytes, boxed beyond. Hashes and
/// compares as the `str` it holds, so the map is queried with `&str`.
#[derive(Clone)]
pub(crate) enum IdKey {
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    Boxed(Box<str>),
}

impl IdKey {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            IdKey::Inline { len, bytes } => {
                // `from` copied exactly `len` bytes of a `str`, cut at its end, so the slice is
                // the whole original string and valid UTF-8; the fallback is never taken.
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            IdKey::Boxed(s) => s,
        }
    }
}

impl From<&str> for IdKey {
    fn from(s: &str) -> Self {
        if s.len() <= INLINE_MAX {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            IdKey::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            IdKey::Boxed(s.into())
        }
    }
}

impl Borrow<str> for IdKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for IdKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for IdKey {}

impl Hash for IdKey {
    /// Exactly `str`'s hash, as `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Asks the CPU to start loading the cache line at `p`. Only a hint: it never faults and
/// never changes what any later read returns.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is defined for any address, valid or not; it reads nothing into the
    // program's state and cannot fault. SSE is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn keys_of_every_length_round_trip_and_hash_as_str() {
        let rs = RandomState::new();
        for len in [0, 1, 21, 22, 23, 200] {
            let s: String = "é".repeat(len / 2) + &"x".repeat(len % 2);
            let key = IdKey::from(s.as_str());
            assert_eq!(key.as_str(), s);
            assert_eq!(rs.hash_one(&key), rs.hash_one(s.as_str()));
            assert_eq!(matches!(key, IdKey::Inline { .. }), s.len() <= INLINE_MAX);
        }
        let mut map: HashMap<IdKey, u32> = HashMap::new();
        map.insert("short".into(), 1);
        map.insert("a-much-longer-instance-identifier".into(), 2);
        assert_eq!(map.get("short"), Some(&1));
        assert_eq!(map.get("a-much-longer-instance-identifier"), Some(&2));
        assert_eq!(map.get("shor"), None);
    }

    #[test]
    fn prefetch_of_any_address_is_harmless() {
        prefetch(std::ptr::null::<u8>());
        prefetch(usize::MAX as *const u64);
    }
}
