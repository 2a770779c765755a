//! LIST_INSTANCES on one shard: filter by machine, state and armed timer, page by id.
//!
//! Read from the placement index (`engine::indexes`): one seek per (machine, state, timer)
//! group the filter selects, then a merge of `limit + 1` steps, never a scan of the shard
//! (docs/queries.md gives the cost).

use super::indexes::GroupFilter;
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
        let none = ListPage {
            instances: Vec::new(),
            more: false,
        };
        // A name never interned is held by no instance: Some(None) is "no filter", None is
        // "nothing matches".
        let known = |name: Option<&str>| match name {
            None => Some(None),
            Some(name) => self.names.get_id(name).map(Some),
        };
        let (Some(machine), Some(state)) = (known(machine), known(state)) else {
            return none;
        };
        let filter = GroupFilter {
            machine,
            state,
            armed: has_timer,
        };
        let (ids, more) = self.indexes.placement.page(filter, after, limit);
        let instances = ids
            .into_iter()
            .filter_map(|id| self.instance_json(id))
            .collect();
        ListPage { instances, more }
    }
}
