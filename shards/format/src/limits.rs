//! The sizes that define smdb's on-disk layout, with their units and reasons. The WAL's
//! run-time limits (write and read sizes, segment bounds) stay in `shards::wal::limits`.

/// Bytes. The unit of every DMA write and of the tail-block rewrite. `DmaFile::alignment()`
/// reports the logical block (512 here) but the physical sector is 4096: aligning to 4096 is
/// correct on both and keeps a rewritten tail block within one physical sector.
pub const BLOCK_BYTES: u64 = 4096;

/// Bytes. A segment starts with one block holding its header, so records start aligned.
pub const SEGMENT_HEADER_BYTES: u64 = BLOCK_BYTES;

/// Bytes. Snapshot header block; the payload starts at this offset.
pub const SNAPSHOT_HEADER_BYTES: u64 = BLOCK_BYTES;

/// Bytes. Largest snapshot payload of version 1 (one JSON document): the engine parses it
/// from one slice in memory.
pub const SNAPSHOT_JSON_BYTES_MAX: u64 = 4 << 30;

/// Bytes. Largest snapshot payload of version 2 (streamed items): nothing holds it whole, so
/// this only stops a damaged length field from sending a reader on an endless read; far above
/// what a shard's memory can hold at ~100 bytes per instance.
pub const SNAPSHOT_BYTES_MAX: u64 = 1 << 40;

/// Bytes. Largest item of a version-2 snapshot: a loader holds one item whole (an instance
/// with its history and idempotency records). An instance keeps at most 1000 history items
/// and 1024 keys, so only payloads of megabytes each come near; a walk that meets a larger
/// record gives the snapshot up (logged) rather than write what no loader would take.
pub const SNAPSHOT_ITEM_BYTES_MAX: usize = 1 << 30;

/// Bytes. Read size of `snapshot::check` (offline tools).
pub const SNAPSHOT_READ_CHUNK_BYTES: usize = 1 << 20;

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

// A record length is stored as u32.
const _: () = assert!(RECORD_PAYLOAD_BYTES_MAX + RECORD_BODY_OVERHEAD < u32::MAX as usize);
const _: () = assert!(MARKER_BYTES == RECORD_HEADER_BYTES + MARKER_PAYLOAD_BYTES);
const _: () = assert!(SNAPSHOT_JSON_BYTES_MAX < SNAPSHOT_BYTES_MAX);
