//! Sync replication on a primary's shard: client write replies wait for replica
//! acknowledgement or become SYNC_TIMEOUT (committed) after the timeout; reads and pushes do
//! not wait; replies stay in order; with failover on, a primary's replay reads deliver only
//! acknowledged records.

use std::time::{Duration, Instant};

use serde_json::json;
use shards::ErrorCode;

use super::*;
use crate::shard::subs::Filter;
use crate::shard::sync::SyncSetup;

const TIMEOUT: Duration = Duration::from_millis(400);

fn sync_opts() -> Options {
    Options {
        sync: Some(SyncSetup {
            timeout: TIMEOUT,
            replicas: 2,
        }),
        ..Options::default()
    }
}

async fn sync_timeouts(s: &mut TestShard) -> u64 {
    match s.call(ShardCall::Stats).await.expect("stats") {
        ReplyBody::Stats(stats) => stats.sync_timeouts,
        _ => panic!("not stats"),
    }
}

#[test]
fn write_replies_wait_for_replica_acks_or_time_out_committed() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let mut s = TestShard::start(&root, sync_opts()).await;
        let put = json!({"machine": "m", "version": 1, "definition": {
            "states": ["a", "b"], "initial": "a",
            "transitions": [{"from": "a", "event": "go", "to": "b"},
                            {"from": "b", "event": "go", "to": "b"}]}});
        // No replica acknowledges: the write is committed but answered SYNC_TIMEOUT.
        let started = Instant::now();
        let err = s.op(Op::PutMachine, put).await.unwrap_err();
        assert!(started.elapsed() >= TIMEOUT);
        assert_eq!(err.code, ErrorCode::SyncTimeout);
        assert!(!err.code.retryable());
        assert_eq!(err.details["committed"], json!(true));
        assert_eq!(err.details["wal_offset"], json!(1));
        assert!(
            err.message.contains("2 replica(s) within 400 ms"),
            "{}",
            err.message
        );
        assert_eq!(sync_timeouts(&mut s).await, 1);
        // It is in the log: reads see it, and they do not wait for replicas.
        let started = Instant::now();
        let m = s
            .op(Op::GetMachine, json!({"machine": "m"}))
            .await
            .expect("get");
        assert_eq!(m["version"], json!(1));
        assert!(started.elapsed() < TIMEOUT);

        // Acknowledged (pipelined behind the write on the same channel): answered normally,
        // and the ack's own reply follows the write's.
        let create = json!({"machine": "m", "version": 1, "id": "i-1"});
        let params = Some(create.to_string().into_bytes());
        let t1 = s
            .send(ShardCall::Op {
                op: crate::shard::ShardOp::of(Op::CreateInstance).expect("a shard op"),
                params,
            })
            .await;
        let t2 = s.send(ShardCall::ReplicaAcked { through: 2 }).await;
        let (got, r1) = s.reply().await;
        assert_eq!(got, t1);
        assert!(r1.is_ok(), "acknowledged write answered normally");
        let (got, r2) = s.reply().await;
        assert_eq!(got, t2);
        assert!(r2.is_ok());
        assert_eq!(sync_timeouts(&mut s).await, 1);

        // A push leaves once durable, before the write's reply (which times out); a read
        // queued behind the waiting write is answered after it.
        let watch = ShardCall::Subscribe {
            sub: 1,
            filter: Filter::default(),
        };
        s.call(watch).await.expect("watch");
        let go = json!({"instance_id": "i-1", "event": "go"});
        let params = Some(go.to_string().into_bytes());
        let t1 = s
            .send(ShardCall::Op {
                op: crate::shard::ShardOp::of(Op::ApplyEvent).expect("a shard op"),
                params,
            })
            .await;
        let get = Some(json!({"instance_id": "i-1"}).to_string().into_bytes());
        let t2 = s
            .send(ShardCall::Op {
                op: crate::shard::ShardOp::of(Op::GetInstance).expect("a shard op"),
                params: get,
            })
            .await;
        let (got, r1) = s.reply().await;
        assert_eq!(got, t1);
        assert_eq!(s.pushes.len(), 1, "the push came before the write's reply");
        assert_eq!(s.pushes[0].offset, 3);
        let Err(e) = r1 else {
            panic!("not acknowledged")
        };
        assert_eq!(e.code, ErrorCode::SyncTimeout);
        assert_eq!(e.details["wal_offset"], json!(3));
        let (got, r2) = s.reply().await;
        assert_eq!(got, t2);
        assert!(r2.is_ok());
        assert_eq!(sync_timeouts(&mut s).await, 2);
        // Acks only move forward; a later ack covers it all, the next write is answered.
        s.call(ShardCall::ReplicaAcked { through: 3 })
            .await
            .expect("ack");
        let t1 = s
            .send(ShardCall::Op {
                op: crate::shard::ShardOp::of(Op::ApplyEvent).expect("a shard op"),
                params: Some(go.to_string().into_bytes()),
            })
            .await;
        s.send(ShardCall::ReplicaAcked { through: 4 }).await;
        let (got, r1) = s.reply().await;
        assert_eq!(got, t1);
        assert!(r1.is_ok());
        s.reply().await.1.expect("ack reply");
        s.stop().await;
    });
}

