//! `smdb-cli backup --out DIR` (docs/backup.md, "Taking a backup"): asks the server for `BACKUP`
//! on a connection of its own and writes what streams back as a data directory: `smdb.meta`,
//! per shard `shard-N/snapshots/<offset>.snap` (the snapshot the server pinned, when it has
//! one) and `shard-N/wal/<first>.seg` segments holding the records after it up to the cut,
//! then `backup.json` (`crate::backup::Manifest`), written last. Every file and directory is
//! fsynced before the manifest, and the manifest before the summary is printed.
//!
//! The connection is TCP, or TLS with the global `--tls` flags, with HELLO and AUTH (`--token`).
//! `SMDB_BACKUP_READ_DELAY_MS` (test-only, undocumented for operators) sleeps that long before
//! reading each frame, so tests can keep a backup running while the server compacts.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use smdb_client::blocking::Transport;
use smdb_client::ClientTlsOptions;
use smdb_format::limits::{BLOCK_BYTES, SEGMENT_HEADER_BYTES};
use smdb_format::record::{encode, KIND_ENTRY};
use smdb_format::segment::{encode_header, segment_path, SegmentHeader};
use smdb_format::snapshot::{self, SnapshotHeader};
use smdb_protocol::frame::{begin_frame, decode_frame, finish_frame, HEADER_LEN};

use crate::backup::{describe, files_under, FileEntry, Manifest, MANIFEST};
use crate::error::{CliError, Kind, CONNECTION_LOST, PROTOCOL_ERROR};

/// A segment written by the backup is closed once it holds this many bytes (the server's
/// default `storage.segment_bytes`); recovery accepts segments of any size up to the format's.
const SEGMENT_BYTES_OUT: u64 = 64 << 20;
/// The largest frame read from the server (a snapshot part is 4 MiB before base64).
const FRAME_BYTES_MAX: u32 = 64 << 20;
/// What `src/datadir.rs` writes as `smdb.meta`'s `format_version`.
const DATA_DIR_FORMAT_VERSION: u32 = 1;
/// The test-only slow reader (module doc).
const READ_DELAY_ENV: &str = "SMDB_BACKUP_READ_DELAY_MS";

/// What the backup printed in its summary.
pub struct Summary {
    pub positions: BTreeMap<String, u64>,
    pub files: usize,
    pub bytes: u64,
    pub seconds: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pos: Vec<String> = self
            .positions
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        write!(
            f,
            "positions {}, {} files, {} bytes, {:.2} s",
            pos.join(","),
            self.files,
            self.bytes,
            self.seconds
        )
    }
}

/// `BACKUP`'s result.
#[derive(Deserialize)]
struct Cut {
    epoch: u64,
    shards: u32,
    server_version: String,
    positions: BTreeMap<String, u64>,
}

/// One stream frame (the fields the backup uses).
#[derive(Deserialize)]
struct StreamFrame {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    shard: u32,
    #[serde(default)]
    first: u64,
    #[serde(default)]
    entries: Vec<String>,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    version: u32,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    crc: u32,
    #[serde(default)]
    last: bool,
    #[serde(default)]
    data: String,
    #[serde(default)]
    message: String,
}

