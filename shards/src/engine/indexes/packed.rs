//! A compact ordered set of byte strings for the declared indexes: sorted pages of
//! front-coded keys.
//!
//! A page is its first key (the page's key in a `BTreeMap`) and the encoding of the keys after
//! it, each as its shared prefix length with the key before it, its suffix length (LEB128
//! varints) and its suffix bytes, in one exact-size allocation. Consecutive entries of an index
//! share the encoded value and often the id's first bytes, so an entry costs its varints and
//! the rest of its id (~10 bytes for `ctx.customer`), where a `BTreeSet` of 24-byte keys costs
//! ~35 bytes (nodes ~69% full after random inserts) and a heap allocation past 22 bytes.
//!
//! A write decodes, edits and re-encodes one page (at most `PAGE_BYTES` and a key): bounded
//! work. A page past `PAGE_BYTES` splits in two; an emptied page is dropped, and a page below a
//! quarter of it merges with the next when both fit in one. A range seeks the page holding its
//! start in O(log pages) and decodes a key at a time.

use std::cmp::Ordering;
use std::collections::{btree_map, BTreeMap};
use std::fmt;
use std::ops::Bound;

/// A page's encoded keys (after its first) before it splits (small under test, so tests split
/// and merge pages often).
const PAGE_BYTES: usize = if cfg!(test) { 96 } else { 1024 };

#[derive(Default, Clone)]
pub(crate) struct PackedSet {
    /// first key -> the page's other keys, front-coded.
    pages: BTreeMap<Box<[u8]>, Box<[u8]>>,
    len: usize,
}

impl PackedSet {
    pub(crate) const EMPTY: PackedSet = PackedSet {
        pages: BTreeMap::new(),
        len: 0,
    };
}

/// A walk over a page's keys: `key` holds the current one (the first, then each entry's).
struct Walk<'p> {
    rest: &'p [u8],
    /// Where the next entry starts.
    at: usize,
    key: Vec<u8>,
}

impl<'p> Walk<'p> {
    fn new(first: &[u8], rest: &'p [u8]) -> Walk<'p> {
        Walk {
            rest,
            at: 0,
            key: first.to_vec(),
        }
    }

    /// Steps onto the next entry (its shared prefix length), None past the last.
    fn step(&mut self) -> Option<usize> {
        let (shared, suffix, next) = entry(self.rest, self.at)?;
        self.key.truncate(shared);
        self.key.extend_from_slice(suffix);
        self.at = next;
        Some(shared)
    }
}

/// Where a key greater than a page's first goes among the page's entries.
struct Spot {
    /// The entry at or past the key: its bytes in `rest`, `start..end` (empty at the end).
    start: usize,
    end: usize,
    /// That entry's key (empty at the end).
    next: Vec<u8>,
    /// The shared prefix length of the key and the one before it.
    lcp_prev: usize,
}

impl Spot {
    fn find(first: &[u8], rest: &[u8], key: &[u8]) -> Spot {
        let mut walk = Walk::new(first, rest);
        loop {
            let (start, lcp_prev) = (walk.at, lcp(&walk.key, key));
            if walk.step().is_none() {
                let (end, next) = (start, Vec::new());
                return Spot {
                    start,
                    end,
                    next,
                    lcp_prev,
                };
            }
            if walk.key.as_slice() >= key {
                let (end, next) = (walk.at, walk.key);
                return Spot {
                    start,
                    end,
                    next,
                    lcp_prev,
                };
            }
        }
    }

