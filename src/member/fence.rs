//! The refusals failover adds (docs/ha.md, "Errors"): `NO_PRIMARY` from a member that holds no
//! valid lease, and the primary's address in `READ_ONLY_MODE` so clients can follow it.

use shards::{ErrorCode, Rejection};

use crate::member::ReplState;

/// `NO_PRIMARY` (retryable). `maybe_committed`: the write is already in this member's log, so
/// it may survive (resend it only with an idempotency key).
pub fn no_primary(state: &ReplState, maybe_committed: bool) -> Rejection {
    let msg = match maybe_committed {
        true => {
            "this member lost its primary lease after the write reached its log; it may or \
                 may not survive the failover"
        }
        false => "this member is not a primary with a valid lease; no primary is known",
    };
    let rej = Rejection::new(ErrorCode::NoPrimary, msg)
        .with("epoch", state.epoch())
        .with("primary", serde_json::Value::Null);
    match maybe_committed {
        true => rej.with("maybe_committed", true),
        false => rej,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_primary_says_whether_the_write_may_have_committed() {
        let s = crate::member::ReplState::new_ha();
        s.see_epoch(4);
        let r = super::no_primary(&s, true);
        assert_eq!(r.code, shards::ErrorCode::NoPrimary);
        assert_eq!(r.details["maybe_committed"], true);
        assert_eq!(r.details["epoch"], 4);
        assert!(r.details["primary"].is_null());
        assert!(super::no_primary(&s, false)
            .details
            .get("maybe_committed")
            .is_none());
        assert!(s.fenced(), "a member without a lease is fenced");
    }
}