/// Takes a backup from `addr` into `dir` (which must not exist or be empty).
pub fn take(
    addr: &str,
    token: Option<&str>,
    tls: Option<&ClientTlsOptions>,
    dir: &Path,
) -> Result<Summary, CliError> {
    let started = Instant::now();
    prepare_dir(dir)?;
    let mut conn = Conn::open(addr, token, tls)?;
    let result = conn.call("BACKUP", json!({}))?;
    let cut: Cut = serde_json::from_value(result).map_err(protocol)?;
    let mut shards: Vec<ShardOut> = (0..cut.shards)
        .map(|i| ShardOut::new(dir, i))
        .collect::<Result<_, _>>()?;
    let delay = std::env::var(READ_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    loop {
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        let frame: StreamFrame = serde_json::from_slice(&conn.read_frame()?).map_err(protocol)?;
        let shard = shards
            .get_mut(frame.shard as usize)
            .ok_or_else(|| protocol(format!("no shard {}", frame.shard)))?;
        match frame.kind.as_str() {
            "snapshot" => shard.snapshot_part(&frame)?,
            "entries" => shard.entries(&frame)?,
            "end" => break,
            "error" => {
                return Err(CliError::new(
                    Kind::Server,
                    "BACKUP_FAILED",
                    format!("the server ended the backup: {}", frame.message),
                ))
            }
            other => return Err(protocol(format!("unexpected stream frame {other:?}"))),
        }
    }
    for (i, s) in shards.iter_mut().enumerate() {
        let want = cut.positions.get(&i.to_string()).copied().unwrap_or(0);
        s.finish(want)?;
    }
    write_meta(dir, cut.shards)?;
    let manifest = manifest(dir, &cut)?;
    let bytes = manifest.files.iter().map(|f| f.bytes).sum();
    write_manifest(dir, &manifest)?;
    Ok(Summary {
        positions: cut.positions,
        files: manifest.files.len(),
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// DIR must not exist or be empty; it is created.
fn prepare_dir(dir: &Path) -> Result<(), CliError> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(|e| io(dir, e))?;
        if entries.next().is_some() {
            return Err(CliError::usage(format!(
                "{} is not empty: a backup goes into a new or empty directory",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))
}

/// The RCP1 connection the backup streams on.
struct Conn {
    stream: Transport,
    next_id: u64,
}

impl Conn {
    fn open(
        addr: &str,
        token: Option<&str>,
        tls: Option<&ClientTlsOptions>,
    ) -> Result<Conn, CliError> {
        let first = addr.split(',').next().unwrap_or(addr).trim();
        let failed = |e: std::io::Error| {
            CliError::new(
                Kind::Connection,
                crate::error::CONNECT_FAILED,
                format!("cannot connect to {first}: {e}"),
            )
        };
        let sock = TcpStream::connect(first).map_err(failed)?;
        let stream = match tls {
            None => Transport::Plain(sock),
            Some(opts) => {
                let config = smdb_protocol::tls::client_config(opts).map_err(CliError::usage)?;
                let name = smdb_protocol::tls::server_name(opts, first);
                Transport::tls(sock, config, &name).map_err(failed)?
            }
        };
        let mut c = Conn { stream, next_id: 1 };
        c.call(
            "HELLO",
            json!({"protocol_version": 1, "client_name": "smdb-cli backup"}),
        )?;
        if let Some(token) = token {
            c.call("AUTH", json!({"method": "bearer", "token": token}))?;
        }
        Ok(c)
    }

    /// One request and its response's `result`; a refusal is the server's error.
    fn call(&mut self, op: &str, params: Value) -> Result<Value, CliError> {
        let id = self.next_id.to_string();
        self.next_id += 1;
        let mut out = Vec::new();
        let start = begin_frame(&mut out);
        let req = json!({"type": "request", "id": id, "op": op, "params": params});
        out.extend_from_slice(req.to_string().as_bytes());
        finish_frame(&mut out, start);
        self.stream.write_all(&out).map_err(lost)?;
        let resp: Value = serde_json::from_slice(&self.read_frame()?).map_err(protocol)?;
        if resp["status"] == "ok" {
            return Ok(resp["result"].clone());
        }
        let e = &resp["error"];
        if !e.is_object() {
            return Err(protocol(format!("unexpected answer to {op}: {resp}")));
        }
        let mut err = CliError::new(
            Kind::Server,
            e["code"].as_str().unwrap_or("UNKNOWN"),
            e["message"].as_str().unwrap_or("").to_string(),
        );
        err.details = e["details"].clone();
        Err(err)
    }

    /// The next frame's payload.
    fn read_frame(&mut self) -> Result<Vec<u8>, CliError> {
        let mut buf = vec![0u8; HEADER_LEN];
        self.stream.read_exact(&mut buf).map_err(lost)?;
        let len = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if len > FRAME_BYTES_MAX {
            return Err(protocol(format!("a frame of {len} bytes")));
        }
        buf.resize(HEADER_LEN + len as usize, 0);
        self.stream
            .read_exact(&mut buf[HEADER_LEN..])
            .map_err(lost)?;
        match decode_frame(&buf, FRAME_BYTES_MAX) {
            Ok(Some((range, _))) => Ok(buf[range].to_vec()),
            Ok(None) => Err(protocol("a short frame")),
            Err(e) => Err(protocol(format!("{e:?}"))),
        }
    }
}

/// One shard's files being written.
struct ShardOut {
    index: u32,
    wal: PathBuf,
    snaps: PathBuf,
    /// The snapshot being received: its file and the CRC of the payload so far.
    snapshot: Option<(File, SnapshotHeader, u32, u64)>,
    /// The offset after which the log starts (the snapshot's, or 0).
    base: u64,
    segment: Option<Segment>,
    /// The next offset expected.
    next: u64,
}

struct Segment {
    file: File,
    bytes: u64,
}

impl ShardOut {
    fn new(dir: &Path, index: u32) -> Result<ShardOut, CliError> {
        let shard = dir.join(format!("shard-{index}"));
        let (wal, snaps) = (shard.join("wal"), shard.join("snapshots"));
        for d in [&wal, &snaps] {
            std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        Ok(ShardOut {
            index,
            wal,
            snaps,
            snapshot: None,
            base: 0,
            segment: None,
            next: 1,
        })
    }

    /// A `snapshot` frame: the first opens the file (header first: the frame says the payload's
    /// length and CRC), the last checks them and closes it.
    fn snapshot_part(&mut self, f: &StreamFrame) -> Result<(), CliError> {
        if self.segment.is_some() {
            return Err(protocol("a snapshot after log records"));
        }
        if self.snapshot.is_none() {
            let path = snapshot::snapshot_path(&self.snaps, f.offset);
            let mut file = File::create(&path).map_err(|e| io(&path, e))?;
            let h = SnapshotHeader {
                version: f.version,
                shard: self.index,
                offset: f.offset,
                payload_len: f.bytes,
                payload_crc: f.crc,
            };
            let mut block = vec![0u8; smdb_format::limits::SNAPSHOT_HEADER_BYTES as usize];
            snapshot::encode_header(h, &mut block);
            file.write_all(&block).map_err(|e| io(&path, e))?;
            self.snapshot = Some((file, h, 0, 0));
        }
        let data = STANDARD.decode(f.data.as_bytes()).map_err(protocol)?;
        let Some((file, h, crc, len)) = self.snapshot.as_mut() else {
            return Err(protocol("no snapshot open"));
        };
        file.write_all(&data).map_err(lost)?;
        *crc = crc32c::crc32c_append(*crc, &data);
        *len += data.len() as u64;
        if !f.last {
            return Ok(());
        }
        if *crc != h.payload_crc || *len != h.payload_len {
            return Err(protocol(format!(
                "shard {}: the snapshot at {} arrived with {len} bytes and crc {crc:08x}, \
                 the server said {} and {:08x}",
                self.index, h.offset, h.payload_len, h.payload_crc
            )));
        }
        let pad = snapshot::file_bytes(*len) - smdb_format::limits::SNAPSHOT_HEADER_BYTES - *len;
        file.write_all(&vec![0u8; pad as usize]).map_err(lost)?;
        file.sync_all().map_err(lost)?;
        self.base = h.offset;
        self.next = h.offset + 1;
        self.snapshot = None;
        Ok(())
    }

    /// An `entries` frame: records appended to the current segment in order.
    fn entries(&mut self, f: &StreamFrame) -> Result<(), CliError> {
        if f.first != self.next {
            return Err(protocol(format!(
                "shard {}: records from {} where {} was expected",
                self.index, f.first, self.next
            )));
        }
        let mut buf = Vec::new();
        for e in &f.entries {
            let payload = STANDARD.decode(e.as_bytes()).map_err(protocol)?;
            buf.clear();
            encode(&mut buf, self.next, KIND_ENTRY, &payload);
            let full = self
                .segment
                .as_ref()
                .is_some_and(|s| s.bytes + buf.len() as u64 > SEGMENT_BYTES_OUT);
            if full || self.segment.is_none() {
                self.close_segment()?;
                self.segment = Some(self.new_segment(self.next)?);
            }
            if let Some(s) = self.segment.as_mut() {
                s.file.write_all(&buf).map_err(lost)?;
                s.bytes += buf.len() as u64;
            }
            self.next += 1;
        }
        Ok(())
    }

    fn new_segment(&self, first: u64) -> Result<Segment, CliError> {
        let path = segment_path(&self.wal, first);
        let mut file = File::create(&path).map_err(|e| io(&path, e))?;
        let mut block = vec![0u8; SEGMENT_HEADER_BYTES as usize];
        let h = SegmentHeader {
            shard: self.index,
            first_offset: first,
        };
        encode_header(h, &mut block);
        file.write_all(&block).map_err(|e| io(&path, e))?;
        Ok(Segment {
            file,
            bytes: SEGMENT_HEADER_BYTES,
        })
    }

    /// Pads the open segment with zeros to a whole block (a zero length ends the data) and
    /// fsyncs it.
    fn close_segment(&mut self) -> Result<(), CliError> {
        if let Some(mut s) = self.segment.take() {
            let pad = s.bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES - s.bytes;
            s.file.write_all(&vec![0u8; pad as usize]).map_err(lost)?;
            s.file.sync_all().map_err(lost)?;
        }
        Ok(())
    }

    /// The stream ended: the log must reach `want` exactly. A shard with no record after its
    /// snapshot gets an empty segment starting after it, as a live log has.
    fn finish(&mut self, want: u64) -> Result<(), CliError> {
        if self.snapshot.is_some() || self.next != want + 1 {
            return Err(protocol(format!(
                "shard {}: the stream ended at offset {} but the cut is {want}",
                self.index,
                self.next - 1
            )));
        }
        if self.next == self.base + 1 && self.segment.is_none() {
            self.segment = Some(self.new_segment(self.next)?);
        }
        self.close_segment()?;
        let shard = self.wal.parent().unwrap_or(&self.wal).to_path_buf();
        for d in [&self.wal, &self.snaps, &shard] {
            sync_dir(d)?;
        }
        Ok(())
    }
}

/// `smdb.meta`, as `src/datadir.rs` writes it.
fn write_meta(dir: &Path, shards: u32) -> Result<(), CliError> {
    let meta = json!({"format_version": DATA_DIR_FORMAT_VERSION, "shard_count": shards});
    write_synced(&dir.join("smdb.meta"), meta.to_string().as_bytes())
}

fn manifest(dir: &Path, cut: &Cut) -> Result<Manifest, CliError> {
    let mut files = Vec::new();
    for path in files_under(dir).map_err(|e| io(dir, e))? {
        if path == MANIFEST {
            continue;
        }
        let (bytes, crc) = describe(&dir.join(&path)).map_err(|e| io(&dir.join(&path), e))?;
        files.push(FileEntry {
            path,
            bytes,
            crc32c: format!("{crc:08x}"),
        });
    }
    Ok(Manifest {
        created_at: rfc3339_now(),
        server_version: cut.server_version.clone(),
        epoch: cut.epoch,
        shards: cut.shards,
        positions: cut.positions.clone(),
        files,
    })
}

/// `backup.json`, last: written, fsynced, and the directory fsynced.
fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), CliError> {
    let text = serde_json::to_vec_pretty(m).map_err(protocol)?;
    write_synced(&dir.join(MANIFEST), &text)?;
    sync_dir(dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let mut f = File::create(path).map_err(|e| io(path, e))?;
    f.write_all(bytes).map_err(|e| io(path, e))?;
    f.sync_all().map_err(|e| io(path, e))
}

fn sync_dir(dir: &Path) -> Result<(), CliError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

/// Now as RFC 3339 UTC with seconds (`2026-11-28T11:40:00Z`).
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 as (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn io(path: &Path, e: std::io::Error) -> CliError {
    CliError::new(
        Kind::Usage,
        crate::error::USAGE,
        format!("{}: {e}", path.display()),
    )
}

fn lost(e: std::io::Error) -> CliError {
    CliError::new(Kind::Connection, CONNECTION_LOST, format!("backup: {e}"))
}

fn protocol(e: impl std::fmt::Display) -> CliError {
    CliError::new(Kind::Connection, PROTOCOL_ERROR, format!("backup: {e}"))
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn days_become_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_785), (2026, 11, 28));
    }
}