    fn found(&self, key: &[u8]) -> bool {
        self.end > self.start && self.next == key
    }
}

fn lcp(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn put_entry(out: &mut Vec<u8>, shared: usize, suffix: &[u8]) {
    put_varint(out, shared);
    put_varint(out, suffix.len());
    out.extend_from_slice(suffix);
}

/// The entry at `at` of a page's encoding: (shared prefix length, suffix, next entry's offset).
fn entry(rest: &[u8], at: usize) -> Option<(usize, &[u8], usize)> {
    let (shared, at) = varint(rest, at)?;
    let (len, at) = varint(rest, at)?;
    let suffix = rest.get(at..at + len)?;
    Some((shared, suffix, at + len))
}

fn varint(b: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut value = 0usize;
    let mut shift = 0;
    loop {
        let byte = *b.get(at)?;
        at += 1;
        value |= usize::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
        shift += 7;
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: usize) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A page's entries (after `spot`'s page first) without the one at `spot`: the entry after it
/// re-encoded against the one before it.
fn without(rest: &[u8], spot: &Spot) -> Vec<u8> {
    let mut out = Vec::with_capacity(rest.len());
    out.extend_from_slice(&rest[..spot.start]);
    if let Some((shared, suffix, end)) = entry(rest, spot.end) {
        // lcp(before, after) = min(lcp(before, removed), lcp(removed, after)): keys are sorted.
        let kept = spot.lcp_prev.min(shared);
        put_varint(&mut out, kept);
        put_varint(&mut out, shared - kept + suffix.len());
        out.extend_from_slice(&spot.next[kept..shared]);
        out.extend_from_slice(suffix);
        out.extend_from_slice(&rest[end..]);
    }
    out
}

/// A page's first key and the encoding of its other keys.
type Page = (Vec<u8>, Vec<u8>);

/// `rest` (of a page starting at `first`) split at its first entry past its middle: the
/// entries before it, and that entry's key with the entries after it.
fn split(first: &[u8], rest: Vec<u8>) -> (Vec<u8>, Option<Page>) {
    let mut walk = Walk::new(first, &rest);
    loop {
        let start = walk.at;
        if walk.step().is_none() {
            return (rest, None);
        }
        if start >= rest.len() / 2 {
            let second = (walk.key, rest[walk.at..].to_vec());
            let mut rest = rest;
            rest.truncate(start);
            return (rest, Some(second));
        }
    }
}

impl PackedSet {
    /// The set of `keys`, which must be sorted and distinct; pages filled to `PAGE_BYTES`.
    pub(crate) fn from_sorted<'k>(keys: impl IntoIterator<Item = &'k [u8]>) -> PackedSet {
        let mut set = PackedSet::default();
        // The page being filled: its first key, its encoding, its last key.
        let mut first: Option<Vec<u8>> = None;
        let (mut rest, mut prev) = (Vec::new(), Vec::new());
        for key in keys {
            set.len += 1;
            let full = rest.len() + key.len() > PAGE_BYTES;
            if first.is_none() || full {
                if let Some(first) = first.replace(key.to_vec()) {
                    set.pages
                        .insert(first.into(), std::mem::take(&mut rest).into());
                }
                prev = key.to_vec();
                continue;
            }
            let shared = lcp(&prev, key);
            put_entry(&mut rest, shared, &key[shared..]);
            prev.truncate(shared);
            prev.extend_from_slice(&key[shared..]);
        }
        if let Some(first) = first {
            set.pages.insert(first.into(), rest.into());
        }
        set
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page `key` belongs in (first key, other keys): the last page starting at or
    /// before it, else the first page; None when there is no page.
    fn page_of(&self, key: &[u8]) -> Option<(&[u8], &[u8])> {
        let mut before = (self.pages).range::<[u8], _>((Bound::Unbounded, Bound::Included(key)));
        let (first, rest) = before.next_back().or_else(|| self.pages.iter().next())?;
        Some((first, rest))
    }

    /// Stores a page in place of the one that started at `old`: `first` (None: `old`) and
    /// `rest`, split in two at its middle entry when past `PAGE_BYTES` (the second half's
    /// entries are relative to that entry, its first key: no re-encoding).
    fn store(&mut self, old: &[u8], first: Option<Vec<u8>>, rest: Vec<u8>) {
        let (rest, second) = match rest.len() > PAGE_BYTES {
            true => split(first.as_deref().unwrap_or(old), rest),
            false => (rest, None),
        };
        match (first, self.pages.get_mut(old)) {
            (None, Some(page)) => *page = rest.into(),
            (first, _) => {
                let first = first.unwrap_or_else(|| old.to_vec());
                self.pages.remove(old);
                self.pages.insert(first.into(), rest.into());
            }
        }
        if let Some((first, rest)) = second {
            self.pages.insert(first.into(), rest.into());
        }
    }

    /// Adds `key`; false when it was present. Re-encodes at most two entries of one page.
    pub(crate) fn insert(&mut self, key: &[u8]) -> bool {
        let Some((first, rest)) = self.page_of(key) else {
            self.pages.insert(key.into(), Box::default());
            self.len = 1;
            return true;
        };
        let mut out = Vec::with_capacity(rest.len() + key.len() + 4);
        let new_first = match first.cmp(key) {
            Ordering::Equal => return false,
            Ordering::Greater => {
                let shared = lcp(key, first);
                put_entry(&mut out, shared, &first[shared..]);
                out.extend_from_slice(rest);
                Some(key.to_vec())
            }
            Ordering::Less => {
                let spot = Spot::find(first, rest, key);
                if spot.found(key) {
                    return false;
                }
                out.extend_from_slice(&rest[..spot.start]);
                put_entry(&mut out, spot.lcp_prev, &key[spot.lcp_prev..]);
                if spot.end > spot.start {
                    let shared = lcp(key, &spot.next);
                    put_entry(&mut out, shared, &spot.next[shared..]);
                }
                out.extend_from_slice(&rest[spot.end..]);
                None
            }
        };
        let old = first.to_vec();
        self.store(&old, new_first, out);
        self.len += 1;
        true
    }

    /// Removes `key`; false when it was absent. Re-encodes at most one entry of one page; a
    /// page left below a quarter of `PAGE_BYTES` takes in the next when both fit in one.
    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        let Some((first, rest)) = self.page_of(key) else {
            return false;
        };
        let (new_first, mut out) = match first.cmp(key) {
            Ordering::Greater => return false,
            Ordering::Equal => match entry(rest, 0) {
                None => {
                    let old: Box<[u8]> = first.into();
                    self.pages.remove(&old);
                    self.len -= 1;
                    return true;
                }
                Some((shared, suffix, end)) => {
                    let next = [&first[..shared], suffix].concat();
                    (Some(next), rest[end..].to_vec())
                }
            },
            Ordering::Less => {
                let spot = Spot::find(first, rest, key);
                if !spot.found(key) {
                    return false;
                }
                (None, without(rest, &spot))
            }
        };
        let old = first.to_vec();
        if out.len() < PAGE_BYTES / 4 {
            self.merge_next(&old, new_first.as_deref().unwrap_or(&old), &mut out);
        }
        self.store(&old, new_first, out);
        self.len -= 1;
        true
    }

    /// Appends the page after `old` to `rest` (the page `first`, `rest`) when both fit in
    /// `PAGE_BYTES`, and drops it.
    fn merge_next(&mut self, old: &[u8], first: &[u8], rest: &mut Vec<u8>) {
        let after = (Bound::Excluded(old), Bound::Unbounded);
        let Some((next, next_rest)) = self.pages.range::<[u8], _>(after).next() else {
            return;
        };
        if rest.len() + next.len() + next_rest.len() + 4 > PAGE_BYTES {
            return;
        }
        let mut walk = Walk::new(first, rest);
        while walk.step().is_some() {}
        let shared = lcp(&walk.key, next);
        let mut tail = Vec::with_capacity(next.len() + next_rest.len() + 4);
        put_entry(&mut tail, shared, &next[shared..]);
        tail.extend_from_slice(next_rest);
        let next = next.clone();
        rest.extend_from_slice(&tail);
        self.pages.remove(&next);
    }

    /// The keys within `low` and `high`, in order; the bounds must not be crossed.
    pub(crate) fn range(&self, low: Bound<&[u8]>, high: Bound<&[u8]>) -> Range<'_> {
        let start = match low {
            Bound::Included(k) | Bound::Excluded(k) => self.page_of(k).map(|(first, _)| first),
            Bound::Unbounded => None,
        };
        let pages = match start {
            Some(first) => self
                .pages
                .range::<[u8], _>((Bound::Included(first), Bound::Unbounded)),
            None => self.pages.range::<[u8], _>(..),
        };
        Range {
            pages,
            rest: &[],
            at: 0,
            key: Vec::new(),
            low: low.map(<[u8]>::to_vec),
            high: high.map(<[u8]>::to_vec),
        }
    }
}

