//! Per-instance event history: the most recent `HISTORY_PER_INSTANCE_MAX` events, in seq order.
//!
//! Seqs are the 1-based event numbers of the instance and are contiguous, so a page is a
//! binary search and a slice. Older events are only in the write-ahead log.
//!
//! Replaying a log appends one item per event, so the layout is built for appending:
//! - An item keeps only what it cannot derive (`Slot`: event, the state it left, time, offset,
//!   payload length). Seqs count back from the instance's event count (the newest item's seq),
//!   and the state an item entered is the state the next item left, or the instance's current
//!   state for the newest (`Tail`): an event applies only to an instance in the entry's `from`
//!   state, and only events move an instance. So the history itself holds nothing but its two
//!   buffers (64 bytes), and is allocated only at an instance's first event.
//! - Payload texts are appended back to back into one ring of bytes per instance instead of one
//!   allocation per item: a push allocates nothing once the buffers have grown.
//!
//! `HistoryItem` is the full item, built when a page is read. The snapshot form is the list of
//! full items, as before.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::index::prefetch;
use super::instance::HistoryItem;
use super::json_text::{self, JsonText};
use super::limits::HISTORY_PER_INSTANCE_MAX;
use super::names::{Interner, Name};

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct History {
    slots: VecDeque<Slot>,
    /// The payload texts of `slots`, oldest first, back to back.
    text: VecDeque<u8>,
}

/// What one item keeps (see the module doc for what it derives).
#[derive(Debug, Clone, PartialEq)]
struct Slot {
    event: Name,
    from_state: Name,
    at_ms: u64,
    wal_offset: u64,
    /// Bytes of payload text in `History::text`; `NO_PAYLOAD` when the event had none.
    payload_len: u32,
}

/// `Slot::payload_len` of an event without a payload.
const NO_PAYLOAD: u32 = u32::MAX;

impl Slot {
    fn text_len(&self) -> usize {
        match self.payload_len {
            NO_PAYLOAD => 0,
            n => n as usize,
        }
    }
}

/// What the items of a history derive from the instance that owns it.
#[derive(Clone, Copy)]
pub(crate) struct Tail<'a> {
    /// Seq of the newest item: the instance's event count.
    pub(crate) last_seq: u64,
    /// The state the newest item entered: the instance's current state.
    pub(crate) state: &'a Name,
}

/// Makes room for `more` elements in a ring. The first allocation holds exactly `more` (most
/// instances of a large population have a few events; `VecDeque` would start at 4 slots or 8
/// bytes); later ones quadruple the capacity. Growing by less reallocated on nearly every
/// event of a young history (~30% of `apply` in the micro benches); doubling still made the
/// reallocations of many young histories, interleaved in the heap, a fifth of a busy shard's
/// time (a realloc there moves the ring and works the allocator's bins): quadrupling halves
/// their number, +30% atomic batches of 10 (benches/RESULTS.md, session 8), and the resident
/// size of 1, 2 and 10-event instances did not move.
fn grow<T>(ring: &mut VecDeque<T>, more: usize) {
    let cap = ring.capacity();
    if cap == 0 {
        ring.reserve_exact(more);
    } else if ring.len() + more > cap {
        ring.reserve_exact((3 * cap).max(more));
    }
}

/// Where a ring's next element goes while it has room (only for prefetching: never read).
fn ring_end<T>(ring: &VecDeque<T>) -> *const T {
    let (front, back) = ring.as_slices();
    let last = if back.is_empty() { front } else { back };
    last.as_ptr_range().end
}

/// What `push_left` stores of an event: `NewItem` with the left state owned and without the
/// entered state (derived, see `Tail`).
pub(crate) struct Left<'a> {
    pub(crate) event: Name,
    pub(crate) from_state: Name,
    pub(crate) payload: Option<&'a str>,
    pub(crate) at_ms: u64,
    pub(crate) wal_offset: u64,
}

/// One event being appended (borrowed from the log entry or the decided command).
pub(crate) struct NewItem<'a> {
    pub(crate) event: Name,
    pub(crate) from_state: &'a Name,
    pub(crate) to_state: Name,
    pub(crate) payload: Option<&'a str>,
    pub(crate) at_ms: u64,
    pub(crate) wal_offset: u64,
}

