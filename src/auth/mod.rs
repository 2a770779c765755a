//! Authentication and authorization (docs/protocol.md, "Session ops"): bearer tokens configured as SHA-256
//! digests, each with scopes, and the one check every op of a session passes through.
//!
//! * `scope`: the scopes and the scope each op needs.
//! * `table`: the configured tokens and the AUTH check against them.
//! * here: `SessionAuth`, a connection's authentication state, whose `check` is the single
//!   place that decides whether the session may run an op. `Session::handle` calls it for every
//!   request before anything else looks at the op (a BATCH calls it for each op inside).

pub mod scope;
pub mod table;

use std::sync::Arc;

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

pub use scope::{need, required_scope, Need, Scope, Scopes};
pub use table::{Grant, Table};

use crate::protocol::Op;

/// Failed AUTH requests one connection may make; the last one's response closes it.
pub const AUTH_FAILURES_PER_CONNECTION_MAX: u32 = 5;

/// What an AUTH request did to the session.
pub enum AuthOutcome {
    /// Authenticated: the AUTH result.
    Granted(Value),
    /// Refused; the session stays as it was.
    Refused(Rejection),
    /// Refused for the last allowed time: answer, then close the connection.
    RefusedAndClose(Rejection),
}

/// One connection's authentication state.
pub struct SessionAuth {
    /// `auth.required` when the connection was accepted (a reload does not change it for open
    /// connections).
    required: bool,
    grant: Option<Grant>,
    failures: u32,
}

impl SessionAuth {
    pub fn new(required: bool) -> SessionAuth {
        SessionAuth {
            required,
            grant: None,
            failures: 0,
        }
    }

    /// An HTTP request's authentication: its bearer token checked against `table` now (each
    /// request stands alone). `None` with `auth.required` is `UNAUTHORIZED` for every op that
    /// needs a scope; a token that matches no digest is `AUTH_FAILED`. Without
    /// `auth.required` every request has every scope and a token is not looked at.
    pub fn bearer(table: &Table, token: Option<&[u8]>) -> Result<SessionAuth, Rejection> {
        let grant = match token {
            Some(t) if table.required => Some(table.verify(t)?),
            _ => None,
        };
        Ok(SessionAuth {
            required: table.required,
            grant,
            failures: 0,
        })
    }

    /// The scopes this session holds: every one when auth is not required.
    pub fn scopes(&self) -> Scopes {
        match (&self.grant, self.required) {
            (_, false) => Scopes::ALL,
            (Some(g), true) => g.scopes,
            (None, true) => Scopes::default(),
        }
    }

    pub fn required(&self) -> bool {
        self.required
    }

    /// The one authorization check: may this session run `op`? `UNAUTHORIZED` before a
    /// successful AUTH (when auth is required), `FORBIDDEN` with `details.scope` when the
    /// token lacks the op's scope.
    pub fn check(&self, op: Op) -> Result<(), Rejection> {
        let scope = match need(op) {
            Need::Nothing => return Ok(()),
            Need::Scope(scope) => Some(scope),
            Need::EachOpsScope => None,
        };
        if !self.required {
            return Ok(());
        }
        match (&self.grant, scope) {
            (None, _) => Err(Rejection::new(
                ErrorCode::Unauthorized,
                "authentication required: send AUTH first",
            )),
            (Some(_), None) => Ok(()),
            (Some(g), Some(scope)) if g.scopes.contains(scope) => Ok(()),
            (Some(g), Some(scope)) => Err(Rejection::new(
                ErrorCode::Forbidden,
                format!("token {:?} lacks the {} scope", g.name, scope.as_str()),
            )
            .with("scope", scope.as_str())
            .with("op", op.as_str())),
        }
    }

    /// `check` for each op inside a BATCH: the first op the session may not run refuses the
    /// whole batch, with its index in `details.index`.
    pub fn check_each(&self, ops: impl Iterator<Item = Op>) -> Result<(), Rejection> {
        for (index, op) in ops.enumerate() {
            self.check(op).map_err(|rej| rej.with("index", index))?;
        }
        Ok(())
    }

    /// May this session receive subscription pushes (it holds the read scope)?
    pub fn may_read(&self) -> bool {
        self.check(Op::WatchAll).is_ok()
    }

