//! The load engine: one OS thread drives many non-blocking connections with poll(2), keeping
//! `in_flight` requests outstanding on each (closed loop: a response lets the next request go).
//!
//! Why not a thread per connection: 16+ blocking threads on a 2-core machine spend their time
//! in context switches and steal the cores the server needs. One thread here writes every
//! ready request of a connection with one `write` and reads every ready response with one
//! `read`, so the syscall count per op falls as the load rises, like the server's own fronts.
//!
//! Latency is measured per request from the moment it is queued for sending (just before the
//! write) to the moment the read that brought its response returned. Being closed-loop, a
//! stalled server delays the next requests instead of piling them up (coordinated omission):
//! the percentiles describe the requests that were sent, at the offered load the server allowed.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConnection;
use serde_json::Value;

use smdb_client::{ClientTlsOptions, CLIENT_FRAME_BYTES_MAX};
use smdb_protocol::frame::decode_frame;

use super::cluster::Routes;
use super::setup;
use super::stats::RunCounts;
use super::workload::{OpKind, Plan, RequestWriter};

/// Initial read buffer per connection; grows (doubling) only for a frame that does not fit.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Reads per connection per poll round before moving on to the others (fairness).
const READS_PER_ROUND: usize = 4;
/// Longest poll(2) sleep: bounds how late a thread notices the end of the window.
const POLL_SLICE_MS: i32 = 20;

/// When the phases of a run begin and end; the same for every thread.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Warm-up ends and counting starts.
    pub window_start: Instant,
    /// No request is sent after this; counting stops.
    pub window_end: Instant,
    /// Requests still unanswered then are counted as `DRAIN_TIMEOUT` and abandoned.
    pub drain_until: Instant,
}

/// What one load thread needs.
#[derive(Debug, Clone)]
pub struct ThreadSpec {
    pub addr: String,
    pub token: Option<String>,
    pub tls: Option<ClientTlsOptions>,
    /// Global numbers of this thread's connections (they seed ids and randomness).
    pub conns: Vec<u64>,
    pub in_flight: usize,
    pub plan: Arc<Plan>,
    pub seed: u64,
    /// CPU to pin this thread to.
    pub pin: Option<usize>,
    /// `--http`: the HTTP API's address (connections go there, requests are HTTP).
    pub http: Option<String>,
    /// `--cluster` against a cluster: each connection is one socket per group primary, and
    /// each request goes to its slot's (`cluster`).
    pub routes: Option<Arc<Routes>>,
}

/// Body of a load thread: pin, connect every connection (HELLO, AUTH), report ready, wait for
/// the schedule, drive the load, return the counts. A connect failure is reported on `ready`
/// and ends the thread.
pub fn run_thread(
    spec: ThreadSpec,
    ready: mpsc::Sender<Result<(), String>>,
    go: mpsc::Receiver<Schedule>,
) -> RunCounts {
    if let Some(cpu) = spec.pin {
        if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
            let _ = ready.send(Err(format!("cannot pin a load thread to CPU {cpu}")));
            return RunCounts::default();
        }
    }
    let mut conns = Vec::with_capacity(spec.conns.len());
    // `--cluster`: the sockets of connection i are conns[i * width..(i + 1) * width], one per
    // primary in `routes.addrs` order; each connection's requests come from its own writer.
    let mut writers = Vec::new();
    for n in &spec.conns {
        let opened = match &spec.routes {
            None => Conn::open(&spec, *n, &spec.addr).map(|c| vec![c]),
            Some(routes) => {
                writers.push(RequestWriter::new(spec.seed, *n));
                (routes.addrs.iter())
                    .map(|addr| Conn::open(&spec, *n, addr))
                    .collect()
            }
        };
        match opened {
            Ok(c) => conns.extend(c),
            Err(e) => {
                let _ = ready.send(Err(e));
                return RunCounts::default();
            }
        }
    }
    let _ = ready.send(Ok(()));
    let Ok(schedule) = go.recv() else {
        return RunCounts::default();
    };
    let mut counts = RunCounts::default();
    drive(&mut conns, &mut writers, &spec, &schedule, &mut counts);
    counts
}

/// One request waiting for its response.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    sent: Instant,
    op: OpKind,
}

struct Conn {
    stream: TcpStream,
    /// The TLS session of a `--tls` run; `None` keeps the plain path as it was.
    tls: Option<Box<TlsState>>,
    writer: RequestWriter,
    out: Vec<u8>,
    out_pos: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    pending: VecDeque<Pending>,
    next_id: u64,
    open: bool,
    /// `--http`: the Host of every request (and HTTP responses are read).
    http_host: Option<String>,
}

