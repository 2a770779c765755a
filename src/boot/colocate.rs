//! `network.fronts_on_shards`: each shard's executor also runs one front (accept, decode,
//! route), so a request for one of its own instances never crosses cores and wakes no other
//! thread (docs/architecture.md, "Placement"). The front is the same code as on its own
//! executor; its channels to its own shard have both ends on one executor, where a send is a
//! ring push and the reactor's poll hands it over (no eventfd write).
//!
//! Start-up keeps its order (shards recovered, the control executor, then the fronts): a
//! shard's executor starts its front only once `boot` hands it the front's setup.

use std::sync::mpsc;
use std::time::Duration;

use crate::front::executor::FrontSetup;
use crate::shard::runtime::ShardSetup;

/// How often a shard's executor looks for its front's setup while start-up is not done.
const SETUP_POLL: Duration = Duration::from_millis(1);

/// Where `boot` hands each shard's executor its front's setup: the senders (`None`: fronts
/// run on executors of their own) and one receiver per shard.
pub(super) type Slots = (
    Option<Vec<mpsc::Sender<FrontSetup>>>,
    Vec<Option<mpsc::Receiver<FrontSetup>>>,
);

pub(super) fn slots(on_shards: bool, shards: usize) -> Slots {
    if !on_shards {
        return (None, (0..shards).map(|_| None).collect());
    }
    let (tx, rx): (Vec<_>, Vec<_>) = (0..shards).map(|_| mpsc::channel()).unzip();
    (Some(tx), rx.into_iter().map(Some).collect())
}

/// A shard's executor: the shard, and with `front` the front it serves once start-up hands
/// over its setup (never, if start-up failed first: the sender is dropped).
pub(super) async fn run(shard: ShardSetup, front: Option<mpsc::Receiver<FrontSetup>>) {
    let Some(front) = front else {
        return crate::shard::runtime::run(shard).await;
    };
    let front = async move {
        if let Some(setup) = setup(front).await {
            crate::front::executor::run(setup).await;
        }
    };
    futures_lite::future::zip(crate::shard::runtime::run(shard), front).await;
}

/// Waits, without blocking the executor (the shard serves the control executor meanwhile),
/// for the front's setup.
async fn setup(rx: mpsc::Receiver<FrontSetup>) -> Option<FrontSetup> {
    loop {
        match rx.try_recv() {
            Ok(setup) => return Some(setup),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => glommio::timer::sleep(SETUP_POLL).await,
        }
    }
}
