//! The nemesis's workload: clients appending unique tokens to instances of the machine `nem`
//! (APPLY_EVENT `add`, payload `{"t": token}`, idempotency key `k<token>`) and reading them back
//! (GET_HISTORY), each with one request in flight, recording every request as an `Op` of
//! `history.rs`; and a monitor of `/health/primary` on every member, for the time without a
//! primary. Bounded: clients stop when told, or by their own deadline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::history::{Kind, Op, Outcome};
use super::net;
use super::wire::{connect, http_get, tokens_of};
use crate::common::{Client, ClientError};

/// Appends per instance at most (GET_HISTORY keeps the newest 1,000 events per instance).
const PER_INSTANCE_MAX: u64 = 900;
/// How long a client waits for an answer before it counts the request indeterminate.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(2500);
/// Answers that say the request did not happen (the protocol's table of failed requests).
const DEFINITE: &[&str] = &[
    "READ_ONLY_MODE",
    "BAD_REQUEST",
    "INSTANCE_NOT_FOUND",
    "INVALID_TRANSITION",
    "RATE_LIMITED",
    "SHUTTING_DOWN",
    "CONNECTION_LIMIT",
    "STORAGE_FULL",
    "STALE_EPOCH",
    "FORBIDDEN",
];

/// splitmix64: a small, seedable PRNG (no new crates).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the clients share: the run's clock, the ops, token and per-instance counters.
pub struct Shared {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    next_token: AtomicU64,
    instances: Vec<String>,
    appends: Vec<AtomicU64>,
    /// `READ_ONLY_MODE` answers naming the answering member itself as primary (defect 3).
    pub self_named: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl Shared {
    pub fn new(start: Instant, instances: Vec<String>, first_token: u64) -> Arc<Shared> {
        Arc::new(Shared {
            start,
            ops: Mutex::new(Vec::new()),
            next_token: AtomicU64::new(first_token),
            appends: instances.iter().map(|_| AtomicU64::new(0)).collect(),
            instances,
            self_named: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn record(&self, op: Op) {
        self.ops.lock().unwrap().push(op);
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    pub fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }
}

/// A member as the clients see it: node id and client address.
pub type Target = (String, SocketAddr);

/// An indeterminate append to send again later, with the same token and key.
struct Pending {
    token: u64,
    instance: String,
    sends_left: u32,
    after: Instant,
}

/// One client: one request in flight, following redirects, moving on when a member fails.
pub struct Worker {
    pub process: u32,
    rng: Rng,
    members: Vec<Target>,
    target: usize,
    conn: Option<Client>,
    pending: Vec<Pending>,
    shared: Arc<Shared>,
}

impl Worker {
    pub fn new(process: u32, seed: u64, members: Vec<Target>, shared: Arc<Shared>) -> Worker {
        Worker {
            process,
            rng: Rng(seed ^ (u64::from(process) << 32)),
            target: process as usize % members.len(),
            members,
            conn: None,
            pending: Vec::new(),
            shared,
        }
    }

    /// Requests until told to stop (then only the resends still owed, for at most `drain`),
    /// or until `limit` passes.
    fn run(mut self, limit: Duration, drain: Duration) {
        let deadline = Instant::now() + limit;
        let mut drain_end = None;
        while Instant::now() < deadline {
            if self.shared.stop.load(Ordering::Relaxed) {
                let end = *drain_end.get_or_insert_with(|| Instant::now() + drain);
                if self.pending.is_empty() || Instant::now() > end {
                    return;
                }
                if !self.resend() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
            let roll = self.rng.below(100);
            let done = match roll {
                0..=29 => self.resend(),
                30..=39 => self.read(),
                _ => false,
            };
            if !done {
                self.append_new();
            }
            std::thread::sleep(Duration::from_millis(10 + self.rng.below(10)));
        }
    }

    fn append_new(&mut self) {
        let n = self.shared.instances.len() as u64;
        let start = self.rng.below(n) as usize;
        let Some(k) = (0..n as usize)
            .map(|d| (start + d) % n as usize)
            .find(|&k| self.shared.appends[k].fetch_add(1, Ordering::Relaxed) < PER_INSTANCE_MAX)
        else {
            return;
        };
        let (instance, token) = (self.shared.instances[k].clone(), self.shared.token());
        self.append(token, instance, 3);
    }

    /// Sends one owed resend whose time has come; false when none is due.
    fn resend(&mut self) -> bool {
        let now = Instant::now();
        let Some(i) = self.pending.iter().position(|p| p.after <= now) else {
            return false;
        };
        let p = self.pending.swap_remove(i);
        self.append(p.token, p.instance, p.sends_left);
        true
    }

    /// APPLY_EVENT `add` with `token` (key `k<token>`); an indeterminate answer is owed a
    /// resend while `sends_left` allows. The outcome, None when nothing could be sent.
    pub fn append(&mut self, token: u64, instance: String, sends_left: u32) -> Option<Outcome> {
        let params = json!({"instance_id": instance, "event": "add", "payload": {"t": token},
            "idempotency_key": format!("k{token}")});
        let Some(outcome) = self.request("APPLY_EVENT", params, &instance, Kind::Append { token })
        else {
            // Never sent (no connection): still owed, as it was.
            let after = Instant::now();
            self.pending.push(Pending {
                token,
                instance,
                sends_left,
                after,
            });
            return None;
        };
        // A definite refusal of a resend says nothing of an earlier send: resend again.
        let owed = outcome == Outcome::Info || (outcome == Outcome::Fail && sends_left < 3);
        if owed && sends_left > 1 {
            let after = Instant::now() + Duration::from_millis(300 + self.rng.below(1500));
            self.pending.push(Pending {
                token,
                instance,
                sends_left: sends_left - 1,
                after,
            });
        }
        Some(outcome)
    }

    /// Sends the next requests to member `i`.
    pub fn aim(&mut self, i: usize) {
        self.target = i;
        self.conn = None;
    }

    /// Forgets the resends owed (a scripted client sends its own).
    pub fn forget_pending(&mut self) {
        self.pending.clear();
    }

    fn read(&mut self) -> bool {
        let n = self.shared.instances.len() as u64;
        let instance = self.shared.instances[self.rng.below(n) as usize].clone();
        let params = json!({"id": instance, "from": 1, "limit": 1000});
        self.request(
            "GET_HISTORY",
            params,
            &instance,
            Kind::Read { tokens: vec![] },
        );
        true
    }

    /// Sends one request to the current target and records it; None when no connection could
    /// be made (nothing sent, nothing recorded).
    fn request(&mut self, op: &str, params: Value, instance: &str, kind: Kind) -> Option<Outcome> {
        self.connection()?;
        let mut c = self.conn.take()?;
        let member = self.members[self.target].0.clone();
        let invoke_ns = self.shared.now_ns();
        let r = c.call(op, params);
        let complete_ns = self.shared.now_ns();
        self.conn = Some(c);
        let mut rec = Op {
            process: self.process,
            member,
            instance: instance.to_string(),
            kind,
            invoke_ns,
            complete_ns,
            outcome: Outcome::Ok,
            error: None,
            shard: None,
            wal_offset: None,
        };
        let out = match r {
            Ok(v) => {
                match &mut rec.kind {
                    Kind::Append { .. } => {
                        rec.shard = Some(0);
                        rec.wal_offset = v["wal_offset"].as_u64();
                    }
                    Kind::Read { tokens } => *tokens = tokens_of(&v),
                }
                Outcome::Ok
            }
            Err(e) => {
                let (outcome, code) = classify(&e);
                rec.outcome = outcome;
                rec.error = Some(code);
                self.after_error(&e);
                outcome
            }
        };
        self.shared.record(rec);
        Some(out)
    }

    /// The connection to the current target, made when needed; on failure the next member
    /// becomes the target.
    fn connection(&mut self) -> Option<()> {
        if self.conn.as_mut().is_some_and(|c| !c.is_alive()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            match connect(self.members[self.target].1) {
                Ok(c) => {
                    let _ = c.set_timeout(Some(CLIENT_TIMEOUT));
                    self.conn = Some(c);
                }
                Err(_) => {
                    self.target = (self.target + 1) % self.members.len();
                    std::thread::sleep(Duration::from_millis(50));
                    return None;
                }
            }
        }
        Some(())
    }

    /// Where the next request goes after `e`.
    fn after_error(&mut self, e: &ClientError) {
        let me = self.members[self.target].clone();
        match e.code() {
            Some("READ_ONLY_MODE") => {
                let named = e.details()["primary"].as_str().unwrap_or("").to_string();
                if named == me.1.to_string() {
                    let what = format!(
                        "{} at {}: READ_ONLY_MODE naming itself: {}",
                        me.0,
                        wall(),
                        e.details()
                    );
                    self.shared.self_named.lock().unwrap().push(what);
                }
                match self.members.iter().position(|m| m.1.to_string() == named) {
                    Some(i) if i != self.target => self.target = i,
                    _ => self.target = (self.target + 1) % self.members.len(),
                }
                self.conn = None;
            }
            Some("SYNC_TIMEOUT") => {}
            _ => {
                self.conn = None;
                self.target = (self.target + 1) % self.members.len();
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The wall clock (UTC, time of day), to find an answer in the members' logs.
pub fn wall() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (s, ms) = (t.as_secs() % 86_400, t.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}Z", s / 3600, s / 60 % 60, s % 60)
}

/// What an error answer promised, and its code.
pub fn classify(e: &ClientError) -> (Outcome, String) {
    match e.code() {
        Some("NO_PRIMARY") if e.details()["maybe_committed"] == true => {
            (Outcome::Info, "NO_PRIMARY".into())
        }
        Some("NO_PRIMARY") => (Outcome::Fail, "NO_PRIMARY".into()),
        Some(c) if DEFINITE.contains(&c) => (Outcome::Fail, c.into()),
        Some(c) => (Outcome::Info, c.into()),
        None if e.is_timeout() => (Outcome::Info, "TIMEOUT".into()),
        None => (Outcome::Info, "CONNECTION_LOST".into()),
    }
}

/// The clients of one scenario.
pub struct Workload {
    pub shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workload {
    /// Starts a client per entry of `namespaces` (its namespace), each bounded by `limit`.
    pub fn start(
        namespaces: &[String],
        members: Vec<Target>,
        shared: Arc<Shared>,
        seed: u64,
        limit: Duration,
    ) -> Workload {
        let threads = (namespaces.iter().enumerate())
            .map(|(p, ns)| {
                let w = Worker::new(p as u32, seed, members.clone(), shared.clone());
                net::spawn_in(ns, &format!("client-{p}"), move || {
                    w.run(limit, Duration::from_secs(4))
                })
            })
            .collect();
        Workload { shared, threads }
    }

    /// Stops the clients (after the resends they owe, at most a few seconds) and returns
    /// every op recorded.
    pub fn finish(self) -> Vec<Op> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.shared.ops()
    }
}

/// One `/health/primary` answer: when it was asked and answered (ns since the run began),
/// 200 or not, and the epoch the member named.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub asked: u64,
    pub answered: u64,
    pub up: bool,
    pub epoch: Option<u64>,
}

impl Sample {
    /// When the answer counts from: a member SIGSTOPped after computing a 200 delivers it on
    /// SIGCONT, seconds later (found by the soak); what it says is what it was when the
    /// question was sent, not when the answer arrived. A 503 is dated when it arrives, so a
    /// stall never shortens a gap.
    fn at(&self) -> u64 {
        if self.up {
            self.asked
        } else {
            self.answered
        }
    }
}

/// One member's `/health/primary` answers, in the order they came.
type Samples = Arc<Mutex<Vec<Sample>>>;

/// `/health/primary` of every member every 100 ms, each polled inside its own host.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    samples: Vec<Samples>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Monitor {
    pub fn start(hosts: &[String], metrics: &[SocketAddr], shared: &Arc<Shared>) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let mut samples = Vec::new();
        let threads = (hosts.iter().zip(metrics))
            .map(|(ns, &m)| {
                let (stop, shared) = (stop.clone(), shared.clone());
                let mine = Arc::new(Mutex::new(Vec::new()));
                samples.push(mine.clone());
                net::spawn_in(ns, "monitor", move || {
                    while !stop.load(Ordering::Relaxed) {
                        let asked = shared.now_ns();
                        let answer = http_get(m, "/health/primary");
                        let answered = shared.now_ns();
                        let up = answer.as_ref().is_some_and(|(c, _)| *c == 200);
                        let epoch = answer.and_then(|(_, body)| {
                            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                            v["epoch"].as_u64()
                        });
                        let s = Sample {
                            asked,
                            answered,
                            up,
                            epoch,
                        };
                        mine.lock().unwrap().push(s);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
            })
            .collect();
        Monitor {
            stop,
            samples,
            threads,
        }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// The longest interval within `[from, to]` (ns) in which no member answered 200, and
    /// when it began.
    pub fn longest_gap(&self, from: u64, to: u64) -> (Duration, u64) {
        self.longest(from, to, |up| up == 0)
    }

    /// The longest interval within `[from, to]` in which two members or more answered 200
    /// (by their latest answers; each is up to 100 ms old), and when it began.
    pub fn longest_overlap(&self, from: u64, to: u64) -> (Duration, u64) {
        self.longest(from, to, |up| up >= 2)
    }

    /// The longest interval within `[from, to]` in which `held(members answering 200)`, and
    /// when it began.
    fn longest(&self, from: u64, to: u64, held: impl Fn(usize) -> bool) -> (Duration, u64) {
        let mut events: Vec<(u64, usize, bool)> = Vec::new();
        let mut state = vec![false; self.samples.len()];
        for (m, s) in self.samples.iter().enumerate() {
            for s in s.lock().unwrap().iter() {
                match s.at() {
                    t if t <= from => state[m] = s.up,
                    t if t <= to => events.push((t, m, s.up)),
                    _ => {}
                }
            }
        }
        events.sort();
        let count = |state: &[bool]| state.iter().filter(|&&u| u).count();
        let (mut longest, mut since) = ((0, from), held(count(&state)).then_some(from));
        for (t, m, up) in events {
            state[m] = up;
            match (held(count(&state)), since) {
                (false, Some(s)) => {
                    longest = longest.max((t - s, s));
                    since = None;
                }
                (true, None) => since = Some(t),
                _ => {}
            }
        }
        if let Some(s) = since {
            longest = longest.max((to - s, s));
        }
        (Duration::from_nanos(longest.0), longest.1)
    }

    /// An interval `len` long from `since` (a gap or an overlap a round failed on), with
    /// every member's answers asked from a second before it to a second after.
    pub fn around(&self, len: Duration, since: u64) -> String {
        let end = since + len.as_nanos() as u64;
        format!(
            "{:.3} s from {:.3} s; the answers around it:\n{}",
            len.as_secs_f64(),
            since as f64 / 1e9,
            self.answers(since.saturating_sub(1_000_000_000), end + 1_000_000_000)
        )
    }

    /// Every member's answers asked within `[from, to]`, a line each.
    fn answers(&self, from: u64, to: u64) -> String {
        let mut out = String::new();
        for (m, s) in self.samples.iter().enumerate() {
            for s in s.lock().unwrap().iter() {
                if s.asked >= from && s.asked <= to {
                    out.push_str(&format!(
                        "  member {m}: asked {:.3} s, answered {:.3} s: {} (epoch {:?})\n",
                        s.asked as f64 / 1e9,
                        s.answered as f64 / 1e9,
                        if s.up { 200 } else { 503 },
                        s.epoch,
                    ));
                }
            }
        }
        out
    }

    /// The members (indexes) that answered 200 at some time within `[from, to]`.
    pub fn primaries(&self, from: u64, to: u64) -> Vec<usize> {
        (0..self.samples.len())
            .filter(|&m| {
                let s = self.samples[m].lock().unwrap();
                s.iter().any(|s| s.up && s.at() >= from && s.at() <= to)
            })
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop();
    }
}
