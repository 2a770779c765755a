//! The control executor's side of replication: it receives what the fronts relay (`relay`),
//! serves `REPLICATE` (agreement per shard, then a `sender` task per replica), collects acks
//! (lag, sync quorum), answers REPLICATION_STATUS and PROMOTE, and runs the `follower` when
//! this member is a replica.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::channels::shared_channel::{ConnectedReceiver, ConnectedSender};
use shards::{ErrorCode, Rejection};

use super::sender::{self, Link};
use super::{follower, promote};
use crate::config::{Config, ReplicationMode, Role};
use crate::member::{ReplState, ReplicaView};
use crate::mesh::relay::{ControlEnds, Down, Up};
use crate::mesh::router::Router;
use crate::protocol::routes;
use crate::protocol::stream::{self, ReplicateParams, ReplicateResult};
use crate::shard::{ReplyBody, ShardCall};
use crate::util::notify::Notify;
use crate::util::time::now_ms;

/// How often the hub looks whether the sync set's counting members changed (failover, sync
/// mode): a write waiting for its acknowledgement waits at most this much longer after its
/// replica joined the set.
const SYNC_SET_RECOUNT_EVERY: Duration = Duration::from_millis(20);

/// The replication settings the control executor needs (from `replication.*`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: ReplicationMode,
    pub sync_replicas: u32,
    pub fanout_max: u64,
    pub heartbeat: Duration,
    pub follower: Option<follower::Settings>,
}

impl Settings {
    pub fn from_config(c: &Config) -> Result<Settings, follower::SettingsError> {
        let r = &c.replication;
        let follower = match r.role {
            Some(Role::Replica) => Some(follower::Settings::from_config(c)?),
            _ => None,
        };
        Ok(Settings {
            mode: r.mode,
            sync_replicas: r.sync_replicas.max(1),
            fanout_max: u64::from(r.fanout_max.max(1)),
            heartbeat: Duration::from_millis(r.heartbeat_ms.max(1)),
            follower,
        })
    }
}

/// What `main` hands the control executor for replication.
pub struct HubSetup {
    pub fronts: Vec<ControlEnds>,
    pub state: Arc<ReplState>,
    pub settings: Settings,
    /// Failover (docs/ha.md): the HA thread's exchange and the follower settings without an
    /// upstream (the leader key gives it).
    pub ha: Option<(Arc<crate::control::ha::shared::Shared>, follower::Settings)>,
}

/// A shard's log position, as `ShardCall::LogPosition` answers it.
pub struct Position {
    pub head: u64,
    pub durable: u64,
    pub oldest: u64,
    pub last_epoch: u64,
    pub epochs: Vec<(u64, u64)>,
    pub handle: shards::wal::LogHandle,
}

pub struct Hub {
    pub router: Rc<Router>,
    pub state: Arc<ReplState>,
    pub settings: Settings,
    /// Each front's down channel, once that front has connected it.
    downs: RefCell<Vec<Option<Rc<ConnectedSender<Down>>>>>,
    links: RefCell<HashMap<u64, Rc<Link>>>,
    /// Per shard, the offset last reported to the shard as acknowledged by a sync quorum.
    synced: RefCell<Vec<u64>>,
    /// Ends the follower (PROMOTE, shutdown); `follower_running` says whether it still runs.
    pub follower_stop: Notify,
    pub follower_running: Cell<bool>,
    /// Set at shutdown and by PROMOTE: the follower stops for good.
    pub stopping: Cell<bool>,
    /// A follower runs while this is the generation it started with (`stop_follower`).
    pub follow_gen: Cell<u64>,
    /// Failover (docs/ha.md): what the HA thread shows in REPLICATION_STATUS.ha.
    pub(crate) ha: Option<Arc<crate::control::ha::shared::Shared>>,
}

