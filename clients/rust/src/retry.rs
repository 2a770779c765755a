//! When and how long to wait before sending a request again.
//!
//! A request is resent only when that cannot apply it twice: after an error the server marks
//! retryable for a request that is safe to repeat (reads, PUT_MACHINE, writes with an
//! idempotency key), after `SHUTTING_DOWN`, `RATE_LIMITED` or `CONNECTION_LIMIT` for any
//! request (the server did not execute it), and after a lost connection only for safe
//! requests. A write without an idempotency key whose connection broke is reported, never
//! resent: it may have been applied.
//!
//! With several addresses (a failover cluster, docs/ha.md) [`next_step`] also says where the
//! request goes next: to the primary a follower named (`READ_ONLY_MODE` with
//! `details.primary`: not executed, so any request follows it), to another address after
//! `NO_PRIMARY`, `CLUSTERDOWN`, `SHUTTING_DOWN` or a lost connection, or again to the same one
//! (`TRYAGAIN`: a cluster slot frozen for a moment by a move, docs/cluster.md).

use std::time::Duration;

use crate::error::{Error, ErrorCode, Execution};
use crate::ops::Retry;

/// Capped exponential backoff. `attempts` counts the first try: 1 means never retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 6 tries, waits of 50, 100, 200, 400, 800 ms: rides out a restart or a drain of a few
    /// seconds' worst case without hammering the server.
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Enough tries to ride out an automatic failover (docs/ha.md: a lease of a few seconds,
    /// then an election): 16 tries, waits of 50 ms doubling up to 1 s, about 11.5 s in all.
    pub fn failover() -> RetryPolicy {
        RetryPolicy {
            attempts: 16,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }

    /// The wait before try number `attempt + 1` (`attempt` >= 1 tries have failed).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(1u32 << shift)
            .min(self.max_backoff)
    }

    /// Whether a request of safety `retry` that failed with `e` on try `attempt` (1-based)
    /// goes again.
    pub fn should_retry(&self, e: &Error, retry: Retry, attempt: u32) -> bool {
        attempt < self.attempts && retryable(e, retry)
    }
}

/// Whether `e` allows sending a request of safety `retry` again.
pub fn retryable(e: &Error, retry: Retry) -> bool {
    match e {
        Error::Server { code, details, .. } if not_executed(code, details) => true,
        Error::Server { retryable, .. } => *retryable && retry == Retry::Safe,
        Error::Io(_) | Error::Protocol(_) => retry == Retry::Safe,
        Error::Lagged { .. } | Error::Config(_) => false,
    }
}

/// How far a request got before it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Failed while (re)connecting, HELLO or AUTH: the request was not written to any socket,
    /// so any request may go again.
    BeforeSend,
    /// Failed after the request was written: the server may have executed it.
    Sent,
}

/// What to do with a request that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Report the error.
    Fail,
    /// After a backoff, send again to the same address (reconnecting if the connection broke).
    Again,
    /// After a backoff, reconnect to the next address and send again there.
    Elsewhere,
    /// Reconnect at once to this address (the primary a follower named) and send there.
    Redirect(String),
}

/// Where a request of safety `retry` that failed with `e` at `stage` goes next (the retry
/// budget is the caller's: `RetryPolicy::should_retry` for `Again` and `Elsewhere`, a fixed
/// bound for `Redirect`).
pub fn next_step(e: &Error, retry: Retry, stage: Stage) -> Next {
    if let Error::Server { code, details, .. } = e {
        if *code == crate::error::Code::ReadOnlyMode {
            // Not executed: any request may follow the follower's pointer to its primary.
            return match details["primary"].as_str() {
                Some(p) if !p.is_empty() => Next::Redirect(p.to_string()),
                _ => Next::Fail,
            };
        }
    }
    let lost = e.is_connection_lost();
    let ok = match stage {
        // Nothing was written: a lost or refused connection, or a refusal the server did not
        // act on, leaves the request unexecuted whatever it is.
        Stage::BeforeSend => lost || e.is_timeout() || retryable(e, Retry::Safe),
        Stage::Sent => retryable(e, retry),
    };
    let elsewhere = lost
        || stage == Stage::BeforeSend
        || matches!(
            e.error_code().and_then(ErrorCode::known),
            Some(
                crate::error::Code::NoPrimary
                    | crate::error::Code::ClusterDown
                    | crate::error::Code::ShuttingDown
            )
        );
    match (ok, elsewhere) {
        (false, _) => Next::Fail,
        (true, true) => Next::Elsewhere,
        (true, false) => Next::Again,
    }
}

