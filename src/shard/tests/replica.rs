//! Replication calls on real shards: a primary's records applied on a replica at the same
//! offsets give the same state, epochs and pushes; wrong offsets and stale epochs are refused;
//! timers are armed but not fired until promotion.

use std::time::Duration;

use serde_json::{json, Value};
use shards::wal::LogHandle;
use shards::ErrorCode;

use super::*;
use crate::shard::subs::Filter;
use crate::shard::SnapshotChunk;

fn machine() -> Value {
    json!({"machine": "order", "version": 1, "definition": {
        "states": ["new", "paid", "expired"],
        "initial": "new",
        "final": ["expired"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid"},
            {"from": "paid", "event": "note", "to": "paid"},
            {"from": "paid", "event": "expire", "to": "expired", "after_ms": 1}
        ]
    }})
}

async fn position(s: &mut TestShard) -> (u64, u64, Vec<(u64, u64)>, LogHandle) {
    match s.call(ShardCall::LogPosition).await.expect("position") {
        ReplyBody::Position {
            head,
            last_epoch,
            epochs,
            handle,
            durable,
            ..
        } => {
            assert!(durable <= head);
            (head, last_epoch, epochs, handle)
        }
        _ => panic!("not a position"),
    }
}

async fn append(s: &mut TestShard, epoch: u64, first: u64, entries: &[Vec<u8>]) -> ReplyBody {
    let call = ShardCall::ReplicaAppend {
        epoch,
        first,
        entries: entries.to_vec(),
    };
    s.call(call).await.expect("replica append")
}

fn code(r: Result<ReplyBody, Rejection>) -> Rejection {
    match r {
        Ok(_) => panic!("expected a rejection"),
        Err(rej) => rej,
    }
}

