//! A pipelined writer for the failover tests (tests/ha.rs): one raw RCP1 connection
//! (docs/protocol.md, "Frames") that keeps up to `window` `APPLY_EVENT touch` requests in
//! flight. A writer thread sends as fast as the window allows; a reader thread matches each
//! response to its request by id and records it `ok` (with the time it was read) or its error
//! code. Requests still unanswered when the connection closes (or at `finish`) got no answer.
//! Request `w<i>` touches `ids[i % ids.len()]` with payload `{"i": i}`, so every write is
//! identifiable in the histories (the shape `writes::assert_acked_present_once` checks).
//!
//! `write_windowed` is the simpler in-order writer on the project's client (tests/durability.rs,
//! tests/batch.rs): any requests, up to a window in flight, each response checked `ok`.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use smdb_client::frame::{encode_frame, HEADER_LEN};
use smdb_client::Client;

#[derive(Default)]
struct State {
    sent: u64,
    answered: u64,
    /// Sent and not answered: request number → instance id.
    pending: BTreeMap<u64, String>,
    ok: Vec<(String, u64, Instant)>,
    errors: Vec<(String, u64, String)>,
    closed_at: Option<Instant>,
}

struct Shared {
    stop: AtomicBool,
    closed: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a pipeline saw: every `ok` (id, request number, when read), every error (id, number,
/// code) and the requests that never got an answer.
#[derive(Debug)]
pub struct Outcome {
    pub sent: u64,
    pub ok: Vec<(String, u64, Instant)>,
    pub errors: Vec<(String, u64, String)>,
    pub unanswered: Vec<(String, u64)>,
    /// When the server closed the connection (a failed write counts too), if it did.
    pub closed_at: Option<Instant>,
}

pub struct Pipeline {
    shared: Arc<Shared>,
    stream: TcpStream,
    writer: Option<JoinHandle<()>>,
    reader: Option<JoinHandle<()>>,
}

fn frame(id: &str, op: &str, params: Value) -> Vec<u8> {
    let payload = json!({"type": "request", "id": id, "op": op, "params": params}).to_string();
    let mut out = Vec::new();
    encode_frame(payload.as_bytes(), &mut out);
    out
}

/// Reads one frame's JSON payload (the CRC is the server's business here: loopback).
fn read_frame(r: &mut impl Read) -> std::io::Result<Value> {
    let mut head = [0u8; HEADER_LEN];
    r.read_exact(&mut head)?;
    let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    serde_json::from_slice(&payload).map_err(std::io::Error::other)
}

impl Pipeline {
    /// Connects to `addr`, does HELLO and starts writing with up to `window` requests in flight.
    pub fn start(addr: SocketAddr, ids: Vec<String>, window: u64) -> Pipeline {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let hello = json!({"protocol_version": 1, "client_name": "pipeline"});
        stream.write_all(&frame("hello", "HELLO", hello)).unwrap();
        let r = read_frame(&mut stream).unwrap();
        assert_eq!(r["status"], "ok", "HELLO: {r}");
        // The reader blocks until a response or the close; `finish` shuts the socket down.
        stream.set_read_timeout(None).unwrap();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let (sh, mut out) = (shared.clone(), stream.try_clone().unwrap());
        let writer = std::thread::spawn(move || loop {
            let mut st = sh.lock();
            while st.sent - st.answered >= window && !sh.stop.load(Ordering::SeqCst) {
                st = sh
                    .cv
                    .wait_timeout(st, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if sh.stop.load(Ordering::SeqCst) || sh.closed.load(Ordering::SeqCst) {
                return;
            }
            // Fill the window in one write; registered before sending, so the reader always
            // finds the request its response answers.
            let mut buf = Vec::new();
            for _ in st.sent - st.answered..window {
                let i = st.sent;
                let id = ids[i as usize % ids.len()].clone();
                let params = json!({"instance_id": id, "event": "touch", "payload": {"i": i}});
                buf.extend(frame(&format!("w{i}"), "APPLY_EVENT", params));
                st.pending.insert(i, id);
                st.sent += 1;
            }
            drop(st);
            if out.write_all(&buf).is_err() {
                sh.lock().closed_at.get_or_insert(Instant::now());
                sh.closed.store(true, Ordering::SeqCst);
                sh.cv.notify_all();
                return;
            }
        });
        let (sh, inp) = (shared.clone(), stream.try_clone().unwrap());
        let reader = std::thread::spawn(move || {
            let mut inp = std::io::BufReader::with_capacity(1 << 16, inp);
            while let Ok(r) = read_frame(&mut inp) {
                let at = Instant::now();
                let Some(i) = r["id"]
                    .as_str()
                    .and_then(|s| s.strip_prefix('w'))
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue; // an error frame with `"id": null`: the close follows
                };
                let mut st = sh.lock();
                let Some(id) = st.pending.remove(&i) else {
                    panic!("a response to w{i}, which is not pending: {r}");
                };
                st.answered += 1;
                if r["status"] == "ok" {
                    st.ok.push((id, i, at));
                } else {
                    let code = r["error"]["code"].as_str().unwrap_or("?").to_string();
                    st.errors.push((id, i, code));
                }
                drop(st);
                sh.cv.notify_all();
            }
            if !sh.stop.load(Ordering::SeqCst) {
                sh.lock().closed_at.get_or_insert(Instant::now());
            }
            sh.closed.store(true, Ordering::SeqCst);
            sh.cv.notify_all();
        });
        Pipeline {
            shared,
            stream,
            writer: Some(writer),
            reader: Some(reader),
        }
    }

    /// Requests sent and not answered yet.
    pub fn in_flight(&self) -> u64 {
        let st = self.shared.lock();
        st.sent - st.answered
    }

    pub fn acked(&self) -> usize {
        self.shared.lock().ok.len()
    }

    /// The server closed the connection (or a write to it failed).
    pub fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Waits (at most `limit`) until `f(acked, in_flight)` holds; false if it never did.
    pub fn wait_for(&self, limit: Duration, f: impl Fn(usize, u64) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut st = self.shared.lock();
        loop {
            if f(st.ok.len(), st.sent - st.answered) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.closed() {
                return false;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stops sending, waits up to `drain` for answers to what is in flight (or the close), then
    /// closes the connection and returns what was seen.
    pub fn finish(mut self, drain: Duration) -> Outcome {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        if let Some(w) = self.writer.take() {
            w.join().unwrap();
        }
        self.wait_for(drain, |_, in_flight| in_flight == 0);
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let mut st = self.shared.lock();
        Outcome {
            sent: st.sent,
            ok: std::mem::take(&mut st.ok),
            errors: std::mem::take(&mut st.errors),
            closed_at: st.closed_at,
            unanswered: std::mem::take(&mut st.pending)
                .into_iter()
                .map(|(i, id)| (id, i))
                .collect(),
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Keeps `window` requests in flight on one connection to `addr`, request `n` (numbered from
/// `start + 1`) being `request(n)` (an op and its params); each response, read in order, must
/// be `ok`, and `acked(n, response)` sees it. Returns at the first I/O error (the server was
/// killed) or, between responses, once `stop` is set.
pub fn write_windowed(
    addr: SocketAddr,
    name: &str,
    window: usize,
    start: u64,
    stop: &AtomicBool,
    mut request: impl FnMut(u64) -> (&'static str, Value),
    mut acked: impl FnMut(u64, &Value),
) {
    let Ok(mut c) = Client::connect_hello(addr, name) else {
        return;
    };
    let mut next = start + 1;
    let mut inflight = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        while inflight.len() < window {
            let (op, params) = request(next);
            if c.send(op, &params).is_err() {
                return;
            }
            inflight.push_back(next);
            next += 1;
        }
        let Ok(resp) = c.recv_response() else { return };
        let n = inflight.pop_front().unwrap_or(0);
        assert_eq!(resp["status"], "ok", "{resp}");
        acked(n, &resp);
    }
}
