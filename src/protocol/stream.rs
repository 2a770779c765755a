//! The replication stream on the wire (docs/replication.md): after `REPLICATE` succeeds, the
//! primary sends `stream` frames (entries, snapshot parts, heartbeats) and the replica sends
//! `ack` frames. All are ordinary RCP1 frames with a JSON payload; log records travel as
//! base64 text, byte for byte as they are in the primary's log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::base64;
use crate::protocol::frame::{begin_frame, finish_frame};

/// Records per `entries` frame, at most.
pub const ENTRIES_PER_FRAME_MAX: usize = 512;
/// Record bytes per `entries` frame (the first record always goes, whatever its size).
pub const ENTRY_BYTES_PER_FRAME_MAX: usize = 1 << 20;
/// Bytes of snapshot per `snapshot` frame (well under the default 16 MiB frame limit, after
/// base64).
pub const SNAPSHOT_PART_BYTES: usize = 4 << 20;

/// `REPLICATE` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicateParams {
    pub replica_id: String,
    /// The highest epoch the replica has seen.
    #[serde(default)]
    pub epoch: u64,
    /// The replica's durable head per shard ("0": offset, ...).
    pub positions: BTreeMap<String, u64>,
    /// The epoch of the replica's last entry per shard.
    #[serde(default)]
    pub epochs: BTreeMap<String, u64>,
    /// The snapshot formats the replica reads (`smdb_format::snapshot`); absent from a replica
    /// built before streamed snapshots, which reads format 1 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_versions: Option<Vec<u32>>,
}

/// What a replica that does not say reads: format 1 (one JSON document).
pub const SNAPSHOT_VERSIONS_UNSAID: &[u32] = &[1];

/// `REPLICATE` result: per shard, the offset up to which both logs agree (the replica
/// truncates whatever follows it), and the primary's heads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicateResult {
    pub epoch: u64,
    pub shards: u32,
    pub agree: BTreeMap<String, u64>,
    pub heads: BTreeMap<String, u64>,
    /// The fewest milliseconds between two acks that only move positions (heartbeat acks
    /// aside): 0 from a sync primary (its writes wait for them), `ASYNC_ACK_EVERY_MS` from an
    /// async one (each ack wakes the primary's control executor through a front).
    #[serde(default)]
    pub ack_every_ms: u64,
}

/// What an async primary asks of its replicas' acks (`ReplicateResult::ack_every_ms`).
pub const ASYNC_ACK_EVERY_MS: u64 = 5;

/// One frame from the primary after `REPLICATE`.
#[derive(Debug, Deserialize)]
pub struct StreamFrame {
    #[serde(rename = "type")]
    pub kind_of: String,
    /// Absent on a `response` (e.g. `SHUTTING_DOWN` while the primary drains), which the
    /// follower skips.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub shard: u32,
    #[serde(default)]
    pub epoch: u64,
    #[serde(default)]
    pub first: u64,
    #[serde(default)]
    pub time_ms: u64,
    #[serde(default)]
    pub entries: Vec<String>,
    #[serde(default)]
    pub offset: u64,
    #[serde(default)]
    pub part: u32,
    #[serde(default)]
    pub last: bool,
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub heads: BTreeMap<String, u64>,
    /// `heartbeat`, failover in sync mode: per shard, the offset the sync set acknowledged.
    #[serde(default)]
    pub committed: Option<BTreeMap<String, u64>>,
    /// `snapshot`: the payload's format (absent from older primaries: 1).
    #[serde(default)]
    pub version: Option<u32>,
    /// `snapshot`: the payload's length in bytes.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// `snapshot`: the payload's CRC32C.
    #[serde(default)]
    pub crc: Option<u32>,
    /// `error`: why the primary ends the stream.
    #[serde(default)]
    pub message: String,
}

/// A replica's acknowledgement: every shard's durable offset.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ack {
    #[serde(rename = "type")]
    pub kind_of: String,
    pub epoch: u64,
    pub positions: BTreeMap<String, u64>,
}

