//! Parsing raw `params` JSON into typed structs, with `BAD_REQUEST` on any mismatch.

use serde::de::DeserializeOwned;
use shards::engine::limits::INSTANCE_ID_BYTES_MAX;
use shards::{ErrorCode, Rejection};

/// Parses `params` (absent means `{}`) into `T`.
pub fn parse<T: DeserializeOwned>(raw: Option<&[u8]>) -> Result<T, Rejection> {
    serde_json::from_slice(raw.unwrap_or(b"{}"))
        .map_err(|e| Rejection::new(ErrorCode::BadRequest, format!("invalid params: {e}")))
}

/// Checks an instance id: non-empty and at most `INSTANCE_ID_BYTES_MAX` bytes.
pub fn check_id(id: &str) -> Result<(), Rejection> {
    if id.is_empty() {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            "id must not be empty",
        ));
    }
    if id.len() > INSTANCE_ID_BYTES_MAX {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            format!(
                "id is {} bytes; the limit is {INSTANCE_ID_BYTES_MAX}",
                id.len()
            ),
        ));
    }
    Ok(())
}
