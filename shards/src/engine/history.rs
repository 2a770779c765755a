//! Per-instance event history: the most recent `HISTORY_PER_INSTANCE_MAX` items, in seq order.
//!
//! Seqs are the 1-based event numbers of the instance and are contiguous in the buffer, so a
//! page is a binary search and a slice. Older events are only in the write-ahead log.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::instance::HistoryItem;
use super::limits::HISTORY_PER_INSTANCE_MAX;
use super::names::Interner;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct History {
    items: VecDeque<HistoryItem>,
}

impl History {
    /// Appends `item`, dropping the oldest item when the buffer is full.
    pub(crate) fn push(&mut self, item: HistoryItem) {
        if self.items.len() >= HISTORY_PER_INSTANCE_MAX {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    /// Points every item's names at the interner's shared copies (after a snapshot restore,
    /// which allocates each name separately).
    pub(crate) fn share_names(&mut self, names: &mut Interner) {
        for item in &mut self.items {
            names.adopt(&mut item.event);
            names.adopt(&mut item.from_state);
            names.adopt(&mut item.to_state);
        }
    }

    /// Prefetches the slot the next `push` writes (see `replay`).
    pub(crate) fn prefetch_tail(&self) {
        let (front, back) = self.items.as_slices();
        let tail = if back.is_empty() { front } else { back };
        super::index::prefetch(tail.as_ptr().wrapping_add(tail.len()));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The newest item, if any.
    pub(crate) fn last(&self) -> Option<&HistoryItem> {
        self.items.back()
    }

    /// Seq of the oldest item kept, if any.
    pub(crate) fn oldest_seq(&self) -> Option<u64> {
        self.items.front().map(|item| item.seq)
    }

    /// Up to `limit` items with seq >= `from`, and the seq to ask for next (None at the end).
    pub(crate) fn page(
        &self,
        from: u64,
        limit: usize,
    ) -> (impl Iterator<Item = &HistoryItem>, Option<u64>) {
        let start = self.items.partition_point(|item| item.seq < from);
        let end = start.saturating_add(limit).min(self.items.len());
        let next = self.items.get(end).map(|item| item.seq);
        (self.items.range(start..end), next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seq: u64) -> HistoryItem {
        HistoryItem {
            seq,
            event: "e".into(),
            from_state: "a".into(),
            to_state: "b".into(),
            payload: None,
            at_ms: seq,
            wal_offset: seq,
        }
    }

    fn seqs(h: &History, from: u64, limit: usize) -> (Vec<u64>, Option<u64>) {
        let (items, next) = h.page(from, limit);
        (items.map(|i| i.seq).collect(), next)
    }

    #[test]
    fn pages_walk_the_history_in_order() {
        let mut h = History::default();
        (1..=5).for_each(|s| h.push(item(s)));
        assert_eq!(seqs(&h, 1, 2), (vec![1, 2], Some(3)));
        assert_eq!(seqs(&h, 3, 2), (vec![3, 4], Some(5)));
        assert_eq!(seqs(&h, 5, 2), (vec![5], None));
        assert_eq!(seqs(&h, 6, 2), (vec![], None));
        assert_eq!(seqs(&h, 0, 10), (vec![1, 2, 3, 4, 5], None));
        assert_eq!(seqs(&h, 2, 0), (vec![], Some(2)));
        assert_eq!(seqs(&h, 1, usize::MAX), (vec![1, 2, 3, 4, 5], None));
    }

    #[test]
    fn history_keeps_only_the_most_recent_items() {
        let mut h = History::default();
        let total = HISTORY_PER_INSTANCE_MAX as u64 + 10;
        (1..=total).for_each(|s| h.push(item(s)));
        assert_eq!(h.len(), HISTORY_PER_INSTANCE_MAX);
        assert_eq!(h.oldest_seq(), Some(11));
        assert_eq!(seqs(&h, 1, 2), (vec![11, 12], Some(13)));
    }
}