/// Appends one `entries` frame: `records[k]` is the record at offset `first + k`.
pub fn entries_frame(
    out: &mut Vec<u8>,
    shard: u32,
    epoch: u64,
    first: u64,
    time_ms: u64,
    records: &[Vec<u8>],
) {
    let start = begin_frame(out);
    out.extend_from_slice(
        format!(
            "{{\"type\":\"stream\",\"kind\":\"entries\",\"shard\":{shard},\"epoch\":{epoch},\
             \"first\":{first},\"time_ms\":{time_ms},\"entries\":["
        )
        .as_bytes(),
    );
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        base64::encode_into(r, out);
        out.push(b'"');
    }
    out.extend_from_slice(b"]}");
    finish_frame(out, start);
}

/// What a `snapshot` frame says about the whole snapshot it is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub shard: u32,
    pub epoch: u64,
    /// The state as of this offset.
    pub offset: u64,
    /// Payload format, length and CRC32C (the snapshot file's header).
    pub version: u32,
    pub bytes: u64,
    pub crc: u32,
}

/// Appends one `snapshot` frame carrying `data`, part `part` of the snapshot `info` describes.
pub fn snapshot_frame(out: &mut Vec<u8>, info: &SnapshotInfo, part: u32, last: bool, data: &[u8]) {
    let SnapshotInfo {
        shard,
        epoch,
        offset,
        version,
        bytes,
        crc,
    } = *info;
    let start = begin_frame(out);
    out.extend_from_slice(
        format!(
            "{{\"type\":\"stream\",\"kind\":\"snapshot\",\"shard\":{shard},\"epoch\":{epoch},\
             \"offset\":{offset},\"version\":{version},\"bytes\":{bytes},\"crc\":{crc},\
             \"part\":{part},\"last\":{last},\"data\":\""
        )
        .as_bytes(),
    );
    base64::encode_into(data, out);
    out.extend_from_slice(b"\"}");
    finish_frame(out, start);
}

/// Appends one `error` frame: the primary ends the stream, and says why.
pub fn error_frame(out: &mut Vec<u8>, epoch: u64, message: &str) {
    let start = begin_frame(out);
    let body = serde_json::json!({
        "type": "stream",
        "kind": "error",
        "epoch": epoch,
        "message": message,
    });
    out.extend_from_slice(body.to_string().as_bytes());
    finish_frame(out, start);
}

/// Appends one `heartbeat` frame with the primary's durable heads and clock, and, from a
/// primary under failover in sync mode, `committed`: per shard, the offset its sync set has
/// acknowledged (a follower holds its pushes until it, docs/ha.md "Subscriptions across
/// terms"). A follower that does not read `committed` ignores it.
pub fn heartbeat_frame(
    out: &mut Vec<u8>,
    epoch: u64,
    heads: &[u64],
    committed: Option<&[u64]>,
    time_ms: u64,
) {
    // Written by hand, not through serde_json: in sync mode one goes out at every move of
    // the acknowledged offset, to every replica.
    let start = begin_frame(out);
    out.extend_from_slice(
        format!("{{\"type\":\"stream\",\"kind\":\"heartbeat\",\"epoch\":{epoch},\"heads\":")
            .as_bytes(),
    );
    write_positions(out, heads);
    if let Some(c) = committed {
        out.extend_from_slice(b",\"committed\":");
        write_positions(out, c);
    }
    out.extend_from_slice(format!(",\"time_ms\":{time_ms}}}").as_bytes());
    finish_frame(out, start);
}

/// `[a, b]` as the JSON object `{"0":a,"1":b}` (`positions_map`'s form), appended to `out`.
fn write_positions(out: &mut Vec<u8>, values: &[u64]) {
    out.push(b'{');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(format!("\"{i}\":{v}").as_bytes());
    }
    out.push(b'}');
}

/// Appends one `ack` frame.
pub fn ack_frame(out: &mut Vec<u8>, epoch: u64, positions: &[u64]) {
    let ack = Ack {
        kind_of: "ack".into(),
        epoch,
        positions: positions_map(positions),
    };
    let start = begin_frame(out);
    // Serialising a struct of integers and strings cannot fail.
    let _ = serde_json::to_writer(&mut *out, &ack);
    finish_frame(out, start);
}

/// `[a, b]` as `{"0": a, "1": b}`.
pub fn positions_map(values: &[u64]) -> BTreeMap<String, u64> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (i.to_string(), *v))
        .collect()
}

