//! Limits that must fit inside one another, checked in one place: at compile time where both
//! are constants, at config load where one is a setting (docs/architecture.md, "Limits and
//! queue policies").
//!
//! The chain a write travels: a request frame (`network.max_frame_bytes`) becomes one log
//! record (`RECORD_PAYLOAD_BYTES_MAX`, a BATCH included: one record for the whole batch),
//! which a primary ships base64-encoded in one replication `entries` frame that a replica's
//! reader must accept (`STREAM_FRAME_BYTES_MAX`); snapshot parts travel in the same frames.
//! Every record the log accepts therefore reaches every replica: no config can produce an
//! unreplicable record.

use shards::wal::limits::{record_payload_max, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX};

use crate::protocol::stream::{
    ENTRIES_PER_FRAME_MAX, ENTRY_BYTES_PER_FRAME_MAX, SNAPSHOT_PART_BYTES,
};

/// Bytes of base64 text for `n` bytes.
pub const fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Bytes. The JSON around an `entries` frame's records: its fixed members (type, kind, shard,
/// epoch, first, time_ms: under 200 bytes with 20-digit numbers) and, per record, two quotes
/// and a comma.
const ENTRIES_FRAME_OVERHEAD: usize = 256 + 3 * ENTRIES_PER_FRAME_MAX;

/// Bytes. The largest `entries` frame a primary sends: the sender adds records while their
/// bytes stay within `ENTRY_BYTES_PER_FRAME_MAX`, and the first record always goes, so a frame
/// carries at most the larger of that budget and one whole record.
pub const ENTRIES_FRAME_BYTES_MAX: usize = base64_len(max(
    ENTRY_BYTES_PER_FRAME_MAX,
    RECORD_HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX,
)) + ENTRIES_FRAME_OVERHEAD;

/// Bytes. The largest frame a replica reads from its primary (`control::replication::follower`):
/// the largest `entries` frame, rounded up to a MiB.
pub const STREAM_FRAME_BYTES_MAX: u32 = ENTRIES_FRAME_BYTES_MAX.next_multiple_of(1 << 20) as u32;

/// Bytes. The largest `network.max_frame_bytes` a config may set: a write's record holds its
/// request's data (the context, the payload, a BATCH's ops), so a request larger than a record
/// could be accepted on the wire and then refused by the log.
pub const REQUEST_FRAME_BYTES_MAX: u32 = RECORD_PAYLOAD_BYTES_MAX as u32;

// A whole record fits in one replication frame, and that frame in the replica's reader.
const _: () = assert!(ENTRIES_FRAME_BYTES_MAX <= STREAM_FRAME_BYTES_MAX as usize);
const _: () = assert!(
    base64_len(RECORD_HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX) + 256
        <= STREAM_FRAME_BYTES_MAX as usize
);
// A snapshot part, base64-encoded with its JSON members, fits in the same frames.
const _: () = assert!(base64_len(SNAPSHOT_PART_BYTES) + 512 <= STREAM_FRAME_BYTES_MAX as usize);
// The largest request the front may accept fits in one record.
const _: () = assert!(REQUEST_FRAME_BYTES_MAX as usize <= RECORD_PAYLOAD_BYTES_MAX);
// A client reads the largest record back (GET_INSTANCE of the largest context) with its envelope.
const _: () = assert!(
    smdb_protocol::frame::RESPONSE_FRAME_BYTES_MAX as usize >= RECORD_PAYLOAD_BYTES_MAX + (1 << 20)
);
// Frame lengths are u32 on the wire.
const _: () = assert!(ENTRIES_FRAME_BYTES_MAX < u32::MAX as usize);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// Bytes. The largest record a log with segments of `segment_bytes` holds (a record fits in
/// one segment, and in the format's limit).
pub fn record_bytes_max(segment_bytes: u64) -> u32 {
    // At most RECORD_PAYLOAD_BYTES_MAX, which fits in u32 (asserted above).
    record_payload_max(segment_bytes) as u32
}

/// The config-load check of an explicit `network.max_frame_bytes` against the record it must
/// fit in; the message names the keys (the server exits 78 with it).
pub fn check_max_frame_bytes(max_frame_bytes: u32, segment_bytes: u64) -> Result<(), String> {
    if max_frame_bytes > REQUEST_FRAME_BYTES_MAX {
        return Err(format!(
            "network.max_frame_bytes must be <= {REQUEST_FRAME_BYTES_MAX}: a write's log \
             record holds its request, and a record holds at most {RECORD_PAYLOAD_BYTES_MAX} \
             bytes (got {max_frame_bytes})"
        ));
    }
    let record = record_bytes_max(segment_bytes);
    if max_frame_bytes > record {
        return Err(format!(
            "network.max_frame_bytes ({max_frame_bytes}) must be <= {record}, the largest \
             record a segment of storage.segment_bytes = {segment_bytes} holds: raise \
             storage.segment_bytes or lower network.max_frame_bytes"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_entries_frame_fits_the_replicas_reader() {
        // A frame as the sender builds it around one record of the largest size.
        let record = vec![0x5a; RECORD_HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX];
        let mut out = Vec::new();
        crate::protocol::stream::entries_frame(
            &mut out,
            u32::MAX,
            u64::MAX,
            u64::MAX,
            u64::MAX,
            &[record],
        );
        let payload = out.len() - crate::protocol::HEADER_LEN;
        assert!(payload <= ENTRIES_FRAME_BYTES_MAX, "{payload}");
        assert!(payload <= STREAM_FRAME_BYTES_MAX as usize);
    }

    #[test]
    fn a_frame_limit_above_a_record_is_refused_naming_the_keys() {
        let big_segments = 256 << 20;
        assert!(check_max_frame_bytes(16 << 20, 64 << 20).is_ok());
        assert!(check_max_frame_bytes(REQUEST_FRAME_BYTES_MAX, big_segments).is_ok());
        let e = check_max_frame_bytes(104_857_600, big_segments).unwrap_err();
        assert!(e.starts_with("network.max_frame_bytes"), "{e}");
        let e = check_max_frame_bytes(16 << 20, 1 << 20).unwrap_err();
        assert!(e.contains("storage.segment_bytes"), "{e}");
        assert!(record_bytes_max(1 << 20) < 1 << 20);
        assert_eq!(record_bytes_max(1 << 30) as usize, RECORD_PAYLOAD_BYTES_MAX);
    }
}
