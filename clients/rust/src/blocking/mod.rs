//! The blocking client over `std::net::TcpStream` (plain or rustls): connect, HELLO, AUTH,
//! typed calls with retries, pipelining, and pushes kept apart from responses. It runs no
//! async runtime, so it fits scripts, CLIs and threads of any service.
//!
//! Several addresses (`Client::connect_with("a:7401,b:7401", ..)` or `Client::connect_any`):
//! the client connects to the first that answers and, on typed calls, follows the cluster
//! (docs/ha.md): a follower's `READ_ONLY_MODE` naming the primary sends the request there;
//! `NO_PRIMARY` (not maybe committed), `SHUTTING_DOWN` and a connection lost or refused before
//! the request was written move on to the next address after a backoff, as the `RetryPolicy`
//! allows (`RetryPolicy::failover()` rides out an election); a request that may have executed
//! is resent only when safe (reads, writes with an idempotency key). Reads go to whichever
//! address the client is connected to. See `retry::next_step`.
//!
//! Reads go through an internal buffer, so a read timeout never loses half a frame: the next
//! read picks up where the last one stopped.

mod calls;
mod cluster;
mod subscription;
mod transport;
mod watch_fanout;

pub use subscription::Subscription;
pub use transport::Transport;

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::frame::{decode_frame, encode_frame, HEADER_LEN};
use crate::message::{check_id, encode_request, into_result, Incoming};
use crate::ops::{self, Request};
use crate::retry::{next_step, Next, RetryPolicy, Stage};
use crate::tls::{client_config, server_name, ClientTlsOptions};
use crate::CLIENT_FRAME_BYTES_MAX;

/// Initial capacity of the read buffer; it grows to the largest frame seen.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Requests `pipeline` keeps in flight: hides the round trip, stays well under the server's
/// `network.max_inflight_per_connection` (1024), so neither side ever blocks on a full socket.
pub const PIPELINE_WINDOW: usize = 256;
/// Redirects (`READ_ONLY_MODE` naming a primary) one typed call follows beyond its policy's
/// tries: a follower's pointer is followed even by a client that never retries.
const EXTRA_REDIRECTS: u32 = 2;

/// The addresses of a comma-separated list (`"a:7401, b:7401"`), blanks dropped.
pub fn parse_addrs(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// Where and how a client made by `connect_with` / `connect_any` connects again.
#[derive(Debug, Clone)]
struct Recipe {
    /// Never empty: `connect_any` refuses an empty list.
    addrs: Vec<String>,
    /// The index in `addrs` of the connection in use.
    at: usize,
    opts: ConnectOptions,
}

/// Where a typed call reconnects before sending.
enum Target {
    /// The address in use first, then the others.
    Same,
    /// The next address first, then the others (the one in use last).
    Next,
    /// This address only (a primary a follower named).
    Addr(String),
}

/// How `Client::connect_with` connects (and reconnects).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `client_name` sent in HELLO.
    pub client_name: String,
    /// Limit on establishing the TCP connection, per resolved address; `None` waits as long as
    /// the OS does.
    pub connect_timeout: Option<Duration>,
    /// Read and write timeout of every later call; `None` waits forever. The async client
    /// checks it on each connection every tenth of it (10 ms to 1 s), so a call there fails
    /// between `timeout` and `timeout * 1.1` after it was sent; its late answer is dropped.
    pub timeout: Option<Duration>,
    /// Bearer token: when set, AUTH `{method:"bearer", token}` follows HELLO.
    pub token: Option<String>,
    /// TLS: when set, the handshake runs right after the TCP connect, before HELLO.
    pub tls: Option<ClientTlsOptions>,
    /// Retries of connecting and of typed calls (see `retry`).
    pub retry: RetryPolicy,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            client_name: "smdb-client".into(),
            connect_timeout: Some(Duration::from_secs(5)),
            timeout: Some(Duration::from_secs(30)),
            token: None,
            tls: None,
            retry: RetryPolicy::default(),
        }
    }
}

