//! The etcd watch on the cluster's prefix (`/smdb/<cluster>/`, docs/ha.md "Inside a member"),
//! one per session, as a task of its own on the HA thread's runtime: each change of a key but
//! this member's own member key (which only this loop writes) wakes the loop (`control::ha::wake`), so
//! a deleted leader key, a switchover, a sync set, a pause or another member's final positions
//! are read within milliseconds, not at the next poll. The watch never decides anything and
//! never holds up the loop or the lease renewal: it only signals.
//!
//! A stream that fails, ends, is cancelled by etcd, or stays silent for `quiet` (this member's
//! own renewals rewrite its member key every `ttl_ms / 6`, so a working watch never is) is
//! created again after `RETRY_MIN`, doubling to `RETRY_MAX` while new ones fail before
//! delivering anything; each creation is bounded by `Etcd::timeout`. A re-created
//! watch wakes the loop once (it may have missed changes meanwhile). Each re-creation counts
//! in `HaStats::watch_restarts` (`REPLICATION_STATUS.ha.watch_restarts`; the `svc_ha_*`
//! families are fixed, docs/ha.md "Metrics", so it is not a metric) and logs at debug.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{WatchResponse, WatchStream};

use super::etcd::Etcd;
use super::shared::Shared;
use super::Ctx;

/// The first pause before a broken watch is created again.
const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest pause between two attempts (the poll covers the gap meanwhile).
const RETRY_MAX: Duration = Duration::from_secs(2);

/// The running watch; dropping it (the session ended) stops it.
pub struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts watching on the endpoint calls go to (`control::ha::etcd`; a watch created again goes to
/// the endpoint pinned then).
pub fn spawn(ctx: &Ctx, etcd: Arc<Etcd>) -> Watch {
    let own = ctx.keys.member(&ctx.node_id).into_bytes();
    let news = move |msg: &WatchResponse| {
        (msg.events().iter()).any(|e| e.kv().is_none_or(|kv| kv.key() != own.as_slice()))
    };
    let watcher = Watcher {
        prefix: ctx.keys.prefix().to_string(),
        quiet: Duration::from_millis(ctx.cfg.ttl_ms.saturating_mul(2)),
        shared: ctx.shared.clone(),
        news: Box::new(news),
        wake: None,
    };
    Watch(tokio::spawn(watcher.run(etcd)))
}

/// Which changes are news, and whom they wake.
pub struct Listener {
    /// Whether a response holds a change its loop must read.
    pub news: News,
    /// The loop to wake (the HA loop when None).
    pub wake: Option<Arc<super::wake::Wake>>,
}

/// Whether a watch response holds news for its loop.
pub type News = Box<dyn Fn(&WatchResponse) -> bool + Send + Sync>;

/// Watches `prefix` for another loop on the HA thread's runtime (`cluster::follow`): each
/// response `listener.news` takes for news wakes it, with the same re-creation rules and
/// counters as the HA loop's watch. `quiet` is how long a silent stream is trusted.
pub fn spawn_for(
    etcd: Arc<Etcd>,
    prefix: String,
    quiet: Duration,
    shared: Arc<Shared>,
    listener: Listener,
) -> Watch {
    let watcher = Watcher {
        prefix,
        quiet,
        shared,
        news: listener.news,
        wake: listener.wake,
    };
    Watch(tokio::spawn(watcher.run(etcd)))
}

struct Watcher {
    prefix: String,
    /// A stream silent this long is taken for broken.
    quiet: Duration,
    shared: Arc<Shared>,
    /// Which responses wake the loop (the HA loop's: a change of a key but its own member
    /// key, which only it writes).
    news: News,
    /// The loop woken (None: the HA loop, `Shared::wake`).
    wake: Option<Arc<super::wake::Wake>>,
}

impl Watcher {
    async fn run(self, etcd: Arc<Etcd>) {
        let mut retry = RETRY_MIN;
        let mut again = false;
        loop {
            let (why, worked) = match etcd.watch(self.prefix.clone()).await {
                Ok(mut stream) => self.follow(&mut stream, again).await,
                Err(e) => {
                    self.shared.stats.etcd_errors.fetch_add(1, Relaxed);
                    (e.to_string(), false)
                }
            };
            retry = if worked {
                RETRY_MIN
            } else {
                (retry * 2).min(RETRY_MAX)
            };
            log::debug!("ha: {why}; watching again in {} ms", retry.as_millis());
            tokio::time::sleep(retry).await;
            self.shared.stats.watch_restarts.fetch_add(1, Relaxed);
            again = true;
        }
    }

    /// Wakes the loop at each change until the stream stops: why it stopped, and whether it
    /// delivered events (a working watch: the next attempt comes after `RETRY_MIN`).
    async fn follow(&self, stream: &mut WatchStream, again: bool) -> (String, bool) {
        let mut worked = false;
        loop {
            let msg = match tokio::time::timeout(self.quiet, stream.message()).await {
                Err(_) => {
                    return (
                        format!("the etcd watch was silent for {:?}", self.quiet),
                        worked,
                    )
                }
                Ok(Err(e)) => return (format!("the etcd watch failed: {e}"), worked),
                Ok(Ok(None)) => return ("the etcd watch stream ended".into(), worked),
                Ok(Ok(Some(msg))) => msg,
            };
            if msg.canceled() {
                let why = format!("etcd cancelled the watch ({})", msg.cancel_reason());
                return (why, worked);
            }
            worked |= !msg.events().is_empty();
            if (msg.created() && again) || (self.news)(&msg) {
                match &self.wake {
                    Some(w) => w.signal(),
                    None => self.shared.wake.signal(),
                }
            }
        }
    }
}
