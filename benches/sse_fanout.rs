//! Event streams under load (docs/http.md, "Event streams"): N SSE streams on one machine's
//! events while writers apply events at a fixed total rate. Every stream must see every event,
//! in order, with no gap, no duplicate and no `lagged`; the server's CPU and memory are read
//! from /proc over the window.
//!
//! ```sh
//! cargo build --release --bin smdb-server --example sse_fanout
//! target/release/examples/sse_fanout --streams 1000 --rate 100 --secs 20
//! target/release/examples/sse_fanout --streams 1000 --rate 400 --secs 20   # find the ceiling
//! target/release/examples/sse_fanout --stalled --rate 2000 --secs 20       # one reader that never reads
//! ```
//!
//! It spawns its own server (`--server-bin`, default next to this example's directory's
//! parent: `target/release/smdb-server`) with one shard, `storage.fsync = "never"` unless
//! `--fsync always` (the streams, not the disk, are measured), and `http.max_connections` above
//! the stream count. Events: `W` writer threads (`--writers`), each applying `inc` to its own
//! instance with payload `{"w":W,"i":I}` over RCP1 at `rate / W` per second.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use smdb_bench::spawn::{Fsync, ServerSpec};
use smdb_client::Client;

struct Args {
    streams: usize,
    rate: u64,
    secs: u64,
    writers: u64,
    threads: usize,
    stalled: bool,
    fsync: Fsync,
    server_bin: PathBuf,
    payload_bytes: usize,
}

fn args() -> Args {
    let mut a = Args {
        streams: 1000,
        rate: 100,
        secs: 20,
        writers: 4,
        threads: 4,
        stalled: false,
        fsync: Fsync::Never,
        server_bin: std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.parent()?.join("smdb-server")))
            .unwrap_or_else(|| PathBuf::from("target/release/smdb-server")),
        payload_bytes: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--streams" => a.streams = val().parse().unwrap(),
            "--rate" => a.rate = val().parse().unwrap(),
            "--secs" => a.secs = val().parse().unwrap(),
            "--writers" => a.writers = val().parse().unwrap(),
            "--threads" => a.threads = val().parse().unwrap(),
            "--server-bin" => a.server_bin = PathBuf::from(val()),
            "--payload-bytes" => a.payload_bytes = val().parse().unwrap(),
            "--fsync" => {
                a.fsync = match val().as_str() {
                    "always" => Fsync::Always,
                    _ => Fsync::Never,
                }
            }
            "--stalled" => a.stalled = true,
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// What one stream saw.
#[derive(Default, Clone)]
struct Seen {
    events: u64,
    /// Next `i` expected from each writer.
    next: HashMap<u64, u64>,
    out_of_order: u64,
    lagged: u64,
    closed: bool,
}

fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("sse-fanout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.toml");
    let conns = a.streams + 64;
    std::fs::write(
        &base,
        format!(
            "[http]\nmax_connections = {conns}\n[network]\nmax_connections = 1024\n\
             [logging]\nlevel = \"warn\"\n"
        ),
    )
    .unwrap();
    let spec = ServerSpec {
        bin: a.server_bin.clone(),
        base_config: Some(base),
        cores: Vec::new(),
        fsync: a.fsync,
        data_parent: PathBuf::from("/tmp"),
        http: true,
    };
    let server = spec.start(Some(1)).expect("server starts");
    let http = server.http_addr.clone().expect("http listener");
    let mut c = Client::connect_hello(server.addr.as_str(), "sse-fanout").unwrap();
    let def = json!({"states": ["on"], "initial": "on", "transitions": [{"from": "on", "event": "inc", "to": "on"}]});
    c.call(
        "PUT_MACHINE",
        json!({"machine": "fan", "version": 1, "definition": def}),
    )
    .unwrap();
    for w in 0..a.writers {
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "fan", "version": 1, "id": format!("w{w}"), "context": {}}),
        )
        .unwrap();
    }
    if a.stalled {
        drop(c); // only the tool's counted connections stay open
        return stalled(&a, &http, server.pid, &server.addr);
    }
    let streams = open_streams(&http, a.streams);
    println!("{} streams open on {http}", streams.len());
    let stop = Arc::new(AtomicBool::new(false));
    let readers = start_readers(streams, a.threads, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    let before = proc_stat(server.pid);
    let rss_before = rss_kib(server.pid);
    let started = Instant::now();
    let sent = run_writers(&Load::of(&a), &server.addr);
    let window = started.elapsed().as_secs_f64();
    let after = proc_stat(server.pid);
    let rss_after = rss_kib(server.pid);
    std::thread::sleep(Duration::from_secs(2)); // the last events reach every stream
    stop.store(true, Relaxed);
    let seen: Vec<Seen> = readers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    report(
        &a,
        &seen,
        sent,
        window,
        after - before,
        (rss_before, rss_after, hwm_kib(server.pid)),
    );
}