/// `ReadEvents` of records `from..=4` (the test's whole log), every event.
fn read(from: u64) -> ShardCall {
    ShardCall::ReadEvents {
        filter: Filter::default(),
        from,
        to: 4,
        max: 100,
    }
}

/// The offsets of a `ReadEvents` answer's events, and its `next`.
fn offsets(r: Result<ReplyBody, shards::Rejection>) -> (Vec<u64>, u64) {
    match r.expect("events") {
        ReplyBody::Events { events, next } => (events.iter().map(|e| e.0).collect(), next),
        _ => panic!("not events"),
    }
}

#[test]
fn a_primarys_replay_in_ha_sync_mode_delivers_only_acknowledged_records() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let setup = SyncSetup {
            timeout: Duration::from_millis(100),
            replicas: 1,
        };
        let opts = Options {
            sync: Some(setup),
            ha_primary: true,
            ..Options::default()
        };
        let mut s = TestShard::start(&root, opts).await;
        let put = json!({"machine": "m", "version": 1, "definition": {
            "states": ["a"], "initial": "a",
            "transitions": [{"from": "a", "event": "go", "to": "a"}]}});
        let go = json!({"instance_id": "i", "event": "go"});
        let ops = [
            (Op::PutMachine, put),
            (
                Op::CreateInstance,
                json!({"machine": "m", "version": 1, "id": "i"}),
            ),
            (Op::ApplyEvent, go.clone()),
            (Op::ApplyEvent, go),
        ];
        for (op, params) in ops {
            let err = s.op(op, params).await.unwrap_err();
            assert_eq!(
                err.code,
                ErrorCode::SyncTimeout,
                "committed, not acknowledged"
            );
        }
        s.call(ShardCall::ReplicaAcked { through: 3 })
            .await
            .expect("ack");
        // Through the acknowledged offset, then nothing yet (after a bounded wait).
        assert_eq!(offsets(s.call(read(1)).await), (vec![3], 4));
        let started = Instant::now();
        assert_eq!(offsets(s.call(read(4)).await), (vec![], 4));
        assert!(started.elapsed() >= Duration::from_millis(150));
        // An acknowledgement wakes a waiting read.
        let t = s.send(read(4)).await;
        s.send(ShardCall::ReplicaAcked { through: 4 }).await;
        let (mut got, mut result) = s.reply().await;
        if got != t {
            (got, result) = s.reply().await;
        }
        assert_eq!(got, t);
        assert_eq!(offsets(result), (vec![4], 5));
        // Past the lease the replay stops, as held pushes do; a follower reads what is durable.
        s.member.set_lease_until(1);
        let Err(err) = s.call(read(1)).await else {
            panic!("a replay past the lease")
        };
        assert_eq!(err.code, ErrorCode::NoPrimary);
        s.member.become_follower();
        assert_eq!(offsets(s.call(read(1)).await), (vec![3, 4], 5));
        s.stop().await;
    });
}
