//! One etcd session of the HA control thread (docs/ha.md, "Inside a member"): connect, grant
//! a lease, claim this node's member key (a second live process with the same `node_id` exits
//! 1), remove a stale leader key left by an earlier process, then renew and decide every
//! `POLL` until the lease is lost, sooner when woken (`control::ha::wake`: the etcd watch of
//! `control::ha::watch`, an operator's request, the driver): a wake only starts the next read early, the
//! read decides. Every etcd call is bounded by `CALL_TIMEOUT`; a failed call is retried at the
//! next poll while the lease deadline lies ahead.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
};

use super::error::{Fault, HaError};
use super::etcd::Etcd;
use super::keys::{Leader, Member};
use super::term::Term;
use super::Ctx;
use crate::member::clock::boottime_ns;

/// How often the thread renews (when due), reads the cluster's keys and decides when nothing
/// wakes it sooner (`control::ha::wake`).
pub const POLL: Duration = Duration::from_millis(200);

/// Why a lease renewal failed.
#[derive(Debug)]
pub enum Renewal {
    /// etcd answered that the lease is gone: the session is over.
    Expired,
    /// No endpoint renewed it in time (or the answer was an error): tried again while the
    /// lease deadline lies ahead.
    Failed(HaError),
}

impl std::fmt::Display for Renewal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Renewal::Expired => f.write_str("the lease expired in etcd"),
            Renewal::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// The lease deadline of a renewal sent at `sent` (CLOCK_BOOTTIME ns) that etcd answered
/// with `ttl` seconds: `sent + ttl - margin`.
fn deadline(sent: u64, ttl: i64, margin: Duration) -> Result<u64, Renewal> {
    if ttl <= 0 {
        return Err(Renewal::Expired);
    }
    let ttl_ns = (ttl as u64).saturating_mul(1_000_000_000);
    Ok(sent
        .saturating_add(ttl_ns)
        .saturating_sub(margin.as_nanos() as u64))
}

/// The cluster's keys as one read saw them.
pub struct Snapshot {
    /// The read's revision.
    pub revision: i64,
    /// The leader key: value, lease id, mod revision.
    pub leader: Option<(Leader, i64, i64)>,
    /// The stored epoch and the epoch key's mod revision (0, 0 when absent).
    pub epoch: (u64, i64),
    /// Member keys: value and mod revision.
    pub members: Vec<(Member, i64)>,
    /// The paused key exists (`HA_PAUSE`): nobody campaigns.
    pub paused: bool,
    /// The terms' history keys, oldest first.
    pub history: Vec<super::keys::History>,
    /// The switchover key (`SWITCHOVER` under way) and its mod revision.
    pub switchover: Option<(super::keys::Switchover, i64)>,
    /// The sync key (sync mode) and its mod revision.
    pub sync: Option<(super::keys::SyncSet, i64)>,
}

/// A connected session: the endpoints, its lease and the lease's keep-alive stream.
pub struct Session {
    pub etcd: Arc<Etcd>,
    pub lease: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    /// The endpoint the keep-alive stream runs on.
    stream_on: usize,
    /// Keep-alives sent on `stream` whose answers have not been read. A renewal that timed out
    /// leaves its answer on the stream; the next renewal must not take that answer for its
    /// own (it would date etcd's TTL from its later send time: a deadline past the lease's
    /// real end, which once made a primary resumed from SIGSTOP answer as primary for a poll
    /// after it had been replaced). Each renewal reads until its own answer.
    unanswered: u32,
}

pub async fn connect(etcd: &Arc<Etcd>, ctx: &Ctx) -> Result<Session, HaError> {
    let lease = etcd.lease_grant(ctx.cfg.ttl_secs()).await?;
    let (stream_on, keeper, stream) = etcd.keep_alive(lease).await?;
    Ok(Session {
        etcd: etcd.clone(),
        lease,
        keeper,
        stream,
        stream_on,
        unanswered: 0,
    })
}

