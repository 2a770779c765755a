//! Per-instance event history: the most recent `HISTORY_PER_INSTANCE_MAX` events, in seq order.
//!
//! Seqs are the 1-based event numbers of the instance and are contiguous, so a page is the run
//! of items from a computed position. Older events are only in the write-ahead log.
//!
//! Replaying a log appends one item per event, so the layout is built for appending:
//! - An item keeps only what it cannot derive (`Header`: event, the state it left, time,
//!   offset, payload length). Seqs count back from the instance's event count (the newest
//!   item's seq), and the state an item entered is the state the next item left, or the
//!   instance's current state for the newest (`Tail`): an event applies only to an instance in
//!   the entry's `from` state, and only events move an instance.
//! - Names are the engine's interned ids (`NameId`, 4 bytes), not `Arc` handles: appending
//!   counts no references, and a page read maps them back through the `Interner`.
//! - Each item is its fixed-size little-endian header followed by its payload text, back to
//!   back in ONE byte ring per instance, oldest first: an append writes one place (one cache
//!   line or two), and allocates nothing once the ring has grown.
//!
//! `HistoryItem` is the full item, built when a page is read. The snapshot form is the list of
//! full items, as before.

use std::borrow::Cow;

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use super::index::prefetch;
use super::instance::HistoryItem;
use super::json_text::{self, JsonText};
use super::limits::HISTORY_PER_INSTANCE_MAX;
use super::names::{Interner, Name, NameId};

/// The items of one instance in one ring of bytes (40 bytes; allocated at the first event).
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    /// Items from `head` on, wrapping at the end: each a `Header` then its payload text.
    ring: Box<[u8]>,
    /// Where the oldest item starts.
    head: usize,
    /// Bytes of items in the ring.
    used: usize,
    /// Items in the ring.
    items: usize,
}

/// Bytes of an encoded `Header`.
const HEADER: usize = 28;

/// What one item keeps (see the module doc for what it derives), stored as `HEADER` bytes:
/// event id, left-state id, at_ms, wal_offset, payload length, little-endian.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Header {
    event: NameId,
    from_state: NameId,
    at_ms: u64,
    wal_offset: u64,
    /// Bytes of payload text after the header; `NO_PAYLOAD` when the event had none.
    payload_len: u32,
}

/// `Header::payload_len` of an event without a payload.
const NO_PAYLOAD: u32 = u32::MAX;

impl Header {
    fn text_len(&self) -> usize {
        match self.payload_len {
            NO_PAYLOAD => 0,
            n => n as usize,
        }
    }

    fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..4].copy_from_slice(&self.event.to_le_bytes());
        b[4..8].copy_from_slice(&self.from_state.to_le_bytes());
        b[8..16].copy_from_slice(&self.at_ms.to_le_bytes());
        b[16..24].copy_from_slice(&self.wal_offset.to_le_bytes());
        b[24..28].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HEADER]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        Header {
            event: u32_at(0),
            from_state: u32_at(4),
            at_ms: u64_at(8),
            wal_offset: u64_at(16),
            payload_len: u32_at(24),
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

/// One event being appended (borrowed from the log entry or the decided command), its names
/// as the engine's ids.
pub(crate) struct NewItem<'a> {
    pub(crate) event: NameId,
    pub(crate) from_state: NameId,
    pub(crate) payload: Option<&'a str>,
    pub(crate) at_ms: u64,
    pub(crate) wal_offset: u64,
}

impl PartialEq for History {
    /// The same items: the ring's bytes in order (not where they sit in the ring, nor its
    /// capacity).
    fn eq(&self, other: &History) -> bool {
        let (a, b) = self.bytes(0, self.used);
        let (c, d) = other.bytes(0, other.used);
        self.items == other.items && a.iter().chain(b).eq(c.iter().chain(d))
    }
}

