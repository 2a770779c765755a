//! Moving slots between groups (docs/cluster.md, "Moving slots"). One entry point, `run`: a
//! task on the control executor of every cluster member. While the member is its group's
//! primary it runs each move its copy shows leaving its group (`source::drive`, a task per
//! move) and settles what moves left behind (`tidy`). The pieces:
//! - `ops`: `CLUSTER_MOVE_SLOTS` and `CLUSTER_CANCEL_MOVE`, on any member;
//! - `etcd`: the intent, the switch and the abort, each one transaction (HA thread);
//! - `source`: copy, catch-up, freeze, switch, on the source's primary; `end`: how it ends;
//! - `link`: the source's connection to the target's primary;
//! - `import`: `CLUSTER_IMPORT`, the target's side of that connection;
//! - `tidy`: aborting moves of an earlier term, settling staged instances, deleting the data
//!   of slots moved away.
//!
//! The shard's part (`crate::shard::moves`): the steps a shard serves, the freeze, the
//! staged check. The engine's (`shards::engine`): import entries, staging, `move_in`.

mod end;
pub mod etcd;
pub mod import;
pub mod link;
pub mod ops;
mod source;
mod tidy;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use super::Cluster;
use crate::control::replication::follower::Settings;
use crate::control::replication::hub::Hub;

/// Runs the moves of this member's group and settles after them, for the life of the
/// process; `template` is the member's replication link settings (the move's link uses its
/// TLS and token).
pub async fn run(hub: Rc<Hub>, cluster: Arc<Cluster>, template: Settings) {
    let mover = Rc::new(source::Mover {
        router: hub.router.clone(),
        cluster: cluster.clone(),
        template,
        frame_bytes: cluster.max_frame_bytes,
    });
    // Moves running here, and those finished here that the copy may still list for a moment
    // (never run twice: a move is never resumed).
    let running: Rc<RefCell<BTreeSet<String>>> = Rc::default();
    let finished: Rc<RefCell<BTreeSet<String>>> = Rc::default();
    let mut tidy = tidy::Tidy::default();
    loop {
        glommio::timer::sleep(tidy::TIDY_EVERY).await;
        if hub.stopping.get() || hub.state.role_name() != "primary" || hub.state.fenced() {
            continue;
        }
        let copy = cluster.view.get();
        let listed = |id: &String| {
            copy.map
                .iter()
                .flat_map(|m| m.migrations.iter())
                .any(|m| &m.id == id)
        };
        finished.borrow_mut().retain(listed);
        let leaving = (copy.map.iter())
            .flat_map(|m| m.migrations.iter())
            .filter(|m| m.from == cluster.group)
            .cloned();
        for m in leaving {
            if finished.borrow().contains(&m.id) || !running.borrow_mut().insert(m.id.clone()) {
                continue;
            }
            let (mover, running, finished) = (mover.clone(), running.clone(), finished.clone());
            glommio::spawn_local(async move {
                log::info!(
                    "cluster: move {} of slots [{}, {}] to {}: running",
                    m.id,
                    m.lo,
                    m.hi,
                    m.to
                );
                let (outcome, figures) = source::drive(&mover, &m).await;
                source::finish(&mover, &m, outcome, figures).await;
                running.borrow_mut().remove(&m.id);
                finished.borrow_mut().insert(m.id.clone());
            })
            .detach();
        }
        tidy.round(&hub.router, &cluster).await;
    }
}
