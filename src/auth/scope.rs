//! Scopes (CONTRACT §3) and the scope each op needs. The match in `required_scope` has no
//! wildcard arm: a new `Op` does not compile until someone decides which scope guards it.

use crate::protocol::Op;

/// One permission a token may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Read,
    Write,
    Admin,
    Replicate,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Admin, Scope::Replicate];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
            Scope::Replicate => "replicate",
        }
    }

    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of scopes (a bit per scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    pub const ALL: Scopes = Scopes(0b1111);

    pub fn contains(self, s: Scope) -> bool {
        self.0 & s.bit() != 0
    }

    pub fn with(self, s: Scope) -> Scopes {
        Scopes(self.0 | s.bit())
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

/// What a session needs to run an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Every session may run it (HELLO, PING, BYE, AUTH itself; the label-only pseudo-ops).
    Nothing,
    /// The session's token must carry this scope.
    Scope(Scope),
    /// An authenticated session, and the scope of each op inside (BATCH).
    EachOpsScope,
}

/// What a session needs to run `op`.
pub fn need(op: Op) -> Need {
    match op {
        Op::Batch => Need::EachOpsScope,
        op => required_scope(op).map_or(Need::Nothing, Need::Scope),
    }
}

/// The scope a session needs to run `op`; `None` for the ops every session may run (HELLO,
/// PING, BYE, AUTH itself), for the label-only pseudo-ops, and for BATCH (whose ops each
/// need their own: see `need`).
pub fn required_scope(op: Op) -> Option<Scope> {
    match op {
        Op::Hello | Op::Ping | Op::Bye | Op::Auth | Op::Frame | Op::Unknown | Op::Batch => None,
        Op::GetInstance
        | Op::GetMachine
        | Op::ListMachines
        | Op::ListInstances
        | Op::GetHistory
        | Op::Info
        | Op::WatchInstance
        | Op::WatchAll
        | Op::Unwatch
        | Op::ReplicationStatus => Some(Scope::Read),
        Op::CreateInstance | Op::ApplyEvent | Op::DeleteInstance => Some(Scope::Write),
        Op::PutMachine | Op::Promote => Some(Scope::Admin),
        Op::Replicate => Some(Scope::Replicate),
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
        for op in Op::ALL {
            let free = matches!(
                op,
                Op::Hello | Op::Ping | Op::Bye | Op::Auth | Op::Frame | Op::Unknown
            );
            assert_eq!(need(op) == Need::Nothing, free, "{op:?}");
        }
    }
}
