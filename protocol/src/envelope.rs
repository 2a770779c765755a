//! Request envelopes in, response envelopes out (docs/protocol.md, "Envelopes").
//!
//! The front only parses the envelope (`type`, `id`, `op`) and keeps `params` as raw JSON: the
//! owning shard parses params, so the front core (the bottleneck) does the least work per frame.

use std::borrow::Cow;

use crate::codes::{ErrorCode, Rejection};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::frame::{begin_frame, finish_frame};

/// A parsed request envelope borrowing from the frame payload.
#[derive(Debug)]
pub struct RequestEnvelope<'a> {
    /// The request id as raw JSON text (a string or an integer), echoed verbatim.
    pub id: &'a str,
    pub op: Cow<'a, str>,
    /// Raw JSON of `params`; `None` when absent or null.
    pub params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "opt_cow")]
    op: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// An optional string borrowed from the payload unless it has escapes. (`#[serde(borrow)]`
/// alone does not borrow through an `Option`: serde copied both strings of every request.)
fn opt_cow<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }
    d.deserialize_option(Text)
}

/// A payload that is valid JSON framing-wise but not a request. `id` is the raw request id when
/// it could be read, so the error response can echo it.
#[derive(Debug)]
pub struct BadRequest<'a> {
    pub id: Option<&'a str>,
    pub message: String,
}

/// Parses a request payload. Any failure is a `BAD_REQUEST` the connection survives.
pub fn parse_request(payload: &[u8]) -> Result<RequestEnvelope<'_>, BadRequest<'_>> {
    let wire: Wire<'_> = match serde_json::from_slice(payload) {
        Ok(w) => w,
        Err(e) => {
            return Err(BadRequest {
                id: None,
                message: format!("payload is not a JSON request object: {e}"),
            })
        }
    };
    let id = wire.id.map(RawValue::get).filter(|raw| is_usable_id(raw));
    let bad = |message: &str| BadRequest {
        id,
        message: message.to_string(),
    };
    if wire.kind.as_deref() != Some("request") {
        return Err(bad("field `type` must be \"request\""));
    }
    let Some(id) = id else {
        return Err(bad(
            "field `id` is required and must be a string or an integer",
        ));
    };
    let Some(op) = wire.op else {
        return Err(bad("field `op` is required and must be a string"));
    };
    let params = match wire.params {
        Some(p) if p.get() == "null" => None,
        Some(p) if !p.get().starts_with('{') => {
            return Err(bad("field `params` must be an object"));
        }
        other => other,
    };
    Ok(RequestEnvelope { id, op, params })
}

/// A request id we echo: a JSON string or integer (raw text from the client's payload).
fn is_usable_id(raw: &str) -> bool {
    let b = raw.as_bytes();
    match b.first() {
        Some(b'"') => true,
        Some(b'-' | b'0'..=b'9') => b.iter().skip(1).all(u8::is_ascii_digit),
        _ => false,
    }
}

/// Appends a success frame `{"type":"response","id":ID,"status":"ok","result":RESULT}`.
/// `result` must be the JSON text of an object.
pub fn encode_ok(out: &mut Vec<u8>, id: &str, result: &[u8]) {
    let start = begin_frame(out);
    out.extend_from_slice(br#"{"type":"response","id":"#);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(br#","status":"ok","result":"#);
    out.extend_from_slice(result);
    out.push(b'}');
    finish_frame(out, start);
}

/// Appends an error frame. `id` is the raw request id, or `None` for `null`.
pub fn encode_error(out: &mut Vec<u8>, id: Option<&str>, rejection: &Rejection) {
    let start = begin_frame(out);
    out.extend_from_slice(br#"{"type":"response","id":"#);
    out.extend_from_slice(id.unwrap_or("null").as_bytes());
    out.extend_from_slice(br#","status":"error","error":"#);
    let body = serde_json::json!({
        "code": rejection.code.as_str(),
        "message": rejection.message,
        "retryable": rejection.code.retryable(),
        "details": rejection.details,
    });
    // Serialising a Value into a Vec cannot fail: no I/O, and every key is a string.
    let _ = serde_json::to_writer(&mut *out, &body);
    out.push(b'}');
    finish_frame(out, start);
}

/// Convenience: a rejection with a code and message, for errors raised by the front.
pub fn rejection(code: ErrorCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};

    fn payload_of(frame: &[u8]) -> serde_json::Value {
        let (range, _) = decode_frame(frame, FRAME_PAYLOAD_BYTES_DEFAULT)
            .unwrap()
            .unwrap();
        serde_json::from_slice(&frame[range]).unwrap()
    }

    #[test]
    fn parses_a_request_with_params() {
        let p = br#"{"type":"request","id":"7","op":"GET_INSTANCE","params":{"id":"a"}}"#;
        let r = parse_request(p).unwrap();
        assert_eq!(r.id, "\"7\"");
        assert_eq!(r.op, "GET_INSTANCE");
        assert_eq!(r.params.unwrap().get(), r#"{"id":"a"}"#);
    }

    #[test]
    fn type_and_op_borrow_unless_escaped_and_null_counts_as_absent() {
        let r = parse_request(br#"{"type":"request","id":1,"op":"PING"}"#).unwrap();
        assert!(matches!(r.op, Cow::Borrowed("PING")));
        let r = parse_request(br#"{"type":"req\u0075est","id":1,"op":"P\u0049NG"}"#).unwrap();
        assert!(matches!(r.op, Cow::Owned(ref op) if op == "PING"));
        let e = parse_request(br#"{"type":"request","id":1,"op":null}"#).unwrap_err();
        assert!(e.message.contains("`op` is required"), "{}", e.message);
        let e = parse_request(br#"{"type":"request","id":1,"op":5}"#).unwrap_err();
        assert!(
            e.message.contains("not a JSON request object"),
            "{}",
            e.message
        );
    }

    #[test]
    fn missing_op_echoes_the_id() {
        let e = parse_request(br#"{"type":"request","id":12}"#).unwrap_err();
        assert_eq!(e.id, Some("12"));
    }

    #[test]
    fn non_object_payload_is_bad_request_without_id() {
        assert!(parse_request(b"[1,2]").unwrap_err().id.is_none());
        assert!(parse_request(b"not json").unwrap_err().id.is_none());
    }

    #[test]
    fn params_must_be_an_object() {
        let e = parse_request(br#"{"type":"request","id":"1","op":"PING","params":[1]}"#);
        assert!(e.unwrap_err().message.contains("params"));
    }

    #[test]
    fn encodes_ok_and_error_envelopes() {
        let mut out = Vec::new();
        encode_ok(&mut out, "\"1\"", br#"{"pong":true}"#);
        assert_eq!(
            payload_of(&out),
            serde_json::json!({"type":"response","id":"1","status":"ok","result":{"pong":true}})
        );
        let mut out = Vec::new();
        let rej = Rejection::new(ErrorCode::InstanceNotFound, "no such instance").with("id", "x");
        encode_error(&mut out, None, &rej);
        let v = payload_of(&out);
        assert_eq!(v["id"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], "INSTANCE_NOT_FOUND");
        assert_eq!(v["error"]["retryable"], false);
        assert_eq!(v["error"]["details"]["id"], "x");
    }
}
