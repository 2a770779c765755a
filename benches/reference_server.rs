//! The reference server: the design's shape and nothing else, to tell the host's limits from
//! smdb's own costs (benches/RESULTS.md, "Session 15").
//!
//! It rebuilds the throwaway prototype of `docs/glommio.md` §5, which set issue 14's targets: a front
//! executor on core 0 (one reader and one writer task per connection: RCP1 header, CRC32C, a
//! `serde_json::Value` parse, one message per request to the shard) and one shard executor on
//! core 1 (a `HashMap` of instance versions; an apply task that appends `len|crc|request` to the
//! open group and rings the committer; a committer that writes the group with one DMA write into
//! a pre-zeroed file, `O_DSYNC` like smdb's WAL under `fsync = "always"`, then sends the
//! replies). GET_INSTANCE is answered by the shard at once; HELLO, INFO, PING and PUT_MACHINE by
//! the front. There is no recovery, no auth, no metrics and no definition: the log wraps around
//! at its end. It speaks enough RCP1 for `smdb-bench --workload apply|get|ping`.
//!
//! A measuring tool, not server code: a failure to set up or to write the log panics with its
//! cause (`expect`), and a connection that sends a bad frame is closed.
//!
//! `cargo build --release --example reference_server`, then
//! `target/release/examples/reference_server ADDR DATA_DIR [dsync|fdatasync|none]`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::os::fd::IntoRawFd;
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender};
use glommio::io::{DmaFile, OpenOptions};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};
use serde_json::Value;
use smdb_client::frame::{decode_frame, encode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};

/// Messages per direction between the front and the shard (docs/glommio.md §2: ≥ 1024).
const CHANNEL_CAPACITY: usize = 4096;
/// The pre-zeroed log file; writes wrap around at its end.
const LOG_BYTES: u64 = 256 << 20;
const BLOCK: usize = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Durability {
    Dsync,
    Fdatasync,
    None,
}

enum Kind {
    Apply,
    Create,
    Get,
}

struct Request {
    conn: u32,
    seq: u64,
    /// The request's id as JSON text (a number or a string), echoed in the reply.
    id: String,
    kind: Kind,
    instance: String,
    body: Vec<u8>,
}

struct Reply {
    conn: u32,
    seq: u64,
    frame: Vec<u8>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: reference_server ADDR DATA_DIR [dsync|fdatasync|none] [two|one]");
        std::process::exit(2);
    }
    let sync = match args.get(3).map(String::as_str) {
        None | Some("dsync") => Durability::Dsync,
        Some("fdatasync") => Durability::Fdatasync,
        Some("none") => Durability::None,
        Some(other) => panic!("unknown sync mode {other}"),
    };
    let dir = std::path::PathBuf::from(&args[2]);
    std::fs::create_dir_all(&dir).expect("data dir");
    prepare_files(&dir);
    let listener = std::net::TcpListener::bind(&args[1]).expect("bind");
    println!("listening on {}", listener.local_addr().expect("addr"));
    let fd = listener.into_raw_fd();

    if args.get(4).map(String::as_str) == Some("one") {
        // The shard's own core serves the connections too (Seastar's shape): one executor, the
        // front and the shard talk through local channels, no cross-thread wake-up.
        let one = LocalExecutorBuilder::new(Placement::Fixed(1))
            .name("ref-one")
            .spawn(move || async move {
                let (req_tx, req_rx) = local_channel::new_bounded::<Request>(CHANNEL_CAPACITY);
                let (rep_tx, rep_rx) = local_channel::new_bounded::<Reply>(CHANNEL_CAPACITY);
                glommio::spawn_local(shard(dir, sync, Rx::Local(req_rx), Tx::Local(rep_tx)))
                    .detach();
                front(fd, Tx::Local(req_tx), Rx::Local(rep_rx)).await
            })
            .expect("executor");
        one.join().expect("executor");
        return;
    }
    let (req_tx, req_rx) = shared_channel::new_bounded::<Request>(CHANNEL_CAPACITY);
    let (rep_tx, rep_rx) = shared_channel::new_bounded::<Reply>(CHANNEL_CAPACITY);
    let shard = LocalExecutorBuilder::new(Placement::Fixed(1))
        .name("ref-shard")
        .spawn(move || async move {
            let (rx, tx) = futures_lite::future::zip(req_rx.connect(), rep_tx.connect()).await;
            shard(dir, sync, Rx::Shared(rx), Tx::Shared(tx)).await
        })
        .expect("shard executor");
    let front = LocalExecutorBuilder::new(Placement::Fixed(0))
        .name("ref-front")
        .spawn(move || async move {
            let (tx, rx) = futures_lite::future::zip(req_tx.connect(), rep_rx.connect()).await;
            front(fd, Tx::Shared(tx), Rx::Shared(rx)).await
        })
        .expect("front executor");
    front.join().expect("front");
    shard.join().expect("shard");
}