impl History {
    pub(crate) fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// Appends `item` as the newest item, dropping the oldest item when the history is full.
    ///
    /// `item.from_state` is the state the newest item entered, and the owner's `Tail` moves
    /// with the push (one more event, the state `item` entered): `apply` only appends events
    /// of the instance in its current state. A payload longer than `u32::MAX - 1` bytes cannot
    /// reach here (frames are far smaller); it would be kept as an empty object rather than cut.
    pub(crate) fn push(&mut self, item: NewItem<'_>) {
        if self.items >= HISTORY_PER_INSTANCE_MAX {
            self.pop_oldest();
        }
        let (text, payload_len): (&[u8], u32) = match item.payload {
            None => (b"", NO_PAYLOAD),
            Some(text) => match u32::try_from(text.len()).ok().filter(|n| *n != NO_PAYLOAD) {
                Some(n) => (text.as_bytes(), n),
                None => (b"{}", 2),
            },
        };
        let header = Header {
            event: item.event,
            from_state: item.from_state,
            at_ms: item.at_ms,
            wal_offset: item.wal_offset,
            payload_len,
        };
        self.grow(HEADER + text.len());
        let end = self.used;
        self.write(end, &header.encode());
        self.write(end + HEADER, text);
        self.used += HEADER + text.len();
        self.items += 1;
    }

    /// Makes room for `more` bytes. The first allocation holds exactly `more` (most instances
    /// of a large population have a few events); later ones quadruple the capacity. Growing by
    /// less reallocated on nearly every event of a young history (~30% of `apply` in the micro
    /// benches); doubling still made the reallocations of many young histories, interleaved in
    /// the heap, a fifth of a busy shard's time (a realloc there moves the ring and works the
    /// allocator's bins): quadrupling halves their number, +30% atomic batches of 10
    /// (benches/RESULTS.md, session 8), and the resident size of 1, 2 and 10-event instances
    /// did not move.
    fn grow(&mut self, more: usize) {
        let cap = self.ring.len();
        if self.used + more <= cap {
            return;
        }
        let new_cap = self.used + if cap == 0 { more } else { (3 * cap).max(more) };
        let mut ring = vec![0u8; new_cap].into_boxed_slice();
        let (a, b) = self.bytes(0, self.used);
        ring[..a.len()].copy_from_slice(a);
        ring[a.len()..a.len() + b.len()].copy_from_slice(b);
        self.ring = ring;
        self.head = 0;
    }

    /// Index in `ring` of byte `at` of the items (0 = the oldest item's first byte).
    fn index(&self, at: usize) -> usize {
        let i = self.head + at;
        if i >= self.ring.len() {
            i - self.ring.len()
        } else {
            i
        }
    }

    /// `len` bytes of the items from `at`, as the part before the ring's end and the part
    /// after it (empty unless they wrap).
    fn bytes(&self, at: usize, len: usize) -> (&[u8], &[u8]) {
        if len == 0 {
            return (&[], &[]);
        }
        let start = self.index(at);
        let first = (self.ring.len() - start).min(len);
        (&self.ring[start..start + first], &self.ring[..len - first])
    }

    /// Writes `bytes` at byte `at` of the items (room made by `grow`).
    fn write(&mut self, at: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = self.index(at);
        let first = (self.ring.len() - start).min(bytes.len());
        let (a, b) = bytes.split_at(first);
        self.ring[start..start + first].copy_from_slice(a);
        self.ring[..b.len()].copy_from_slice(b);
    }

    fn header_at(&self, at: usize) -> Header {
        let (a, b) = self.bytes(at, HEADER);
        let mut h = [0u8; HEADER];
        h[..a.len()].copy_from_slice(a);
        h[a.len()..].copy_from_slice(b);
        Header::decode(&h)
    }

    /// Starts loading the cache lines the next `push` touches first: the ring's end, and, when
    /// the history is full, the oldest item's header, which `pop_oldest` reads to drop it (in
    /// a long-lived instance that line is the coldest the push touches: a whole ring away).
    pub(crate) fn prefetch_end(&self) {
        if self.ring.is_empty() {
            return;
        }
        let base = self.ring.as_ptr();
        let end = base.wrapping_add(self.index(self.used));
        prefetch(end);
        prefetch(end.wrapping_add(64));
        if self.items >= HISTORY_PER_INSTANCE_MAX {
            prefetch(base.wrapping_add(self.head));
        }
    }

    fn pop_oldest(&mut self) {
        if self.items == 0 {
            return;
        }
        let len = HEADER + self.header_at(0).text_len();
        self.head = self.index(len);
        self.used -= len;
        self.items -= 1;
    }

