//! A blocking RCP1 client over `std::net::TcpStream`: connect, HELLO, typed requests, pipelined
//! sends, pushes kept apart from responses. Used by `smdb-cli`, `smdb-bench` and the tests; it
//! runs no async runtime, so it never fights glommio.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{json, Value};

use crate::protocol::frame::{decode_header, encode_frame, HEADER_LEN};

/// Largest response frame the client accepts (matches the server's default frame limit x4, so
/// large LIST/GET_HISTORY pages fit).
pub const CLIENT_FRAME_BYTES_MAX: u32 = 64 * 1024 * 1024;

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
}

pub struct Client {
    stream: TcpStream,
    next_id: u64,
    rbuf: Vec<u8>,
    /// Pushes (`type` other than `response`) received while waiting for a response.
    pushes: VecDeque<Value>,
}

impl Client {
    /// Connects (TCP_NODELAY on) without sending HELLO.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            next_id: 1,
            rbuf: Vec::with_capacity(64 * 1024),
            pushes: VecDeque::new(),
        })
    }

    /// Connects and performs HELLO with protocol version 1.
    pub fn connect_hello(addr: impl ToSocketAddrs, name: &str) -> Result<Client, ClientError> {
        let mut c = Client::connect(addr)?;
        c.call(
            "HELLO",
            json!({"protocol_version": 1, "client_name": name,
                   "client_version": env!("CARGO_PKG_VERSION")}),
        )?;
        Ok(c)
    }

    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(t)?;
        self.stream.set_write_timeout(t)?;
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
        Ok(())
    }

    /// Reads the next response, setting aside any push that arrives first.
    pub fn recv_response(&mut self) -> Result<Value, ClientError> {
        loop {
            let v = self.read_message()?;
            if v.get("type").and_then(Value::as_str) == Some("response") {
                return Ok(v);
            }
            self.pushes.push_back(v);
        }
    }

    /// The next push: one already received, or the next message read.
    pub fn recv_push(&mut self) -> Result<Value, ClientError> {
        if let Some(p) = self.pushes.pop_front() {
            return Ok(p);
        }
        self.read_message()
    }

    /// Reads one frame and parses its JSON payload.
    pub fn read_message(&mut self) -> Result<Value, ClientError> {
        let payload = self.read_frame()?;
        serde_json::from_slice(&payload)
            .map_err(|e| ClientError::Protocol(format!("bad JSON: {e}")))
    }

    /// Reads one frame's payload bytes. EOF gives an `UnexpectedEof` I/O error.
    pub fn read_frame(&mut self) -> Result<Vec<u8>, ClientError> {
        let mut head = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut head)?;
        let h = decode_header(&head, CLIENT_FRAME_BYTES_MAX)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.rbuf.resize(h.payload_len as usize, 0);
        self.stream.read_exact(&mut self.rbuf)?;
        if crc32c::crc32c(&self.rbuf) != h.checksum {
            return Err(ClientError::Protocol("response checksum mismatch".into()));
        }
        Ok(std::mem::take(&mut self.rbuf))
    }

    /// The underlying stream (for shutdown or raw tests).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

fn check_id(resp: &Value, id: &str) -> Result<(), ClientError> {
    match resp.get("id").and_then(Value::as_str) {
        Some(got) if got == id => Ok(()),
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