    /// Handles AUTH against `table`. A success replaces the session's grant; a failure leaves
    /// it as it was and counts towards `AUTH_FAILURES_PER_CONNECTION_MAX`.
    pub fn authenticate(&mut self, table: &Table, params: Option<&[u8]>) -> AuthOutcome {
        match table.authenticate(params) {
            Ok(grant) => {
                log::debug!("AUTH ok: token {:?}", grant.name);
                let result = json!({
                    "authenticated": true,
                    "name": &*grant.name,
                    "scopes": grant.scopes.names(),
                });
                self.grant = Some(grant);
                AuthOutcome::Granted(result)
            }
            Err(rej) if rej.code != ErrorCode::AuthFailed => AuthOutcome::Refused(rej),
            Err(rej) => {
                self.failures += 1;
                log::info!(
                    "AUTH failed ({} of {AUTH_FAILURES_PER_CONNECTION_MAX} on this connection)",
                    self.failures
                );
                if self.failures >= AUTH_FAILURES_PER_CONNECTION_MAX {
                    AuthOutcome::RefusedAndClose(rej)
                } else {
                    AuthOutcome::Refused(rej)
                }
            }
        }
    }

    /// The name of the token this session authenticated with, if any.
    pub fn token_name(&self) -> Option<Arc<str>> {
        self.grant.as_ref().map(|g| g.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let cfg = format!(
            "[auth]\nrequired = true\n[[auth.tokens]]\nname = \"w\"\nsha256 = \"{}\"\n\
             scopes = [\"write\"]\n",
            table::hex(&table::sha256(b"w"))
        );
        Table::from_config(&toml::from_str(&cfg).unwrap()).unwrap()
    }

    fn auth(s: &mut SessionAuth, token: &str) -> AuthOutcome {
        let p = format!(r#"{{"method":"bearer","token":"{token}"}}"#);
        s.authenticate(&table(), Some(p.as_bytes()))
    }

    #[test]
    fn every_scoped_op_is_refused_before_auth_and_free_ops_pass() {
        let s = SessionAuth::new(true);
        for &op in Op::ALL {
            match need(op) {
                Need::Nothing => assert!(s.check(op).is_ok()),
                _ => assert_eq!(s.check(op).unwrap_err().code, ErrorCode::Unauthorized),
            }
        }
        assert!(!s.may_read());
    }

    #[test]
    fn without_required_auth_every_op_passes() {
        let s = SessionAuth::new(false);
        assert!(Op::ALL.iter().all(|op| s.check(*op).is_ok()));
        assert!(s.may_read());
    }

    #[test]
    fn a_scope_allows_exactly_its_ops() {
        let mut s = SessionAuth::new(true);
        assert!(matches!(auth(&mut s, "w"), AuthOutcome::Granted(_)));
        for &op in Op::ALL {
            match required_scope(op) {
                Some(Scope::Write) | None => assert!(s.check(op).is_ok(), "{op:?}"),
                Some(scope) => {
                    let e = s.check(op).unwrap_err();
                    assert_eq!(e.code, ErrorCode::Forbidden);
                    assert_eq!(e.details["scope"], scope.as_str());
                }
            }
        }
    }

    #[test]
    fn a_batch_needs_the_scope_of_each_op() {
        let mut s = SessionAuth::new(true);
        assert_eq!(
            s.check(Op::Batch).unwrap_err().code,
            ErrorCode::Unauthorized
        );
        assert!(matches!(auth(&mut s, "w"), AuthOutcome::Granted(_)));
        assert!(s.check(Op::Batch).is_ok());
        let ops = [Op::CreateInstance, Op::ApplyEvent, Op::GetInstance];
        let e = s.check_each(ops.into_iter()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert_eq!(
            (e.details["index"].as_u64(), e.details["scope"].as_str()),
            (Some(2), Some("read"))
        );
        assert!(s.check_each(ops[..2].iter().copied()).is_ok());
    }

    #[test]
    fn the_fifth_failure_closes_and_a_failure_keeps_the_grant() {
        let mut s = SessionAuth::new(true);
        assert!(matches!(auth(&mut s, "w"), AuthOutcome::Granted(_)));
        for _ in 0..4 {
            assert!(matches!(auth(&mut s, "x"), AuthOutcome::Refused(_)));
        }
        assert!(
            s.check(Op::ApplyEvent).is_ok(),
            "a failed AUTH keeps the grant"
        );
        assert!(matches!(auth(&mut s, "x"), AuthOutcome::RefusedAndClose(_)));
    }
}
