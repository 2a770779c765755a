//! Scopes (docs/protocol.md, "Auth") and the scope each op needs. Which scope guards an op is a
//! fact of the op table (`smdb_protocol::op`): a new op does not compile until its row says.

use crate::protocol::Op;

pub use smdb_protocol::op::{Need, Scope};

/// A set of scopes (a bit per scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

const fn bit(s: Scope) -> u8 {
    1 << s as u8
}

impl Scopes {
    pub const ALL: Scopes = Scopes(0b1111);

    pub fn contains(self, s: Scope) -> bool {
        self.0 & bit(s) != 0
    }

    pub fn with(self, s: Scope) -> Scopes {
        Scopes(self.0 | bit(s))
    }

    /// The scope names in `Scope::ALL` order (the AUTH result's `scopes`).
    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Scope::as_str)
            .collect()
    }
}

/// What a session needs to run `op` (its row of the op table).
pub fn need(op: Op) -> Need {
    op.facts().need
}

/// The scope a session needs to run `op`; `None` for the ops every session may run (HELLO,
/// PING, BYE, AUTH itself), for the label-only pseudo-ops, and for BATCH (whose ops each
/// need their own: see `need`).
pub fn required_scope(op: Op) -> Option<Scope> {
    match need(op) {
        Need::Scope(s) => Some(s),
        Need::Nothing | Need::EachOpsScope => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_round_trip() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("READ"), None);
    }

    #[test]
    fn sets_hold_what_was_added() {
        let s = Scopes::default().with(Scope::Read).with(Scope::Admin);
        assert!(s.contains(Scope::Read) && s.contains(Scope::Admin));
        assert!(!s.contains(Scope::Write) && !s.contains(Scope::Replicate));
        assert_eq!(s.names(), ["read", "admin"]);
        assert_eq!(Scopes::ALL.names().len(), 4);
    }

    #[test]
    fn only_session_ops_need_no_scope() {
        for &op in Op::ALL {
            let free = matches!(
                op,
                Op::Hello | Op::Ping | Op::Bye | Op::Auth | Op::Frame | Op::Unknown
            );
            assert_eq!(need(op) == Need::Nothing, free, "{op:?}");
        }
    }
}
