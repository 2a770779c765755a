//! Every size limit of the WAL, with its unit and the reason for its value. The sizes that
//! define the on-disk layout are the format crate's (`smdb_format::limits`), re-exported here.

pub use smdb_format::limits::*;

/// Bytes. The largest entry a log with segments of `segment_bytes` accepts: a record (with a
/// sync marker after it) must fit in one segment after its header, and in the format's limit.
pub const fn record_payload_max(segment_bytes: u64) -> usize {
    let room = (segment_bytes.saturating_sub(SEGMENT_HEADER_BYTES) as usize)
        .saturating_sub(MARKER_BYTES + RECORD_HEADER_BYTES);
    if room < RECORD_PAYLOAD_BYTES_MAX {
        room
    } else {
        RECORD_PAYLOAD_BYTES_MAX
    }
}

/// Bytes. Largest single `write_at`. Bigger batches are split into several writes before the
/// one fdatasync, which bounds the DMA buffer a batch needs.
pub const WRITE_BYTES_MAX: usize = 4 << 20;

/// Bytes. A batch buffer larger than this is freed after its commit instead of being reused,
/// so one burst does not pin its memory for the life of the shard.
pub const BATCH_REUSE_BYTES_MAX: usize = 4 << 20;

/// Bytes. Smallest segment accepted: header plus a few blocks (tests use small segments to
/// exercise rotation).
pub const SEGMENT_BYTES_MIN: u64 = 16 << 10;

/// Bytes. Largest segment accepted: recovery reads the whole newest segment at open, so this
/// bounds the cost of a restart.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Bytes. Default segment size.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

/// Bytes. Default amount of log kept behind the newest snapshot for readers.
pub const RETAIN_BYTES_DEFAULT: u64 = 256 << 20;

/// Bytes. Buffer size of the streaming reader used by `read_from` and snapshot loads; 128 KiB
/// with read-ahead 4 measured fastest (1.5 GB/s) for a bare read on the target VM (docs/glommio.md
/// §4), and keeps a reader's buffers at 640 KiB, of which a shard may run several.
pub const READ_CHUNK_BYTES: usize = 128 << 10;

/// Buffers of read-ahead for the streaming reader (see `READ_CHUNK_BYTES`).
pub const READ_AHEAD_BUFFERS: usize = 4;

/// Bytes. Buffer size of recovery's scan at open. Recovery also decodes and applies every
/// record, so the disk gets fewer chances to run ahead; with 128 KiB × 4 the scan alone
/// (read, CRC, decode) took 0.66 s for 1.09M records, with 512 KiB × 8 0.36–0.44 s. One scan
/// runs per shard, only at open, so its 4.5 MiB are spent once.
pub const RECOVERY_READ_CHUNK_BYTES: usize = 512 << 10;

/// Buffers of read-ahead for recovery's scan (see `RECOVERY_READ_CHUNK_BYTES`).
pub const RECOVERY_READ_AHEAD_BUFFERS: usize = 8;

/// Bytes. One write of a snapshot file (`SnapshotWriter`): one is in flight at a time, so a
/// snapshot never queues more than this ahead of the log's own writes on the device.
pub const SNAPSHOT_WRITE_BYTES: usize = 1 << 20;

/// Snapshots kept on disk: the newest, and one older to fall back to if the newest is damaged.
pub const SNAPSHOTS_KEPT: usize = 2;

/// Bytes. Distance between entries of a segment's sparse in-memory offset index, so
/// `read_from` starts near its target instead of at the segment start.
pub const INDEX_STRIDE_BYTES: u64 = 256 << 10;

const _: () = assert!(WRITE_BYTES_MAX as u64 % BLOCK_BYTES == 0);
const _: () = assert!(SEGMENT_BYTES_MIN % BLOCK_BYTES == 0);
const _: () = assert!(SEGMENT_BYTES_DEFAULT % BLOCK_BYTES == 0);
const _: () = assert!(SEGMENT_BYTES_MIN > SEGMENT_HEADER_BYTES + 2 * BLOCK_BYTES);
const _: () = assert!(SEGMENT_BYTES_DEFAULT >= SEGMENT_BYTES_MIN);
const _: () = assert!(SEGMENT_BYTES_MAX >= SEGMENT_BYTES_DEFAULT);
const _: () = assert!(WRITE_BYTES_MAX as u64 > 2 * BLOCK_BYTES);
const _: () = assert!(READ_CHUNK_BYTES as u64 % BLOCK_BYTES == 0);
const _: () = assert!(SNAPSHOT_WRITE_BYTES as u64 % BLOCK_BYTES == 0);
const _: () = assert!(RECOVERY_READ_CHUNK_BYTES as u64 % BLOCK_BYTES == 0);
