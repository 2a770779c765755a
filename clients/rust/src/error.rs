//! One error type for every call: the server's refusals (with its code, `retryable` and
//! `details`), lost connections, bytes that are not RCP1, and a subscription that lagged.

use std::io::{self, ErrorKind};

use serde_json::Value;

/// The protocol's error codes (`smdb_protocol::ErrorCode`): one table for the server and this
/// client, with each code's retryability and what a failed request did.
pub use smdb_protocol::ErrorCode as Code;
pub use smdb_protocol::Execution;

/// An error code as the server sent it: one of the protocol's codes, or a code this client
/// does not know yet (a newer server), kept with its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Known(Code),
    Other(String),
}

impl ErrorCode {
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::Known(c) => c.as_str(),
            ErrorCode::Other(s) => s,
        }
    }

    pub fn parse(code: &str) -> ErrorCode {
        Code::parse(code).map_or_else(|| ErrorCode::Other(code.to_string()), ErrorCode::Known)
    }

    /// The protocol's code, when this client knows it.
    pub fn known(&self) -> Option<Code> {
        match self {
            ErrorCode::Known(c) => Some(*c),
            ErrorCode::Other(_) => None,
        }
    }

    /// Retryable per the protocol's table (the server also says so in each error's
    /// `retryable`); an unknown code is not.
    pub fn retryable(&self) -> bool {
        self.known().is_some_and(Code::retryable)
    }
}

impl From<Code> for ErrorCode {
    fn from(c: Code) -> Self {
        ErrorCode::Known(c)
    }
}

impl PartialEq<Code> for ErrorCode {
    fn eq(&self, other: &Code) -> bool {
        self.known() == Some(*other)
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A client-side failure.
#[derive(Debug)]
pub enum Error {
    /// The server answered `status: "error"`.
    Server {
        code: ErrorCode,
        message: String,
        /// As the server said (docs/protocol.md, "Error codes" lists which codes are).
        retryable: bool,
        details: Value,
    },
    /// The socket failed or closed (`UnexpectedEof` when the server closed it).
    Io(io::Error),
    /// The peer sent bytes that are not an RCP1 frame, or a frame that is not a JSON message:
    /// the connection is unusable.
    Protocol(String),
    /// A subscription fell too far behind and the server ended it; resume with
    /// `WATCH_ALL {from_cursor: resume_cursor}` (subscriptions that reconnect do so themselves).
    Lagged {
        subscription_id: Value,
        resume_cursor: String,
    },
    /// Bad client settings (TLS files, server name, options).
    Config(String),
}

/// The old name, kept for callers written against `smdb::client::ClientError`.
pub type ClientError = Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Server { code, message, .. } => write!(f, "{code}: {message}"),
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
            Error::Lagged {
                subscription_id,
                resume_cursor,
            } => write!(
                f,
                "subscription {subscription_id} lagged; resume from cursor {resume_cursor}"
            ),
            Error::Config(m) => write!(f, "configuration error: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl Error {
    /// The server's error code as text, when this is a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Server { code, .. } => Some(code.as_str()),
            _ => None,
        }
    }

    /// The server's error code, when this is a server error.
    pub fn error_code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The server's `details` (`Null` for other errors).
    pub fn details(&self) -> &Value {
        match self {
            Error::Server { details, .. } => details,
            _ => &Value::Null,
        }
    }

    /// True for a server error the server marked retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Server {
                retryable: true,
                ..
            }
        )
    }

    /// True when a read or write timeout expired (a response to a request already sent may
    /// still arrive later, so the connection should not be reused).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Io(e)
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }

    /// True for `SHUTTING_DOWN`: the server is draining and did not execute the request; it is
    /// safe to send it again on a new connection.
    pub fn is_shutting_down(&self) -> bool {
        matches!(
            self,
            Error::Server { code, .. } if *code == Code::ShuttingDown
        )
    }

    /// True when the connection is unusable: the peer closed or reset it, or sent garbage.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::Io(_) => !self.is_timeout(),
            Error::Protocol(_) => true,
            Error::Server { code, .. } => matches!(
                code.known(),
                Some(
                    Code::InvalidFrame
                        | Code::ChecksumMismatch
                        | Code::FrameTooLarge
                        | Code::ConnectionLimit
                )
            ),
            Error::Lagged { .. } | Error::Config(_) => false,
        }
    }

    /// The error of an error envelope's `error` object.
    pub fn from_wire(error: &Value) -> Error {
        let code = ErrorCode::parse(error["code"].as_str().unwrap_or("UNKNOWN"));
        Error::Server {
            retryable: error["retryable"]
                .as_bool()
                .unwrap_or_else(|| code.retryable()),
            code,
            message: error["message"].as_str().unwrap_or("").to_string(),
            details: error.get("details").cloned().unwrap_or(Value::Null),
        }
    }

    /// A copy (an `io::Error` is copied as its kind and text), to give one failure to many
    /// waiters.
    pub fn duplicate(&self) -> Error {
        match self {
            Error::Server {
                code,
                message,
                retryable,
                details,
            } => Error::Server {
                code: code.clone(),
                message: message.clone(),
                retryable: *retryable,
                details: details.clone(),
            },
            Error::Io(e) => Error::Io(io::Error::new(e.kind(), e.to_string())),
            Error::Protocol(m) => Error::Protocol(m.clone()),
            Error::Lagged {
                subscription_id,
                resume_cursor,
            } => Error::Lagged {
                subscription_id: subscription_id.clone(),
                resume_cursor: resume_cursor.clone(),
            },
            Error::Config(m) => Error::Config(m.clone()),
        }
    }

    pub(crate) fn eof(what: &str) -> Error {
        Error::Io(io::Error::new(ErrorKind::UnexpectedEof, what.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codes_round_trip_and_unknown_ones_are_kept() {
        for &c in Code::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), c);
        }
        assert_eq!(
            ErrorCode::parse("NEW_CODE"),
            ErrorCode::Other("NEW_CODE".into())
        );
        assert!(!ErrorCode::parse("NEW_CODE").retryable());
    }

    /// The shared vector (protocol/testdata/error_codes.json) and this client agree on every
    /// code: known, retryable as the vector says.
    #[test]
    fn every_code_of_the_shared_vector_has_its_retryability_here() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../protocol/testdata/error_codes.json"
        );
        let text = std::fs::read_to_string(path).expect("the shared vector");
        let vector: Value = serde_json::from_str(&text).expect("vector is JSON");
        let codes = vector["codes"].as_array().expect("codes");
        assert_eq!(codes.len(), Code::ALL.len());
        for c in codes {
            let code = ErrorCode::parse(c["code"].as_str().expect("name"));
            assert!(code.known().is_some(), "{code} unknown to the client");
            assert_eq!(Some(code.retryable()), c["retryable"].as_bool(), "{code}");
        }
    }

    #[test]
    fn wire_errors_carry_code_retryable_and_details() {
        let e = Error::from_wire(&json!({"code":"CONFLICT","message":"m","retryable":false,
                                          "details":{"x":1}}));
        assert_eq!(e.code(), Some("CONFLICT"));
        assert_eq!(e.details()["x"], 1);
        assert!(!e.is_retryable());
        assert_eq!(e.to_string(), "CONFLICT: m");
        let e = Error::from_wire(&json!({"code":"SHUTTING_DOWN","message":"m","retryable":true}));
        assert!(e.is_retryable() && e.is_shutting_down());
    }
}