/// Opens `n` streams and reads each one's `subscribed` event.
fn open_streams(http: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(http).unwrap();
            let req = format!("GET /stream?machines=fan HTTP/1.1\r\nHost: {http}\r\nAccept: text/event-stream\r\n\r\n");
            s.write_all(req.as_bytes()).unwrap();
            let mut got = Vec::new();
            let mut b = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains("event: subscribed") {
                let n = s.read(&mut b).unwrap();
                assert!(n > 0, "stream closed at start");
                got.extend_from_slice(&b[..n]);
            }
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// Reader threads: each polls its share of the streams and checks every event.
fn start_readers(
    streams: Vec<TcpStream>,
    threads: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<Seen>>> {
    let mut shares: Vec<Vec<TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in streams.into_iter().enumerate() {
        shares[i % threads].push(s);
    }
    shares
        .into_iter()
        .map(|mut mine| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = vec![Seen::default(); mine.len()];
                let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); mine.len()];
                let mut fds: Vec<libc::pollfd> = mine
                    .iter()
                    .map(|s| libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                let mut chunk = vec![0u8; 64 * 1024];
                while !stop.load(Relaxed) {
                    // SAFETY: `fds` is a valid array of pollfd for the whole call.
                    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
                    if n <= 0 {
                        continue;
                    }
                    for (k, fd) in fds.iter_mut().enumerate() {
                        if fd.revents == 0 || seen[k].closed {
                            continue;
                        }
                        loop {
                            match mine[k].read(&mut chunk) {
                                Ok(0) => {
                                    seen[k].closed = true;
                                    fd.fd = -1;
                                    break;
                                }
                                Ok(n) => {
                                    bufs[k].extend_from_slice(&chunk[..n]);
                                    parse(&mut bufs[k], &mut seen[k]);
                                }
                                Err(_) => break,
                            }
                        }
                    }
                }
                seen
            })
        })
        .collect()
}

/// Takes every complete event out of `buf`.
fn parse(buf: &mut Vec<u8>, seen: &mut Seen) {
    let mut start = 0;
    while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
        let ev = &buf[start..start + end];
        start += end + 2;
        if ev.starts_with(b"event: lagged") {
            seen.lagged += 1;
            continue;
        }
        // serde_json writes object members sorted: `"payload":{"i":I,"w":W...`.
        let Some(p) = find(ev, b"\"payload\":{\"i\":") else {
            continue;
        };
        let rest = &ev[p + 15..];
        let (i, rest) = number(rest);
        let (w, _) = number(&rest[5..]); // `,"w":`
        seen.events += 1;
        let next = seen.next.entry(w).or_insert(i);
        if i != *next {
            seen.out_of_order += 1;
        }
        *next = i + 1;
    }
    buf.drain(..start);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn number(b: &[u8]) -> (u64, &[u8]) {
    let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let v = b[..n]
        .iter()
        .fold(0u64, |a, d| a * 10 + u64::from(d - b'0'));
    (v, &b[n..])
}

/// The write load: `rate` events per second in total from `writers` threads for `secs`.
#[derive(Clone, Copy)]
struct Load {
    rate: u64,
    secs: u64,
    writers: u64,
    payload_bytes: usize,
}

impl Load {
    fn of(a: &Args) -> Load {
        Load {
            rate: a.rate,
            secs: a.secs,
            writers: a.writers,
            payload_bytes: a.payload_bytes,
        }
    }
}