pub struct Client {
    stream: Transport,
    next_id: u64,
    /// Bytes read from the socket and not yet handed out; frames start at `rstart`.
    rbuf: Vec<u8>,
    rstart: usize,
    /// Pushes received while waiting for a response.
    pushes: VecDeque<Value>,
    /// Responses received while waiting for a push.
    responses: VecDeque<Value>,
    /// The HELLO result, once HELLO succeeded through this client.
    hello: Option<Value>,
    /// Where and how to connect again (clients made by `connect_with`); `None`: a lost
    /// connection is final and typed calls are not retried.
    recipe: Option<Recipe>,
    /// A call found the connection lost (or timed out): the next typed call reconnects first.
    broken: bool,
    /// Requests sent again by `run` after a retryable failure.
    retries: u64,
    /// Connections opened by `connect_with` and `reconnect` (the first included).
    connects: u64,
    /// Cluster mode (the seed's HELLO lists `"cluster"`): the slot map and the group
    /// primaries' connections (`cluster`).
    cluster: Option<Box<cluster::Routing>>,
}

impl Client {
    /// Connects (TCP_NODELAY on) without sending HELLO.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client> {
        Client::from_stream(TcpStream::connect(addr)?)
    }

    /// Connects without sending HELLO, giving up on each resolved address after `timeout`.
    pub fn connect_timeout(addr: impl ToSocketAddrs, timeout: Duration) -> Result<Client> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return Client::from_stream(s),
                Err(e) => last = Some(e),
            }
        }
        Err(Error::Io(last.unwrap_or_else(|| {
            std::io::Error::new(ErrorKind::InvalidInput, "address resolved to nothing")
        })))
    }

    /// A client over a connected stream (e.g. after writing a PROXY header on it).
    pub fn from_stream(stream: TcpStream) -> Result<Client> {
        stream.set_nodelay(true)?;
        Ok(Client::from_transport(Transport::Plain(stream)))
    }

    /// A client over an established transport (plain or after a TLS handshake).
    pub fn from_transport(stream: Transport) -> Client {
        Client {
            stream,
            next_id: 1,
            rbuf: Vec::with_capacity(READ_BUFFER_BYTES),
            rstart: 0,
            pushes: VecDeque::new(),
            responses: VecDeque::new(),
            hello: None,
            recipe: None,
            broken: false,
            retries: 0,
            connects: 1,
            cluster: None,
        }
    }

    /// Connects over TLS (no HELLO): TCP connect, then the handshake, both within `timeout`
    /// when given. The server name defaults to the host part of `addr`.
    pub fn connect_tls(
        addr: &str,
        tls: &ClientTlsOptions,
        timeout: Option<Duration>,
    ) -> Result<Client> {
        let config = client_config(tls).map_err(Error::Config)?;
        let plain = match timeout {
            Some(t) => Client::connect_timeout(addr, t)?,
            None => Client::connect(addr)?,
        };
        plain.set_timeout(timeout)?;
        let (sock, _) = plain.stream.into_parts();
        let name = server_name(tls, addr);
        Ok(Client::from_transport(Transport::tls(sock, config, &name)?))
    }

    /// Connects and performs HELLO with protocol version 1.
    pub fn connect_hello(addr: impl ToSocketAddrs, name: &str) -> Result<Client> {
        let mut c = Client::connect(addr)?;
        c.hello(name)?;
        Ok(c)
    }

    /// Connects with a connect timeout, sets the call timeout, performs HELLO and, when a token
    /// is given, AUTH. Retries per `opts.retry` while the server is unreachable or answers a
    /// retryable refusal (`CONNECTION_LIMIT`, `SHUTTING_DOWN`). The client remembers `addr`
    /// and `opts` to reconnect when a safe call finds the connection lost.
    ///
    /// `addr` may list several addresses separated by commas (`"a:7401,b:7401"`): see
    /// `connect_any`.
    pub fn connect_with(addr: &str, opts: &ConnectOptions) -> Result<Client> {
        Client::connect_any(&parse_addrs(addr), opts)
    }

    /// `connect_with` over several addresses (the members of a failover cluster): each round
    /// tries them in order and keeps the first that answers; rounds are retried per
    /// `opts.retry`. Typed calls then follow the primary (see the module's documentation).
    pub fn connect_any<S: AsRef<str>>(addrs: &[S], opts: &ConnectOptions) -> Result<Client> {
        let addrs: Vec<String> = addrs.iter().flat_map(|a| parse_addrs(a.as_ref())).collect();
        if addrs.is_empty() {
            return Err(Error::Config("no server address given".into()));
        }
        let (mut c, at) = Client::connect_from(&addrs, 0, opts, opts.retry)?;
        c.recipe = Some(Recipe {
            addrs,
            at,
            opts: opts.clone(),
        });
        c.cluster = cluster::Routing::detect(&mut c, opts).map(Box::new);
        Ok(c)
    }

    /// Tries `addrs` from index `start` on, wrapping around, in rounds retried per `rounds`;
    /// returns the client and the index of the address it reached.
    fn connect_from(
        addrs: &[String],
        start: usize,
        opts: &ConnectOptions,
        rounds: RetryPolicy,
    ) -> Result<(Client, usize)> {
        let mut attempt = 1;
        loop {
            let mut last = Error::Config("no server address given".into());
            for k in 0..addrs.len() {
                let at = (start + k) % addrs.len();
                match Client::connect_once(&addrs[at], opts) {
                    Ok(c) => return Ok((c, at)),
                    Err(e) if next_step(&e, ops::Retry::Safe, Stage::BeforeSend) == Next::Fail => {
                        return Err(e)
                    }
                    Err(e) => last = e,
                }
            }
            if addrs.is_empty() || !rounds.should_retry(&last, ops::Retry::Safe, attempt) {
                return Err(last);
            }
            std::thread::sleep(rounds.backoff(attempt));
            attempt += 1;
        }
    }

    fn connect_once(addr: &str, opts: &ConnectOptions) -> Result<Client> {
        let mut c = match (&opts.tls, opts.connect_timeout) {
            (Some(tls), t) => Client::connect_tls(addr, tls, t)?,
            (None, Some(t)) => Client::connect_timeout(addr, t)?,
            (None, None) => Client::connect(addr)?,
        };
        c.set_timeout(opts.timeout)?;
        c.hello(&opts.client_name)?;
        if let Some(token) = &opts.token {
            c.auth(token)?;
        }
        Ok(c)
    }

    /// Replaces the connection by a new one to the same server (HELLO, AUTH again), or, when
    /// it does not answer and several addresses were given, to the next that does. Only for
    /// clients made by `connect_with`. Pushes and responses not yet taken are dropped.
    pub fn reconnect(&mut self) -> Result<()> {
        let policy = self.retry_policy();
        self.reopen(Target::Same, policy)
    }

    /// The address the client is connected to, as given (clients made by `connect_with`).
    pub fn address(&self) -> Option<&str> {
        self.recipe
            .as_ref()
            .and_then(|r| r.addrs.get(r.at))
            .map(String::as_str)
    }

    /// Reconnects to `target`, connection rounds retried per `rounds`.
    fn reopen(&mut self, target: Target, rounds: RetryPolicy) -> Result<()> {
        let Some(mut recipe) = self.recipe.clone() else {
            return Err(Error::Config(
                "this client was not made by connect_with: it cannot reconnect".into(),
            ));
        };
        let n = recipe.addrs.len();
        let (fresh, at) = match target {
            Target::Same => Client::connect_from(&recipe.addrs, recipe.at, &recipe.opts, rounds)?,
            Target::Next => {
                Client::connect_from(&recipe.addrs, (recipe.at + 1) % n, &recipe.opts, rounds)?
            }
            Target::Addr(a) => {
                let at = match recipe.addrs.iter().position(|x| *x == a) {
                    Some(i) => i,
                    None => {
                        recipe.addrs.push(a.clone());
                        recipe.addrs.len() - 1
                    }
                };
                (Client::connect_once(&a, &recipe.opts)?, at)
            }
        };
        recipe.at = at;
        let (next_id, retries, connects) = (self.next_id, self.retries, self.connects);
        let cluster = self.cluster.take();
        *self = fresh;
        self.cluster = cluster;
        self.recipe = Some(recipe);
        self.next_id = next_id;
        self.retries = retries;
        self.connects = connects + 1;
        Ok(())
    }

    /// Requests sent again after a retryable failure, over this client's life.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Connections opened by this client (the first included).
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// The retry policy of typed calls: `connect_with`'s, else none.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.recipe
            .as_ref()
            .map_or_else(RetryPolicy::none, |r| r.opts.retry)
    }

    /// Sends HELLO (protocol version 1) and keeps its result (see `hello_result`).
    pub fn hello(&mut self, client_name: &str) -> Result<ops::Hello> {
        let req = ops::hello(client_name);
        let r = self.call(req.op, req.params.clone())?;
        self.hello = Some(r.clone());
        req.decode(r)
    }

    /// The result of the HELLO this client performed, if any.
    pub fn hello_result(&self) -> Option<&Value> {
        self.hello.as_ref()
    }

    /// Sets the read and write timeout of the socket (`None`: wait forever).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.stream.socket().set_read_timeout(t)?;
        self.stream.socket().set_write_timeout(t)?;
        Ok(())
    }

    /// Sends one typed request and decodes its result, retrying per the client's policy where
    /// that is safe (see `retry::next_step`), on a new connection when the old one was lost,
    /// at the primary a follower names, at the next address when this one has no primary.
    ///
    /// In cluster mode an instance op goes to its slot's group primary instead (see
    /// `cluster`).
    pub fn run<T: serde::de::DeserializeOwned>(&mut self, req: Request<T>) -> Result<T> {
        if self.cluster.is_some() {
            if let Some(key) = crate::cluster::route_key(req.op, &req.params) {
                return self.run_routed(req, &key);
            }
        }
        self.run_direct(req)
    }

    /// `run` on this connection (the seed's, in cluster mode).
    fn run_direct<T: serde::de::DeserializeOwned>(&mut self, req: Request<T>) -> Result<T> {
        let policy = self.retry_policy();
        let (mut attempt, mut redirects) = (1, 0);
        let mut target = None;
        loop {
            let (e, stage) = match self.prepare(req.retry, target.take()) {
                Err(e) => (e, Stage::BeforeSend),
                Ok(()) => match self.call(req.op, req.params.clone()) {
                    Ok(v) => return req.decode(v),
                    Err(e) => (e, Stage::Sent),
                },
            };
            if e.is_connection_lost() || e.is_timeout() || e.is_shutting_down() {
                self.broken = true;
            }
            if self.recipe.is_none() {
                return Err(e);
            }
            match next_step(&e, req.retry, stage) {
                Next::Fail => return Err(e),
                Next::Redirect(primary) => {
                    if redirects >= policy.attempts + EXTRA_REDIRECTS {
                        return Err(e);
                    }
                    if redirects > 0 {
                        // Followers pointing at each other, or at a primary just lost.
                        std::thread::sleep(policy.backoff(redirects));
                    }
                    redirects += 1;
                    target = Some(Target::Addr(primary));
                }
                next @ (Next::Again | Next::Elsewhere) => {
                    if attempt >= policy.attempts {
                        return Err(e);
                    }
                    std::thread::sleep(policy.backoff(attempt));
                    attempt += 1;
                    if next == Next::Elsewhere {
                        target = Some(Target::Next);
                    }
                }
            }
            self.retries += 1;
        }
    }

    /// Before a typed call sends: reconnects to `target`, or to the address in use when the
    /// connection broke, or elsewhere when a request that must not be resent would go into a
    /// connection the server has closed (found now, it was surely not executed). One round
    /// over the addresses: `run` paces the retries.
    fn prepare(&mut self, retry: ops::Retry, target: Option<Target>) -> Result<()> {
        if self.recipe.is_none() {
            return Ok(());
        }
        let target = match target {
            Some(t) => t,
            None if self.broken => Target::Same,
            None if retry == ops::Retry::Unsafe && !self.is_alive() => Target::Next,
            None => return Ok(()),
        };
        self.reopen(target, RetryPolicy::none())
    }

    /// Sends one request and returns its `result` (raw JSON), or the server's error. No retry.
    pub fn call(&mut self, op: &str, params: Value) -> Result<Value> {
        let r = self.send(op, &params).and_then(|id| {
            let resp = self.recv_response()?;
            check_id(&resp, &id)?;
            Ok(resp)
        });
        if matches!(&r, Err(e) if e.is_connection_lost() || e.is_timeout()) {
            self.broken = true;
        }
        into_result(r?)
    }

    /// Sends many typed requests on this connection without waiting for each answer, at most
    /// `PIPELINE_WINDOW` in flight, and returns their results in request order (answers are
    /// matched to requests by id). A server error fails only its own entry; a lost connection
    /// fails the call.
    pub fn pipeline<T: serde::de::DeserializeOwned>(
        &mut self,
        reqs: &[Request<T>],
    ) -> Result<Vec<Result<T>>> {
        let mut out = Vec::with_capacity(reqs.len());
        let mut pending: VecDeque<(usize, String)> = VecDeque::new();
        let mut next = 0;
        let mut buf = Vec::new();
        while out.len() < reqs.len() {
            while next < reqs.len() && pending.len() < PIPELINE_WINDOW {
                let id = self.take_id();
                encode_request(&mut buf, &id, reqs[next].op, &reqs[next].params)?;
                pending.push_back((next, id));
                next += 1;
            }
            if !buf.is_empty() {
                self.send_raw(&buf)?;
                buf.clear();
            }
            let resp = self.recv_response()?;
            let Some((i, id)) = pending.pop_front() else {
                return Err(Error::Protocol("a response nobody asked for".into()));
            };
            check_id(&resp, &id)?;
            out.push(into_result(resp).and_then(|v| reqs[i].decode(v)));
        }
        Ok(out)
    }

    fn take_id(&mut self) -> String {
        let id = self.next_id.to_string();
        self.next_id += 1;
        id
    }

    /// Sends one request without waiting; returns its id. Use `recv_response` for the answer.
    /// A `Null` params value omits `params`.
    pub fn send(&mut self, op: &str, params: &Value) -> Result<String> {
        let id = self.take_id();
        let mut out = Vec::new();
        encode_request(&mut out, &id, op, params)?;
        self.send_raw(&out)?;
        Ok(id)
    }

    /// Sends a frame around arbitrary payload bytes.
    pub fn send_payload(&mut self, payload: &[u8]) -> Result<()> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        encode_frame(payload, &mut out);
        self.send_raw(&out)
    }

    /// Writes raw bytes (for tests of malformed frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()?;
        Ok(())
    }

    /// Reads the next response, setting aside any push that arrives first.
    pub fn recv_response(&mut self) -> Result<Value> {
        if let Some(r) = self.responses.pop_front() {
            return Ok(r);
        }
        loop {
            let v = self.read_message()?;
            if is_response(&v) {
                return Ok(v);
            }
            self.pushes.push_back(v);
        }
    }

    /// The next push: one already received, or the next message read (whatever its type).
    pub fn recv_push(&mut self) -> Result<Value> {
        if let Some(p) = self.pushes.pop_front() {
            return Ok(p);
        }
        self.read_message()
    }

    /// The next push, waiting at most `wait` (`None`: the call timeout). `Ok(None)` when none
    /// came in time. Responses read meanwhile are kept for `recv_response`.
    pub fn next_push(&mut self, wait: Option<Duration>) -> Result<Option<Value>> {
        if let Some(p) = self.pushes.pop_front() {
            return Ok(Some(p));
        }
        let before = self.stream.socket().read_timeout()?;
        if let Some(w) = wait {
            // A zero timeout means "block" to the OS: wait at least a millisecond instead.
            self.stream
                .socket()
                .set_read_timeout(Some(w.max(Duration::from_millis(1))))?;
        }
        let got = loop {
            match self.read_message() {
                Ok(v) if is_response(&v) => self.responses.push_back(v),
                Ok(v) => break Ok(Some(v)),
                Err(e) if e.is_timeout() => break Ok(None),
                Err(e) => break Err(e),
            }
        };
        if wait.is_some() {
            self.stream.socket().set_read_timeout(before)?;
        }
        got
    }

    /// Pushes already received and not yet taken, oldest first (never reads the socket).
    pub fn take_pushes(&mut self) -> Vec<Value> {
        self.pushes.drain(..).collect()
    }

    /// Reads one frame and parses its JSON payload (a JSON object, or a protocol error).
    pub fn read_message(&mut self) -> Result<Value> {
        let payload = self.read_frame()?;
        Ok(Incoming::parse(&payload)?.into_value())
    }

    /// Reads one frame's payload bytes. EOF gives an `UnexpectedEof` I/O error; a timeout keeps
    /// the bytes read so far for the next call.
    pub fn read_frame(&mut self) -> Result<Vec<u8>> {
        loop {
            let buffered = &self.rbuf[self.rstart..];
            match decode_frame(buffered, CLIENT_FRAME_BYTES_MAX) {
                Ok(Some((range, consumed))) => {
                    let payload = buffered[range].to_vec();
                    self.rstart += consumed;
                    return Ok(payload);
                }
                Ok(None) => self.fill()?,
                Err(e) => return Err(Error::Protocol(e.to_string())),
            }
        }
    }

    /// Reads more bytes of the current frame into the buffer (at least one, or an error).
    /// Never reads past the frame's end, so whatever follows it stays in the socket, where
    /// `stream()` users (tests checking that the server closed) see it.
    fn fill(&mut self) -> Result<()> {
        if self.rstart > 0 {
            self.rbuf.drain(..self.rstart);
            self.rstart = 0;
        }
        let len = self.rbuf.len();
        let frame_len = match self.rbuf.first_chunk::<HEADER_LEN>() {
            // `read_frame` validated this header (length within the limit) before calling.
            Some(h) => HEADER_LEN + u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
            None => HEADER_LEN,
        };
        self.rbuf.resize(frame_len.max(len + 1), 0);
        let n = loop {
            match self.stream.read(&mut self.rbuf[len..]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        self.rbuf.truncate(len + *n.as_ref().unwrap_or(&0));
        match n? {
            0 if len == 0 => Err(Error::eof("connection closed by the server")),
            0 => Err(Error::Protocol(format!(
                "connection closed by the server in the middle of a frame \
                 ({len} of {frame_len} bytes received)"
            ))),
            _ => Ok(()),
        }
    }

    /// True when the connection looks usable: the peer has not closed or reset it. Never
    /// blocks and consumes nothing. Use before reusing an idle connection, so a request is not
    /// sent into a socket whose server went away.
    pub fn is_alive(&mut self) -> bool {
        if self.rbuf.len() > self.rstart || !self.pushes.is_empty() {
            return true;
        }
        if self.stream.socket().set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        let alive = match self.stream.socket().peek(&mut b) {
            Ok(0) => false,
            Ok(_) => self.stream.take_in_waiting(),
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        };
        self.stream.socket().set_nonblocking(false).is_ok() && alive
    }

    /// The server's address.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        Ok(self.stream.socket().peer_addr()?)
    }

    /// The underlying TCP socket (for shutdown or raw tests).
    pub fn stream(&self) -> &TcpStream {
        self.stream.socket()
    }

    /// The transport, for a caller that drives the socket itself (smdb-bench's load driver).
    /// Every frame read so far was handed out, so nothing is lost with the client.
    pub fn into_transport(self) -> Transport {
        self.stream
    }
}

