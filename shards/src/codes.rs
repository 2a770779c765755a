//! Stable error codes (CONTRACT §6) and the rejection value the engine returns.
//!
//! A rejection is a domain refusal: it becomes an error response with a code, it is never logged
//! as a server fault.

use serde_json::{Map, Value};

/// Every error code the server can put on the wire. The string forms are a public contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    HelloRequired,
    UnsupportedProtocol,
    BadRequest,
    UnknownOperation,
    InvalidFrame,
    ChecksumMismatch,
    FrameTooLarge,
    Unauthorized,
    AuthFailed,
    MachineNotFound,
    MachineVersionExists,
    InvalidDefinition,
    InstanceNotFound,
    InstanceExists,
    InvalidTransition,
    GuardFailed,
    Conflict,
    ReadOnlyMode,
    SyncTimeout,
    ConnectionLimit,
    RateLimited,
    ShuttingDown,
    WalIoError,
    InternalError,
    Forbidden,
    BatchAborted,
    CrossShard,
    /// Replication: a stream or term from an epoch older than one this member has seen.
    StaleEpoch,
}

impl ErrorCode {
    /// All codes, in declaration order (used to size per-code metric arrays).
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::HelloRequired,
        ErrorCode::UnsupportedProtocol,
        ErrorCode::BadRequest,
        ErrorCode::UnknownOperation,
        ErrorCode::InvalidFrame,
        ErrorCode::ChecksumMismatch,
        ErrorCode::FrameTooLarge,
        ErrorCode::Unauthorized,
        ErrorCode::AuthFailed,
        ErrorCode::MachineNotFound,
        ErrorCode::MachineVersionExists,
        ErrorCode::InvalidDefinition,
        ErrorCode::InstanceNotFound,
        ErrorCode::InstanceExists,
        ErrorCode::InvalidTransition,
        ErrorCode::GuardFailed,
        ErrorCode::Conflict,
        ErrorCode::ReadOnlyMode,
        ErrorCode::SyncTimeout,
        ErrorCode::ConnectionLimit,
        ErrorCode::RateLimited,
        ErrorCode::ShuttingDown,
        ErrorCode::WalIoError,
        ErrorCode::InternalError,
        ErrorCode::Forbidden,
        ErrorCode::BatchAborted,
        ErrorCode::CrossShard,
        ErrorCode::StaleEpoch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::HelloRequired => "HELLO_REQUIRED",
            ErrorCode::UnsupportedProtocol => "UNSUPPORTED_PROTOCOL",
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::UnknownOperation => "UNKNOWN_OPERATION",
            ErrorCode::InvalidFrame => "INVALID_FRAME",
            ErrorCode::ChecksumMismatch => "CHECKSUM_MISMATCH",
            ErrorCode::FrameTooLarge => "FRAME_TOO_LARGE",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::MachineNotFound => "MACHINE_NOT_FOUND",
            ErrorCode::MachineVersionExists => "MACHINE_VERSION_EXISTS",
            ErrorCode::InvalidDefinition => "INVALID_DEFINITION",
            ErrorCode::InstanceNotFound => "INSTANCE_NOT_FOUND",
            ErrorCode::InstanceExists => "INSTANCE_EXISTS",
            ErrorCode::InvalidTransition => "INVALID_TRANSITION",
            ErrorCode::GuardFailed => "GUARD_FAILED",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::ReadOnlyMode => "READ_ONLY_MODE",
            ErrorCode::SyncTimeout => "SYNC_TIMEOUT",
            ErrorCode::ConnectionLimit => "CONNECTION_LIMIT",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::WalIoError => "WAL_IO_ERROR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::BatchAborted => "BATCH_ABORTED",
            ErrorCode::CrossShard => "CROSS_SHARD",
            ErrorCode::StaleEpoch => "STALE_EPOCH",
        }
    }

    /// CONTRACT §6: the codes a client may retry unchanged. `SYNC_TIMEOUT` is not one: the
    /// write it answers is committed (CONTRACT §10), so a retry would apply it twice.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited
                | ErrorCode::ShuttingDown
                | ErrorCode::ConnectionLimit
                | ErrorCode::WalIoError
                | ErrorCode::InternalError
        )
    }

    /// Index into `ALL`, for metric arrays.
    pub fn index(self) -> usize {
        self as usize
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
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Rejection {
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds one detail field (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_match_all_order() {
        for (i, c) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{}", c.as_str());
        }
    }
}
