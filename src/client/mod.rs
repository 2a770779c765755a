//! A blocking RCP1 client over `std::net::TcpStream`: connect, HELLO, typed requests, pipelined
//! sends, pushes kept apart from responses. Used by `smdb-cli`, `smdb-bench` and the tests; it
//! runs no async runtime, so it never fights glommio.
//!
//! This module owns the connection and the framing; `ops` adds one typed helper per operation.
//! Reads go through an internal buffer, so a read timeout never loses half a frame: the next
//! read picks up where the last one stopped.

mod ops;
pub mod reconnect;
mod transport;

pub use ops::{ApplyOptions, CreateOptions, ListFilter, WatchAllFilter, WatchOptions};
pub use transport::{ClientTlsOptions, Transport};

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{json, Value};

use crate::protocol::frame::{decode_frame, encode_frame, HEADER_LEN};

/// Largest response frame the client accepts (matches the server's default frame limit x4, so
/// large LIST/GET_HISTORY pages fit).
pub const CLIENT_FRAME_BYTES_MAX: u32 = 64 * 1024 * 1024;

/// Initial capacity of the read buffer; it grows to the largest frame seen.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The protocol version this client speaks (CONTRACT §3).
pub const PROTOCOL_VERSION: u32 = 1;

/// A client-side failure.
#[derive(Debug)]
pub enum ClientError {
    Io(std::io::Error),
    /// The peer sent bytes that are not a valid frame or JSON.
    Protocol(String),
    /// The server answered with `status: "error"`.
    Server {
        code: String,
        message: String,
        details: Value,
    },
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "i/o error: {e}"),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
            ClientError::Server { code, message, .. } => write!(f, "{code}: {message}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl ClientError {
    /// The server's error code, when this is a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when a read or write timeout expired (the connection may still be usable, but a
    /// response to a request already sent may still arrive later).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Io(e)
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }

    /// True for `SHUTTING_DOWN`: the server is draining and did not execute the request; it
    /// is safe to send it again on a new connection (`reconnect::Reconnecting` does).
    pub fn is_shutting_down(&self) -> bool {
        self.code() == Some("SHUTTING_DOWN")
    }

    /// True when the connection is unusable: the peer closed it, reset it, or sent garbage.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            ClientError::Io(_) => !self.is_timeout(),
            ClientError::Protocol(_) => true,
            ClientError::Server { .. } => false,
        }
    }
}

/// How `Client::connect_with` connects.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `client_name` sent in HELLO.
    pub client_name: String,
    /// Limit on establishing the TCP connection, per resolved address; `None` waits as long as
    /// the OS does.
    pub connect_timeout: Option<Duration>,
    /// Read and write timeout of every later call; `None` waits forever.
    pub timeout: Option<Duration>,
    /// Bearer token: when set, AUTH `{method:"bearer", token}` follows HELLO.
    pub token: Option<String>,
    /// TLS: when set, the handshake runs right after the TCP connect, before HELLO.
    pub tls: Option<ClientTlsOptions>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            client_name: "smdb-client".into(),
            connect_timeout: Some(Duration::from_secs(5)),
            timeout: Some(Duration::from_secs(30)),
            token: None,
            tls: None,
        }
    }
}

pub struct Client {
    stream: Transport,
    next_id: u64,
    /// Bytes read from the socket and not yet handed out; frames start at `rstart`.
    rbuf: Vec<u8>,
    rstart: usize,
    /// Pushes (`type` other than `response`) received while waiting for a response.
    pushes: VecDeque<Value>,
    /// Responses received while waiting for a push.
    responses: VecDeque<Value>,
    /// The HELLO result, once HELLO succeeded through this client.
    hello: Option<Value>,
}