#[test]
fn replica_applies_the_primary_log_at_the_same_offsets() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let no_timers = Options {
            fires_timers: false,
            ..Options::default()
        };
        let mut p = TestShard::start(&root.join("p"), no_timers).await;
        p.op(Op::PutMachine, machine()).await.expect("put");
        let b = p
            .json(ShardCall::BeginEpoch { epoch: 1 })
            .await
            .expect("epoch 1");
        assert_eq!(b, json!({"offset": 2}));
        let stale = p.call(ShardCall::BeginEpoch { epoch: 1 }).await;
        assert_eq!(code(stale).code, ErrorCode::StaleEpoch);
        for id in ["o-1", "o-2", "o-3"] {
            let create = json!({"machine": "order", "version": 1, "id": id});
            p.op(Op::CreateInstance, create).await.expect("create");
        }
        p.op(
            Op::ApplyEvent,
            json!({"instance_id": "o-1", "event": "pay"}),
        )
        .await
        .expect("pay");
        p.json(ShardCall::BeginEpoch { epoch: 2 })
            .await
            .expect("epoch 2");
        p.op(
            Op::ApplyEvent,
            json!({"instance_id": "o-2", "event": "pay"}),
        )
        .await
        .expect("pay");
        p.op(
            Op::ApplyEvent,
            json!({"instance_id": "o-1", "event": "note", "payload": {"n": 1}}),
        )
        .await
        .expect("note");
        let (head, last_epoch, epochs, handle) = position(&mut p).await;
        assert_eq!((head, last_epoch), (9, 2));
        assert_eq!(epochs, vec![(1, 2), (2, 7)]);
        let records = handle
            .reader()
            .read_from(1, 100, 1 << 20)
            .await
            .expect("read");
        let entries: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
        assert_eq!(entries.len(), 9);

        let mut r = TestShard::start(&root.join("r"), no_timers).await;
        let watch = ShardCall::Subscribe {
            sub: 7,
            filter: Filter::default(),
        };
        assert!(matches!(
            r.call(watch).await,
            Ok(ReplyBody::Watching { head: 0, .. })
        ));
        let wrong = code(
            r.call(ShardCall::ReplicaAppend {
                epoch: 2,
                first: 2,
                entries: vec![],
            })
            .await,
        );
        assert_eq!(wrong.code, ErrorCode::BadRequest);
        assert_eq!(wrong.details["expected"], json!(1));
        let ReplyBody::Replicated { through, .. } = append(&mut r, 2, 1, &entries[..4]).await
        else {
            panic!("not replicated")
        };
        assert_eq!(through, 4);
        let stale = r
            .call(ShardCall::ReplicaAppend {
                epoch: 1,
                first: 5,
                entries: vec![],
            })
            .await;
        assert_eq!(code(stale).code, ErrorCode::StaleEpoch);
        let bad = vec![entries[4].clone(), vec![3, 0, 200]];
        let bad = code(
            r.call(ShardCall::ReplicaAppend {
                epoch: 2,
                first: 5,
                entries: bad,
            })
            .await,
        );
        assert_eq!(bad.code, ErrorCode::BadRequest);
        assert!(bad.message.contains("offset 6"), "{}", bad.message);
        let ReplyBody::Replicated {
            through,
            last_at_ms,
        } = append(&mut r, 2, 5, &entries[4..]).await
        else {
            panic!("not replicated")
        };
        assert_eq!(through, 9);
        let Ok(shards::engine::Entry::Apply { at_ms, .. }) =
            shards::engine::Entry::decode(&entries[8])
        else {
            panic!("the last record is the note event")
        };
        assert_eq!(last_at_ms, at_ms);
        let (r_head, r_epoch, r_epochs, _) = position(&mut r).await;
        assert_eq!((r_head, r_epoch, r_epochs), (head, last_epoch, epochs));
        for id in ["o-1", "o-2", "o-3"] {
            let get = json!({"instance_id": id});
            let on_p = p.op(Op::GetInstance, get.clone()).await.expect("get p");
            let on_r = r.op(Op::GetInstance, get).await.expect("get r");
            assert_eq!(on_p, on_r, "{id}");
        }
        // Pushes of the three events, at their offsets, none for creates or epochs.
        let offsets: Vec<u64> = r.pushes.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, vec![6, 8, 9]);
        // o-1 and o-2 are in `paid` with a 1 ms timer: armed, not fired on a replica.
        let o1 = r
            .op(Op::GetInstance, json!({"instance_id": "o-1"}))
            .await
            .expect("get");
        assert_eq!(
            (o1["state"].clone(), o1["timer"]["event"].clone()),
            (json!("paid"), json!("expire"))
        );
        glommio::timer::sleep(Duration::from_millis(20)).await;
        assert_eq!(position(&mut r).await.0, 9, "a replica fires nothing");
        // Promoted, it fires both overdue timers through its own log.
        assert_eq!(
            r.json(ShardCall::Promote).await.expect("promote"),
            json!({})
        );
        let mut fired = 0;
        for _ in 0..200 {
            fired = position(&mut r).await.0 - 9;
            if fired == 2 {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(fired, 2);
        let o1 = r
            .op(Op::GetInstance, json!({"instance_id": "o-1"}))
            .await
            .expect("get");
        assert_eq!(o1["state"], json!("expired"));
        let stale = r.call(ShardCall::BeginEpoch { epoch: 2 }).await;
        assert_eq!(code(stale).code, ErrorCode::StaleEpoch);
        let b = r
            .json(ShardCall::BeginEpoch { epoch: 3 })
            .await
            .expect("epoch 3");
        assert_eq!(b, json!({"offset": 12}));
        p.stop().await;
        r.stop().await;
    });
}

/// A primary's log of 9 records (as in the test above) and the primary itself.
async fn primary(root: &std::path::Path) -> (TestShard, Vec<Vec<u8>>) {
    let no_timers = Options {
        fires_timers: false,
        ..Options::default()
    };
    let mut p = TestShard::start(&root.join("p"), no_timers).await;
    p.op(Op::PutMachine, machine()).await.expect("put");
    p.json(ShardCall::BeginEpoch { epoch: 1 })
        .await
        .expect("epoch");
    for id in ["o-1", "o-2", "o-3"] {
        let create = json!({"machine": "order", "version": 1, "id": id});
        p.op(Op::CreateInstance, create).await.expect("create");
    }
    let pay = |id: &str| json!({"instance_id": id, "event": "pay"});
    p.op(Op::ApplyEvent, pay("o-1")).await.expect("pay");
    p.json(ShardCall::BeginEpoch { epoch: 2 })
        .await
        .expect("epoch");
    p.op(Op::ApplyEvent, pay("o-2")).await.expect("pay");
    p.op(Op::ApplyEvent, pay("o-3")).await.expect("pay");
    let (_, _, _, handle) = position(&mut p).await;
    let records = handle
        .reader()
        .read_from(1, 100, 1 << 20)
        .await
        .expect("read");
    (p, records.into_iter().map(|(_, p)| p).collect())
}

