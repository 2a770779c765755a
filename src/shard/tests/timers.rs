//! Paused timers (`timers.paused`, `crate::timers_pause`) on a real shard: armed and queued but
//! never fired, not even after a promotion, until `ShardCall::TimersResume`.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

fn machine() -> Value {
    json!({"machine": "order", "version": 1, "definition": {
        "states": ["new", "paid", "expired"],
        "initial": "new",
        "final": ["expired"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid"},
            {"from": "paid", "event": "expire", "to": "expired", "after_ms": 1}
        ]
    }})
}

async fn resume(s: &mut TestShard) -> Value {
    match s.call(ShardCall::TimersResume).await.expect("resume") {
        ReplyBody::Value(v) => v,
        _ => panic!("not a value reply"),
    }
}

async fn state(s: &mut TestShard) -> Value {
    let get = json!({"instance_id": "o-1"});
    let i = s.op(Op::GetInstance, get).await.expect("get");
    i["state"].clone()
}

#[test]
fn a_paused_shard_fires_nothing_even_when_promoted_until_resumed() {
    run(|| async {
        let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
        let paused_follower = Options {
            fires_timers: false,
            timers_paused: true,
            ..Options::default()
        };
        let mut s = TestShard::start(dir.path(), paused_follower).await;
        s.op(Op::PutMachine, machine()).await.expect("put");
        let create = json!({"machine": "order", "version": 1, "id": "o-1"});
        s.op(Op::CreateInstance, create).await.expect("create");
        let pay = json!({"instance_id": "o-1", "event": "pay"});
        s.op(Op::ApplyEvent, pay).await.expect("pay");
        assert_eq!(
            s.json(ShardCall::Promote).await.expect("promote"),
            json!({})
        );
        glommio::timer::sleep(Duration::from_millis(50)).await;
        assert_eq!(state(&mut s).await, "paid", "paused: nothing fires");
        assert_eq!(resume(&mut s).await, json!({"was_paused": true}));
        let mut now = state(&mut s).await;
        for _ in 0..200 {
            if now == "expired" {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
            now = state(&mut s).await;
        }
        assert_eq!(now, "expired", "the overdue timer fired once resumed");
        assert_eq!(resume(&mut s).await, json!({"was_paused": false}));
        s.stop().await;
    });
}