/// A range's keys, one at a time (`next_key`): each decoded into one buffer it lends.
pub(crate) struct Range<'a> {
    pages: btree_map::Range<'a, Box<[u8]>, Box<[u8]>>,
    /// The current page's encoding and the offset of its next entry.
    rest: &'a [u8],
    at: usize,
    key: Vec<u8>,
    /// Cleared once a key passes it (every later key does).
    low: Bound<Vec<u8>>,
    /// Made `Excluded(empty)` (nothing passes) once a key passes it.
    high: Bound<Vec<u8>>,
}

impl Range<'_> {
    /// The next key in order, or None at the range's end.
    pub(crate) fn next_key(&mut self) -> Option<&[u8]> {
        loop {
            if !self.advance() {
                return None;
            }
            let below = match &self.low {
                Bound::Included(low) => self.key < *low,
                Bound::Excluded(low) => self.key <= *low,
                Bound::Unbounded => false,
            };
            if !below {
                self.low = Bound::Unbounded;
                break;
            }
        }
        let within = match &self.high {
            Bound::Included(high) => self.key <= *high,
            Bound::Excluded(high) => self.key < *high,
            Bound::Unbounded => true,
        };
        if !within {
            self.high = Bound::Excluded(Vec::new());
            return None;
        }
        Some(&self.key)
    }

    /// Decodes the next key into `key`; false past the last page.
    fn advance(&mut self) -> bool {
        if let Some((shared, suffix, next)) = entry(self.rest, self.at) {
            self.key.truncate(shared);
            self.key.extend_from_slice(suffix);
            self.at = next;
            return true;
        }
        let Some((first, rest)) = self.pages.next() else {
            return false;
        };
        self.key.clear();
        self.key.extend_from_slice(first);
        (self.rest, self.at) = (rest, 0);
        true
    }
}

impl PartialEq for PackedSet {
    /// The same keys, however paged.
    fn eq(&self, other: &Self) -> bool {
        let (mut a, mut b) = (
            self.range(Bound::Unbounded, Bound::Unbounded),
            other.range(Bound::Unbounded, Bound::Unbounded),
        );
        loop {
            match (a.next_key(), b.next_key()) {
                (None, None) => return true,
                (Some(x), Some(y)) if x == y => {}
                _ => return false,
            }
        }
    }
}

impl fmt::Debug for PackedSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys = self.range(Bound::Unbounded, Bound::Unbounded);
        let mut list = f.debug_list();
        while let Some(key) = keys.next_key() {
            list.entry(&key);
        }
        list.finish()
    }
}

#[cfg(test)]
mod tests;
