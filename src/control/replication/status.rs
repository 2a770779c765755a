//! REPLICATION_STATUS (docs/replication.md, "Operations"; `ha` in docs/ha.md).

use serde_json::{json, Value};
use shards::Rejection;

use super::hub::Hub;
use crate::config::ReplicationMode;
use crate::protocol::stream;
use crate::util::time::now_ms;

impl Hub {
    /// REPLICATION_STATUS.
    pub(super) async fn status(&self) -> Result<Value, Rejection> {
        let logs = self.positions().await?;
        let heads: Vec<u64> = logs.iter().map(|l| l.durable).collect();
        let stats = &self.state.stats;
        let mut v = json!({
            "role": self.state.role_name(),
            "epoch": self.state.epoch(),
            "mode": match self.settings.mode {
                ReplicationMode::Async => "async",
                ReplicationMode::Sync => "sync",
            },
            "shards": heads.len(),
            "positions": stream::positions_map(&heads),
            "truncated_entries": stats.truncated_entries.load(std::sync::atomic::Ordering::Relaxed),
        });
        let replicas: Vec<Value> = stats
            .replicas
            .lock()
            .map(|r| {
                r.iter()
                    .map(|(id, view)| {
                        json!({
                            "replica_id": id,
                            "addr": view.addr,
                            "acked": stream::positions_map(&view.acked),
                            "last_acked_sequence": view.acked_sequence(),
                            "lag_entries": view.lag_entries,
                            "live": view.live,
                            "connected_seconds": now_ms().saturating_sub(view.connected_at_ms) as f64 / 1000.0,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        v["replicas"] = Value::Array(replicas);
        if let Some(shared) = &self.ha {
            v["ha"] = crate::control::ha::status::json(shared, &self.state);
        }
        if let Some(f) = &self.settings.follower {
            let view = stats.follower.lock().map(|f| f.clone()).unwrap_or_default();
            v["replica_id"] = json!(f.replica_id);
            v["upstream"] = json!(f.upstream);
            v["following"] = json!(self.follower_running.get());
            v["connected"] = json!(view.connected);
            v["primary_epoch"] = json!(view.primary_epoch);
            v["primary_heads"] = json!(stream::positions_map(&view.primary_heads));
            v["lag_entries"] = json!(view.lag_entries);
            v["lag_seconds"] = json!(view.lag_seconds);
            v["last_error"] = json!(view.last_error);
        }
        Ok(v)
    }
}
