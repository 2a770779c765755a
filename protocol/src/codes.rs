//! Stable error codes (docs/protocol.md, "Error codes") with what a client may do about each,
//! and the rejection value servers build.
//!
//! This table is the one source: the server answers with it, the Rust client reads its
//! retryability from it, and `protocol/testdata/error_codes.json` (checked by a test here and
//! by the Python client's tests) is generated from it.

use serde_json::{Map, Value};

/// What a failed request did, as far as its code tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// Refused before it could change anything: safe to send again.
    NotExecuted,
    /// It changed state (`SYNC_TIMEOUT`: committed on the primary, not yet on replicas).
    Committed,
    /// It may or may not have changed state (a log I/O error, an internal error, or
    /// `NO_PRIMARY` with `details.maybe_committed`): resend only with an idempotency key.
    Unknown,
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, retryable: $retry:literal,
        execution: $exec:ident, http: $status:literal; )*) => {
        /// Every error code that can appear on the wire or in an HTTP problem body.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorCode {
            /// All codes in declaration order (sizes per-code metric arrays).
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code's wire name (a public contract).
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name,)* }
            }

            /// Whether a client may send the same request again unchanged.
            pub const fn retryable(self) -> bool {
                match self { $(ErrorCode::$variant => $retry,)* }
            }

            /// What the failed request did (see `Execution`). For `NO_PRIMARY` the answer
            /// depends on `details.maybe_committed`: use `execution_with`.
            pub const fn execution(self) -> Execution {
                match self { $(ErrorCode::$variant => Execution::$exec,)* }
            }

            /// The HTTP status this code maps to (docs/http.md, "Statuses").
            pub const fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }
        }
    };
}

