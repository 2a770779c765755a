//! LIST_INSTANCES on one shard: filter by machine, state and armed timer, page by id.
//!
//! The instance map is hashed (the hot path wants O(1) lookups), so a page scans it once and
//! keeps the `limit + 1` smallest matching ids in a bounded max-heap: O(n log limit) time and
//! O(limit) memory, with no full sort.

use std::collections::BinaryHeap;

use super::{Engine, ListPage};

impl Engine {
    /// Matching instances with id > `after` (byte order): the `limit` smallest ids, ascending,
    /// each as its GET_INSTANCE object; `more` says whether further matches exist.
    pub fn list_instances(
        &self,
        machine: Option<&str>,
        state: Option<&str>,
        after: Option<&str>,
        has_timer: Option<bool>,
        limit: usize,
    ) -> ListPage {
        let keep = limit.saturating_add(1);
        let mut heap: BinaryHeap<&str> = BinaryHeap::with_capacity(keep.min(1024));
        for record in self.instances.records() {
            let instance = &record.instance;
            let id = &instance.id;
            let wanted = machine.is_none_or(|m| *instance.machine == *m)
                && state.is_none_or(|s| *instance.state == *s)
                && after.is_none_or(|a| id.as_str() > a)
                && has_timer.is_none_or(|t| (record.timer_due_ms != 0) == t);
            if !wanted || (heap.len() == keep && heap.peek().is_some_and(|max| id.as_str() > *max))
            {
                continue;
            }
            heap.push(id.as_str());
            if heap.len() > keep {
                heap.pop();
            }
        }
        let mut ids = heap.into_sorted_vec();
        let more = ids.len() > limit;
        ids.truncate(limit);
        let instances = ids
            .into_iter()
            .filter_map(|id| self.instance_json(id))
            .collect();
        ListPage { instances, more }
    }
}
