//! Operation names: the `op` field of requests, the `op` label of request metrics and the `op`
//! field of request log lines.

/// Every operation the server knows, plus two pseudo-ops used only as metric/log labels:
/// `Frame` (errors before a request could be read) and `Unknown` (an op name we do not serve;
/// labelled as one value so clients cannot inflate label cardinality).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Hello,
    Ping,
    Bye,
    Info,
    Auth,
    PutMachine,
    GetMachine,
    ListMachines,
    CreateInstance,
    GetInstance,
    ListInstances,
    DeleteInstance,
    ApplyEvent,
    GetHistory,
    WatchInstance,
    WatchAll,
    Unwatch,
    Batch,
    Replicate,
    ReplicationStatus,
    Promote,
    Frame,
    Unknown,
}

impl Op {
    /// All ops in declaration order (sizes per-op metric arrays).
    pub const ALL: [Op; 23] = [
        Op::Hello,
        Op::Ping,
        Op::Bye,
        Op::Info,
        Op::Auth,
        Op::PutMachine,
        Op::GetMachine,
        Op::ListMachines,
        Op::CreateInstance,
        Op::GetInstance,
        Op::ListInstances,
        Op::DeleteInstance,
        Op::ApplyEvent,
        Op::GetHistory,
        Op::WatchInstance,
        Op::WatchAll,
        Op::Unwatch,
        Op::Batch,
        Op::Replicate,
        Op::ReplicationStatus,
        Op::Promote,
        Op::Frame,
        Op::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Hello => "HELLO",
            Op::Ping => "PING",
            Op::Bye => "BYE",
            Op::Info => "INFO",
            Op::Auth => "AUTH",
            Op::PutMachine => "PUT_MACHINE",
            Op::GetMachine => "GET_MACHINE",
            Op::ListMachines => "LIST_MACHINES",
            Op::CreateInstance => "CREATE_INSTANCE",
            Op::GetInstance => "GET_INSTANCE",
            Op::ListInstances => "LIST_INSTANCES",
            Op::DeleteInstance => "DELETE_INSTANCE",
            Op::ApplyEvent => "APPLY_EVENT",
            Op::GetHistory => "GET_HISTORY",
            Op::WatchInstance => "WATCH_INSTANCE",
            Op::WatchAll => "WATCH_ALL",
            Op::Unwatch => "UNWATCH",
            Op::Batch => "BATCH",
            Op::Replicate => "REPLICATE",
            Op::ReplicationStatus => "REPLICATION_STATUS",
            Op::Promote => "PROMOTE",
            Op::Frame => "FRAME",
            Op::Unknown => "UNKNOWN",
        }
    }

    /// The op a request names, or `None` for a name we do not serve. `Frame` and `Unknown` are
    /// labels only and never parse from a request.
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL
            .iter()
            .copied()
            .find(|op| !matches!(op, Op::Frame | Op::Unknown) && op.as_str() == name)
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Ops that are allowed before HELLO (CONTRACT §3): a load balancer may probe with one PING.
    pub fn allowed_before_hello(self) -> bool {
        matches!(self, Op::Hello | Op::Ping | Op::Bye)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_index_matches() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(op.index(), i);
            if !matches!(op, Op::Frame | Op::Unknown) {
                assert_eq!(Op::parse(op.as_str()), Some(*op));
            }
        }
        assert_eq!(Op::parse("FRAME"), None);
        assert_eq!(Op::parse("ping"), None);
    }
}