impl Session {
    /// Renews the lease: the new deadline (CLOCK_BOOTTIME ns) is the send time plus the TTL
    /// etcd returned, minus `ha.safety_margin_ms`. `Renewal::Expired` when etcd says the lease
    /// is gone (the session is over); `Renewal::Failed` when no endpoint answered in time.
    ///
    /// The keep-alive stream runs on one etcd endpoint's connection: when that endpoint goes
    /// silent or away (a partition, a restart, a crash; quorum kept), the stream fails, and
    /// renewing on it again would fail until the deadline passed and this member lost its
    /// term. So a failed renewal marks the endpoint down and at once opens a new stream and
    /// renews on every other endpoint together (`Etcd::renew_anywhere`): the first to answer
    /// carries the stream and the pin from then on. All of it takes at most two call
    /// deadlines, each shorter than the margin.
    pub async fn renew(&mut self, margin: Duration) -> Result<u64, Renewal> {
        let sent = boottime_ns();
        let ttl = match self.renew_on_stream().await {
            Ok(ttl) => ttl,
            Err(e) => {
                let e = self.etcd.failed(self.stream_on, e);
                log::debug!("ha: {e}; renewing on every other endpoint");
                let sent = boottime_ns();
                let (on, keeper, stream, ttl) =
                    (self.etcd.renew_anywhere(self.lease, self.stream_on))
                        .await
                        .map_err(|again| {
                            Renewal::Failed(HaError::Again {
                                first: Box::new(e),
                                again: Box::new(again),
                            })
                        })?;
                (self.stream_on, self.keeper, self.stream) = (on, keeper, stream);
                self.unanswered = 0; // first_renewal read its own answer
                return deadline(sent, ttl, margin);
            }
        };
        deadline(sent, ttl, margin)
    }

    /// One renewal on the current stream: the TTL etcd answered.
    async fn renew_on_stream(&mut self) -> Result<i64, HaError> {
        let call = |fault| HaError::Call {
            what: "keep-alive".into(),
            endpoint: self.etcd.url(self.stream_on).to_string(),
            fault,
        };
        let limit = self.etcd.timeout();
        let answer = tokio::time::timeout(limit, async {
            self.keeper.keep_alive().await?;
            self.unanswered += 1;
            loop {
                let resp = self.stream.message().await?;
                if resp.is_none() {
                    return Ok(None);
                }
                self.unanswered = self.unanswered.saturating_sub(1);
                if self.unanswered == 0 {
                    return Ok(resp);
                }
                // The answer to an earlier keep-alive that timed out: not this one's.
            }
        });
        match answer.await {
            Ok(Ok(Some(resp))) => Ok(resp.ttl()),
            Ok(Ok(None)) => Err(call(Fault::StreamEnded)),
            Ok(Err(e)) => Err(call(Fault::Etcd(e))),
            Err(_) => Err(call(Fault::NoAnswerWithin(limit))),
        }
    }

    /// Reads every key of the cluster.
    pub async fn read(&mut self, ctx: &Ctx) -> Result<Snapshot, HaError> {
        let opts = GetOptions::new().with_prefix();
        let resp = self
            .etcd
            .get("get", ctx.keys.prefix().to_string(), opts)
            .await?;
        let mut snap = Snapshot {
            revision: resp.header().map_or(0, |h| h.revision()),
            leader: None,
            epoch: (0, 0),
            members: Vec::new(),
            paused: false,
            history: Vec::new(),
            switchover: None,
            sync: None,
        };
        let leader_key = ctx.keys.leader();
        let epoch_key = ctx.keys.epoch();
        let paused_key = ctx.keys.paused();
        let switchover_key = ctx.keys.switchover();
        let sync_key = ctx.keys.sync();
        for kv in resp.kvs() {
            let key = kv.key_str().unwrap_or("");
            if key == leader_key {
                let leader = serde_json::from_slice(kv.value()).ok();
                snap.leader = leader.map(|l| (l, kv.lease(), kv.mod_revision()));
            } else if key == epoch_key {
                let v = kv
                    .value_str()
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                snap.epoch = (v, kv.mod_revision());
            } else if key == paused_key {
                snap.paused = true;
            } else if key == switchover_key {
                let value = serde_json::from_slice(kv.value()).ok();
                snap.switchover = value.map(|v| (v, kv.mod_revision()));
            } else if key == sync_key {
                let value = serde_json::from_slice(kv.value()).ok();
                snap.sync = value.map(|v| (v, kv.mod_revision()));
            } else if ctx.keys.is_history(key) {
                if let Ok(h) = serde_json::from_slice(kv.value()) {
                    snap.history.push(h); // keys sort by their zero-padded epoch
                }
            } else if ctx.keys.member_of(key).is_some() {
                if let Ok(m) = serde_json::from_slice(kv.value()) {
                    snap.members.push((m, kv.mod_revision()));
                }
            }
        }
        Ok(snap)
    }

