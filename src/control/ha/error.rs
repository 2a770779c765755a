//! What goes wrong on the HA thread, with its context: which etcd call on which endpoint and
//! how it failed, which file of the `[ha]` section could not be read, which request was
//! refused. `Display` gives the text logged and answered (`ha: ...` log lines, a `Rejection`'s
//! message), word for word as before these types; `From<HaError> for String` lets a caller
//! outside the HA thread (`boot`) keep its `String` error.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How one etcd call (or connection) failed.
#[derive(Debug)]
pub enum Fault {
    /// etcd (or the transport) answered an error.
    Etcd(etcd_client::Error),
    /// No answer within the call deadline.
    NoAnswerWithin(Duration),
    /// No answer within the call deadline (said without the deadline).
    NoAnswer,
    /// A connection attempt outlasted the call deadline.
    TimedOut,
    /// The keep-alive stream ended.
    StreamEnded,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Etcd(e) => write!(f, "{e}"),
            Fault::NoAnswerWithin(d) => write!(f, "no answer within {d:?}"),
            Fault::NoAnswer => f.write_str("no answer"),
            Fault::TimedOut => f.write_str("timed out"),
            Fault::StreamEnded => f.write_str("the stream ended"),
        }
    }
}

/// An error of the HA thread or of an HA request.
#[derive(Debug)]
pub enum HaError {
    /// The etcd call `what` on `endpoint` failed.
    Call {
        what: String,
        endpoint: String,
        fault: Fault,
    },
    /// Connecting to `endpoint` failed.
    Connect { endpoint: String, fault: Fault },
    /// One endpoint's part of a renewal tried on every endpoint.
    Endpoint { endpoint: String, fault: Fault },
    /// A renewal failed on every endpoint tried: each one's error.
    Nowhere(Vec<HaError>),
    /// A call failed, and so did the second try elsewhere.
    Again {
        first: Box<HaError>,
        again: Box<HaError>,
    },
    /// etcd answered that the session's lease is gone.
    Expired,
    /// A call failed after the lease deadline had passed: the session is over.
    PastDeadline(Box<HaError>),
    /// The `[ha]` section is incomplete.
    Config(&'static str),
    /// A file the `[ha]` setting `key` names could not be read.
    ReadFile {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A key's value could not be encoded.
    Encode(serde_json::Error),
    /// The HA thread (or its runtime) could not be started.
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    /// Shard `shard` refused a step of the driver, or answered something unexpected.
    Shard { shard: u32, why: String },
    /// The target of a switchover did not catch up in time.
    NotCaughtUp {
        to: String,
        heads: Vec<u64>,
        acked: Vec<u64>,
    },
    /// A request was refused (the reason is the client's message).
    Refused(String),
}

impl fmt::Display for HaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HaError::Call {
                what,
                endpoint,
                fault,
            } => write!(f, "etcd {what} ({endpoint}): {fault}"),
            HaError::Connect { endpoint, fault } => write!(f, "etcd connect {endpoint}: {fault}"),
            HaError::Endpoint { endpoint, fault } => write!(f, "{endpoint}: {fault}"),
            HaError::Nowhere(each) => {
                f.write_str("etcd keep-alive on every endpoint failed: ")?;
                for (i, e) in each.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{e}")?;
                }
                Ok(())
            }
            HaError::Again { first, again } => write!(f, "{first}; {again}"),
            HaError::Expired => f.write_str("the lease expired in etcd"),
            HaError::PastDeadline(e) => write!(f, "{e}; the lease deadline has passed"),
            HaError::Config(what) => f.write_str(what),
            HaError::ReadFile { key, path, source } => {
                write!(f, "{key}: {}: {source}", path.display())
            }
            HaError::Encode(e) => write!(f, "{e}"),
            HaError::Thread { what, source } => write!(f, "ha: {what}: {source}"),
            HaError::Shard { shard, why } => write!(f, "shard {shard}: {why}"),
            HaError::NotCaughtUp { to, heads, acked } => write!(
                f,
                "{to} did not acknowledge the head {heads:?} within {:?} (it acknowledged \
                 {acked:?})",
                super::handover::CATCH_UP_MAX
            ),
            HaError::Refused(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for HaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HaError::Call {
                fault: Fault::Etcd(e),
                ..
            }
            | HaError::Connect {
                fault: Fault::Etcd(e),
                ..
            }
            | HaError::Endpoint {
                fault: Fault::Etcd(e),
                ..
            } => Some(e),
            HaError::ReadFile { source, .. } | HaError::Thread { source, .. } => Some(source),
            HaError::Encode(e) => Some(e),
            HaError::Again { again, .. } => Some(again.as_ref()),
            HaError::PastDeadline(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<serde_json::Error> for HaError {
    fn from(e: serde_json::Error) -> HaError {
        HaError::Encode(e)
    }
}

impl From<HaError> for String {
    fn from(e: HaError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_the_one_logged_before_the_types() {
        let call = |what: &str, fault| HaError::Call {
            what: what.into(),
            endpoint: "http://a:1".into(),
            fault,
        };
        let slow = call("get", Fault::NoAnswerWithin(Duration::from_millis(400)));
        assert_eq!(
            slow.to_string(),
            "etcd get (http://a:1): no answer within 400ms"
        );
        let ended = call("keep-alive", Fault::StreamEnded);
        assert_eq!(
            ended.to_string(),
            "etcd keep-alive (http://a:1): the stream ended"
        );
        let nowhere = HaError::Nowhere(vec![
            HaError::Endpoint {
                endpoint: "http://b:2".into(),
                fault: Fault::NoAnswer,
            },
            HaError::Endpoint {
                endpoint: "http://c:3".into(),
                fault: Fault::NoAnswer,
            },
        ]);
        let both = HaError::Again {
            first: Box::new(ended),
            again: Box::new(nowhere),
        };
        assert_eq!(
            HaError::PastDeadline(Box::new(both)).to_string(),
            "etcd keep-alive (http://a:1): the stream ended; etcd keep-alive on every endpoint \
             failed: http://b:2: no answer; http://c:3: no answer; the lease deadline has passed"
        );
        let connect = HaError::Connect {
            endpoint: "http://a:1".into(),
            fault: Fault::TimedOut,
        };
        assert_eq!(connect.to_string(), "etcd connect http://a:1: timed out");
    }
}