async fn state(s: &mut TestShard, id: &str) -> Value {
    let got = s.op(Op::GetInstance, json!({"instance_id": id})).await;
    got.expect("get")["state"].clone()
}

#[test]
fn truncate_and_snapshot_install_rebuild_the_state_from_the_log() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (mut p, entries) = primary(&root).await;
        assert_eq!(entries.len(), 9);
        let opts = Options {
            fires_timers: false,
            segment_bytes: 16 << 10,
            ..Options::default()
        };
        let mut r = TestShard::start(&root.join("r"), opts).await;
        append(&mut r, 2, 1, &entries).await;
        let watch = ShardCall::Subscribe {
            sub: 1,
            filter: Filter::default(),
        };
        r.call(watch).await.expect("watch");
        // Keep what agrees through offset 6 (epoch 1), drop epoch 2's entries.
        let t = r
            .call(ShardCall::Truncate { after: 6 })
            .await
            .expect("truncate");
        assert!(matches!(t, ReplyBody::Truncated { removed: 3 }));
        let (head, last_epoch, epochs, _) = position(&mut r).await;
        assert_eq!((head, last_epoch, epochs), (6, 1, vec![(1, 2)]));
        // Its subscriptions hear where the log now ends (those past it end `diverged`).
        let ended: Vec<_> = r
            .ended
            .iter()
            .map(|e| (e.subs.clone(), e.diverged_at))
            .collect();
        assert_eq!(ended, vec![(vec![1], Some((1, 6)))]);
        assert_eq!(state(&mut r, "o-1").await, json!("paid"));
        assert_eq!(state(&mut r, "o-2").await, json!("new"));
        let t = r
            .call(ShardCall::Truncate { after: 50 })
            .await
            .expect("no-op");
        assert!(matches!(t, ReplyBody::Truncated { removed: 0 }));
        // The stream resumes at 7; the subscription still gets the events.
        append(&mut r, 2, 7, &entries[6..]).await;
        assert_eq!(state(&mut r, "o-3").await, json!("paid"));
        let pushed: Vec<u64> = r.pushes.iter().map(|p| p.offset).collect();
        assert_eq!(pushed, vec![8, 9]);

        // A snapshot install: refused when it does not load, else it replaces everything.
        let bad = install(&mut r, 9, 1, b"{}", 1).await;
        assert_eq!(bad.unwrap_err().code, ErrorCode::BadRequest);
        let bad = install(&mut r, 9, 2, b"\x01\x03\x00\x00\x00\x07\x01\x09", 3).await;
        assert_eq!(bad.unwrap_err().code, ErrorCode::BadRequest);
        assert_eq!(state(&mut r, "o-3").await, json!("paid"), "nothing changed");
        let mut engine = shards::engine::Engine::new();
        let mut replay = shards::engine::Replay::new();
        for (k, bytes) in entries.iter().enumerate() {
            replay
                .push(&mut engine, k as u64 + 1, bytes)
                .expect("replay");
        }
        replay.flush(&mut engine).expect("replay");
        let mut fresh = TestShard::start(&root.join("f"), opts).await;
        let items = engine.snapshot_items(9);
        install(&mut fresh, 9, 2, &items, 100)
            .await
            .expect("install");
        let (head, last_epoch, epochs, handle) = position(&mut fresh).await;
        assert_eq!((head, last_epoch, epochs), (9, 2, vec![(1, 2), (2, 7)]));
        assert_eq!(handle.oldest(), 10);
        for id in ["o-1", "o-2", "o-3"] {
            let get = json!({"instance_id": id});
            let on_p = p.op(Op::GetInstance, get.clone()).await.expect("get p");
            let on_f = fresh.op(Op::GetInstance, get).await.expect("get f");
            assert_eq!(on_p, on_f, "{id}");
        }
        let note = json!({"instance_id": "o-1", "event": "note"});
        p.op(Op::ApplyEvent, note).await.expect("note");
        let tail = handle_read(&mut p, 10).await;
        let done = append(&mut fresh, 2, 10, &tail).await;
        assert!(matches!(done, ReplyBody::Replicated { through: 10, .. }));
        // Installing over a log that holds entries replaces them too; a format-1 snapshot
        // (an older primary's) installs as well.
        install(&mut r, 9, 1, &engine.snapshot(), 1 << 20)
            .await
            .expect("install over a log");
        assert_eq!(position(&mut r).await.0, 9);
        fresh.stop().await;
        r.stop().await;
        // After a restart the installed state and the entry after it are recovered.
        let mut fresh = TestShard::start(&root.join("f"), opts).await;
        assert_eq!(position(&mut fresh).await.0, 10);
        let get = json!({"instance_id": "o-1"});
        let on_p = p.op(Op::GetInstance, get.clone()).await.expect("get p");
        assert_eq!(fresh.op(Op::GetInstance, get).await.expect("get f"), on_p);
        fresh.stop().await;
        p.stop().await;
    });
}