impl Hub {
    /// Starts one task per front (it connects that front's relay channels, which completes
    /// only once the front runs, after start-up), and the follower on a replica.
    pub async fn start(setup: HubSetup, router: Rc<Router>) -> Rc<Hub> {
        let shards = router.shard_count() as usize;
        let hub = Rc::new(Hub {
            router,
            state: setup.state,
            settings: setup.settings,
            downs: RefCell::new((0..setup.fronts.len()).map(|_| None).collect()),
            links: RefCell::new(HashMap::new()),
            synced: RefCell::new(vec![0; shards]),
            follower_stop: Notify::default(),
            follower_running: Cell::new(false),
            stopping: Cell::new(false),
            follow_gen: Cell::new(0),
            ha: setup.ha.as_ref().map(|(shared, _)| shared.clone()),
        });
        for (front, (rx, tx)) in setup.fronts.into_iter().enumerate() {
            let weak = Rc::downgrade(&hub);
            glommio::spawn_local(async move {
                let (rx, tx) = futures_lite::future::zip(rx.connect(), tx.connect()).await;
                if let Some(hub) = weak.upgrade() {
                    hub.downs.borrow_mut()[front] = Some(Rc::new(tx));
                }
                serve_front(weak, front, rx).await;
            })
            .detach();
        }
        if let Some(cfg) = hub.settings.follower.clone() {
            hub.start_follower(cfg);
        }
        if hub.ha.is_some() && hub.settings.mode == ReplicationMode::Sync {
            glommio::spawn_local(Hub::recount_on_sync_set_change(Rc::downgrade(&hub))).detach();
        }
        if let Some((shared, template)) = setup.ha {
            if let Some(cluster) = shared.cluster.clone() {
                let run = crate::cluster::moves::run(hub.clone(), cluster, template.clone());
                glommio::spawn_local(run).detach();
            }
            glommio::spawn_local(crate::control::ha::driver::run(
                hub.clone(),
                shared,
                template,
            ))
            .detach();
        }
        hub
    }

    /// Starts the follower stream to `cfg.upstream`.
    pub fn start_follower(self: &Rc<Self>, cfg: follower::Settings) {
        self.follower_stop.clear();
        self.follower_running.set(true);
        let gen = self.follow_gen.get();
        glommio::spawn_local(follower::run(self.clone(), cfg, gen)).detach();
    }