impl History {
    /// No items (what an instance without a history reads as).
    pub(crate) const EMPTY: History = History {
        slots: VecDeque::new(),
        text: VecDeque::new(),
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Appends `item` as the newest item, dropping the oldest item when the buffer is full.
    ///
    /// `item.from_state` is the state the newest item entered, and the owner's `Tail` moves
    /// with the push (one more event, the state `item` entered): `apply` only appends events
    /// of the instance in its current state. A payload longer than `u32::MAX - 1` bytes cannot
    /// reach here (frames are far smaller); it would be kept as an empty object rather than cut.
    pub(crate) fn push(&mut self, item: NewItem<'_>) {
        let event = Left {
            event: item.event,
            from_state: item.from_state.clone(),
            payload: item.payload,
            at_ms: item.at_ms,
            wal_offset: item.wal_offset,
        };
        self.push_left(event);
    }

    /// `push`, with the state the item left given owned (`apply` moves the instance's old
    /// state name here instead of counting one more reference to it).
    pub(crate) fn push_left(&mut self, item: Left<'_>) {
        if self.slots.len() >= HISTORY_PER_INSTANCE_MAX {
            self.pop_oldest();
        }
        grow(&mut self.slots, 1);
        let payload_len = match item.payload {
            None => NO_PAYLOAD,
            Some(text) => match u32::try_from(text.len()).ok().filter(|n| *n != NO_PAYLOAD) {
                Some(n) => {
                    grow(&mut self.text, text.len());
                    self.text.extend(text.as_bytes());
                    n
                }
                None => {
                    grow(&mut self.text, 2);
                    self.text.extend(b"{}");
                    2
                }
            },
        };
        self.slots.push_back(Slot {
            event: item.event,
            from_state: item.from_state,
            at_ms: item.at_ms,
            wal_offset: item.wal_offset,
            payload_len,
        });
    }

    /// Starts loading the cache lines the next `push` writes first (both rings' ends).
    pub(crate) fn prefetch_end(&self) {
        prefetch(ring_end(&self.slots));
        let text_end = ring_end(&self.text);
        prefetch(text_end);
        prefetch(text_end.wrapping_add(64));
    }

    fn pop_oldest(&mut self) {
        if let Some(oldest) = self.slots.pop_front() {
            self.text.drain(..oldest.text_len());
        }
    }

    /// Points every item's names at the interner's shared copies (after a snapshot restore,
    /// which allocates each name separately).
    pub(crate) fn share_names(&mut self, names: &mut Interner) {
        for slot in &mut self.slots {
            names.adopt(&mut slot.event);
            names.adopt(&mut slot.from_state);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Seq of the oldest item.
    fn first_seq(&self, tail: Tail<'_>) -> u64 {
        (tail.last_seq + 1).saturating_sub(self.slots.len() as u64)
    }

    /// Seq of the oldest item kept, if any.
    pub(crate) fn oldest_seq(&self, tail: Tail<'_>) -> Option<u64> {
        (!self.slots.is_empty()).then(|| self.first_seq(tail))
    }

    /// Up to `limit` items with seq >= `from`, and the seq to ask for next (None at the end).
    pub(crate) fn page(
        &self,
        tail: Tail<'_>,
        from: u64,
        limit: usize,
    ) -> (Vec<HistoryItem>, Option<u64>) {
        let first_seq = self.first_seq(tail);
        let start = usize::try_from(from.saturating_sub(first_seq))
            .unwrap_or(usize::MAX)
            .min(self.slots.len());
        let end = start.saturating_add(limit).min(self.slots.len());
        let next = (end < self.slots.len()).then(|| first_seq + end as u64);
        let items = self.views(tail).skip(start).take(end - start);
        (items.map(|v| v.to_item()).collect(), next)
    }

    /// Every item, oldest first, as borrowed views.
    fn views<'a>(&'a self, tail: Tail<'a>) -> impl Iterator<Item = ItemView<'a>> {
        let first_seq = self.first_seq(tail);
        let entered = (self.slots.iter().skip(1).map(|next| &next.from_state))
            .chain(std::iter::once(tail.state));
        let mut text_at = 0usize;
        (self.slots.iter().zip(entered).enumerate()).map(move |(i, (slot, to_state))| {
            let len = slot.text_len();
            let payload = (slot.payload_len != NO_PAYLOAD).then(|| self.text_at(text_at, len));
            text_at += len;
            ItemView {
                seq: first_seq + i as u64,
                event: &slot.event,
                from_state: &slot.from_state,
                to_state,
                payload,
                at_ms: slot.at_ms,
                wal_offset: slot.wal_offset,
            }
        })
    }

    /// `len` bytes of payload text from byte `at` of the ring, borrowed unless they wrap.
    fn text_at(&self, at: usize, len: usize) -> Cow<'_, str> {
        let (front, back) = self.text.as_slices();
        let bytes: Cow<'_, [u8]> = if at + len <= front.len() {
            Cow::Borrowed(&front[at..at + len])
        } else if at >= front.len() {
            Cow::Borrowed(&back[at - front.len()..at - front.len() + len])
        } else {
            Cow::Owned(self.text.range(at..at + len).copied().collect())
        };
        // The ring holds whole `str`s back to back and items are cut at their boundaries, so
        // each item's bytes are the UTF-8 they were pushed as; the lossy path never replaces.
        match bytes {
            Cow::Borrowed(b) => String::from_utf8_lossy(b),
            Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
        }
    }
}

/// One item as `History` stores it, borrowed; the snapshot form of an item (the fields and
/// order of `HistoryItem`).
#[derive(Serialize)]
struct ItemView<'a> {
    seq: u64,
    event: &'a Name,
    from_state: &'a Name,
    to_state: &'a Name,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw_json")]
    payload: Option<Cow<'a, str>>,
    at_ms: u64,
    wal_offset: u64,
}

