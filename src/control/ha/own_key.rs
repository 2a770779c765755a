//! This member's own member key (docs/ha.md, "etcd keys"): what it publishes at every renewal
//! and when it fences. In cluster mode it adds the member's group, the map epoch of its copy
//! and its HTTP address (docs/cluster.md, "etcd keys").

use super::keys::{Member, MemberCluster};
use super::term::Term;
use super::Ctx;

impl Term {
    /// This member's key value now.
    pub fn member(&self, ctx: &Ctx) -> Member {
        let report = ctx.shared.report();
        let heads = ctx
            .state
            .stats
            .follower
            .lock()
            .map(|f| f.primary_heads.clone())
            .unwrap_or_default();
        Member {
            node_id: ctx.node_id.clone(),
            instance: ctx.instance.clone(),
            addr: ctx.addr.clone(),
            role: if self.leading { "primary" } else { "follower" }.into(),
            epoch: report.last_epoch.max(ctx.state.epoch()),
            positions: report.positions,
            primary_heads: heads,
            following: report.following,
            nofailover: ctx.cfg.nofailover,
            refuses_writes: report.log_poisoned || report.storage_full,
            cluster: ctx.shared.cluster.as_ref().map(|c| MemberCluster {
                group: c.group.clone(),
                map_epoch: c.view.get().map_epoch(),
                http_addr: c.http_addr.clone(),
            }),
        }
    }
}
