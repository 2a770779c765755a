//! A demoted primary closes its client connections (failover, docs/ha.md "Demotion";
//! docs/ha.md "The path of a demotion"): it answers what it had read, then closes, so that clients behind a load
//! balancer reconnect, and reach the new primary.
//!
//! Each front watches `ReplState::demotions` (one relaxed load every `POLL`) and, when it moves,
//! shuts down the read side of every connection it has open (RCP1, HTTP, REPLICATE alike). A
//! read loop then sees the end of the stream once it has taken what the kernel had already
//! received; the replies to those requests (refusals, now that the member follows) are written,
//! and the connection closes as if the client had left. Connections accepted afterwards are
//! left alone: this member serves reads as a follower.

use std::rc::Rc;
use std::time::Duration;

use super::executor::Front;

/// How often a front looks at the demotion count: the delay between the role flip and the
/// connections closing.
const POLL: Duration = Duration::from_millis(100);

/// Runs on each front for its life when failover is on (returns at once when it is off, and
/// when the front begins to drain).
pub async fn watch(front: Rc<Front>) {
    let state = front.info.replication.clone();
    if !state.ha() {
        return;
    }
    let mut seen = state.demotions();
    while !front.drain.stopping() {
        glommio::timer::sleep(POLL).await;
        let now = state.demotions();
        if now != seen {
            seen = now;
            let closed = front.shutdown_reads();
            // (The role change itself is logged once, by `control::ha::driver`.)
            log::info!(
                "closing {closed} connection(s) after demotion, once their requests are answered"
            );
        }
    }
}