/// A retryable refusal of a request the server surely did not execute (the protocol's table;
/// `NO_PRIMARY` counts only without `details.maybe_committed`).
fn not_executed(code: &ErrorCode, details: &serde_json::Value) -> bool {
    let maybe_committed = details["maybe_committed"].as_bool().unwrap_or(false);
    code.known().is_some_and(|c| {
        c.retryable() && c.execution_with(maybe_committed) == Execution::NotExecuted
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        let waits: Vec<u64> = (1..8).map(|a| p.backoff(a).as_millis() as u64).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1600, 2000]);
    }

    #[test]
    fn unsafe_writes_are_never_resent_after_a_lost_connection() {
        let lost = Error::eof("gone");
        assert!(!retryable(&lost, Retry::Unsafe));
        assert!(retryable(&lost, Retry::Safe));
        let internal = Error::from_wire(&json!({"code":"INTERNAL_ERROR","retryable":true}));
        assert!(!retryable(&internal, Retry::Unsafe));
        assert!(retryable(&internal, Retry::Safe));
        let drain = Error::from_wire(&json!({"code":"SHUTTING_DOWN","retryable":true}));
        assert!(retryable(&drain, Retry::Unsafe));
        let conflict = Error::from_wire(&json!({"code":"CONFLICT","retryable":false}));
        assert!(!retryable(&conflict, Retry::Safe));
        assert!(!RetryPolicy::none().should_retry(&drain, Retry::Safe, 1));
    }

    fn wire(v: serde_json::Value) -> Error {
        Error::from_wire(&v)
    }

    #[test]
    fn a_follower_naming_its_primary_redirects_any_request() {
        let ro = wire(json!({"code":"READ_ONLY_MODE","retryable":false,
                             "details":{"primary":"10.0.0.2:7401","epoch":3}}));
        for r in [Retry::Safe, Retry::Unsafe] {
            assert_eq!(
                next_step(&ro, r, Stage::Sent),
                Next::Redirect("10.0.0.2:7401".into())
            );
        }
        // A static replica names no primary: the refusal is final.
        let replica = wire(json!({"code":"READ_ONLY_MODE","retryable":false}));
        assert_eq!(next_step(&replica, Retry::Unsafe, Stage::Sent), Next::Fail);
    }

    #[test]
    fn no_primary_goes_elsewhere_unless_the_write_may_have_committed() {
        let none = wire(json!({"code":"NO_PRIMARY","retryable":true,
                               "details":{"epoch":2,"primary":null}}));
        assert_eq!(
            next_step(&none, Retry::Unsafe, Stage::Sent),
            Next::Elsewhere
        );
        let maybe = wire(json!({"code":"NO_PRIMARY","retryable":true,
                                "details":{"epoch":2,"primary":null,"maybe_committed":true}}));
        assert_eq!(next_step(&maybe, Retry::Unsafe, Stage::Sent), Next::Fail);
        assert_eq!(next_step(&maybe, Retry::Safe, Stage::Sent), Next::Elsewhere);
        let drain = wire(json!({"code":"SHUTTING_DOWN","retryable":true}));
        assert_eq!(
            next_step(&drain, Retry::Unsafe, Stage::Sent),
            Next::Elsewhere
        );
        let full = wire(json!({"code":"STORAGE_FULL","retryable":true}));
        assert_eq!(next_step(&full, Retry::Unsafe, Stage::Sent), Next::Again);
    }

    #[test]
    fn a_lost_connection_resends_only_what_was_not_written_or_is_safe() {
        let refused = Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            next_step(&refused, Retry::Unsafe, Stage::BeforeSend),
            Next::Elsewhere
        );
        let lost = Error::eof("gone");
        assert_eq!(next_step(&lost, Retry::Unsafe, Stage::Sent), Next::Fail);
        assert_eq!(next_step(&lost, Retry::Safe, Stage::Sent), Next::Elsewhere);
        let timeout = Error::Io(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(next_step(&timeout, Retry::Unsafe, Stage::Sent), Next::Fail);
        assert_eq!(next_step(&timeout, Retry::Safe, Stage::Sent), Next::Again);
        // HELLO or AUTH refused for good while reconnecting: reported.
        let auth = wire(json!({"code":"UNAUTHORIZED","retryable":false}));
        assert_eq!(next_step(&auth, Retry::Safe, Stage::BeforeSend), Next::Fail);
        let conflict = wire(json!({"code":"CONFLICT","retryable":false}));
        assert_eq!(next_step(&conflict, Retry::Safe, Stage::Sent), Next::Fail);
    }

    /// Cluster mode's refusals (docs/cluster.md): nothing ran, so any request backs off and
    /// goes again (`CLUSTERDOWN` elsewhere, as `NO_PRIMARY`); `MOVED` and `CROSS_SLOT` fail.
    #[test]
    fn cluster_refusals_back_off_and_retry_or_fail_as_the_table_says() {
        let frozen = wire(json!({"code":"TRYAGAIN","retryable":true,
                                 "details":{"slot":340,"retry_after_ms":50}}));
        assert!(retryable(&frozen, Retry::Unsafe));
        assert_eq!(next_step(&frozen, Retry::Unsafe, Stage::Sent), Next::Again);
        let down = wire(json!({"code":"CLUSTERDOWN","retryable":true,
                               "details":{"reason":"no_map","map_epoch":0}}));
        assert!(retryable(&down, Retry::Unsafe));
        assert_eq!(
            next_step(&down, Retry::Unsafe, Stage::Sent),
            Next::Elsewhere
        );
        for code in ["MOVED", "CROSS_SLOT", "MIGRATION_ABORTED"] {
            let e = wire(json!({"code": code, "retryable": false}));
            assert_eq!(
                next_step(&e, Retry::Safe, Stage::Sent),
                Next::Fail,
                "{code}"
            );
        }
    }

    #[test]
    fn the_failover_policy_waits_out_an_election() {
        let p = RetryPolicy::failover();
        let total: Duration = (1..p.attempts).map(|a| p.backoff(a)).sum();
        assert!(total > Duration::from_secs(10), "{total:?}");
        assert!(total < Duration::from_secs(15), "{total:?}");
    }
}
