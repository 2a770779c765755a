//! What keeps a replica from following its primary, or ends a session of following, with its
//! context: the setting, the step of the link and the request, the shard, the offset and the
//! snapshot part. `Display` gives the text logged (`replication: following ... failed: ...`,
//! `replication: asking ... for its shard count failed: ...`) and shown as REPLICATION_STATUS's
//! `follower.last_error`, word for word as before these types (the shard-count preflight, which
//! only logs, gained a step name on a few of its texts).

use std::fmt;

use crate::protocol::FrameError;
use shards::ErrorCode;

/// The follower's settings could not be made from the config (start-up refuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsError {
    /// `replication.role = "replica"` without `replication.upstream`.
    NoUpstream,
    /// The `replication.tls_*` files do not make a TLS client configuration.
    Tls(String),
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::NoUpstream => {
                f.write_str("replication.role = \"replica\" needs replication.upstream")
            }
            SettingsError::Tls(why) => write!(f, "replication.tls_*: {why}"),
        }
    }
}

impl std::error::Error for SettingsError {}

/// Lets start-up (`boot`), whose errors are text, keep its `String` error.
impl From<SettingsError> for String {
    fn from(e: SettingsError) -> String {
        e.to_string()
    }
}

/// The link to the primary failed: the connection, its frames, or a request before the stream
/// (HELLO, AUTH, REPLICATE). Underlying errors are kept as their text (`Clone`: the session's
/// two halves share the error that ends it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// The TCP connect failed or timed out.
    Connect(String),
    /// The socket's read and write timeouts could not be set (preflight).
    SocketTimeouts(String),
    /// The PROXY v2 `LOCAL` header could not be written.
    ProxyHeader(String),
    /// `replication.tls_server_name` (or the upstream's host) is not a valid server name.
    ServerName(String),
    /// The TLS client connection could not be set up (preflight).
    TlsSetup(String),
    /// The TLS handshake with the primary failed.
    TlsHandshake(String),
    /// The primary sent bytes that are not a frame.
    Frame(FrameError),
    /// Nothing came from the primary for `ms` milliseconds.
    Silent { ms: u128 },
    /// The primary closed the connection.
    Closed,
    /// Reading from the primary failed.
    Read(String),
    /// Writing a request to the primary failed.
    Write(String),
    /// The answer to request `op` is not JSON.
    Answer { op: &'static str, why: String },
    /// The primary refused request `op`; `why` is what of its error is told.
    Refused { op: &'static str, why: String },
    /// The result of REPLICATE does not parse.
    ReplicateResult(String),
    /// The result of HELLO names no shard count (preflight).
    NoShardCount,
    /// The primary has `primary` shards, this replica `mine`.
    ShardCounts { primary: u32, mine: u32 },
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Connect(e) => write!(f, "connect: {e}"),
            LinkError::SocketTimeouts(e) => write!(f, "socket timeouts: {e}"),
            LinkError::ProxyHeader(e) => write!(f, "PROXY header: {e}"),
            LinkError::ServerName(e) => write!(f, "replication.tls_server_name: {e}"),
            LinkError::TlsSetup(e) => write!(f, "TLS: {e}"),
            LinkError::TlsHandshake(e) => write!(f, "TLS handshake: {e}"),
            LinkError::Frame(e) => write!(f, "bad frame from the primary: {e}"),
            LinkError::Silent { ms } => write!(f, "nothing from the primary for {ms} ms"),
            LinkError::Closed => f.write_str("the primary closed the connection"),
            LinkError::Read(e) => write!(f, "read: {e}"),
            LinkError::Write(e) => write!(f, "write: {e}"),
            LinkError::Answer { op, why } => write!(f, "{op}: {why}"),
            LinkError::Refused { op, why } => write!(f, "{op} refused: {why}"),
            LinkError::ReplicateResult(e) => write!(f, "REPLICATE result: {e}"),
            LinkError::NoShardCount => f.write_str("the HELLO result has no shard count"),
            LinkError::ShardCounts { primary, mine } => write!(
                f,
                "shard counts differ: the primary has {primary}, this replica {mine}; not following"
            ),
        }
    }
}

impl std::error::Error for LinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LinkError::Frame(e) => Some(e),
            _ => None,
        }
    }
}

