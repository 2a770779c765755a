//! `smdb-format`: smdb's on-disk formats as plain codecs over bytes and `std::fs`, with no
//! runtime: the shard's WAL (on glommio) and offline tools (backup, verify, restore) read and
//! write the same files through them. docs/wal.md describes every layout.
//!
//! * [`archive`]: the WAL archive's names and per-epoch history files;
//! * [`limits`]: the sizes that define the layout;
//! * [`manifest`]: a backup's `backup.json`;
//! * [`record`]: one log record (`len | crc | offset | kind | payload`) and sync markers;
//! * [`segment`]: segment file names, the header block, directory listings;
//! * [`snapshot`]: snapshot file names, the header block, and a whole-file check;
//! * [`snapshot_items`]: the payload of a version-2 snapshot: framed items and their fields;
//! * [`verify`]: checking a backup directory against its manifest and its files' checksums.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
pub mod archive;
pub mod limits;
pub mod manifest;
pub mod record;
pub mod segment;
pub mod snapshot;
pub mod snapshot_items;
pub mod verify;