    /// Stops the follower stream (failover: a new leader, or none) and waits until it has
    /// stopped, at most `wait`. Returns whether it stopped.
    pub async fn stop_follower(&self, wait: Duration) -> bool {
        self.follow_gen.set(self.follow_gen.get() + 1);
        self.follower_stop.notify();
        let since = std::time::Instant::now();
        while self.follower_running.get() {
            if since.elapsed() > wait {
                return false;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// A new term (promotion or demotion): acknowledgements of the last one no longer count.
    pub fn reset_quorum(&self) {
        self.synced.borrow_mut().iter_mut().for_each(|s| *s = 0);
        if let Some(shared) = &self.ha {
            shared.with_sync(|c| {
                c.synced.iter_mut().for_each(|s| *s = 0);
                c.acked.clear();
            });
        }
    }

    /// Sends `msg` to front `front` (waits for room: the front drains its channel without
    /// waiting on anything).
    pub async fn down(&self, front: usize, msg: Down) -> bool {
        let tx = self.downs.borrow().get(front).cloned().flatten();
        match tx {
            Some(tx) => tx.send(msg).await.is_ok(),
            None => false,
        }
    }

    /// Every shard's log position.
    pub async fn positions(&self) -> Result<Vec<Position>, Rejection> {
        let mut slots = Vec::new();
        for shard in 0..self.router.shard_count() {
            slots.push(self.router.start(shard, ShardCall::LogPosition).await);
        }
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            match slot.wait().await? {
                ReplyBody::Position {
                    head,
                    durable,
                    oldest,
                    last_epoch,
                    epochs,
                    handle,
                } => out.push(Position {
                    head,
                    durable,
                    oldest,
                    last_epoch,
                    epochs,
                    handle,
                }),
                _ => return Err(internal("unexpected reply to LogPosition")),
            }
        }
        Ok(out)
    }

    /// Shutdown: every stream ends, the follower stops.
    pub fn shut_down(&self) {
        self.stopping.set(true);
        self.stop_links();
        self.follower_stop.notify();
    }

    /// Stops every link.
    pub fn stop_links(&self) {
        for link in self.links.borrow().values() {
            link.stop();
        }
    }

    pub fn remove_link(&self, id: u64) {
        if let Some(link) = self.links.borrow_mut().remove(&id) {
            link.stop();
            if let Ok(mut r) = self.state.stats.replicas.lock() {
                if r.get(&link.replica_id).is_some_and(|v| v.link == id) {
                    r.remove(&link.replica_id);
                }
            }
        }
    }

    /// A replica acknowledged `positions`: records them and, in sync mode, tells each shard
    /// the offset a quorum of `replication.sync_replicas` replicas has made durable.
    async fn on_ack(&self, id: u64, payload: &[u8]) {
        let Some(link) = self.links.borrow().get(&id).cloned() else {
            return;
        };
        let ack: stream::Ack = match serde_json::from_slice(payload) {
            Ok(a) => a,
            Err(e) => {
                log::warn!("replica {}: bad ack ({e}); closing", link.replica_id);
                link.stop();
                return;
            }
        };
        let n = self.router.shard_count();
        let Ok(acked) = stream::positions_vec(&ack.positions, n) else {
            link.stop();
            return;
        };
        link.record_ack(&acked, &self.state);
        if self.settings.mode == ReplicationMode::Sync {
            self.report_quorum().await;
        }
    }

    /// Failover in sync mode: per shard, the offset the sync set has acknowledged, which every
    /// replica's heartbeats carry (`sender.rs`); None otherwise.
    pub fn committed(&self) -> Option<Vec<u64>> {
        let sync = self.settings.mode == ReplicationMode::Sync;
        (sync && self.ha.is_some()).then(|| self.synced.borrow().clone())
    }

    async fn report_quorum(&self) {
        let moves = self.quorum_moves();
        if !moves.is_empty() && self.ha.is_some() {
            // Every replica's sender tells its replica (`committed`), not only the one whose
            // acknowledgement moved it.
            for link in self.links.borrow().values() {
                link.nudge();
            }
        }
        for (shard, through) in moves {
            // Fire and forget: the shard answers at once; nobody needs the reply.
            drop(
                self.router
                    .start(shard, ShardCall::ReplicaAcked { through })
                    .await,
            );
        }
    }

    /// Per shard, the offset `replication.sync_replicas` counting replicas have made durable,
    /// where it moved. With failover only the sync set's members count (docs/ha.md, "The sync
    /// set"): the count and its record in the shared `SyncCount` happen under that lock, so the
    /// HA thread never removes a member between the two.
    fn quorum_moves(&self) -> Vec<(u32, u64)> {
        let k = self.settings.sync_replicas as usize;
        let n = self.router.shard_count() as usize;
        let links = self.links.borrow();
        let mut guard = match &self.ha {
            Some(shared) => match shared.sync.lock() {
                Ok(g) => Some(g),
                Err(_) => return Vec::new(), // a panicked HA thread: count nothing
            },
            None => None,
        };
        let mut synced = self.synced.borrow_mut();
        let mut moves = Vec::new();
        for (shard, done) in synced.iter_mut().enumerate().take(n) {
            let mut acks: Vec<u64> = (links.values())
                .filter(|l| guard.as_ref().is_none_or(|c| c.counts(&l.replica_id)))
                .map(|l| l.acked_at(shard))
                .collect();
            if acks.len() < k {
                continue;
            }
            acks.sort_unstable_by(|a, b| b.cmp(a));
            let through = acks[k - 1];
            if through > *done {
                *done = through;
                moves.push((shard as u32, through));
            }
        }
        if let Some(c) = guard.as_mut() {
            c.synced.clone_from(&synced);
            c.acked.clear();
            for l in links.values() {
                let e = (c.acked.entry(l.replica_id.clone())).or_insert_with(|| vec![0; n]);
                for (shard, a) in e.iter_mut().enumerate() {
                    *a = (*a).max(l.acked_at(shard));
                }
            }
        }
        moves
    }

    /// Failover in sync mode: recounts the quorum whenever the sync set's counting members
    /// change (an added member may already hold what waits for its acknowledgement).
    async fn recount_on_sync_set_change(hub: std::rc::Weak<Hub>) {
        let mut seen = 0;
        loop {
            glommio::timer::sleep(SYNC_SET_RECOUNT_EVERY).await;
            let Some(hub) = hub.upgrade() else {
                return;
            };
            let version = (hub.ha.as_ref()).and_then(|s| s.with_sync(|c| c.version));
            if let Some(v) = version.filter(|v| *v != seen) {
                seen = v;
                hub.report_quorum().await;
            }
        }
    }

    /// `REPLICATE` from a replica: checks, agreement per shard, then the sender task.
    async fn open(
        self: &Rc<Self>,
        front: usize,
        id: u64,
        params: Option<Vec<u8>>,
        peer: String,
    ) -> Result<Vec<u8>, Rejection> {
        let p = self.check_replicate(params.as_deref())?;
        let n = self.router.shard_count();
        let positions = stream::positions_vec(&p.positions, n)
            .map_err(|e| Rejection::new(ErrorCode::BadRequest, e))?;
        let epochs = stream::positions_vec(&p.epochs, n)
            .map_err(|e| Rejection::new(ErrorCode::BadRequest, e))?;
        let logs = self.positions().await?;
        let agree = agreement(&logs, &positions, &epochs, p.epoch);
        let own = self.state.epoch();
        let result = ReplicateResult {
            epoch: own,
            shards: n,
            agree: stream::positions_map(&agree),
            heads: stream::positions_map(&logs.iter().map(|l| l.durable).collect::<Vec<_>>()),
            ack_every_ms: match self.settings.mode {
                ReplicationMode::Sync => 0,
                ReplicationMode::Async => stream::ASYNC_ACK_EVERY_MS,
            },
        };
        let link = self.register_link(front, id, &p, &agree, peer);
        log::info!(
            "replica {} connected: streaming from {:?} (epoch {own})",
            p.replica_id,
            agree
        );
        let handles = logs.into_iter().map(|l| l.handle).collect();
        glommio::spawn_local(sender::run(self.clone(), link, handles)).detach();
        serde_json::to_vec(&result).map_err(|e| internal(&e.to_string()))
    }

    /// REPLICATE's refusals: not a primary, a replica that saw a newer epoch, another shard
    /// count.
    fn check_replicate(&self, params: Option<&[u8]>) -> Result<ReplicateParams, Rejection> {
        if self.state.role() != Some(Role::Primary) {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                format!(
                    "this server is a {}, not a primary: REPLICATE is refused",
                    self.state.role_name()
                ),
            ));
        }
        let p: ReplicateParams = crate::ops::params::parse(params)?;
        let own = self.state.epoch();
        if p.epoch > own {
            return Err(Rejection::new(
                ErrorCode::StaleEpoch,
                format!(
                    "the replica has seen epoch {}, newer than this primary's epoch {own}",
                    p.epoch
                ),
            )
            .with("epoch", own));
        }
        let n = self.router.shard_count();
        let theirs = p.positions.len() as u32;
        if theirs != n {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                format!("shard counts differ: the primary has {n}, the replica {theirs}"),
            )
            .with("shards", n));
        }
        Ok(p)
    }

    /// The new link, in the hub and in the replicas REPLICATION_STATUS lists.
    fn register_link(
        &self,
        front: usize,
        id: u64,
        p: &ReplicateParams,
        agree: &[u64],
        peer: String,
    ) -> Rc<Link> {
        let versions = (p.snapshot_versions.clone())
            .unwrap_or_else(|| stream::SNAPSHOT_VERSIONS_UNSAID.to_vec());
        let link = Rc::new(Link::new(id, front, p.replica_id.clone(), agree, versions));
        if let Some(old) = self.links.borrow_mut().insert(id, link.clone()) {
            old.stop();
        }
        if let Ok(mut r) = self.state.stats.replicas.lock() {
            r.insert(
                p.replica_id.clone(),
                ReplicaView {
                    link: id,
                    addr: peer,
                    acked: agree.to_vec(),
                    lag_entries: 0,
                    live: false,
                    connected_at_ms: now_ms(),
                },
            );
        }
        link
    }

    async fn call(
        self: &Rc<Self>,
        op: routes::Control,
        params: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, Rejection> {
        use routes::Control as C;
        let v = match op {
            C::ReplicationStatus => self.status().await?,
            C::Promote => promote::promote(self, params.as_deref()).await?,
            C::HaPause | C::HaResume => {
                crate::control::ha::admin::pause_op(self.ha.as_deref(), op == C::HaPause).await?
            }
            C::Switchover => {
                crate::control::ha::switchover::op(self, self.ha.as_deref(), params.as_deref())
                    .await?
            }
        };
        serde_json::to_vec(&v).map_err(|e| internal(&e.to_string()))
    }
}

