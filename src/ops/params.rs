//! Parsing raw `params` JSON into typed structs, with `BAD_REQUEST` on any mismatch.

use serde::de::DeserializeOwned;
use shards::engine::limits::INSTANCE_ID_BYTES_MAX;
use shards::{ErrorCode, Rejection};

/// Parses `params` (absent means `{}`) into `T`. Params that are not an object are refused
/// first (`check_object`).
pub fn parse<T: DeserializeOwned>(raw: Option<&[u8]>) -> Result<T, Rejection> {
    let raw = raw.unwrap_or(b"{}");
    check_object(raw)?;
    serde_json::from_slice(raw)
        .map_err(|e| Rejection::new(ErrorCode::BadRequest, format!("invalid params: {e}")))
}

/// `BAD_REQUEST` unless `raw` is an object (after JSON whitespace), with the message the
/// envelope gives a request whose params are not one (`protocol::message::parse_request`).
/// A BATCH op's params reach the parsers without that check, and serde reads an array into a
/// struct by position: `["x","go"]` was APPLY_EVENT `{instance_id:"x", event:"go"}` to
/// `parse` but `{id:"x", instance_id:"go"}` to `route_key`, which routed it by `go`
/// (docs/protocol.md, BATCH: an op's params are exactly what the op takes alone).
pub fn check_object(raw: &[u8]) -> Result<(), Rejection> {
    match raw
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        Some(b'{') => Ok(()),
        _ => Err(Rejection::new(
            ErrorCode::BadRequest,
            "field `params` must be an object",
        )),
    }
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
    fn params_that_are_not_an_object_are_refused() {
        for raw in [&b"{}"[..], b" \n\t{\"a\":1}", b"{"] {
            assert_eq!(check_object(raw), Ok(()), "{raw:?}");
        }
        for raw in [
            &b"[\"x\",\"go\"]"[..],
            b"\"x\"",
            b"7",
            b"null",
            b"",
            b"\x0c{}",
        ] {
            let e = check_object(raw).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{raw:?}");
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Two {
            a: String,
            b: String,
        }
        // serde alone would read the array by position.
        assert!(serde_json::from_slice::<Two>(br#"["x","go"]"#).is_ok());
        assert!(parse::<Two>(Some(br#"["x","go"]"#)).is_err());
    }
}