fn is_response(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::net::TcpListener;

    fn frame(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(&serde_json::to_vec(v).unwrap(), &mut out);
        out
    }

    /// A one-shot fake server: accepts one connection and runs `f` on it.
    fn fake(f: impl FnOnce(TcpStream) + Send + 'static) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || f(l.accept().unwrap().0));
        addr
    }

    #[test]
    fn a_timeout_mid_frame_loses_nothing() {
        let addr = fake(|mut s| {
            let f = frame(&json!({"type":"event","n":1}));
            s.write_all(&f[..10]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            s.write_all(&f[10..]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let mut c = Client::connect(addr).unwrap();
        let first = c.next_push(Some(Duration::from_millis(50))).unwrap();
        assert_eq!(first, None, "half a frame is not a push yet");
        let mut got = None;
        for _ in 0..40 {
            got = c.next_push(Some(Duration::from_millis(50))).unwrap();
            if got.is_some() {
                break;
            }
        }
        assert_eq!(got.unwrap()["n"], 1);
    }

    #[test]
    fn reads_stop_at_the_end_of_the_frame() {
        let addr = fake(|mut s| {
            let mut out = frame(&json!({"type":"event","n":1}));
            out.extend(b"tail");
            s.write_all(&out).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let mut c = Client::connect(addr).unwrap();
        assert_eq!(c.read_message().unwrap()["n"], 1);
        let mut rest = [0u8; 4];
        c.stream().read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"tail", "bytes after the frame stay in the socket");
    }

    #[test]
    fn pushes_and_responses_are_kept_apart() {
        let addr = fake(|mut s| {
            let mut out = frame(&json!({"type":"event","n":1}));
            out.extend(frame(
                &json!({"type":"response","id":"1","status":"ok","result":{"a":1}}),
            ));
            out.extend(frame(&json!({"type":"event","n":2})));
            s.write_all(&out).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let mut c = Client::connect(addr).unwrap();
        c.send("PING", &Value::Null).unwrap();
        assert_eq!(c.recv_response().unwrap()["result"]["a"], 1);
        assert_eq!(c.next_push(None).unwrap().unwrap()["n"], 1);
        assert_eq!(c.next_push(None).unwrap().unwrap()["n"], 2);
    }

    #[test]
    fn a_closed_peer_is_not_alive_and_reads_give_eof() {
        let addr = fake(drop);
        let mut c = Client::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!c.is_alive());
        match c.read_frame() {
            Err(e) => assert!(e.is_connection_lost(), "{e}"),
            Ok(_) => panic!("expected EOF"),
        }
    }
}