    /// Writes this member's key on the session's lease; returns the write's revision.
    pub async fn put_member(&mut self, ctx: &Ctx, member: &Member) -> Result<i64, HaError> {
        let value = serde_json::to_vec(member)?;
        let opts = PutOptions::new().with_lease(self.lease);
        let key = ctx.keys.member(&ctx.node_id);
        let resp = self.etcd.put("put member", key, value, Some(opts)).await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Deletes `key` if its mod revision is still `rev` (a guarded delete).
    pub async fn delete_if(&mut self, key: String, rev: i64) -> Result<bool, HaError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.etcd.txn("txn delete", txn).await?.succeeded())
    }
}

/// Waits until no other live process holds this node's member key, then creates it. A key of
/// another process that keeps being rewritten belongs to a live duplicate: exit 1. One that
/// stays unchanged belongs to a dead process and goes with its lease. This process's own key
/// from an earlier session (etcd was out of reach past the lease deadline, but the key's lease
/// still lives in etcd) is taken back at once (`take_back`), not waited out.
pub async fn claim_member_key(ctx: &Ctx, s: &mut Session, first: &Member) -> Result<(), HaError> {
    let key = ctx.keys.member(&ctx.node_id);
    let mut seen: Option<i64> = None;
    loop {
        let value = serde_json::to_vec(first)?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(s.lease)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = s.etcd.txn("claim member key", txn).await?;
        if resp.succeeded() {
            return Ok(());
        }
        let held = Held::of(&resp);
        if held.instance.as_deref() == Some(ctx.instance.as_str()) {
            if take_back(s, &key, value, &held).await? {
                return Ok(());
            }
            continue; // it changed meanwhile: look again
        }
        if seen.is_some_and(|r| r != held.rev) {
            log::error!(
                "ha.node_id {:?} is held by another live process (its member key keeps being \
                 renewed); exiting",
                ctx.node_id
            );
            std::process::exit(1);
        }
        seen = Some(held.rev);
        log::info!(
            "ha: the member key of {:?} is held by an earlier process; waiting for it to expire",
            ctx.node_id
        );
        tokio::time::sleep(Duration::from_millis(ctx.cfg.ttl_ms / 2)).await;
    }
}

/// Moves this process's member key from an earlier session's lease to this session's (if it
/// is still at `held.rev`), then revokes that lease: whatever else it held (a leader key of a
/// term this member already gave up) goes at once instead of at its expiry.
async fn take_back(s: &Session, key: &str, value: Vec<u8>, held: &Held) -> Result<bool, HaError> {
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, held.rev)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(s.lease)),
        )]);
    if !s.etcd.txn("take back member key", txn).await?.succeeded() {
        return Ok(false);
    }
    log::info!("ha: took back this process's member key from its earlier etcd session");
    if held.lease != 0 && held.lease != s.lease {
        if let Err(e) = s.etcd.lease_revoke(held.lease).await {
            log::debug!("ha: revoking the earlier session's lease: {e}");
        }
    }
    Ok(true)
}

/// The member key a failed claim read back.
struct Held {
    /// Its mod revision (0 when it vanished meanwhile).
    rev: i64,
    lease: i64,
    /// The process that wrote it (`Member::instance`).
    instance: Option<String>,
}

impl Held {
    fn of(resp: &etcd_client::TxnResponse) -> Held {
        let kv = resp.op_responses().into_iter().find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        match kv {
            Some(kv) => Held {
                rev: kv.mod_revision(),
                lease: kv.lease(),
                instance: serde_json::from_slice::<Member>(kv.value())
                    .ok()
                    .map(|m| m.instance),
            },
            None => Held {
                rev: 0,
                lease: 0,
                instance: None,
            },
        }
    }
}