impl ItemView<'_> {
    fn to_item(&self) -> HistoryItem {
        HistoryItem {
            seq: self.seq,
            event: self.event.clone(),
            from_state: self.from_state.clone(),
            to_state: self.to_state.clone(),
            payload: self.payload.as_deref().map(JsonText::from_log),
            at_ms: self.at_ms,
            wal_offset: self.wal_offset,
        }
    }
}

/// Writes a stored payload text as the JSON it is (only called when present).
fn raw_json<S: Serializer>(text: &Option<Cow<'_, str>>, s: S) -> Result<S::Ok, S::Error> {
    json_text::serialize_text(text.as_deref().unwrap_or("{}"), s)
}

/// A history with the `Tail` of its instance: its snapshot form, the list of full items.
pub(crate) struct Items<'a>(pub(crate) &'a History, pub(crate) Tail<'a>);

impl Serialize for Items<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Items(history, tail) = self;
        let mut seq = s.serialize_seq(Some(history.slots.len()))?;
        for view in history.views(*tail) {
            seq.serialize_element(&view)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for History {
    /// From the list of full items; seq and `to_state` are derived (see `Tail`), so they are
    /// not kept.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<HistoryItem>::deserialize(d)?;
        let mut history = History::default();
        for item in items {
            history.push(NewItem {
                event: item.event,
                from_state: &item.from_state,
                to_state: item.to_state,
                payload: item.payload.as_ref().map(JsonText::as_str),
                at_ms: item.at_ms,
                wal_offset: item.wal_offset,
            });
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// State names are letters by seq: item `seq` of a chain a -> b -> c -> ... enters
    /// `state(seq)`.
    fn state(n: u64) -> Name {
        Name::from(((b'a' + (n % 26) as u8) as char).to_string())
    }

    fn item(seq: u64) -> HistoryItem {
        HistoryItem {
            seq,
            event: "e".into(),
            from_state: state(seq - 1),
            to_state: state(seq),
            payload: (seq % 3 != 0).then(|| JsonText::from_log(&format!(r#"{{"n":{seq}}}"#))),
            at_ms: seq,
            wal_offset: seq,
        }
    }

    fn push(h: &mut History, it: &HistoryItem) {
        h.push(NewItem {
            event: it.event.clone(),
            from_state: &it.from_state,
            to_state: it.to_state.clone(),
            payload: it.payload.as_ref().map(JsonText::as_str),
            at_ms: it.at_ms,
            wal_offset: it.wal_offset,
        });
    }

    /// A history of items `1..=last` with its instance's tail state.
    struct Filled {
        h: History,
        last: u64,
        state: Name,
    }

    impl Filled {
        fn new(last: u64) -> Self {
            let mut h = History::default();
            (1..=last).for_each(|s| push(&mut h, &item(s)));
            Filled {
                h,
                last,
                state: state(last),
            }
        }
        fn tail(&self) -> Tail<'_> {
            Tail {
                last_seq: self.last,
                state: &self.state,
            }
        }
        fn page(&self, from: u64, limit: usize) -> (Vec<HistoryItem>, Option<u64>) {
            self.h.page(self.tail(), from, limit)
        }
        fn seqs(&self, from: u64, limit: usize) -> (Vec<u64>, Option<u64>) {
            let (items, next) = self.page(from, limit);
            (items.iter().map(|i| i.seq).collect(), next)
        }
    }

    #[test]
    fn pages_walk_the_history_in_order() {
        let h = Filled::new(5);
        assert_eq!(h.seqs(1, 2), (vec![1, 2], Some(3)));
        assert_eq!(h.seqs(3, 2), (vec![3, 4], Some(5)));
        assert_eq!(h.seqs(5, 2), (vec![5], None));
        assert_eq!(h.seqs(6, 2), (vec![], None));
        assert_eq!(h.seqs(0, 10), (vec![1, 2, 3, 4, 5], None));
        assert_eq!(h.seqs(2, 0), (vec![], Some(2)));
        assert_eq!(h.seqs(1, usize::MAX), (vec![1, 2, 3, 4, 5], None));
        assert_eq!(h.seqs(u64::MAX, 3), (vec![], None));
    }

    #[test]
    fn items_come_back_whole_with_derived_seq_and_to_state() {
        let h = Filled::new(7);
        let (items, _) = h.page(1, 100);
        assert_eq!(items, (1..=7).map(item).collect::<Vec<_>>());
    }

    #[test]
    fn history_keeps_only_the_most_recent_items() {
        let total = HISTORY_PER_INSTANCE_MAX as u64 + 10;
        let h = Filled::new(total);
        assert_eq!(h.h.len(), HISTORY_PER_INSTANCE_MAX);
        assert_eq!(h.h.oldest_seq(h.tail()), Some(11));
        assert_eq!(h.seqs(1, 2), (vec![11, 12], Some(13)));
        // Evicting dropped exactly the oldest item and its payload text.
        let (items, _) = h.page(1, usize::MAX);
        assert_eq!(items, (11..=total).map(item).collect::<Vec<_>>());
    }

    #[test]
    fn payload_text_that_wraps_around_the_ring_reads_back_whole() {
        // Evict and append across several ring growths so texts straddle the wrap point.
        let mut h = History::default();
        for seq in 1..=3 * HISTORY_PER_INSTANCE_MAX as u64 {
            push(&mut h, &item(seq));
            if seq % 499 == 0 {
                let st = state(seq);
                let tail = Tail {
                    last_seq: seq,
                    state: &st,
                };
                let (items, _) = h.page(tail, 0, usize::MAX);
                let first = h.oldest_seq(tail).unwrap();
                assert_eq!(items, (first..=seq).map(item).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn snapshot_form_is_the_list_of_full_items() {
        let h = Filled::new(4);
        let json = serde_json::to_value(Items(&h.h, h.tail())).unwrap();
        let items: Vec<HistoryItem> = (1..=4).map(item).collect();
        assert_eq!(json, serde_json::to_value(&items).unwrap());
        assert_eq!(json[2].get("payload"), None, "absent payload stays absent");
        let back: History = serde_json::from_value(json).unwrap();
        assert_eq!(back, h.h);
        let none = state(0);
        let empty = Tail {
            last_seq: 0,
            state: &none,
        };
        assert_eq!(
            serde_json::to_value(Items(&History::default(), empty)).unwrap(),
            serde_json::json!([])
        );
    }

    #[test]
    fn a_history_is_two_buffers_and_its_first_item_allocates_exactly() {
        assert_eq!(size_of::<History>(), 64);
        let h = Filled::new(1);
        assert_eq!(h.h.slots.capacity(), 1);
        assert_eq!(h.h.text.capacity(), item(1).payload.unwrap().as_str().len());
    }
}
