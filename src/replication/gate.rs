//! The one check that keeps a replica read-only (CONTRACT §10): every op passes through
//! `check` in the session, after authorization; a BATCH passes `check_batch` with its ops.

use shards::{ErrorCode, Rejection};

use super::state::ReplState;
use crate::protocol::Op;

/// Ops that change state (they would append to a log).
pub fn is_write(op: Op) -> bool {
    matches!(
        op,
        Op::CreateInstance | Op::ApplyEvent | Op::DeleteInstance | Op::PutMachine
    )
}

/// `READ_ONLY_MODE` for a write on a replica.
pub fn check(state: &ReplState, op: Op) -> Result<(), Rejection> {
    if is_write(op) && state.is_replica() {
        return Err(read_only(op));
    }
    Ok(())
}

/// A BATCH on a replica may only read.
pub fn check_batch(state: &ReplState, ops: impl Iterator<Item = Op>) -> Result<(), Rejection> {
    if !state.is_replica() {
        return Ok(());
    }
    for (index, op) in ops.enumerate() {
        if is_write(op) {
            return Err(read_only(op).with("index", index));
        }
    }
    Ok(())
}

fn read_only(op: Op) -> Rejection {
    Rejection::new(
        ErrorCode::ReadOnlyMode,
        format!(
            "this server is a replica: {} is refused; send writes to the primary",
            op.as_str()
        ),
    )
    .with("op", op.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;

    #[test]
    fn replicas_refuse_writes_only() {
        let replica = ReplState::new(Some(Role::Replica));
        assert_eq!(
            check(&replica, Op::ApplyEvent).unwrap_err().code,
            ErrorCode::ReadOnlyMode
        );
        assert!(check(&replica, Op::GetInstance).is_ok());
        let ops = [Op::GetInstance, Op::CreateInstance];
        assert!(check_batch(&replica, ops.into_iter()).is_err());
        let primary = ReplState::new(Some(Role::Primary));
        assert!(check(&primary, Op::ApplyEvent).is_ok());
        replica.become_primary();
        assert!(check(&replica, Op::ApplyEvent).is_ok());
    }
}
