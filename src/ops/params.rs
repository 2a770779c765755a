//! Parsing raw `params` JSON into typed structs, with `BAD_REQUEST` on any mismatch.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use shards::engine::limits::INSTANCE_ID_BYTES_MAX;
use shards::{ErrorCode, Rejection};

/// Parses `params` (absent means `{}`) into `T`.
pub fn parse<T: DeserializeOwned>(raw: Option<&[u8]>) -> Result<T, Rejection> {
    serde_json::from_slice(raw.unwrap_or(b"{}"))
        .map_err(|e| Rejection::new(ErrorCode::BadRequest, format!("invalid params: {e}")))
}

/// The instance id a routed request names, read leniently on the front core (other fields are
/// skipped, full validation happens on the shard).
#[derive(Deserialize)]
pub struct RouteKey<'a> {
    #[serde(borrow, default)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    instance_id: Option<std::borrow::Cow<'a, str>>,
}

/// Extracts the routing id from raw params: `instance_id` first, then `id`.
pub fn route_key(raw: Option<&[u8]>) -> Result<String, Rejection> {
    let key: RouteKey<'_> = parse_borrowed(raw.unwrap_or(b"{}"))?;
    key.instance_id
        .or(key.id)
        .map(|c| c.into_owned())
        .ok_or_else(|| Rejection::new(ErrorCode::BadRequest, "params.id is required"))
}

fn parse_borrowed<'a, T: Deserialize<'a>>(raw: &'a [u8]) -> Result<T, Rejection> {
    serde_json::from_slice(raw)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_key_prefers_instance_id_and_skips_other_fields() {
        let raw = br#"{"payload":{"deep":[1,2,{"id":"no"}]},"instance_id":"a\"b"}"#;
        assert_eq!(route_key(Some(raw)).unwrap(), "a\"b");
        assert_eq!(route_key(Some(br#"{"id":"x"}"#)).unwrap(), "x");
        assert_eq!(route_key(None).unwrap_err().code, ErrorCode::BadRequest);
    }
}