/// Where a response lands in the counts.
struct Clock<'a> {
    schedule: &'a Schedule,
    now: Instant,
}

impl Clock<'_> {
    fn in_window(&self) -> bool {
        self.now >= self.schedule.window_start && self.now < self.schedule.window_end
    }
}

impl Conn {
    /// Connection number `n` to `addr` (`spec.addr`, or a primary's with `--cluster`).
    fn open(spec: &ThreadSpec, n: u64, addr: &str) -> Result<Conn, String> {
        if let Some(addr) = &spec.http {
            return Conn::open_http(spec, n, addr);
        }
        let tls = spec.tls.as_ref();
        let client = setup::connect(addr, spec.token.as_deref(), tls, "smdb-bench")?;
        // The client reads whole frames only, so nothing is buffered in it: the socket (and
        // the TLS session) can be taken over as they are.
        let (stream, session) = client.into_transport().into_parts();
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("non-blocking socket: {e}"))?;
        Ok(Conn {
            stream,
            tls: session.map(|session| {
                Box::new(TlsState {
                    session: *session,
                    raw: vec![0; READ_BUFFER_BYTES],
                })
            }),
            writer: RequestWriter::new(spec.seed, n),
            out: Vec::with_capacity(16 * 1024),
            out_pos: 0,
            rbuf: vec![0; READ_BUFFER_BYTES],
            rstart: 0,
            rend: 0,
            pending: VecDeque::with_capacity(spec.in_flight),
            // Ids start past HELLO/AUTH's (the client numbered those from 1).
            next_id: 1_000,
            open: true,
            http_host: None,
        })
    }

    /// `--http`: a plain keep-alive connection to the HTTP API (no HELLO; no token).
    fn open_http(spec: &ThreadSpec, n: u64, addr: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("non-blocking socket: {e}"))?;
        Ok(Conn {
            stream,
            tls: None,
            writer: RequestWriter::new(spec.seed, n),
            out: Vec::with_capacity(16 * 1024),
            out_pos: 0,
            rbuf: vec![0; READ_BUFFER_BYTES],
            rstart: 0,
            rend: 0,
            pending: VecDeque::with_capacity(spec.in_flight),
            next_id: 1_000,
            open: true,
            http_host: Some(addr.to_string()),
        })
    }

    /// Queues requests until `in_flight` are outstanding.
    fn top_up(&mut self, spec: &ThreadSpec, now: Instant, counts: &mut RunCounts) {
        while self.pending.len() < spec.in_flight {
            let id = self.next_id;
            self.next_id += 1;
            let op = match &self.http_host {
                None => self.writer.write(&spec.plan, id, &mut self.out),
                Some(host) => self.writer.write_http(&spec.plan, host, &mut self.out),
            };
            self.pending.push_back(Pending { id, sent: now, op });
            counts.sent += 1;
        }
    }

    /// `--cluster`: queues requests on the sockets of one connection (`group`, one per
    /// primary) until `in_flight` are outstanding over all of them, each on its slot's
    /// primary. A connection that lost a socket sends no more (its requests there were
    /// counted as errors).
    fn top_up_routed(
        group: &mut [Conn],
        writer: &mut RequestWriter,
        spec: &ThreadSpec,
        routes: &Routes,
        key: &mut Vec<u8>,
        counts: &mut RunCounts,
    ) {
        if group.iter().any(|c| !c.open) {
            return;
        }
        let mut outstanding: usize = group.iter().map(|c| c.pending.len()).sum();
        let now = Instant::now();
        while outstanding < spec.in_flight {
            let pick = writer.pick(&spec.plan);
            writer.route_key(&spec.plan, pick, key);
            let c = &mut group[routes.index_of_key(key)];
            let id = c.next_id;
            c.next_id += 1;
            let op = writer.write_pick(&spec.plan, id, pick, &mut c.out);
            c.pending.push_back(Pending { id, sent: now, op });
            counts.sent += 1;
            outstanding += 1;
        }
    }

    /// Writes as much queued output as the socket takes.
    fn flush(&mut self) -> std::io::Result<()> {
        if self.tls.is_some() {
            return self.flush_tls();
        }
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        Ok(())
    }

    fn wants_write(&self) -> bool {
        self.out_pos < self.out.len() || self.tls.as_ref().is_some_and(|t| t.session.wants_write())
    }

    /// Reads what is available and handles every complete response.
    fn read(&mut self, schedule: &Schedule, counts: &mut RunCounts) {
        let got = match self.tls.is_some() {
            false => self.read_plain(),
            true => self.read_tls(),
        };
        let clock = Clock {
            schedule,
            now: Instant::now(),
        };
        let eof = match got {
            Ok(eof) => eof,
            Err(e) => {
                self.fail("IO_ERROR", &clock, counts, Some(&e.to_string()));
                return;
            }
        };
        self.handle_frames(&clock, counts);
        if eof && self.open {
            self.fail("CONNECTION_CLOSED", &clock, counts, None);
        }
    }

    /// Reads into the frame buffer until the socket is drained (or the round's quota);
    /// returns true at end of stream.
    fn read_plain(&mut self) -> std::io::Result<bool> {
        for _ in 0..READS_PER_ROUND {
            if self.rend == self.rbuf.len() {
                self.make_room();
            }
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    self.rend += n;
                    if self.rend < self.rbuf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Compacts the read buffer, doubling it when one frame needs more room.
    fn make_room(&mut self) {
        if self.rstart > 0 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        } else {
            let len = self.rbuf.len() * 2;
            self.rbuf.resize(len, 0);
        }
    }

    fn handle_frames(&mut self, clock: &Clock<'_>, counts: &mut RunCounts) {
        if self.http_host.is_some() {
            return self.handle_http(clock, counts);
        }
        while self.open && self.rstart < self.rend {
            let buf = &self.rbuf[self.rstart..self.rend];
            let (range, used) = match decode_frame(buf, CLIENT_FRAME_BYTES_MAX) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.fail("PROTOCOL_ERROR", clock, counts, Some(&e.to_string()));
                    return;
                }
            };
            let reply = classify(&buf[range]);
            self.rstart += used;
            self.settle(reply, clock, counts);
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
    }

    /// `--http`: every complete response, matched in order (HTTP has no request id).
    fn handle_http(&mut self, clock: &Clock<'_>, counts: &mut RunCounts) {
        while self.open && self.rstart < self.rend {
            let buf = &self.rbuf[self.rstart..self.rend];
            let Some((outcome, used)) = super::http::read_response(buf) else {
                break;
            };
            self.rstart += used;
            let id = self.pending.front().map_or(0, |p| p.id);
            let reply = match outcome {
                Ok(None) => Reply::Ok { id },
                Ok(Some(code)) => Reply::Error { id: Some(id), code },
                Err(why) => Reply::Bad(why),
            };
            self.settle(reply, clock, counts);
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
    }

    /// Matches a reply with the oldest pending request and counts it.
    fn settle(&mut self, reply: Reply, clock: &Clock<'_>, counts: &mut RunCounts) {
        let (id, code) = match reply {
            Reply::Push => return,
            Reply::Ok { id } => (Some(id), None),
            Reply::Error { id, code } => (id, Some(code)),
            Reply::Bad(why) => {
                self.fail("PROTOCOL_ERROR", clock, counts, Some(&why));
                return;
            }
        };
        let Some(p) = self.pending.pop_front() else {
            self.fail(
                "PROTOCOL_ERROR",
                clock,
                counts,
                Some("response without a request"),
            );
            return;
        };
        if id.is_some_and(|id| id != p.id) {
            let why = format!("response id {id:?} for request {}", p.id);
            self.pending.push_front(p);
            self.fail("PROTOCOL_ERROR", clock, counts, Some(&why));
            return;
        }
        let in_window = clock.in_window();
        let stats = &mut counts.per_op[p.op.index()];
        match code {
            None if in_window => stats.record_ok(clock.now.saturating_duration_since(p.sent)),
            None => {}
            Some(code) if in_window => {
                stats.errors += 1;
                *counts.errors.entry(code).or_default() += 1;
            }
            Some(_) => counts.errors_outside_window += 1,
        }
        if id.is_none() {
            // An error without an id is a frame-level error: the server closes the connection.
            self.fail("CONNECTION_CLOSED", clock, counts, None);
        }
    }

    /// Closes the connection, counting every pending request as an error with `code`.
    fn fail(&mut self, code: &str, clock: &Clock<'_>, counts: &mut RunCounts, why: Option<&str>) {
        if let Some(why) = why {
            eprintln!("smdb-bench: connection closed: {code}: {why}");
        }
        self.open = false;
        let lost = self.pending.len() as u64;
        for p in self.pending.drain(..) {
            if clock.in_window() {
                counts.per_op[p.op.index()].errors += 1;
            }
        }
        if lost > 0 {
            if clock.in_window() {
                *counts.errors.entry(code.to_string()).or_default() += lost;
            } else {
                counts.errors_outside_window += lost;
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// A connection's TLS session, driven by hand on the non-blocking socket: socket bytes are
/// read with one `read` per round into `raw` (as on the plain path) and fed to rustls; the
/// plaintext lands in the connection's frame buffer.
struct TlsState {
    session: ClientConnection,
    raw: Vec<u8>,
}

impl Conn {
    /// Hands queued requests to the TLS session, then writes its records as far as the socket
    /// takes (what is left goes on the next POLLOUT).
    fn flush_tls(&mut self) -> std::io::Result<()> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(());
        };
        while self.out_pos < self.out.len() {
            match tls.session.writer().write(&self.out[self.out_pos..])? {
                0 => break, // the session's send buffer is full: records go out first
                n => self.out_pos += n,
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        while tls.session.wants_write() {
            match tls.session.write_tls(&mut self.stream) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The TLS twin of `read_plain`: socket bytes through the session into the frame buffer.
    fn read_tls(&mut self) -> std::io::Result<bool> {
        for _ in 0..READS_PER_ROUND {
            let Some(tls) = self.tls.as_mut() else {
                return Ok(false);
            };
            let n = match self.stream.read(&mut tls.raw) {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let full = n == tls.raw.len();
            if self.decrypt(n)? {
                return Ok(true);
            }
            if !full {
                break;
            }
        }
        Ok(false)
    }

    /// Feeds `raw[..n]` to the session and moves the plaintext out; true on close_notify.
    fn decrypt(&mut self, n: usize) -> std::io::Result<bool> {
        let mut at = 0;
        while at < n {
            let Some(tls) = self.tls.as_mut() else {
                return Ok(false);
            };
            let mut data = &tls.raw[at..n];
            let took = tls.session.read_tls(&mut data)?;
            if took == 0 {
                return Err(std::io::Error::other("TLS session takes no more input"));
            }
            at += took;
            tls.session
                .process_new_packets()
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
            if self.take_plaintext()? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves every decrypted byte into the frame buffer; true when the server sent close_notify.
    fn take_plaintext(&mut self) -> std::io::Result<bool> {
        loop {
            if self.rend == self.rbuf.len() {
                self.make_room();
            }
            let Some(tls) = self.tls.as_mut() else {
                return Ok(false);
            };
            match tls.session.reader().read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Ok(true),
                Ok(n) => self.rend += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

/// A response payload, read as cheaply as possible.
#[derive(Debug, PartialEq)]
enum Reply {
    Ok {
        id: u64,
    },
    /// `id` is None for `"id": null` (a frame-level error).
    Error {
        id: Option<u64>,
        code: String,
    },
    /// Not a response (a subscription push): not matched with a request.
    Push,
    Bad(String),
}

/// The server writes responses as `{"type":"response","id":ID,"status":"ok",...` (see
/// `protocol::message::encode_ok`); that prefix is recognised without parsing the JSON. Anything
/// else (errors, pushes, another server's spelling) goes through serde_json.
fn classify(payload: &[u8]) -> Reply {
    const HEAD: &[u8] = br#"{"type":"response","id":"#;
    const OK: &[u8] = br#","status":"ok""#;
    if let Some(rest) = payload.strip_prefix(HEAD) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && digits <= 19 && rest[digits..].starts_with(OK) {
            let id = rest[..digits]
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            return Reply::Ok { id };
        }
    }
    classify_slow(payload)
}

fn classify_slow(payload: &[u8]) -> Reply {
    let v: Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => return Reply::Bad(format!("response is not JSON: {e}")),
    };
    if v.get("type").and_then(Value::as_str) != Some("response") {
        return Reply::Push;
    }
    let id = match v.get("id") {
        Some(Value::Null) | None => None,
        Some(x) => match x
            .as_u64()
            .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
        {
            Some(id) => Some(id),
            None => return Reply::Bad(format!("response id {x} is not ours")),
        },
    };
    match v.get("status").and_then(Value::as_str) {
        Some("ok") => match id {
            Some(id) => Reply::Ok { id },
            None => Reply::Bad("ok response without an id".into()),
        },
        _ => {
            let code = v
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("UNKNOWN_ERROR");
            Reply::Error {
                id,
                code: code.to_string(),
            }
        }
    }
}

/// The poll loop of one thread: top up, flush, poll, read; after the window, only drain.
/// `writers` are the `--cluster` connections' (one per group of sockets; empty otherwise).
fn drive(
    conns: &mut [Conn],
    writers: &mut [RequestWriter],
    spec: &ThreadSpec,
    schedule: &Schedule,
    counts: &mut RunCounts,
) {
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(conns.len());
    let mut which: Vec<usize> = Vec::with_capacity(conns.len());
    let mut key = Vec::with_capacity(64);
    loop {
        let now = Instant::now();
        let sending = now < schedule.window_end;
        let clock = Clock { schedule, now };
        if !sending && conns.iter().all(|c| !c.open || c.pending.is_empty()) {
            break;
        }
        if now >= schedule.drain_until {
            for c in conns.iter_mut().filter(|c| c.open) {
                c.fail("DRAIN_TIMEOUT", &clock, counts, None);
            }
            break;
        }
        if let Some(routes) = &spec.routes {
            let width = routes.addrs.len();
            for (group, writer) in conns.chunks_mut(width).zip(writers.iter_mut()) {
                if sending {
                    Conn::top_up_routed(group, writer, spec, routes, &mut key, counts);
                }
                for c in group.iter_mut().filter(|c| c.open) {
                    if let Err(e) = c.flush() {
                        c.fail("IO_ERROR", &clock, counts, Some(&e.to_string()));
                    }
                }
            }
        }
        for c in conns.iter_mut().filter(|c| c.open && spec.routes.is_none()) {
            if sending {
                // A fresh reading per connection: the writes of the connections before this
                // one are not charged to its requests.
                c.top_up(spec, Instant::now(), counts);
            }
            if let Err(e) = c.flush() {
                c.fail("IO_ERROR", &clock, counts, Some(&e.to_string()));
            }
        }
        fds.clear();
        which.clear();
        for (i, c) in conns.iter().enumerate() {
            if c.open && (!c.pending.is_empty() || c.wants_write()) {
                let mut events = libc::POLLIN;
                if c.wants_write() {
                    events |= libc::POLLOUT;
                }
                fds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events,
                    revents: 0,
                });
                which.push(i);
            }
        }
        if fds.is_empty() {
            if conns.iter().all(|c| !c.open) {
                break;
            }
            continue;
        }
        let until = if sending {
            schedule.window_end
        } else {
            schedule.drain_until
        };
        let timeout = poll_timeout_ms(until.saturating_duration_since(now));
        // SAFETY: `fds` is a valid, initialised slice of pollfd for the duration of the call,
        // and its length fits nfds_t.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            let clock = Clock {
                schedule,
                now: Instant::now(),
            };
            for c in conns.iter_mut().filter(|c| c.open) {
                c.fail("IO_ERROR", &clock, counts, Some(&format!("poll: {e}")));
            }
            break;
        }
        for (pfd, &i) in fds.iter().zip(which.iter()) {
            if pfd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
                conns[i].read(schedule, counts);
            }
        }
    }
}

fn poll_timeout_ms(left: Duration) -> i32 {
    let ms = left.as_micros().div_ceil(1000);
    i32::try_from(ms)
        .unwrap_or(i32::MAX)
        .clamp(0, POLL_SLICE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smdb_protocol::envelope::encode_ok;

    #[test]
    fn ok_responses_take_the_fast_path() {
        let mut out = Vec::new();
        encode_ok(&mut out, "12345", br#"{"pong":true}"#);
        assert_eq!(classify(&out[16..]), Reply::Ok { id: 12345 });
    }

    #[test]
    fn errors_and_pushes_are_parsed() {
        let e =
            br#"{"type":"response","id":7,"status":"error","error":{"code":"INSTANCE_NOT_FOUND"}}"#;
        assert_eq!(
            classify(e),
            Reply::Error {
                id: Some(7),
                code: "INSTANCE_NOT_FOUND".into()
            }
        );
        let frame_err = br#"{"type":"response","id":null,"status":"error","error":{"code":"X"}}"#;
        assert_eq!(
            classify(frame_err),
            Reply::Error {
                id: None,
                code: "X".into()
            }
        );
        assert_eq!(classify(br#"{"type":"event","x":1}"#), Reply::Push);
        assert!(matches!(classify(b"nope"), Reply::Bad(_)));
        // Another spelling of an ok response still counts.
        let spaced = br#"{"status": "ok", "id": "9", "type": "response"}"#;
        assert_eq!(classify(spaced), Reply::Ok { id: 9 });
    }

    #[test]
    fn poll_timeout_is_bounded() {
        assert_eq!(poll_timeout_ms(Duration::ZERO), 0);
        assert_eq!(poll_timeout_ms(Duration::from_micros(1)), 1);
        assert_eq!(poll_timeout_ms(Duration::from_secs(9)), POLL_SLICE_MS);
    }
}