/// Writers apply `inc` to their own instance, paced to `rate / writers` each, for `secs`.
fn run_writers(a: &Load, addr: &str) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let per = a.rate as f64 / a.writers as f64;
    let handles: Vec<_> = (0..a.writers)
        .map(|w| {
            let (addr, total, secs, pad) = (
                addr.to_string(),
                total.clone(),
                a.secs,
                "x".repeat(a.payload_bytes),
            );
            std::thread::spawn(move || {
                let mut c = Client::connect_hello(addr.as_str(), "sse-fanout-writer").unwrap();
                WRITERS_OPEN.fetch_add(1, Relaxed);
                let start = Instant::now();
                let mut i = 0u64;
                while start.elapsed() < Duration::from_secs(secs) {
                    let due = start + Duration::from_secs_f64(i as f64 / per);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let payload = match pad.is_empty() {
                        true => json!({"w": w, "i": i}),
                        false => json!({"w": w, "i": i, "x": pad}),
                    };
                    c.call(
                        "APPLY_EVENT",
                        json!({"instance_id": format!("w{w}"), "event": "inc", "payload": payload}),
                    )
                    .unwrap();
                    i += 1;
                }
                total.fetch_add(i, Relaxed);
                // Uncounted first: the server sees the close later, so the tool never
                // undercounts its own connections (which would look like the stream closed).
                WRITERS_OPEN.fetch_sub(1, Relaxed);
                drop(c);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    total.load(Relaxed)
}

fn report(a: &Args, seen: &[Seen], sent: u64, window: f64, cpu_ticks: u64, rss: (u64, u64, u64)) {
    let complete = seen.iter().filter(|s| s.events == sent).count();
    let lagged: u64 = seen.iter().map(|s| s.lagged).sum();
    let disorder: u64 = seen.iter().map(|s| s.out_of_order).sum();
    let closed = seen.iter().filter(|s| s.closed).count();
    let delivered: u64 = seen.iter().map(|s| s.events).sum();
    let hz = 100.0; // USER_HZ on Linux
    println!(
        "streams={} rate={}/s sent={sent} ({:.0}/s) deliveries={delivered} ({:.0}/s) complete={complete} \
         lagged={lagged} out_of_order={disorder} closed={closed} server_cpu={:.2} cores \
         rss_kib={}->{} hwm_kib={}",
        a.streams,
        a.rate,
        sent as f64 / window,
        delivered as f64 / window,
        cpu_ticks as f64 / hz / window,
        rss.0,
        rss.1,
        rss.2
    );
}

/// utime + stime of `pid`, in clock ticks.
fn proc_stat(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn hwm_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// One stream that never reads (a small receive buffer) while events flow: it must get
/// `lagged` and be closed, with the server's memory bounded the whole time.
fn stalled(a: &Args, http: &str, pid: u32, addr: &str) {
    let s = TcpStream::connect(http).unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: setting an int socket option on a valid socket.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let mut s = s;
    let req = format!("GET /stream?machines=fan HTTP/1.1\r\nHost: {http}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let rss0 = rss_kib(pid);
    let (addr2, load) = (addr.to_string(), Load::of(a));
    let writer = std::thread::spawn(move || run_writers(&load, &addr2));
    let mut info = Client::connect_hello(addr, "sse-fanout-info").unwrap();
    let start = Instant::now();
    let mut peak = rss0;
    let mut lagged_at = None;
    while start.elapsed() < Duration::from_secs(a.secs + 15) {
        std::thread::sleep(Duration::from_millis(200));
        peak = peak.max(rss_kib(pid));
        let open = http_connections(&mut info);
        if std::env::var_os("SSE_DEBUG").is_some() {
            eprintln!("{:?} http connections open: {open}", start.elapsed());
        }
        if lagged_at.is_none() && open == 0 {
            lagged_at = Some(start.elapsed());
        }
    }
    let sent = writer.join().unwrap();
    // Now read what the server wrote before it closed.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    println!(
        "stalled stream: sent={sent} events_it_got={} (bytes {}) closed_by_server_after={:?} \
         rss_kib start={rss0} peak={peak} hwm_kib={}",
        text.matches("\nid: ").count(),
        all.len(),
        lagged_at,
        hwm_kib(pid)
    );
}

/// The HTTP connections open on the server: INFO's `connections.active` (every client
/// connection) less the RCP1 ones this tool holds (this one and the writers' still open).
fn http_connections(info: &mut Client) -> i64 {
    let v = info.call("INFO", json!({})).unwrap();
    let active = v["connections"]["active"].as_i64().unwrap_or(0);
    active - 1 - WRITERS_OPEN.load(Relaxed) as i64
}

/// Writer connections open now (they count in INFO's `connections.active`).
static WRITERS_OPEN: AtomicU64 = AtomicU64::new(0);
