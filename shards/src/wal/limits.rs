//! Every size limit of the WAL, with its unit and the reason for its value.

/// Bytes. The unit of every DMA write and of the tail-block rewrite. `DmaFile::alignment()`
/// reports the logical block (512 here) but the physical sector is 4096: aligning to 4096 is
/// correct on both and keeps a rewritten tail block within one physical sector.
pub const BLOCK_BYTES: u64 = 4096;

/// Bytes. A segment starts with one block holding its header, so records start aligned.
pub const SEGMENT_HEADER_BYTES: u64 = BLOCK_BYTES;

/// Bytes. Snapshot header block; the payload starts at this offset.
pub const SNAPSHOT_HEADER_BYTES: u64 = BLOCK_BYTES;

/// Bytes: `len u32 | crc u32 | offset u64 | kind u8`.
pub const RECORD_HEADER_BYTES: usize = 17;

/// Bytes of the CRC-covered body that are not payload: `offset u64 | kind u8`.
pub const RECORD_BODY_OVERHEAD: usize = 9;

/// Bytes. Largest entry payload. The engine's entries are kilobytes; anything near this is a
/// bug upstream, and recovery buffers a whole record in memory.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = 64 << 20;

/// Bytes. Payload of a sync marker record: the `synced_through` offset (u64).
pub const MARKER_PAYLOAD_BYTES: usize = 8;

/// Bytes. A whole sync marker record.
pub const MARKER_BYTES: usize = RECORD_HEADER_BYTES + MARKER_PAYLOAD_BYTES;

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
/// with read-ahead 4 measured fastest (1.5 GB/s) for a bare read on the target VM (GLOMMIO.md
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

/// Bytes. Largest snapshot payload: recovery hands it to the engine as one slice in memory.
pub const SNAPSHOT_BYTES_MAX: u64 = 4 << 30;

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
const _: () = assert!(RECOVERY_READ_CHUNK_BYTES as u64 % BLOCK_BYTES == 0);
// A record length is stored as u32.
const _: () = assert!(RECORD_PAYLOAD_BYTES_MAX + RECORD_BODY_OVERHEAD < u32::MAX as usize);