/// The stream from the primary, and what this member's shards make of it: a frame or one of its
/// fields that does not decode, an epoch older than this member's, a shard that refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// This member's shards could not say their log positions.
    Positions(String),
    /// Shard `shard` could not drop what follows offset `after`.
    Truncate { shard: u32, after: u64, why: String },
    /// The primary's field `what` (positions, heads, entries, snapshot data) does not decode.
    Field { what: &'static str, why: String },
    /// A stream frame does not parse.
    BadFrame(String),
    /// The stream's epoch is older than the one this member has seen.
    StaleEpoch { stream: u64, seen: u64 },
    /// The primary ended the stream with an `error` frame saying `why`.
    PrimaryEnds(String),
    /// A frame of a kind this build does not know.
    UnknownKind(String),
    /// Snapshot part `part` of shard `shard` came out of order.
    SnapshotOutOfOrder { shard: u32, part: u32 },
    /// Shard `shard` refused a part of the primary's snapshot (at `offset`).
    Install {
        shard: u32,
        offset: u64,
        why: String,
    },
    /// Shard `shard` refused the entries appended from the stream.
    EntriesRefused {
        shard: usize,
        code: ErrorCode,
        message: String,
    },
    /// A shard answered call `call` with a reply of another kind.
    UnexpectedReply { call: &'static str },
    /// The follower's statistics lock is poisoned.
    PoisonedLock,
    /// An ack could not be written to the primary.
    AckWrite,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Positions(why) | StreamError::Field { why, .. } => f.write_str(why),
            StreamError::Truncate { shard, why, .. } => {
                write!(f, "truncating shard {shard}: {why}")
            }
            StreamError::BadFrame(e) => write!(f, "bad stream frame: {e}"),
            StreamError::StaleEpoch { stream, seen } => write!(
                f,
                "STALE_EPOCH: the stream is from epoch {stream}, this member has seen {seen}"
            ),
            StreamError::PrimaryEnds(why) => write!(f, "the primary ends the stream: {why}"),
            StreamError::UnknownKind(kind) => write!(f, "unknown stream frame kind {kind:?}"),
            StreamError::SnapshotOutOfOrder { shard, part } => {
                write!(f, "snapshot part {part} of shard {shard} out of order")
            }
            StreamError::Install { shard, why, .. } => {
                write!(f, "installing the snapshot of shard {shard}: {why}")
            }
            StreamError::EntriesRefused {
                shard,
                code,
                message,
            } => write!(
                f,
                "shard {shard} refused entries: {} {message}",
                code.as_str()
            ),
            StreamError::UnexpectedReply { call } => write!(f, "unexpected reply to {call}"),
            StreamError::PoisonedLock => f.write_str("poisoned lock"),
            StreamError::AckWrite => f.write_str("write to the primary failed"),
        }
    }
}

impl std::error::Error for StreamError {}

/// Why a session of following ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowError {
    /// The follower was stopped (PROMOTE, shutdown, failover).
    Stopped,
    /// The link to the primary failed.
    Link(LinkError),
    /// The stream, or this member's handling of it, failed.
    Stream(StreamError),
}

impl fmt::Display for FollowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FollowError::Stopped => f.write_str("stopped"),
            FollowError::Link(e) => write!(f, "{e}"),
            FollowError::Stream(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FollowError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FollowError::Stopped => None,
            FollowError::Link(e) => Some(e),
            FollowError::Stream(e) => Some(e),
        }
    }
}

impl From<LinkError> for FollowError {
    fn from(e: LinkError) -> FollowError {
        FollowError::Link(e)
    }
}

impl From<StreamError> for FollowError {
    fn from(e: StreamError) -> FollowError {
        FollowError::Stream(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_the_one_shown_before_the_types() {
        let refused = LinkError::Refused {
            op: "AUTH",
            why: "\"UNAUTHENTICATED\"".into(),
        };
        assert_eq!(refused.to_string(), "AUTH refused: \"UNAUTHENTICATED\"");
        let counts = FollowError::from(LinkError::ShardCounts {
            primary: 1,
            mine: 2,
        });
        assert_eq!(
            counts.to_string(),
            "shard counts differ: the primary has 1, this replica 2; not following"
        );
        let stale = FollowError::from(StreamError::StaleEpoch { stream: 3, seen: 4 });
        assert_eq!(
            stale.to_string(),
            "STALE_EPOCH: the stream is from epoch 3, this member has seen 4"
        );
        let refused = StreamError::EntriesRefused {
            shard: 1,
            code: ErrorCode::InternalError,
            message: "disk".into(),
        };
        assert_eq!(
            refused.to_string(),
            "shard 1 refused entries: INTERNAL_ERROR disk"
        );
        let kind = StreamError::UnknownKind("nope".into());
        assert_eq!(kind.to_string(), "unknown stream frame kind \"nope\"");
        assert_eq!(FollowError::Stopped.to_string(), "stopped");
    }
}