/// Sends `payload` as a received snapshot: begin, parts of `part` bytes, end with its CRC.
async fn install(
    s: &mut TestShard,
    offset: u64,
    version: u32,
    payload: &[u8],
    part: usize,
) -> Result<(), shards::Rejection> {
    let len = payload.len() as u64;
    let begin = SnapshotChunk::Begin {
        offset,
        version,
        len,
    };
    s.call(ShardCall::InstallSnapshot(begin)).await?;
    for chunk in payload.chunks(part) {
        let part = SnapshotChunk::Part(chunk.to_vec());
        s.call(ShardCall::InstallSnapshot(part)).await?;
    }
    let end = SnapshotChunk::End {
        crc: Some(crc32c::crc32c(payload)),
    };
    s.call(ShardCall::InstallSnapshot(end)).await.map(drop)
}

async fn handle_read(s: &mut TestShard, from: u64) -> Vec<Vec<u8>> {
    let (_, _, _, handle) = position(s).await;
    let records = handle
        .reader()
        .read_from(from, 100, 1 << 20)
        .await
        .expect("read");
    records.into_iter().map(|(_, p)| p).collect()
}

/// Defence in depth: a client write that reaches a replica's shard without passing the front's
/// gate (a bug upstream) is refused by the shard itself, alone or inside a BATCH, and changes
/// nothing; reads still run.
#[test]
fn a_replica_shard_refuses_client_writes_that_bypass_the_session() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let opts = Options {
            fires_timers: false,
            role: Some(crate::config::Role::Replica),
            ..Options::default()
        };
        let mut r = TestShard::start(&root.join("r"), opts).await;
        let (head, ..) = position(&mut r).await;
        for (op, params) in [
            (Op::PutMachine, machine()),
            (
                Op::CreateInstance,
                json!({"machine": "order", "version": 1, "id": "o-1"}),
            ),
            (
                Op::ApplyEvent,
                json!({"instance_id": "o-1", "event": "pay"}),
            ),
            (Op::DeleteInstance, json!({"id": "o-1"})),
        ] {
            let rej = r.op(op, params).await.expect_err("a replica refuses");
            assert_eq!(rej.code, ErrorCode::ReadOnlyMode, "{op:?}");
            assert_eq!(rej.details["op"], op.as_str());
        }
        let batch = json!({"mode": "atomic", "ops": [
            {"op": "GET_INSTANCE", "params": {"id": "o-1"}},
            {"op": "CREATE_INSTANCE", "params": {"machine": "order", "version": 1, "id": "o-2"}},
        ]});
        let ops = crate::ops::batch::parse_batch(Some(batch.to_string().as_bytes()))
            .expect("batch parses")
            .ops;
        let rej = code(r.call(ShardCall::Batch(ops)).await);
        assert_eq!(rej.code, ErrorCode::ReadOnlyMode);
        assert_eq!(rej.details["index"], 1);
        let (after, ..) = position(&mut r).await;
        assert_eq!(after, head, "nothing was appended");
        let read = r.op(Op::GetInstance, json!({"id": "o-1"})).await;
        assert_eq!(
            read.expect_err("no such instance").code,
            ErrorCode::InstanceNotFound
        );
        r.stop().await;
    });
}