/// Runs sessions for ever: a session that ends (etcd unreachable past the lease, the lease
/// lost) leaves the member fenced, and a new one starts after a pause.
pub async fn run(ctx: Ctx) {
    let etcd = match Etcd::new(&ctx.cfg) {
        Ok(etcd) => etcd,
        Err(e) => {
            log::error!("ha: {e}; automatic failover cannot start");
            return;
        }
    };
    // Cluster mode: the map copy, kept for the life of the process (it needs no lease).
    let _follower = (ctx.shared.cluster.clone()).map(|c| {
        crate::cluster::spawn_follower(c, etcd.clone(), ctx.shared.clone(), ctx.cfg.ttl_ms)
    });
    let mut backoff = POLL;
    loop {
        let mut term = Term::new();
        let outcome = match connect(&etcd, &ctx).await {
            Ok(mut s) => serve(&ctx, &mut s, &mut term).await,
            Err(e) => Err(e),
        };
        term.step_down(
            &ctx,
            super::shared::Demotion::EtcdSession,
            "etcd session ended",
        );
        ctx.shared.update_view(|v| v.etcd_reachable = false);
        if let Err(e) = outcome {
            ctx.shared
                .stats
                .etcd_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            log::warn!("ha: {e}; retrying in {} ms", backoff.as_millis());
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(ctx.cfg.ttl_ms / 3).max(POLL));
    }
}

/// One session: claim, clean up, then poll until the lease is lost.
async fn serve(ctx: &Ctx, s: &mut Session, term: &mut Term) -> Result<(), HaError> {
    claim_member_key(ctx, s, &term.member(ctx)).await?;
    if let Some(c) = &ctx.shared.cluster {
        let ttl = ctx.cfg.ttl_ms;
        let live =
            crate::cluster::unique::live_elsewhere(&s.etcd, &c.keys, &c.group, &ctx.node_id, ttl);
        if let Some(group) = live.await? {
            log::error!(
                "ha.node_id {:?} is held by a live process in group {group:?} of cluster {:?}; \
                 exiting",
                ctx.node_id,
                c.name
            );
            std::process::exit(1);
        }
    }
    term.lease_deadline = s.renew(ctx.margin).await.map_err(|e| match e {
        Renewal::Expired => HaError::Expired,
        Renewal::Failed(e) => e,
    })?;
    ctx.shared.update_view(|v| v.etcd_reachable = true);
    // Every sixth of the TTL: when etcd's own leader goes (its host cut off), no renewal can
    // succeed until etcd has elected another (0.5-1 s with etcd's default election timeout);
    // the last renewal then lies at most a sixth of the TTL back, leaving the rest of the
    // lease window (`ttl_ms - safety_margin_ms`) for the election and one renewal after it.
    let renew_every = Duration::from_millis(ctx.cfg.ttl_ms / 6).as_nanos() as u64;
    let mut next_renew = boottime_ns() + renew_every;
    let _watch = super::watch::spawn(ctx, s.etcd.clone());
    loop {
        let now = boottime_ns();
        if now >= next_renew {
            match s.renew(ctx.margin).await {
                Ok(deadline) => {
                    term.renewed(ctx, deadline);
                    next_renew = now + renew_every;
                    if let Err(e) = s.put_member(ctx, &term.member(ctx)).await {
                        log::debug!("ha: {e}");
                    }
                }
                Err(Renewal::Expired) => return Err(HaError::Expired),
                Err(Renewal::Failed(e)) => note_error(ctx, term, e)?,
            }
        }
        super::admin::carry_out_pauses(ctx, s).await;
        let read_at = tokio::time::Instant::now();
        match s.read(ctx).await {
            Ok(snap) => term.decide(ctx, s, snap).await?,
            Err(e) => note_error(ctx, term, e)?,
        }
        // Until the poll, the renewal (whichever comes first) or a wake (`control::ha::wake`).
        let renew_in = Duration::from_nanos(next_renew.saturating_sub(boottime_ns()));
        ctx.shared.wake.wait(POLL.min(renew_in), read_at).await;
    }
}

/// A failed call: counted; fatal to the session at `Term::give_up_at` (past the lease
/// deadline the member is fenced already: `ReplState::fenced`).
fn note_error(ctx: &Ctx, term: &Term, e: HaError) -> Result<(), HaError> {
    ctx.shared
        .stats
        .etcd_errors
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if boottime_ns() >= term.give_up_at(ctx) {
        return Err(HaError::PastDeadline(Box::new(e)));
    }
    log::debug!("ha: {e}; retrying");
    Ok(())
}
