//! What can go wrong in the CLI, mapped to one exit status per kind:
//! 1 for the server's refusals, 2 for usage, 3 for the connection. Every error prints as
//! `error: CODE: message`, where CODE is the server's code or one of the client-side codes below.

use std::time::Duration;

use serde_json::Value;
use smdb_client::ClientError;

pub const EXIT_SERVER: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_CONNECTION: u8 = 3;

/// Client-side codes (never sent by the server).
pub const USAGE: &str = "USAGE";
pub const CONNECT_FAILED: &str = "CONNECT_FAILED";
pub const CONNECTION_LOST: &str = "CONNECTION_LOST";
pub const TIMEOUT: &str = "TIMEOUT";
pub const PROTOCOL_ERROR: &str = "PROTOCOL_ERROR";
pub const SUBSCRIPTION_LAGGED: &str = "SUBSCRIPTION_LAGGED";
/// `backup --verify`: a file of the backup is missing, changed or not listed (exit 1).
pub const BACKUP_INVALID: &str = "BACKUP_INVALID";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Server,
    Usage,
    Connection,
}

#[derive(Debug)]
pub struct CliError {
    pub kind: Kind,
    pub code: String,
    pub message: String,
    /// The server's `details`, or `Null`.
    pub details: Value,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new(Kind::Usage, USAGE, message)
    }

    pub fn new(kind: Kind, code: &str, message: impl Into<String>) -> CliError {
        CliError {
            kind,
            code: code.to_string(),
            message: message.into(),
            details: Value::Null,
        }
    }

    /// A failed call on an open connection; `timeout` names the limit in the message.
    pub fn from_call(e: ClientError, timeout: Option<Duration>) -> CliError {
        match e {
            ClientError::Server {
                code,
                message,
                details,
                ..
            } => CliError {
                kind: Kind::Server,
                code: code.as_str().to_string(),
                message,
                details,
            },
            e if e.is_timeout() => {
                let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
                CliError::new(
                    Kind::Connection,
                    TIMEOUT,
                    format!("no response within {secs} s (--timeout)"),
                )
            }
            ClientError::Protocol(m) => CliError::new(Kind::Connection, PROTOCOL_ERROR, m),
            ClientError::Lagged { resume_cursor, .. } => CliError::new(
                Kind::Connection,
                SUBSCRIPTION_LAGGED,
                format!("subscription lagged; resume from cursor {resume_cursor}"),
            ),
            ClientError::Config(m) => CliError::usage(m),
            ClientError::Io(io) => CliError::new(
                Kind::Connection,
                CONNECTION_LOST,
                format!("connection to the server lost: {io}"),
            ),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self.kind {
            Kind::Server => EXIT_SERVER,
            Kind::Usage => EXIT_USAGE,
            Kind::Connection => EXIT_CONNECTION,
        }
    }

    /// `error: CODE: message`, plus a `details:` line when the server sent any.
    pub fn render(&self) -> String {
        let mut s = format!("error: {}: {}", self.code, self.message);
        let empty = match &self.details {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            _ => false,
        };
        if !empty {
            s.push_str(&format!("\n  details: {}", self.details));
        }
        s
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::usage(format!("invalid JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_errors_render_code_message_and_details() {
        let e = CliError::from_call(
            ClientError::Server {
                code: smdb_client::error::Code::Conflict.into(),
                message: "expected paid".into(),
                retryable: false,
                details: json!({"actual_state": "new"}),
            },
            None,
        );
        assert_eq!(e.exit_code(), EXIT_SERVER);
        assert_eq!(
            e.render(),
            "error: CONFLICT: expected paid\n  details: {\"actual_state\":\"new\"}"
        );
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "t");
        let t = CliError::from_call(ClientError::Io(io), Some(Duration::from_secs(2)));
        assert_eq!((t.code.as_str(), t.exit_code()), (TIMEOUT, EXIT_CONNECTION));
    }
}
