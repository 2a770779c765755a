//! Shard-level tests: real shards (`runtime::run`, real logs under /tmp) driven over their
//! request channels from the same glommio executor, for the calls no wire op reaches yet
//! (replication's storage side).

mod replica;
mod snapshots;
mod sync;
mod timers;

use std::future::Future;
use std::path::Path;
use std::sync::{mpsc, Arc};

use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender};
use glommio::{LocalExecutorBuilder, Placement};
use serde_json::Value;
use shards::wal::WalConfig;
use shards::Rejection;

use super::message::{ReplyBody, ShardCall, ShardMessage, ShardRequest};
use super::runtime::{self, ShardSetup};
use super::subs::{PushMsg, SubsEnded};
use crate::member::ReplState;
use crate::protocol::Op;

/// Runs `f` in a fresh executor, propagating panics.
pub fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .spawn(f)
        .expect("spawn executor")
        .join()
        .expect("executor panicked");
}

/// The client end of one running shard.
pub struct TestShard {
    tx: ConnectedSender<ShardRequest>,
    rx: ConnectedReceiver<ShardMessage>,
    next_token: u32,
    /// Pushes received while waiting for replies.
    pub pushes: Vec<PushMsg>,
    /// Subscriptions the shard ended, received while waiting for replies.
    pub ended: Vec<SubsEnded>,
    /// The role and lease the shard reads (a test may fence or demote it).
    pub member: Arc<ReplState>,
    task: glommio::task::JoinHandle<()>,
}

#[derive(Clone, Copy)]
pub struct Options {
    pub fires_timers: bool,
    /// The data dir's `timers.paused` marker was found.
    pub timers_paused: bool,
    pub segment_bytes: u64,
    pub sync: Option<super::sync::SyncSetup>,
    /// The member's role (`None`: standalone).
    pub role: Option<crate::config::Role>,
    /// `storage.snapshot_every_entries` (default: never).
    pub snapshot_every: u64,
    /// Failover on, and this member the primary with a lease an hour long (`role` unused).
    pub ha_primary: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fires_timers: true,
            timers_paused: false,
            segment_bytes: 64 << 10,
            sync: None,
            role: None,
            snapshot_every: u64::MAX / 2,
            ha_primary: false,
        }
    }
}

impl TestShard {
    /// Starts shard 0 with its log in `dir/shard-0` on the current executor.
    pub async fn start(dir: &Path, opts: Options) -> TestShard {
        let (req_tx, req_rx) = shared_channel::new_bounded(64);
        let (resp_tx, resp_rx) = shared_channel::new_bounded(64);
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut wal = WalConfig::new(dir.join("shard-0"), 0);
        wal.segment_bytes = opts.segment_bytes;
        wal.retain_bytes = 0;
        let member = Arc::new(match opts.ha_primary {
            true => {
                let m = ReplState::new_ha();
                m.become_primary();
                m.set_lease_until(crate::member::clock::boottime_ns() + 3_600_000_000_000);
                m
            }
            false => ReplState::new(opts.role),
        });
        let setup = ShardSetup {
            index: 0,
            clients: vec![(req_rx, resp_tx)],
            wal,
            snapshot_every: opts.snapshot_every,
            fires_timers: opts.fires_timers,
            timers_paused: opts.timers_paused,
            sync: opts.sync,
            member: member.clone(),
            cluster_group: None,
            ready: ready_tx,
        };
        let task = glommio::spawn_local(runtime::run(setup)).detach();
        // The shard connects its ends only after start-up, so `ready` is in by then.
        let (tx, rx) = futures_lite::future::zip(req_tx.connect(), resp_rx.connect()).await;
        ready_rx
            .try_recv()
            .expect("ready sent")
            .expect("shard started");
        TestShard {
            tx,
            rx,
            next_token: 0,
            pushes: Vec::new(),
            ended: Vec::new(),
            member,
            task,
        }
    }

    pub async fn call(&mut self, call: ShardCall) -> Result<ReplyBody, Rejection> {
        let token = self.send(call).await;
        let (got, result) = self.reply().await;
        assert_eq!(got, token, "replies in order");
        result
    }

    /// Sends a request without waiting for its reply; returns its token.
    pub async fn send(&mut self, call: ShardCall) -> u32 {
        self.next_token += 1;
        let token = self.next_token;
        let sent = self.tx.send(ShardRequest { token, call }).await;
        assert!(sent.is_ok(), "shard gone");
        token
    }

    /// The next reply (token and result), collecting pushes that come before it.
    pub async fn reply(&mut self) -> (u32, Result<ReplyBody, Rejection>) {
        loop {
            match self.rx.recv().await.expect("shard answers") {
                ShardMessage::Reply(r) => return (r.token, r.result),
                ShardMessage::Push(p) => self.pushes.push(p),
                ShardMessage::SubsEnded(e) => self.ended.push(e),
            }
        }
    }

    /// A JSON reply as a value (panics on anything else).
    pub async fn json(&mut self, call: ShardCall) -> Result<Value, Rejection> {
        match self.call(call).await? {
            ReplyBody::Json(bytes) | ReplyBody::Machine { result: bytes, .. } => {
                Ok(serde_json::from_slice(&bytes).expect("json reply"))
            }
            _ => panic!("not a JSON reply"),
        }
    }

    pub async fn op(&mut self, op: Op, params: Value) -> Result<Value, Rejection> {
        let params = Some(params.to_string().into_bytes());
        self.json(ShardCall::Op {
            op: crate::shard::ShardOp::of(op).expect("a shard op"),
            params,
        })
        .await
    }

    /// Hangs up and waits for the shard to stop (its log closed).
    pub async fn stop(self) {
        let TestShard { tx, rx, task, .. } = self;
        drop(tx);
        drop(rx);
        task.await;
    }
}