/// `{"0": a, "1": b}` as `[a, b]` for `shards` shards; a missing shard reads as 0, a key that
/// is not a shard index of `0..shards` is an error naming it.
pub fn positions_vec(map: &BTreeMap<String, u64>, shards: u32) -> Result<Vec<u64>, String> {
    let mut out = vec![0; shards as usize];
    for (k, v) in map {
        match k.parse::<u32>() {
            Ok(i) if i < shards => out[i as usize] = *v,
            _ => return Err(format!("no shard {k:?} (the primary has {shards})")),
        }
    }
    Ok(out)
}

/// Decodes the records of an `entries` frame.
pub fn decode_entries(frame: &StreamFrame) -> Result<Vec<Vec<u8>>, String> {
    frame
        .entries
        .iter()
        .map(|e| base64::decode(e.as_bytes()).ok_or_else(|| "bad base64 in entries".to_string()))
        .collect()
}

pub fn decode_data(frame: &StreamFrame) -> Result<Vec<u8>, String> {
    base64::decode(frame.data.as_bytes()).ok_or_else(|| "bad base64 in snapshot".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::decode_frame;

    fn payload(frame: &[u8]) -> &[u8] {
        let (range, used) = decode_frame(frame, 1 << 24).unwrap().unwrap();
        assert_eq!(used, frame.len());
        &frame[range]
    }

    #[test]
    fn entries_round_trip_byte_for_byte() {
        let records = vec![vec![0u8, 1, 2, 255], vec![], b"{\"x\":1}".to_vec()];
        let mut out = Vec::new();
        entries_frame(&mut out, 1, 2, 40, 99, &records);
        let f: StreamFrame = serde_json::from_slice(payload(&out)).unwrap();
        assert_eq!(
            (f.kind.as_str(), f.shard, f.epoch, f.first),
            ("entries", 1, 2, 40)
        );
        assert_eq!(decode_entries(&f).unwrap(), records);
    }

    #[test]
    fn snapshot_heartbeat_and_ack_frames_parse() {
        let mut out = Vec::new();
        let info = SnapshotInfo {
            shard: 0,
            epoch: 3,
            offset: 77,
            version: 2,
            bytes: 5,
            crc: 4_000_000_000,
        };
        snapshot_frame(&mut out, &info, 2, true, b"state");
        let f: StreamFrame = serde_json::from_slice(payload(&out)).unwrap();
        assert_eq!((f.offset, f.part, f.last), (77, 2, true));
        assert_eq!(
            (f.version, f.bytes, f.crc),
            (Some(2), Some(5), Some(4_000_000_000))
        );
        assert_eq!(decode_data(&f).unwrap(), b"state");
        // A frame from an older primary says none of these.
        let old =
            br#"{"type":"stream","kind":"snapshot","offset":7,"part":0,"last":true,"data":""}"#;
        let f: StreamFrame = serde_json::from_slice(old).unwrap();
        assert_eq!((f.version, f.bytes, f.crc), (None, None, None));
        let mut out = Vec::new();
        error_frame(&mut out, 3, "upgrade replicas first");
        let f: StreamFrame = serde_json::from_slice(payload(&out)).unwrap();
        assert_eq!(
            (f.kind.as_str(), f.message.as_str()),
            ("error", "upgrade replicas first")
        );
        let mut out = Vec::new();
        heartbeat_frame(&mut out, 3, &[5, 6], None, 1000);
        let f: StreamFrame = serde_json::from_slice(payload(&out)).unwrap();
        assert_eq!(positions_vec(&f.heads, 2).unwrap(), vec![5, 6]);
        assert_eq!(f.committed, None);
        let mut out = Vec::new();
        heartbeat_frame(&mut out, 3, &[5, 6], Some(&[4, 6]), 1000);
        let f: StreamFrame = serde_json::from_slice(payload(&out)).unwrap();
        let committed = f.committed.unwrap();
        assert_eq!(positions_vec(&committed, 2).unwrap(), vec![4, 6]);
        let mut out = Vec::new();
        ack_frame(&mut out, 3, &[4, 6]);
        let a: Ack = serde_json::from_slice(payload(&out)).unwrap();
        assert_eq!((a.kind_of.as_str(), a.epoch), ("ack", 3));
        assert_eq!(positions_vec(&a.positions, 2).unwrap(), vec![4, 6]);
        assert!(positions_vec(&a.positions, 1).is_err());
    }
}
