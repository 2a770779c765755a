//! Waiting for a replica to hold its primary's log heads (tests/replication.rs, tests/ha.rs).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Server;

/// Polls `statuses` (the primary's and the replica's `REPLICATION_STATUS`; `None`: one could
/// not be read) every `every` until `same(primary, replica)` holds; after `limit`, panics with
/// both replies and the replica's log.
pub fn wait_converged(
    replica: &Server,
    limit: Duration,
    every: Duration,
    mut statuses: impl FnMut() -> (Option<Value>, Option<Value>),
    same: impl Fn(&Value, &Value) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let (ps, rs) = statuses();
        if let (Some(p), Some(r)) = (&ps, &rs) {
            if same(p, r) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no convergence:\nprimary {}\nreplica {}\nreplica log:\n{}",
            shown(&ps),
            shown(&rs),
            replica.log()
        );
        std::thread::sleep(every);
    }
}

fn shown(status: &Option<Value>) -> String {
    status
        .as_ref()
        .map_or_else(|| "unreachable".to_string(), Value::to_string)
}
