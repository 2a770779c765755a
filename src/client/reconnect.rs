//! A client that survives a server's SIGTERM drain: a call answered `SHUTTING_DOWN` (not
//! executed) is sent again on a new connection (HELLO and AUTH again), and a connection that
//! fails before HELLO completes is retried. A connection lost in the middle of a call is
//! reported, not retried: the request may have been applied.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Client, ClientError, ConnectOptions};

/// Longest time spent reconnecting (connect + HELLO attempts) for one call.
pub const RECONNECT_FOR: Duration = Duration::from_secs(10);
/// Pause between connection attempts.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(20);

pub struct Reconnecting {
    addr: String,
    opts: ConnectOptions,
    client: Option<Client>,
    /// Calls sent again after `SHUTTING_DOWN`.
    pub retries: u64,
    /// Connections opened (the first included).
    pub connects: u64,
}

impl Reconnecting {
    /// Connects lazily, on the first call.
    pub fn new(addr: &str, opts: ConnectOptions) -> Reconnecting {
        Reconnecting {
            addr: addr.to_string(),
            opts,
            client: None,
            retries: 0,
            connects: 0,
        }
    }

    /// The connected client, connecting (with retries) if needed.
    pub fn client(&mut self) -> Result<&mut Client, ClientError> {
        if self.client.is_none() {
            let started = Instant::now();
            let c = loop {
                match Client::connect_with(self.addr.as_str(), &self.opts) {
                    Ok(c) => break c,
                    Err(e) if e.code().is_some() && !e.is_shutting_down() => return Err(e),
                    Err(e) if started.elapsed() >= RECONNECT_FOR => return Err(e),
                    Err(_) => std::thread::sleep(RECONNECT_PAUSE),
                }
            };
            self.connects += 1;
            self.client = Some(c);
        }
        // Just filled above when it was empty.
        self.client
            .as_mut()
            .ok_or_else(|| ClientError::Protocol("not connected".into()))
    }

    /// One request; sent again on a new connection while the answer is `SHUTTING_DOWN`
    /// (bounded by `RECONNECT_FOR`).
    pub fn call(&mut self, op: &str, params: Value) -> Result<Value, ClientError> {
        let started = Instant::now();
        loop {
            let r = self.client()?.call(op, params.clone());
            match r {
                Err(e) if e.is_shutting_down() && started.elapsed() < RECONNECT_FOR => {
                    self.client = None;
                    self.retries += 1;
                }
                Err(e) => {
                    if e.is_connection_lost() || e.is_timeout() {
                        self.client = None;
                    }
                    return Err(e);
                }
                Ok(v) => return Ok(v),
            }
        }
    }
}