error_codes! {
    HelloRequired = "HELLO_REQUIRED", retryable: false, execution: NotExecuted, http: 400;
    UnsupportedProtocol = "UNSUPPORTED_PROTOCOL",
        retryable: false, execution: NotExecuted, http: 400;
    BadRequest = "BAD_REQUEST", retryable: false, execution: NotExecuted, http: 400;
    UnknownOperation = "UNKNOWN_OPERATION", retryable: false, execution: NotExecuted, http: 400;
    InvalidFrame = "INVALID_FRAME", retryable: false, execution: NotExecuted, http: 400;
    ChecksumMismatch = "CHECKSUM_MISMATCH", retryable: false, execution: NotExecuted, http: 400;
    FrameTooLarge = "FRAME_TOO_LARGE", retryable: false, execution: NotExecuted, http: 413;
    Unauthorized = "UNAUTHORIZED", retryable: false, execution: NotExecuted, http: 401;
    AuthFailed = "AUTH_FAILED", retryable: false, execution: NotExecuted, http: 401;
    MachineNotFound = "MACHINE_NOT_FOUND", retryable: false, execution: NotExecuted, http: 404;
    MachineVersionExists = "MACHINE_VERSION_EXISTS",
        retryable: false, execution: NotExecuted, http: 409;
    InvalidDefinition = "INVALID_DEFINITION", retryable: false, execution: NotExecuted, http: 400;
    InstanceNotFound = "INSTANCE_NOT_FOUND", retryable: false, execution: NotExecuted, http: 404;
    InstanceExists = "INSTANCE_EXISTS", retryable: false, execution: NotExecuted, http: 409;
    InvalidTransition = "INVALID_TRANSITION", retryable: false, execution: NotExecuted, http: 422;
    GuardFailed = "GUARD_FAILED", retryable: false, execution: NotExecuted, http: 422;
    Conflict = "CONFLICT", retryable: false, execution: NotExecuted, http: 409;
    /// A follower refuses writes; `details.primary` names the primary when one is known.
    ReadOnlyMode = "READ_ONLY_MODE", retryable: false, execution: NotExecuted, http: 421;
    /// Sync replication: committed locally, not acknowledged by enough replicas in time.
    SyncTimeout = "SYNC_TIMEOUT", retryable: false, execution: Committed, http: 504;
    ConnectionLimit = "CONNECTION_LIMIT", retryable: true, execution: NotExecuted, http: 503;
    RateLimited = "RATE_LIMITED", retryable: true, execution: NotExecuted, http: 429;
    ShuttingDown = "SHUTTING_DOWN", retryable: true, execution: NotExecuted, http: 503;
    /// The shard's log is poisoned by an I/O error until a restart.
    WalIoError = "WAL_IO_ERROR", retryable: false, execution: Unknown, http: 500;
    InternalError = "INTERNAL_ERROR", retryable: true, execution: Unknown, http: 500;
    Forbidden = "FORBIDDEN", retryable: false, execution: NotExecuted, http: 403;
    BatchAborted = "BATCH_ABORTED", retryable: false, execution: NotExecuted, http: 422;
    CrossShard = "CROSS_SHARD", retryable: false, execution: NotExecuted, http: 422;
    /// Replication: a stream or term from an epoch older than one this member has seen.
    StaleEpoch = "STALE_EPOCH", retryable: false, execution: NotExecuted, http: 409;
    /// No member is primary now (failover under way, or this member lost its lease).
    NoPrimary = "NO_PRIMARY", retryable: true, execution: NotExecuted, http: 503;
    /// The disk has no room for the log to grow; reads go on, writes resume by themselves.
    StorageFull = "STORAGE_FULL", retryable: true, execution: NotExecuted, http: 503;
    /// Cluster mode: another group owns the id's slot; `details.addr` names its primary.
    Moved = "MOVED", retryable: false, execution: NotExecuted, http: 421;
    /// Cluster mode: the slot is frozen by a move for a moment.
    TryAgain = "TRYAGAIN", retryable: true, execution: NotExecuted, http: 503;
    /// Cluster mode: no map read yet, or the slot's group has no primary.
    ClusterDown = "CLUSTERDOWN", retryable: true, execution: NotExecuted, http: 503;
    /// Cluster mode: an atomic BATCH whose ids lie in different slots.
    CrossSlot = "CROSS_SLOT", retryable: false, execution: NotExecuted, http: 422;
    /// Cluster mode: a slot move ended without switching (`details.reason`).
    MigrationAborted = "MIGRATION_ABORTED", retryable: false, execution: NotExecuted, http: 409;
    /// HTTP only: no such path.
    NotFound = "NOT_FOUND", retryable: false, execution: NotExecuted, http: 404;
    /// HTTP only: the path exists, the method does not.
    MethodNotAllowed = "METHOD_NOT_ALLOWED", retryable: false, execution: NotExecuted, http: 405;
}

impl ErrorCode {
    /// Number of codes (metric array sizes).
    pub const COUNT: usize = ErrorCode::ALL.len();

    /// The code a wire name names, or `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == name)
    }

    /// Index into `ALL`, for metric arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What a failed request did, given the error's `details.maybe_committed` flag
    /// (`NO_PRIMARY` after the write reached the log; docs/ha.md).
    pub const fn execution_with(self, maybe_committed: bool) -> Execution {
        match (self.execution(), maybe_committed) {
            (Execution::NotExecuted, true) => Execution::Unknown,
            (e, _) => e,
        }
    }

    /// Codes that exist only in HTTP problem bodies, never in an RCP1 response.
    pub const fn http_only(self) -> bool {
        matches!(self, ErrorCode::NotFound | ErrorCode::MethodNotAllowed)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal with a stable code, a human message and structured details.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
}

impl Rejection {
    /// A refusal; a message longer than `MESSAGE_BYTES_MAX` is cut (on a character boundary,
    /// ending in `…`), so no message can carry a client's large value back whole.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MESSAGE_BYTES_MAX {
            let end = floor_char_boundary(&message, MESSAGE_BYTES_MAX);
            message.truncate(end);
            message.push('…');
        }
        Rejection {
            code,
            message,
            details: Map::new(),
        }
    }

    /// Adds one detail field (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }
}

/// Longest prefix of a client's bad value an error message or detail quotes: a bad 100 KB
/// value must not come back whole (over HTTP that would make the server a reflector).
pub const QUOTE_BYTES_MAX: usize = 64;

