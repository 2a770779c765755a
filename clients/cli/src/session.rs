//! The CLI's connection to the server: connected (HELLO, AUTH) on first use, checked before
//! each reuse and dropped when it breaks, so the REPL survives a server restart by reconnecting
//! on the next command. A request is never resent: a connection that breaks mid-request
//! reports the error, because a write may have been applied before the server went away.
//!
//! `--addr a:7401,b:7401` lists the members of a failover cluster (docs/ha.md): the session
//! connects to the first that answers, and the client follows a follower's `READ_ONLY_MODE`
//! to the primary it names. With several addresses the client also retries, with backoff and
//! on the next address, what the server surely did not execute (`NO_PRIMARY`,
//! `SHUTTING_DOWN`, a connection refused before sending) and, only for reads and writes with
//! an idempotency key, a connection lost after sending.

use std::time::Duration;

use serde_json::Value;

use smdb_client::{Client, ClientError, ConnectOptions};

use super::args::GlobalOpts;
use super::error::{CliError, Kind, CONNECT_FAILED, PROTOCOL_ERROR, USAGE};

/// Reconnect-and-retry rounds after `SHUTTING_DOWN`.
const SHUTTING_DOWN_RETRIES: usize = 3;
/// Pause before reconnecting after `SHUTTING_DOWN`.
const SHUTTING_DOWN_PAUSE: Duration = Duration::from_millis(100);

pub struct Session {
    pub addr: String,
    opts: ConnectOptions,
    client: Option<Client>,
}

/// Seconds from the command line as a timeout; zero or negative means "no limit".
fn secs(s: f64) -> Result<Option<Duration>, CliError> {
    if !s.is_finite() {
        return Err(CliError::new(
            Kind::Usage,
            USAGE,
            format!("bad timeout {s}"),
        ));
    }
    Ok((s > 0.0).then(|| Duration::from_secs_f64(s)))
}

impl Session {
    pub fn new(g: &GlobalOpts) -> Result<Session, CliError> {
        Ok(Session {
            addr: g.addr.clone(),
            opts: ConnectOptions {
                client_name: "smdb-cli".into(),
                connect_timeout: secs(g.connect_timeout)?,
                timeout: secs(g.timeout)?,
                token: g.token.clone(),
                tls: g.tls_options(),
                // One address: the session has its own policy (SHUTTING_DOWN is retried below,
                // a lost connection is reported and the next command reconnects). Several: the
                // client's own, which moves between them (see the module's documentation).
                retry: match smdb_client::blocking::parse_addrs(&g.addr).len() {
                    0 | 1 => smdb_client::RetryPolicy::none(),
                    _ => smdb_client::RetryPolicy::default(),
                },
            },
            client: None,
        })
    }

    /// The bearer token (`--token`).
    pub fn token(&self) -> Option<&str> {
        self.opts.token.as_deref()
    }

    /// The TLS options (`--tls`, `--ca`, `--cert`, `--key`, `--server-name`), if TLS is on.
    pub fn tls(&self) -> Option<&smdb_client::ClientTlsOptions> {
        self.opts.tls.as_ref()
    }

    /// The call timeout (`--timeout`).
    pub fn timeout(&self) -> Option<Duration> {
        self.opts.timeout
    }

    /// A connected client: the current one if the server has not closed it, else a new one.
    pub fn client(&mut self) -> Result<&mut Client, CliError> {
        if self.client.as_mut().is_some_and(|c| !c.is_alive()) {
            self.client = None;
        }
        if self.client.is_none() {
            self.client = Some(self.connect()?);
        }
        // Just filled above when it was empty.
        self.client
            .as_mut()
            .ok_or_else(|| CliError::new(Kind::Connection, CONNECT_FAILED, "not connected"))
    }

    fn connect(&self) -> Result<Client, CliError> {
        Client::connect_with(self.addr.as_str(), &self.opts).map_err(|e| match e {
            // HELLO or AUTH refused: the server's own code says why.
            ClientError::Server { .. } => CliError::from_call(e, self.opts.timeout),
            e => CliError::new(
                Kind::Connection,
                CONNECT_FAILED,
                format!("cannot connect to {}: {}", self.addr, io_text(&e)),
            ),
        })
    }

    /// A connection of its own to one address (`cluster check` asks each member), with the
    /// session's options, no retries and at most `connect_timeout` to connect.
    pub fn connect_to(&self, addr: &str, connect_timeout: Duration) -> Result<Client, CliError> {
        let opts = ConnectOptions {
            connect_timeout: Some(connect_timeout),
            retry: smdb_client::RetryPolicy::none(),
            ..self.opts.clone()
        };
        Client::connect_with(addr, &opts).map_err(|e| match e {
            ClientError::Server { .. } => CliError::from_call(e, opts.timeout),
            e => CliError::new(
                Kind::Connection,
                CONNECT_FAILED,
                format!("cannot connect to {addr}: {}", io_text(&e)),
            ),
        })
    }

    /// Runs `f` on a connected client; a broken connection is dropped so the next call
    /// reconnects. `SHUTTING_DOWN` (the server is draining and did not execute the request)
    /// reconnects at once, HELLO and AUTH included, and runs `f` again, up to
    /// `SHUTTING_DOWN_RETRIES` times: behind a load balancer the new connection reaches
    /// another server.
    /// `run` for a typed call, its result as JSON (for rendering).
    pub fn value<T: serde::Serialize>(
        &mut self,
        f: impl FnMut(&mut Client) -> Result<T, ClientError>,
    ) -> Result<Value, CliError> {
        let r = self.run(f)?;
        serde_json::to_value(r)
            .map_err(|e| CliError::new(Kind::Connection, PROTOCOL_ERROR, e.to_string()))
    }

    pub fn run<T>(
        &mut self,
        mut f: impl FnMut(&mut Client) -> Result<T, ClientError>,
    ) -> Result<T, CliError> {
        let timeout = self.opts.timeout;
        let mut r = f(self.client()?);
        for _ in 0..SHUTTING_DOWN_RETRIES {
            match &r {
                Err(e) if e.is_shutting_down() => {
                    self.client = None;
                    std::thread::sleep(SHUTTING_DOWN_PAUSE);
                    r = f(self.client()?);
                }
                _ => break,
            }
        }
        r.map_err(|e| {
            if e.is_connection_lost() || e.is_timeout() {
                // After a timeout the late response could still arrive and be taken for the
                // next request's: start over on a new connection.
                self.client = None;
            }
            CliError::from_call(e, timeout)
        })
    }

    /// The open connection, if any, as it is (no liveness check, no reconnect).
    pub fn current(&mut self) -> Option<&mut Client> {
        self.client.as_mut()
    }

    /// Forgets the connection (after it broke); the next command connects again.
    pub fn reset(&mut self) {
        self.client = None;
    }

    /// Pushes the current connection has received and not yet shown.
    pub fn take_pushes(&mut self) -> Vec<serde_json::Value> {
        self.client
            .as_mut()
            .map(Client::take_pushes)
            .unwrap_or_default()
    }

    /// Closes the connection (BYE, best effort).
    pub fn close(&mut self) {
        if let Some(mut c) = self.client.take() {
            let _ = c.set_timeout(Some(Duration::from_secs(1)));
            let _ = c.bye();
        }
    }
}

fn io_text(e: &ClientError) -> String {
    match e {
        ClientError::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}