    /// The history of `items` (a snapshot's list, oldest first), their names interned in
    /// `names`; seq and `to_state` are derived (see `Tail`), so they are not kept.
    pub(crate) fn from_items(items: &[HistoryItem], names: &mut Interner) -> History {
        let mut history = History::default();
        for item in items {
            history.push_item(item, names);
        }
        history
    }

    /// Appends a full item (its seq and `to_state` are derived, see `Tail`).
    fn push_item(&mut self, item: &HistoryItem, names: &mut Interner) {
        self.push(NewItem {
            event: names.id(&item.event),
            from_state: names.id(&item.from_state),
            payload: item.payload.as_ref().map(JsonText::as_str),
            at_ms: item.at_ms,
            wal_offset: item.wal_offset,
        });
    }

    /// The items as stored, for a snapshot: how many, and their bytes oldest first (headers
    /// and payload texts), in two parts when they wrap around the ring's end.
    /// Asks the CPU to load the first `lines` cache lines of the items (a snapshot walk copies
    /// them a few instances later; `snapshot::walk`).
    pub(crate) fn prefetch_items(&self, lines: usize) {
        let (a, b) = self.bytes(0, self.used);
        for part in [a, b] {
            for line in (0..part.len()).step_by(64).take(lines) {
                super::index::prefetch(part.as_ptr().wrapping_add(line));
            }
        }
    }

    pub(crate) fn raw(&self) -> (usize, &[u8], &[u8]) {
        let (a, b) = self.bytes(0, self.used);
        (self.items, a, b)
    }

    /// The history `raw` gave (`items` items in `bytes`), checked: the headers walk the bytes
    /// exactly, every name id is below `names`, every payload is UTF-8, and there are at most
    /// `HISTORY_PER_INSTANCE_MAX` items. The ring is exactly that size.
    pub(crate) fn from_raw(items: usize, bytes: &[u8], names: usize) -> Result<History, String> {
        if items > HISTORY_PER_INSTANCE_MAX {
            return Err(format!("{items} history items, over the limit"));
        }
        let mut at = 0;
        for _ in 0..items {
            let head: &[u8; HEADER] = (bytes.get(at..at + HEADER))
                .and_then(|h| h.try_into().ok())
                .ok_or("a history item header runs past the history")?;
            let h = Header::decode(head);
            if h.event as usize >= names || h.from_state as usize >= names {
                return Err("a history item names an unknown name id".into());
            }
            let text = (bytes.get(at + HEADER..at + HEADER + h.text_len()))
                .ok_or("a history item's payload runs past the history")?;
            if super::utf8(text).is_err() {
                return Err("a history item's payload is not UTF-8".into());
            }
            at += HEADER + h.text_len();
        }
        if at != bytes.len() {
            return Err(format!(
                "{} bytes after the last history item",
                bytes.len() - at
            ));
        }
        Ok(History {
            ring: bytes.into(),
            head: 0,
            used: bytes.len(),
            items,
        })
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items
    }

    /// Seq of the oldest item.
    fn first_seq(&self, tail: Tail<'_>) -> u64 {
        (tail.last_seq + 1).saturating_sub(self.items as u64)
    }

    /// Seq of the oldest item kept, if any.
    pub(crate) fn oldest_seq(&self, tail: Tail<'_>) -> Option<u64> {
        (self.items != 0).then(|| self.first_seq(tail))
    }

    /// Up to `limit` items with seq >= `from`, and the seq to ask for next (None at the end).
    pub(crate) fn page(
        &self,
        tail: Tail<'_>,
        names: &Interner,
        from: u64,
        limit: usize,
    ) -> (Vec<HistoryItem>, Option<u64>) {
        let first_seq = self.first_seq(tail);
        let start = usize::try_from(from.saturating_sub(first_seq))
            .unwrap_or(usize::MAX)
            .min(self.items);
        let end = start.saturating_add(limit).min(self.items);
        let next = (end < self.items).then(|| first_seq + end as u64);
        let items = self.views(tail, names).skip(start).take(end - start);
        (items.map(|v| v.to_item()).collect(), next)
    }