/// One direction between the front and the shard: across cores (a shared channel) or, with
/// `one`, within the one executor (a local channel).
enum Tx<T: Send + Sized> {
    Shared(ConnectedSender<T>),
    Local(LocalSender<T>),
}

impl<T: Send + Sized> Tx<T> {
    async fn send(&self, t: T) -> Result<(), ()> {
        match self {
            Tx::Shared(s) => s.send(t).await.map_err(|_| ()),
            Tx::Local(s) => s.send(t).await.map_err(|_| ()),
        }
    }
}

enum Rx<T: Send + Sized> {
    Shared(ConnectedReceiver<T>),
    Local(LocalReceiver<T>),
}

impl<T: Send + Sized> Rx<T> {
    async fn recv(&self) -> Option<T> {
        match self {
            Rx::Shared(r) => r.recv().await,
            Rx::Local(r) => r.recv().await,
        }
    }
}

/// The probe file (docs/glommio.md §0.1) and the log, zeroed and synced before the executors start.
fn prepare_files(dir: &std::path::Path) {
    std::fs::write(dir.join(".probe"), vec![1u8; BLOCK]).expect("probe");
    let mut log = std::fs::File::create(dir.join("log")).expect("log");
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..LOG_BYTES / (1 << 20) {
        log.write_all(&zeros).expect("zero log");
    }
    log.sync_all().expect("sync log");
}

fn frame(json: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    encode_frame(json, &mut f);
    f
}

