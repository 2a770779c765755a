//! When and how long to wait before sending a request again.
//!
//! A request is resent only when that cannot apply it twice: after an error the server marks
//! retryable for a request that is safe to repeat (reads, PUT_MACHINE, writes with an
//! idempotency key), after `SHUTTING_DOWN`, `RATE_LIMITED` or `CONNECTION_LIMIT` for any
//! request (the server did not execute it), and after a lost connection only for safe
//! requests. A write without an idempotency key whose connection broke is reported, never
//! resent: it may have been applied.

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
}