    /// Every item's header and where its text starts, oldest first.
    fn headers(&self) -> impl Iterator<Item = (Header, usize)> + '_ {
        let mut at = 0;
        (0..self.items).map(move |_| {
            let header = self.header_at(at);
            let text_at = at + HEADER;
            at = text_at + header.text_len();
            (header, text_at)
        })
    }

    /// Every item, oldest first, as borrowed views.
    fn views<'a>(
        &'a self,
        tail: Tail<'a>,
        names: &'a Interner,
    ) -> impl Iterator<Item = ItemView<'a>> {
        let first_seq = self.first_seq(tail);
        let mut headers = self.headers().peekable();
        let mut seq = first_seq;
        std::iter::from_fn(move || {
            let (header, text_at) = headers.next()?;
            let to_state = match headers.peek() {
                Some((next, _)) => names.name(next.from_state),
                None => tail.state,
            };
            let payload = (header.payload_len != NO_PAYLOAD)
                .then(|| self.text_at(text_at, header.text_len()));
            let view = ItemView {
                seq,
                event: names.name(header.event),
                from_state: names.name(header.from_state),
                to_state,
                payload,
                at_ms: header.at_ms,
                wal_offset: header.wal_offset,
            };
            seq += 1;
            Some(view)
        })
    }

    /// `len` bytes of payload text from byte `at` of the items, borrowed unless they wrap.
    fn text_at(&self, at: usize, len: usize) -> Cow<'_, str> {
        // The ring holds whole `str`s and items are cut at their boundaries, so each item's
        // bytes are the UTF-8 they were pushed as; the lossy path never replaces.
        // `from_utf8` first: its check of mostly-ASCII text is several times faster than the
        // lossy decoder's, which a snapshot (every item of every history) felt.
        match self.bytes(at, len) {
            (a, []) => match std::str::from_utf8(a) {
                Ok(text) => Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(a),
            },
            (a, b) => {
                let joined = [a, b].concat();
                match String::from_utf8(joined) {
                    Ok(text) => Cow::Owned(text),
                    Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
                }
            }
        }
    }

    /// Bytes the snapshot form of these items takes, about: the payload texts plus the
    /// members and numbers of each item (`SNAPSHOT_ITEM_BYTES`). Sizes the snapshot's buffer.
    pub(crate) fn snapshot_bytes_estimate(&self) -> usize {
        let texts = self.used.saturating_sub(self.items * HEADER);
        texts + self.items * SNAPSHOT_ITEM_BYTES
    }
}

/// Bytes. The snapshot form of one item without its payload: member names, three names and
/// three numbers (`{"seq":..,"event":..,..,"wal_offset":..}`), about 110 with short names.
const SNAPSHOT_ITEM_BYTES: usize = 128;

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

/// A history (None: no items) with the `Tail` of its instance and the interner of its ids:
/// its snapshot form, the list of full items.
pub(crate) struct Items<'a>(
    pub(crate) Option<&'a History>,
    pub(crate) Tail<'a>,
    pub(crate) &'a Interner,
);

