//! The follower gate: a member that is not the primary refuses what the op table says a
//! follower may not serve (`Facts::refused_on`), with the role in force now as its input.
//! Every request passes `check` in the session, after authorization; a BATCH passes
//! `check_batch` with its ops. The shard refuses a client write on a follower again by
//! itself (`shard::runtime`, defence in depth).

use shards::{ErrorCode, Rejection};

use super::state::ReplState;
use crate::protocol::Op;

/// `READ_ONLY_MODE` for an op a follower may not serve.
pub fn check(state: &ReplState, op: Op) -> Result<(), Rejection> {
    if op.facts().refused_on(state.table_role()) {
        return Err(read_only(state, op));
    }
    Ok(())
}

/// A BATCH on a follower may only hold ops a follower serves.
pub fn check_batch(state: &ReplState, ops: impl Iterator<Item = Op>) -> Result<(), Rejection> {
    let role = state.table_role();
    for (index, op) in ops.enumerate() {
        if op.facts().refused_on(role) {
            return Err(read_only(state, op).with("index", index));
        }
    }
    Ok(())
}

/// The refusal a follower answers (the gate's and the shard's). Under failover: `NO_PRIMARY`
/// when no primary is known, else `READ_ONLY_MODE` naming it (docs/ha.md, "Errors").
pub fn read_only(state: &ReplState, op: Op) -> Rejection {
    if state.ha() {
        return match state.primary() {
            None => crate::member::fence::no_primary(state, false).with("op", op.as_str()),
            Some(addr) => Rejection::new(
                ErrorCode::ReadOnlyMode,
                format!(
                    "this member is not the primary: {} goes to {addr}",
                    op.as_str()
                ),
            )
            .with("op", op.as_str())
            .with("primary", addr)
            .with("epoch", state.epoch()),
        };
    }
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
    fn followers_refuse_what_the_table_says() {
        let replica = ReplState::new(Some(Role::Replica));
        for &op in Op::ALL {
            let refused = check(&replica, op).is_err();
            assert_eq!(
                refused,
                op.facts().follower == smdb_protocol::Follower::Refuse,
                "{op:?}"
            );
            if op.facts().writes() {
                assert!(refused, "{op:?} writes, so a replica refuses it");
            }
        }
        assert_eq!(
            check(&replica, Op::ApplyEvent).unwrap_err().code,
            ErrorCode::ReadOnlyMode
        );
        let ops = [Op::GetInstance, Op::CreateInstance];
        let rej = check_batch(&replica, ops.into_iter()).unwrap_err();
        assert_eq!(rej.details["index"], 1);
        let primary = ReplState::new(Some(Role::Primary));
        assert!(check(&primary, Op::ApplyEvent).is_ok());
        assert!(check(&ReplState::new(None), Op::ApplyEvent).is_ok());
        replica.become_primary();
        assert!(check(&replica, Op::ApplyEvent).is_ok());
    }
}