/// Longest error message, in bytes: the net under every message (serde's messages, say, name
/// an unknown field whole); a longer one is cut by `Rejection::new`.
pub const MESSAGE_BYTES_MAX: usize = 512;

const _: () = assert!(QUOTE_BYTES_MAX * 4 <= MESSAGE_BYTES_MAX);

/// `value` cut to at most `QUOTE_BYTES_MAX` bytes on a character boundary, with `…` when cut.
pub fn quote(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= QUOTE_BYTES_MAX {
        return value.into();
    }
    let end = floor_char_boundary(value, QUOTE_BYTES_MAX);
    format!("{}…", &value[..end]).into()
}

/// The largest index at most `max` that is a character boundary of `s`.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// The shared vector of every code's facts, as `protocol/testdata/error_codes.json` holds it.
pub fn vector() -> Value {
    let codes: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| {
            serde_json::json!({
                "code": c.as_str(),
                "retryable": c.retryable(),
                "execution": match c.execution() {
                    Execution::NotExecuted => "not_executed",
                    Execution::Committed => "committed",
                    Execution::Unknown => "unknown",
                },
                "http_status": c.http_status(),
                "http_only": c.http_only(),
            })
        })
        .collect();
    serde_json::json!({
        "comment": "Every error code with its facts, generated from protocol/src/codes.rs \
            (SMDB_WRITE_VECTORS=1 cargo test -p smdb-protocol rewrites it). The Rust and \
            Python clients' tests check their tables against it. Do not edit by hand.",
        "codes": codes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_match_all_order_and_names_round_trip() {
        for (i, c) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{c}");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
        }
        assert_eq!(ErrorCode::parse("guard_failed"), None);
    }

    #[test]
    fn committed_and_poisoned_writes_are_not_retryable() {
        assert!(!ErrorCode::SyncTimeout.retryable());
        assert_eq!(ErrorCode::SyncTimeout.execution(), Execution::Committed);
        assert!(!ErrorCode::WalIoError.retryable());
        for c in [
            ErrorCode::NoPrimary,
            ErrorCode::StorageFull,
            ErrorCode::ShuttingDown,
            ErrorCode::TryAgain,
            ErrorCode::ClusterDown,
        ] {
            assert!(c.retryable(), "{c}");
        }
        // A client follows MOVED to its address; the other two need a changed request.
        for c in [
            ErrorCode::Moved,
            ErrorCode::CrossSlot,
            ErrorCode::MigrationAborted,
        ] {
            assert!(!c.retryable(), "{c}");
        }
        assert_eq!(
            ErrorCode::NoPrimary.execution_with(true),
            Execution::Unknown
        );
        assert_eq!(
            ErrorCode::NoPrimary.execution_with(false),
            Execution::NotExecuted
        );
    }

    #[test]
    fn quotes_are_bounded_and_cut_on_a_char_boundary() {
        assert_eq!(quote("short"), "short");
        let long = "é".repeat(100);
        let q = quote(&long);
        assert!(q.len() <= QUOTE_BYTES_MAX + '…'.len_utf8());
        assert!(q.ends_with('…'));
    }

    #[test]
    fn long_messages_are_cut() {
        let rej = Rejection::new(ErrorCode::BadRequest, "x".repeat(100_000));
        assert_eq!(rej.message.len(), MESSAGE_BYTES_MAX + '…'.len_utf8());
        let short = Rejection::new(ErrorCode::BadRequest, "short");
        assert_eq!(short.message, "short");
    }

    /// The vector file matches this table (rewritten with SMDB_WRITE_VECTORS=1).
    #[test]
    fn the_shared_vector_file_matches_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/error_codes.json");
        let want = serde_json::to_string_pretty(&vector()).unwrap() + "\n";
        if std::env::var_os("SMDB_WRITE_VECTORS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            have, want,
            "{path} is stale: SMDB_WRITE_VECTORS=1 cargo test -p smdb-protocol"
        );
    }
}