fn ok(id: &str, result: &str) -> Vec<u8> {
    frame(format!(r#"{{"type":"response","id":{id},"status":"ok","result":{result}}}"#).as_bytes())
}

fn error(id: &str, code: &str) -> Vec<u8> {
    let json = format!(
        r#"{{"type":"response","id":{id},"status":"error","error":{{"code":"{code}","message":"{code}","retryable":false}}}}"#
    );
    frame(json.as_bytes())
}

// ---- front ----

type Conns = Rc<RefCell<HashMap<u32, Rc<LocalSender<Reply>>>>>;

async fn front(fd: i32, to_shard: Tx<Request>, from_shard: Rx<Reply>) {
    let to_shard = Rc::new(to_shard);
    let conns: Conns = Rc::default();
    let routes = conns.clone();
    glommio::spawn_local(async move {
        while let Some(r) = from_shard.recv().await {
            if let Some(tx) = routes.borrow().get(&r.conn) {
                let _ = tx.try_send(r);
            }
        }
    })
    .detach();
    // SAFETY: `fd` is the listening socket made in main and moved here, owned by nobody else.
    let listener = unsafe { <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut next = 0u32;
    loop {
        let Ok(stream) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        next = next.wrapping_add(1);
        let (tx, rx) = local_channel::new_unbounded();
        let tx = Rc::new(tx);
        conns.borrow_mut().insert(next, tx.clone());
        let (conn, shard, conns) = (next, to_shard.clone(), conns.clone());
        glommio::spawn_local(async move {
            let writer = serve(conn, stream, shard, tx, rx).await;
            // The writer ends once no sender is left: the map's goes first.
            conns.borrow_mut().remove(&conn);
            writer.await;
        })
        .detach();
    }
}

async fn serve(
    conn: u32,
    stream: TcpStream,
    shard: Rc<Tx<Request>>,
    local: Rc<LocalSender<Reply>>,
    replies: local_channel::LocalReceiver<Reply>,
) -> glommio::Task<()> {
    let (mut r, w) = futures_lite::io::split(stream);
    let writer = glommio::spawn_local(write_replies(w, replies));
    let mut buf = vec![0u8; 64 * 1024];
    let (mut lo, mut hi, mut seq) = (0usize, 0usize, 0u64);
    loop {
        if hi == buf.len() {
            buf.copy_within(lo..hi, 0);
            (lo, hi) = (0, hi - lo);
            if hi == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        }
        match r.read(&mut buf[hi..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => hi += n,
        }
        loop {
            let (body, used) = match decode_frame(&buf[lo..hi], FRAME_PAYLOAD_BYTES_DEFAULT) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                // A bad frame (magic, length, CRC32C) closes the connection.
                Err(_) => return writer,
            };
            let body = &buf[lo + body.start..lo + body.end];
            if route(conn, seq, body, &shard, &local).await.is_err() {
                return writer;
            }
            seq += 1;
            lo += used;
        }
        if lo == hi {
            (lo, hi) = (0, 0);
        }
    }
    writer
}

/// Writes a connection's replies in request order (early ones wait for their turn), each
/// wake-up's ready replies in one write.
async fn write_replies(
    mut w: futures_lite::io::WriteHalf<TcpStream>,
    replies: local_channel::LocalReceiver<Reply>,
) {
    let (mut next, mut early) = (0u64, BTreeMap::new());
    let mut out = Vec::with_capacity(16 * 1024);
    while let Some(rep) = replies.recv().await {
        early.insert(rep.seq, rep.frame);
        while let Some(Some(rep)) = futures_lite::future::poll_once(replies.recv()).await {
            early.insert(rep.seq, rep.frame);
        }
        while let Some(f) = early.remove(&next) {
            out.extend_from_slice(&f);
            next += 1;
        }
        if !out.is_empty() {
            if w.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}

/// Parses one request: answers it here or sends it to the shard.
async fn route(
    conn: u32,
    seq: u64,
    body: &[u8],
    shard: &Tx<Request>,
    local: &LocalSender<Reply>,
) -> Result<(), ()> {
    let v: Value = serde_json::from_slice(body).map_err(|_| ())?;
    let id = v
        .get("id")
        .map_or_else(|| "null".to_owned(), Value::to_string);
    let params = v.get("params");
    let text = |k: &str| {
        params
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let (kind, instance) = match v.get("op").and_then(Value::as_str).unwrap_or("") {
        "APPLY_EVENT" => (Kind::Apply, text("instance_id")),
        "CREATE_INSTANCE" => (Kind::Create, text("id")),
        "GET_INSTANCE" => (Kind::Get, text("id")),
        op => {
            let frame = match op {
                "HELLO" => ok(&id, r#"{"protocol_version":1,"server_name":"reference"}"#),
                "INFO" => ok(&id, r#"{"shards":1}"#),
                "PING" => ok(&id, r#"{"pong":true}"#),
                "PUT_MACHINE" => {
                    let machine = text("machine").unwrap_or_default();
                    let result = format!(
                        r#"{{"machine":"{machine}","version":1,"created":false,"checksum":"0"}}"#
                    );
                    ok(&id, &result)
                }
                _ => error(&id, "UNKNOWN_OPERATION"),
            };
            let _ = local.try_send(Reply { conn, seq, frame });
            return Ok(());
        }
    };
    let Some(instance) = instance else {
        let _ = local.try_send(Reply {
            conn,
            seq,
            frame: error(&id, "BAD_REQUEST"),
        });
        return Ok(());
    };
    let req = Request {
        conn,
        seq,
        id,
        kind,
        instance,
        body: body.to_vec(),
    };
    shard.send(req).await
}

// ---- shard ----

struct Group {
    records: Vec<u8>,
    replies: Vec<Reply>,
}

async fn shard(
    dir: std::path::PathBuf,
    sync: Durability,
    from_front: Rx<Request>,
    to_front: Tx<Reply>,
) {
    let to_front = Rc::new(to_front);
    let file = open_log(&dir, sync).await;
    let group = Rc::new(RefCell::new(Group {
        records: Vec::new(),
        replies: Vec::new(),
    }));
    let (bell, rung) = local_channel::new_bounded::<()>(1);
    let committer = glommio::spawn_local(commit_loop(
        file,
        sync,
        group.clone(),
        rung,
        to_front.clone(),
    ));
    let mut versions: HashMap<String, u64> = HashMap::new();
    while let Some(req) = from_front.recv().await {
        let (conn, seq) = (req.conn, req.seq);
        match decide(&mut versions, &req) {
            Outcome::Now(frame) => {
                let _ = to_front.send(Reply { conn, seq, frame }).await;
            }
            Outcome::Logged(frame) => {
                let mut g = group.borrow_mut();
                let body = &req.body;
                g.records
                    .extend_from_slice(&(body.len() as u32).to_le_bytes());
                g.records
                    .extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
                g.records.extend_from_slice(body);
                g.replies.push(Reply { conn, seq, frame });
                drop(g);
                let _ = bell.try_send(());
            }
        }
    }
    drop(bell);
    let _ = committer.await;
}

/// The probe (docs/glommio.md §0.1), then the pre-zeroed log, `O_DSYNC` when `sync` says so.
async fn open_log(dir: &std::path::Path, sync: Durability) -> DmaFile {
    let probe = DmaFile::open(dir.join(".probe")).await.expect("probe");
    probe.close().await.expect("probe close");
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(if sync == Durability::Dsync {
            libc::O_DSYNC
        } else {
            0
        })
        .dma_open(dir.join("log"))
        .await
        .expect("log")
}

/// A reply to send at once, or one to send after the request is in the log.
enum Outcome {
    Now(Vec<u8>),
    Logged(Vec<u8>),
}

/// The whole state machine: an instance is a version counter.
fn decide(versions: &mut HashMap<String, u64>, req: &Request) -> Outcome {
    let (id, instance) = (&req.id, &req.instance);
    match req.kind {
        Kind::Get => Outcome::Now(match versions.get(instance) {
            Some(v) => ok(
                id,
                &format!(
                    r#"{{"id":"{instance}","machine":"m","version":1,"state":"s","context":{{}},"last_event_id":{v}}}"#
                ),
            ),
            None => error(id, "INSTANCE_NOT_FOUND"),
        }),
        Kind::Create => {
            let v = versions.entry(instance.clone()).or_insert(0);
            Outcome::Logged(ok(
                id,
                &format!(
                    r#"{{"id":"{instance}","machine":"m","version":1,"state":"s","context":{{}},"wal_offset":{v}}}"#
                ),
            ))
        }
        Kind::Apply => match versions.get_mut(instance) {
            Some(v) => {
                *v += 1;
                Outcome::Logged(ok(
                    id,
                    &format!(
                        r#"{{"applied":true,"context":{{}},"from_state":"s","instance_id":"{instance}","to_state":"s","wal_offset":{v}}}"#
                    ),
                ))
            }
            None => Outcome::Now(error(id, "INSTANCE_NOT_FOUND")),
        },
    }
}

/// Writes each open group with one DMA write (its first block is the last one's partial tail),
/// durable per `sync`, then sends its replies. While one group is written the next fills.
async fn commit_loop(
    file: DmaFile,
    sync: Durability,
    group: Rc<RefCell<Group>>,
    rung: local_channel::LocalReceiver<()>,
    to_front: Rc<Tx<Reply>>,
) {
    let (mut block_at, mut tail) = (0u64, Vec::<u8>::new());
    while rung.recv().await.is_some() {
        let (records, replies) = {
            let mut g = group.borrow_mut();
            (
                std::mem::take(&mut g.records),
                std::mem::take(&mut g.replies),
            )
        };
        if records.is_empty() {
            continue;
        }
        let used = tail.len() + records.len();
        let padded = used.div_ceil(BLOCK) * BLOCK;
        if block_at + padded as u64 > LOG_BYTES {
            (block_at, tail) = (0, Vec::new());
        }
        let used = tail.len() + records.len();
        let mut buf = file.alloc_dma_buffer(used.div_ceil(BLOCK) * BLOCK);
        let bytes = buf.as_bytes_mut();
        bytes[..tail.len()].copy_from_slice(&tail);
        bytes[tail.len()..used].copy_from_slice(&records);
        bytes[used..].fill(0);
        let full = used / BLOCK * BLOCK;
        let next_tail = bytes[full..used].to_vec();
        file.write_at(buf, block_at).await.expect("log write");
        if sync == Durability::Fdatasync {
            file.fdatasync().await.expect("fdatasync");
        }
        block_at += full as u64;
        tail = next_tail;
        for r in replies {
            let _ = to_front.send(r).await;
        }
    }
}