impl Client {
    /// Connects (TCP_NODELAY on) without sending HELLO.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Client::from_stream(TcpStream::connect(addr)?)
    }

    /// Connects without sending HELLO, giving up on each resolved address after `timeout`.
    pub fn connect_timeout(
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return Client::from_stream(s),
                Err(e) => last = Some(e),
            }
        }
        Err(ClientError::Io(last.unwrap_or_else(|| {
            std::io::Error::new(ErrorKind::InvalidInput, "address resolved to nothing")
        })))
    }

    /// A client over a connected stream (e.g. after writing a PROXY header on it).
    pub fn from_stream(stream: TcpStream) -> Result<Client, ClientError> {
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
        }
    }

    /// Connects over TLS (no HELLO): TCP connect, then the handshake, both within `timeout`
    /// when given. The server name defaults to the host part of `addr`.
    pub fn connect_tls(
        addr: &str,
        tls: &ClientTlsOptions,
        timeout: Option<Duration>,
    ) -> Result<Client, ClientError> {
        let config = crate::tls::client_config(tls)
            .map_err(|e| ClientError::Io(std::io::Error::new(ErrorKind::InvalidInput, e)))?;
        let plain = match timeout {
            Some(t) => Client::connect_timeout(addr, t)?,
            None => Client::connect(addr)?,
        };
        plain.set_timeout(timeout)?;
        let name = tls.server_name.clone().unwrap_or_else(|| host_of(addr));
        let (sock, _) = plain.stream.into_parts();
        Ok(Client::from_transport(Transport::tls(sock, config, &name)?))
    }

    /// Connects and performs HELLO with protocol version 1.
    pub fn connect_hello(addr: impl ToSocketAddrs, name: &str) -> Result<Client, ClientError> {
        let mut c = Client::connect(addr)?;
        c.hello(name)?;
        Ok(c)
    }

    /// Connects with a connect timeout, sets the call timeout, performs HELLO and, when a token
    /// is given, AUTH.
    pub fn connect_with(addr: &str, opts: &ConnectOptions) -> Result<Client, ClientError> {
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

    /// Sends HELLO (protocol version 1) and keeps its result (see `hello_result`).
    pub fn hello(&mut self, client_name: &str) -> Result<Value, ClientError> {
        let r = self.call(
            "HELLO",
            json!({"protocol_version": PROTOCOL_VERSION, "client_name": client_name,
                   "client_version": env!("CARGO_PKG_VERSION")}),
        )?;
        self.hello = Some(r.clone());
        Ok(r)
    }

    /// The result of the HELLO this client performed, if any.
    pub fn hello_result(&self) -> Option<&Value> {
        self.hello.as_ref()
    }

    /// Sets the read and write timeout of the socket (`None`: wait forever).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.stream.socket().set_read_timeout(t)?;
        self.stream.socket().set_write_timeout(t)?;
        Ok(())
    }

    /// Sends one request and returns its `result`, or the server's error.
    pub fn call(&mut self, op: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.send(op, &params)?;
        let resp = self.recv_response()?;
        check_id(&resp, &id)?;
        into_result(resp)
    }

    /// Sends one request without waiting; returns its id. Use `recv_response` for the answer.
    /// A `Null` params value omits `params`.
    pub fn send(&mut self, op: &str, params: &Value) -> Result<String, ClientError> {
        let id = self.next_id.to_string();
        self.next_id += 1;
        let mut req = json!({"type": "request", "id": id, "op": op});
        if !params.is_null() {
            req["params"] = params.clone();
        }
        let payload = serde_json::to_vec(&req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.send_payload(&payload)?;
        Ok(id)
    }

    /// Sends a frame around arbitrary payload bytes.
    pub fn send_payload(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        encode_frame(payload, &mut out);
        self.send_raw(&out)
    }

    /// Writes raw bytes (for tests of malformed frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes)?;
        self.stream.flush()?;
        Ok(())
    }

    /// Reads the next response, setting aside any push that arrives first.
    pub fn recv_response(&mut self) -> Result<Value, ClientError> {
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
    pub fn recv_push(&mut self) -> Result<Value, ClientError> {
        if let Some(p) = self.pushes.pop_front() {
            return Ok(p);
        }
        self.read_message()
    }

    /// The next push, waiting at most `wait` (`None`: the call timeout). `Ok(None)` when none
    /// came in time. Responses read meanwhile are kept for `recv_response`.
    pub fn next_push(&mut self, wait: Option<Duration>) -> Result<Option<Value>, ClientError> {
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

    /// Reads one frame and parses its JSON payload.
    pub fn read_message(&mut self) -> Result<Value, ClientError> {
        let payload = self.read_frame()?;
        serde_json::from_slice(&payload)
            .map_err(|e| ClientError::Protocol(format!("bad JSON: {e}")))
    }

    /// Reads one frame's payload bytes. EOF gives an `UnexpectedEof` I/O error; a timeout keeps
    /// the bytes read so far for the next call.
    pub fn read_frame(&mut self) -> Result<Vec<u8>, ClientError> {
        loop {
            let buffered = &self.rbuf[self.rstart..];
            match decode_frame(buffered, CLIENT_FRAME_BYTES_MAX) {
                Ok(Some((range, consumed))) => {
                    let payload = buffered[range].to_vec();
                    self.rstart += consumed;
                    return Ok(payload);
                }
                Ok(None) => self.fill()?,
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            }
        }
    }

    /// Reads more bytes of the current frame into the buffer (at least one, or an error).
    /// Never reads past the frame's end, so whatever follows it stays in the socket, where
    /// `stream()` users (tests checking that the server closed) see it.
    fn fill(&mut self) -> Result<(), ClientError> {
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
            0 if len == 0 => Err(eof("connection closed by the server")),
            0 => Err(eof(
                "connection closed by the server in the middle of a frame",
            )),
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
    pub fn peer_addr(&self) -> Result<SocketAddr, ClientError> {
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

/// The host part of `host:port` (`[v6]:port` gives `v6`), as the TLS server name.
fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

fn eof(what: &str) -> ClientError {
    ClientError::Io(std::io::Error::new(ErrorKind::UnexpectedEof, what))
}

fn is_response(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("response")
}

fn check_id(resp: &Value, id: &str) -> Result<(), ClientError> {
    match resp.get("id").and_then(Value::as_str) {
        Some(got) if got == id => Ok(()),
        // A frame-level error (`id: null`) is the server refusing our bytes: surface its code.
        None if resp.get("status").and_then(Value::as_str) == Some("error") => {
            into_result(resp.clone()).map(|_| ())
        }
        _ => Err(ClientError::Protocol(format!(
            "response id {} for request {id}",
            resp["id"]
        ))),
    }
}

/// Turns a response envelope into its `result` or a `ClientError::Server`.
pub fn into_result(resp: Value) -> Result<Value, ClientError> {
    match resp.get("status").and_then(Value::as_str) {
        Some("ok") => Ok(resp.get("result").cloned().unwrap_or(Value::Null)),
        _ => {
            let e = resp.get("error").cloned().unwrap_or(Value::Null);
            Err(ClientError::Server {
                code: e["code"].as_str().unwrap_or("UNKNOWN").to_string(),
                message: e["message"].as_str().unwrap_or("").to_string(),
                details: e.get("details").cloned().unwrap_or(Value::Null),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn the_server_name_is_the_host_part() {
        assert_eq!(host_of("localhost:7401"), "localhost");
        assert_eq!(host_of("127.0.0.1:7401"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7401"), "::1");
        assert_eq!(host_of("db.example"), "db.example");
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

    #[test]
    fn server_errors_carry_code_message_and_details() {
        let r = into_result(json!({"type":"response","id":"1","status":"error",
            "error":{"code":"CONFLICT","message":"m","retryable":false,"details":{"x":1}}}));
        match r {
            Err(ClientError::Server {
                code,
                message,
                details,
            }) => {
                assert_eq!((code.as_str(), message.as_str()), ("CONFLICT", "m"));
                assert_eq!(details["x"], 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
