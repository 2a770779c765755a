//! The per-shard timer queue: armed timers ordered by deadline, beside the engine.
//!
//! A binary min-heap of `(due_ms, generation, id)` with lazy cancellation: leaving a state
//! does not touch the heap (the engine clears the instance's `timer_due_ms`); a popped timer
//! whose generation no longer matches the instance is stale and skipped
//! (`Engine::decide_timer`). Arming is O(log n), popping O(log n), cancelling O(1).
//!
//! Memory: 32 bytes per queued timer in the heap (due 8, generation 8, boxed id 16) plus the id
//! copy (its length, rounded up by the allocator, at least 16 bytes), plus up to 2x slack from
//! the vector's growth: about 50-100 bytes per pending timer with short ids. Stale entries stay
//! until their deadline passes; `compact` drops them when they outnumber the live ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::engine::Armed;

/// Deadline-ordered timers of one shard.
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<Armed>>,
}

impl TimerQueue {
    /// A queue holding `timers` (recovery): O(n).
    pub fn from_armed(timers: Vec<Armed>) -> Self {
        TimerQueue {
            heap: timers.into_iter().map(Reverse).collect(),
        }
    }

    pub fn push(&mut self, due_ms: u64, generation: u64, id: &str) {
        self.heap.push(Reverse((due_ms, generation, id.into())));
    }

    /// The earliest deadline queued (live or stale).
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// The earliest timer if it is due at `now_ms`.
    pub fn pop_due(&mut self, now_ms: u64) -> Option<Armed> {
        if self.next_due()? > now_ms {
            return None;
        }
        self.heap.pop().map(|Reverse(t)| t)
    }

    /// Entries queued, live or stale.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops the entries `live` rejects, when there are more than twice as many entries as
    /// `armed` (the live count): keeps memory proportional to pending timers when instances
    /// leave timed states long before their deadlines. O(n), amortised over the pushes.
    pub fn compact(&mut self, armed: u64, live: impl Fn(&Armed) -> bool) {
        if (self.heap.len() as u64) <= armed.saturating_mul(2).max(1024) {
            return;
        }
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap.into_iter().filter(|Reverse(t)| live(t)).collect();
    }

    /// Bytes the heap holds (capacity, not counting id copies).
    pub fn heap_bytes(&self) -> usize {
        self.heap.capacity() * size_of::<Reverse<Armed>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_order_only_when_due() {
        let mut q = TimerQueue::default();
        q.push(30, 3, "c");
        q.push(10, 1, "a");
        q.push(20, 2, "b");
        assert_eq!(q.next_due(), Some(10));
        assert_eq!(q.pop_due(9), None);
        assert_eq!(q.pop_due(25).map(|t| t.2), Some("a".into()));
        assert_eq!(q.pop_due(25).map(|t| t.2), Some("b".into()));
        assert_eq!(q.pop_due(25), None);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(u64::MAX).map(|t| t.1), Some(3));
        assert!(q.is_empty());
    }

    #[test]
    fn equal_deadlines_pop_by_generation() {
        let mut q = TimerQueue::from_armed(vec![(5, 9, "x".into()), (5, 2, "y".into())]);
        assert_eq!(q.pop_due(5).map(|t| t.1), Some(2));
        assert_eq!(q.pop_due(5).map(|t| t.1), Some(9));
    }

    #[test]
    fn compact_drops_stale_entries_once_they_dominate() {
        let mut q = TimerQueue::default();
        for i in 0..3000u64 {
            q.push(i, i, "id");
        }
        q.compact(3000, |_| false);
        assert_eq!(
            q.len(),
            3000,
            "nothing dropped while live timers are the majority"
        );
        q.compact(10, |t| t.1 % 100 == 0);
        assert_eq!(q.len(), 30);
        assert_eq!(q.pop_due(u64::MAX).map(|t| t.1), Some(0));
    }

    #[test]
    fn entry_size_is_as_documented() {
        assert_eq!(size_of::<Reverse<Armed>>(), 32);
    }
}
