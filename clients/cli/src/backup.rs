//! Backups on the client's side (docs/backup.md): the manifest and `--verify` live in
//! `smdb_format::verify`, shared with `smdb-server restore`.

pub use smdb_format::verify::{describe, files_under, verify, FileEntry, Manifest, MANIFEST};
