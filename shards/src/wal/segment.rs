//! Segment files: the codec and names are the format crate's (`smdb_format::segment`); here,
//! the listings as the WAL reports their errors.

use std::path::Path;

use super::error::WalError;
pub use smdb_format::segment::{
    decode_epoch, decode_header, encode_epoch, encode_header, segment_path, Listing, SegmentHeader,
    SEGMENT_EXT, TMP_SUFFIX,
};

/// Lists `<20 digits>.<ext>` files and `*.tmp` leftovers in `dir`; warns about anything else.
pub fn list_numbered(dir: &Path, ext: &str) -> Result<Listing, WalError> {
    smdb_format::segment::list_numbered(dir, ext).map_err(|e| WalError::std_io("list", dir, e))
}

pub fn list_segments(wal_dir: &Path) -> Result<Listing, WalError> {
    list_numbered(wal_dir, SEGMENT_EXT)
}
