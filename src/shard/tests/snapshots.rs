//! Snapshots on a real shard: taken beside the requests and recovered at restart, and a rewind
//! that arrives while a walk runs cancels it: no snapshot lands above the truncation point.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;

fn machine() -> Value {
    json!({"machine": "m", "version": 1, "definition": {
        "states": ["a", "b"],
        "initial": "a",
        "transitions": [{"from": "a", "event": "go", "to": "b"}, {"from": "b", "event": "go", "to": "b"}]
    }})
}

/// Creates `n` instances `i-<k>` and gives each one event with a payload of `blob` bytes,
/// keeping up to 32 requests in flight.
async fn fill(s: &mut TestShard, n: usize, blob: usize) {
    s.op(Op::PutMachine, machine()).await.expect("put");
    let b = "x".repeat(blob);
    let mut in_flight = 0;
    for k in 0..n {
        let id = format!("i-{k}");
        let create = json!({"machine": "m", "version": 1, "id": id, "context": {"k": k}});
        let go = json!({"instance_id": id, "event": "go", "payload": {"b": b}});
        for (op, params) in [(Op::CreateInstance, create), (Op::ApplyEvent, go)] {
            let params = Some(params.to_string().into_bytes());
            s.send(ShardCall::Op {
                op: crate::shard::ShardOp::of(op).expect("a shard op"),
                params,
            })
            .await;
            in_flight += 1;
            if in_flight == 32 {
                assert!(s.reply().await.1.is_ok());
                in_flight -= 1;
            }
        }
    }
    for _ in 0..in_flight {
        assert!(s.reply().await.1.is_ok());
    }
}

/// `(offset, name)` of the files in the shard's snapshot directory.
fn snapshot_files(dir: &Path) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = std::fs::read_dir(dir.join("shard-0/snapshots"))
        .expect("snapshots dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .map(|name| (name[..20].parse().unwrap_or(0), name))
        .collect();
    out.sort();
    out
}

async fn stats(s: &mut TestShard) -> crate::metrics::ShardStats {
    match s.call(ShardCall::Stats).await.expect("stats") {
        ReplyBody::Stats(st) => *st,
        _ => panic!("not stats"),
    }
}

#[test]
fn snapshots_are_taken_beside_the_requests_and_recovered() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let opts = Options {
            snapshot_every: 300,
            segment_bytes: 1 << 20,
            ..Options::default()
        };
        let mut s = TestShard::start(&root, opts).await;
        fill(&mut s, 400, 40).await;
        let mut st = stats(&mut s).await;
        for _ in 0..500 {
            if st.snapshots.total >= 2 {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
            st = stats(&mut s).await;
        }
        assert!(st.snapshots.total >= 2, "{:?}", st.snapshots);
        assert!(st.snapshots.last_bytes > 400 * 40, "{:?}", st.snapshots);
        assert_eq!(st.snapshots.duration.count(), st.snapshots.total);
        let get = json!({"instance_id": "i-123"});
        let before = s.op(Op::GetInstance, get.clone()).await.expect("get");
        s.stop().await;
        let files = snapshot_files(&root);
        assert!(files.iter().all(|(_, n)| n.ends_with(".snap")), "{files:?}");
        let mut s = TestShard::start(&root, opts).await;
        assert_eq!(s.op(Op::GetInstance, get).await.expect("get"), before);
        s.stop().await;
    });
}

#[test]
fn a_rewind_during_a_walk_leaves_no_snapshot_above_the_truncation_point() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        // The last write of the fill makes the snapshot due; its walk has ~40 MB to write.
        let opts = Options {
            snapshot_every: 2 * 20_000 + 1,
            segment_bytes: 64 << 20,
            ..Options::default()
        };
        let mut s = TestShard::start(&root, opts).await;
        fill(&mut s, 20_000, 2000).await;
        let after = 1000;
        let t = s
            .call(ShardCall::Truncate { after })
            .await
            .expect("truncate");
        assert!(matches!(t, ReplyBody::Truncated { removed } if removed == 40_001 - after));
        let st = stats(&mut s).await;
        assert_eq!(
            st.snapshots.total, 0,
            "the walk was still running, and cancelled"
        );
        let files = snapshot_files(&root);
        assert!(files.iter().all(|(o, _)| *o <= after), "{files:?}");
        assert!(files.iter().all(|(_, n)| !n.ends_with(".tmp")), "{files:?}");
        s.stop().await;
        let mut s = TestShard::start(&root, opts).await;
        let info = s.call(ShardCall::Info).await.expect("info");
        let ReplyBody::Value(info) = info else {
            panic!("not info")
        };
        assert_eq!(info["wal_offset"], json!(after));
        s.stop().await;
    });
}
