//! Keeps the map copy (docs/cluster.md, "The copy"): a task on the HA thread's runtime,
//! for the life of the process (the copy needs no lease). It watches the cluster's prefix; a
//! change of the map, of a leader key, or a member key created or deleted wakes it, and it
//! reads (`cluster::read`) and publishes what the read shows (`View::publish`). **The watch
//! wakes, the read decides**, as on the HA loop (docs/ha.md, "What wakes it"): a lost or
//! repeated event changes when the task reads, never what the copy holds, and `POLL` stays as
//! the fallback (a member's positions, rewritten at each renewal, are picked up there). With
//! etcd reachable the copy follows a change within a read's time after the event, and within
//! `POLL` plus a read without it: inside 1 s either way.
//!
//! It also starts the requests queued for it (`cluster::admin`), each as a task of its own, so
//! a create waiting for primaries never holds up the copy.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchResponse};

use super::view::MapState;
use super::Cluster;
use crate::control::ha::etcd::Etcd;
use crate::control::ha::shared::Shared;
use crate::control::ha::watch::{self, Listener, Watch};

/// How often the copy is read when nothing wakes the task.
const POLL: Duration = Duration::from_millis(500);

/// The running follower; dropping it stops it (and its watch).
pub struct Follower(tokio::task::JoinHandle<()>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the follower of `cluster`'s map on the current (HA thread's) runtime; `ttl_ms` is
/// the member's lease TTL (its own renewals keep the watch busy every `ttl_ms / 6`).
pub fn spawn(cluster: Arc<Cluster>, etcd: Arc<Etcd>, shared: Arc<Shared>, ttl_ms: u64) -> Follower {
    Follower(tokio::spawn(run(cluster, etcd, shared, ttl_ms)))
}

async fn run(cluster: Arc<Cluster>, etcd: Arc<Etcd>, shared: Arc<Shared>, ttl_ms: u64) {
    let listener = Listener {
        news: news(&cluster),
        wake: Some(cluster.wake.clone()),
    };
    let quiet = Duration::from_millis(ttl_ms.saturating_mul(2));
    let prefix = cluster.keys.prefix().to_string();
    let _watch: Watch = watch::spawn_for(etcd.clone(), prefix, quiet, shared.clone(), listener);
    let mut groups = super::read::groups_to_read(None, &cluster.group);
    let mut reported_rev = 0;
    loop {
        super::admin::start_requests(&cluster, &etcd);
        let read_at = tokio::time::Instant::now();
        match super::read::read(&etcd, &cluster.keys, &groups).await {
            Ok(read) => {
                let copy = super::read::copy(&read);
                let want = super::read::groups_to_read(copy.map.as_ref(), &cluster.group);
                if want != groups {
                    groups = want; // the map names other groups: read them now
                    continue;
                }
                if let MapState::Invalid(why) = &copy.state {
                    if copy.map_rev != reported_rev {
                        reported_rev = copy.map_rev;
                        log::error!("cluster: the map in etcd is refused, not served: {why}");
                    }
                }
                let epoch = copy.map_epoch();
                if epoch != cluster.view.get().map_epoch() {
                    log::info!("cluster: map epoch {epoch}");
                }
                cluster.view.publish(copy);
            }
            Err(e) => {
                shared.stats.etcd_errors.fetch_add(1, Relaxed);
                log::debug!("cluster: reading the map: {e}");
            }
        }
        cluster.wake.wait(POLL, read_at).await;
    }
}

/// Which watched changes the copy must read at once: the map, a leader key, a member key
/// created or deleted (a member's periodic rewrites wait for the poll).
fn news(cluster: &Cluster) -> watch::News {
    let keys = cluster.keys.clone();
    let map = keys.map();
    Box::new(move |msg: &WatchResponse| {
        msg.events().iter().any(|e| {
            let Some(kv) = e.kv() else {
                return true;
            };
            let key = kv.key_str().unwrap_or("");
            match keys.split_group(key) {
                _ if key == map => true,
                Some((_, "leader")) => true,
                Some((_, rest)) if rest.starts_with("members/") => {
                    e.event_type() == EventType::Delete || kv.version() == 1
                }
                _ => false,
            }
        })
    })
}