/// Per shard, the offset up to which the replica's log agrees with this one: its position,
/// capped at the end of its last epoch here (docs/replication.md, "Epochs and divergence").
fn agreement(logs: &[Position], positions: &[u64], epochs: &[u64], epoch: u64) -> Vec<u64> {
    logs.iter()
        .enumerate()
        .map(|(shard, log)| {
            let their_epoch = match epochs[shard] {
                0 => epoch,
                e => e,
            };
            positions[shard].min(epoch_end(&log.epochs, their_epoch, log.durable))
        })
        .collect()
}

/// The last offset written under an epoch <= `epoch`: just before the first epoch record of a
/// later epoch, or the head when there is none (Kafka's leader-epoch end offset).
pub fn epoch_end(epochs: &[(u64, u64)], epoch: u64, head: u64) -> u64 {
    epochs
        .iter()
        .find(|(e, _)| *e > epoch)
        .map_or(head, |(_, first)| first.saturating_sub(1))
}

/// Receives what one front relays, until the front goes away.
async fn serve_front(hub: std::rc::Weak<Hub>, front: usize, rx: ConnectedReceiver<Up>) {
    while let Some(msg) = rx.recv().await {
        let Some(hub) = hub.upgrade() else { return };
        match msg {
            Up::Open { link, params, peer } => {
                let result = hub.open(front, link, params, peer).await;
                hub.down(front, Down::Opened { link, result }).await;
            }
            Up::Frame { link, payload } => hub.on_ack(link, &payload).await,
            Up::Closed { link } => hub.remove_link(link),
            Up::Call { token, op, params } => {
                // PROMOTE can take a while (epoch records): answer from a task of its own.
                let hub2 = hub.clone();
                glommio::spawn_local(async move {
                    let result = hub2.call(op, params).await;
                    hub2.down(front, Down::Answer { token, result }).await;
                })
                .detach();
            }
        }
    }
}

pub fn internal(msg: &str) -> Rejection {
    Rejection::new(ErrorCode::InternalError, msg.to_string())
}

#[cfg(test)]
mod tests {
    use super::epoch_end;

    #[test]
    fn an_epoch_ends_where_the_next_begins() {
        let epochs = [(1, 1), (2, 50), (4, 90)];
        assert_eq!(epoch_end(&epochs, 1, 100), 49);
        assert_eq!(epoch_end(&epochs, 2, 100), 89);
        assert_eq!(epoch_end(&epochs, 3, 100), 89);
        assert_eq!(epoch_end(&epochs, 4, 100), 100);
        assert_eq!(epoch_end(&[], 1, 7), 7);
        assert_eq!(epoch_end(&epochs, 0, 100), 0);
    }
}