impl Serialize for Items<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Items(history, tail, names) = self;
        let Some(history) = history else {
            return s.collect_seq(std::iter::empty::<()>());
        };
        let mut seq = s.serialize_seq(Some(history.items))?;
        for view in history.views(*tail, names) {
            seq.serialize_element(&view)?;
        }
        seq.end()
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

    /// Item `seq`: every third has no payload, the others a payload whose length varies.
    fn item(seq: u64) -> HistoryItem {
        HistoryItem {
            seq,
            event: format!("e{}", seq % 5).into(),
            from_state: state(seq - 1),
            to_state: state(seq),
            payload: (seq % 3 != 0).then(|| {
                JsonText::from_log(&format!(
                    r#"{{"n":{seq},"s":"{}"}}"#,
                    "x".repeat((seq % 41) as usize)
                ))
            }),
            at_ms: seq * 1000 + 7,
            wal_offset: u64::MAX - seq,
        }
    }

    fn push(h: &mut History, names: &mut Interner, it: &HistoryItem) {
        h.push_item(it, names);
    }

    /// A history of items `1..=last` with its instance's tail state and its interner.
    struct Filled {
        h: History,
        names: Interner,
        last: u64,
        state: Name,
    }

    impl Filled {
        fn new(last: u64) -> Self {
            let mut f = Filled {
                h: History::default(),
                names: Interner::default(),
                last: 0,
                state: state(0),
            };
            f.extend(last);
            f
        }
        fn extend(&mut self, last: u64) {
            for seq in self.last + 1..=last {
                push(&mut self.h, &mut self.names, &item(seq));
            }
            self.last = last;
            self.state = state(last);
        }
        fn tail(&self) -> Tail<'_> {
            Tail {
                last_seq: self.last,
                state: &self.state,
            }
        }
        fn page(&self, from: u64, limit: usize) -> (Vec<HistoryItem>, Option<u64>) {
            self.h.page(self.tail(), &self.names, from, limit)
        }
        fn seqs(&self, from: u64, limit: usize) -> (Vec<u64>, Option<u64>) {
            let (items, next) = self.page(from, limit);
            (items.iter().map(|i| i.seq).collect(), next)
        }
        /// True when the items' bytes currently run past the end of the ring.
        fn wraps(&self) -> bool {
            !self.h.bytes(0, self.h.used).1.is_empty()
        }
    }

    #[test]
    fn header_round_trips_every_field() {
        let h = Header {
            event: 0x0102_0304,
            from_state: u32::MAX - 1,
            at_ms: 0x1122_3344_5566_7788,
            wal_offset: u64::MAX,
            payload_len: NO_PAYLOAD,
        };
        assert_eq!(Header::decode(&h.encode()), h);
        assert_eq!(h.encode()[..4], [4, 3, 2, 1], "little-endian");
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
        assert_eq!(items[2].payload, None, "absent payload stays absent");
        assert!(items[1].payload.is_some(), "present payload stays present");
    }

    #[test]
    fn an_empty_payload_is_kept_apart_from_none() {
        let mut h = History::default();
        let mut names = Interner::default();
        let mut it = item(1);
        it.payload = Some(JsonText::from_log(""));
        push(&mut h, &mut names, &it);
        let (e, b) = (state(1), state(0));
        let tail = Tail {
            last_seq: 1,
            state: &e,
        };
        let (items, _) = h.page(tail, &names, 1, 1);
        assert_eq!(items[0].payload.as_ref().map(JsonText::as_str), Some(""));
        assert_eq!(items[0].from_state, b);
    }

    #[test]
    fn history_keeps_only_the_most_recent_items() {
        let total = HISTORY_PER_INSTANCE_MAX as u64 + 10;
        let h = Filled::new(total);
        assert_eq!(h.h.len(), HISTORY_PER_INSTANCE_MAX);
        assert_eq!(h.h.oldest_seq(h.tail()), Some(11));
        assert_eq!(h.seqs(1, 2), (vec![11, 12], Some(13)));
        // Evicting dropped exactly the oldest items and their payload texts.
        let (items, _) = h.page(1, usize::MAX);
        assert_eq!(items, (11..=total).map(item).collect::<Vec<_>>());
        let bytes: usize = (items.iter())
            .map(|i| HEADER + i.payload.as_ref().map_or(0, |p| p.as_str().len()))
            .sum();
        assert_eq!(h.h.used, bytes);
    }

    #[test]
    fn eviction_at_the_limit_is_one_item_per_push() {
        let mut h = Filled::new(HISTORY_PER_INSTANCE_MAX as u64);
        assert_eq!(h.h.oldest_seq(h.tail()), Some(1));
        for last in HISTORY_PER_INSTANCE_MAX as u64 + 1..HISTORY_PER_INSTANCE_MAX as u64 + 5 {
            h.extend(last);
            assert_eq!(h.h.len(), HISTORY_PER_INSTANCE_MAX);
            let first = last + 1 - HISTORY_PER_INSTANCE_MAX as u64;
            assert_eq!(h.h.oldest_seq(h.tail()), Some(first));
            assert_eq!(h.page(0, 1).0, vec![item(first)]);
        }
    }

    #[test]
    fn items_that_wrap_around_the_ring_read_back_whole() {
        // Evict and append across several ring growths so headers and texts straddle the
        // wrap point; every page of every size reads the same items.
        let mut h = Filled::new(0);
        let mut wrapped = 0;
        for last in 1..=10 * HISTORY_PER_INSTANCE_MAX as u64 {
            h.extend(last);
            if last % 97 == 0 {
                wrapped += usize::from(h.wraps());
                let first = h.h.oldest_seq(h.tail()).unwrap();
                let (items, next) = h.page(0, usize::MAX);
                assert_eq!(items, (first..=last).map(item).collect::<Vec<_>>());
                assert_eq!(next, None);
                // Pages across the wrap: walk in pages of 13 from the oldest item.
                let mut from = first;
                let mut walked = Vec::new();
                loop {
                    let (page, next) = h.page(from, 13);
                    walked.extend(page);
                    match next {
                        Some(n) => from = n,
                        None => break,
                    }
                }
                assert_eq!(walked, items);
            }
        }
        assert!(
            wrapped > 10,
            "pages read while the items wrapped: {wrapped}"
        );
    }

    #[test]
    fn a_header_split_by_the_wrap_reads_back() {
        // A ring whose free space at the end is smaller than a header: the next header is
        // written in two parts.
        let mut h = Filled::new(HISTORY_PER_INSTANCE_MAX as u64);
        let mut split = 0;
        for last in h.last + 1..h.last + 20 * HISTORY_PER_INSTANCE_MAX as u64 {
            let (end, cap) = (h.h.index(h.h.used), h.h.ring.len());
            h.extend(last);
            if h.h.ring.len() == cap && cap - end < HEADER {
                split += 1;
                let (items, _) = h.page(0, usize::MAX);
                assert_eq!(items.last(), Some(&item(last)));
                let first = last + 1 - HISTORY_PER_INSTANCE_MAX as u64;
                assert_eq!(items.first(), Some(&item(first)));
            }
        }
        assert!(
            split > 0,
            "some header was written across the end of the ring"
        );
    }

    #[test]
    fn snapshot_form_is_the_list_of_full_items() {
        let h = Filled::new(4);
        let json = serde_json::to_value(Items(Some(&h.h), h.tail(), &h.names)).unwrap();
        let items: Vec<HistoryItem> = (1..=4).map(item).collect();
        assert_eq!(json, serde_json::to_value(&items).unwrap());
        assert_eq!(json[2].get("payload"), None, "absent payload stays absent");
        // Back through a fresh interner: the same items, whatever ids they got there.
        let mut names = Interner::default();
        names.id("first something else");
        let back = History::from_items(&items, &mut names);
        assert_eq!(back.page(h.tail(), &names, 0, 10).0, items);
        let json_back = serde_json::to_value(Items(Some(&back), h.tail(), &names)).unwrap();
        assert_eq!(json_back, json);
        let none = state(0);
        let empty = Tail {
            last_seq: 0,
            state: &none,
        };
        assert_eq!(
            serde_json::to_value(Items(None, empty, &names)).unwrap(),
            serde_json::json!([])
        );
    }

    #[test]
    fn snapshot_round_trip_across_the_wrap() {
        let mut h = Filled::new(HISTORY_PER_INSTANCE_MAX as u64);
        while !h.wraps() {
            h.extend(h.last + 1);
        }
        let json = serde_json::to_string(&Items(Some(&h.h), h.tail(), &h.names)).unwrap();
        let items: Vec<HistoryItem> = serde_json::from_str(&json).unwrap();
        let mut names = h.names.clone();
        let back = History::from_items(&items, &mut names);
        assert_eq!(
            back, h.h,
            "the same items, though laid out from the ring's start"
        );
        assert!(!Filled {
            h: back,
            ..Filled::new(0)
        }
        .wraps());
    }

    #[test]
    fn equality_is_of_items_not_of_ring_position() {
        let a = Filled::new(HISTORY_PER_INSTANCE_MAX as u64 + 50);
        let b = Filled::new(HISTORY_PER_INSTANCE_MAX as u64 + 50);
        assert_eq!(a.h, b.h);
        let c = Filled::new(HISTORY_PER_INSTANCE_MAX as u64 + 51);
        assert_ne!(a.h, c.h);
    }

    #[test]
    fn a_history_is_one_ring_and_its_first_item_allocates_exactly() {
        assert_eq!(size_of::<History>(), 40);
        let h = Filled::new(1);
        let text = item(1).payload.unwrap().as_str().len();
        assert_eq!(h.h.ring.len(), HEADER + text);
        let h = Filled::new(3);
        // 1 exact, then quadrupled: 4 x the first, enough for items 2 and 3.
        assert_eq!(h.h.ring.len(), 4 * (HEADER + text));
    }
}
