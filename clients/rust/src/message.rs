//! Envelopes (docs/protocol.md, "Envelopes") on the client side: requests out, responses and pushes in.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::frame::{begin_frame, finish_frame};

/// Appends one request frame `{"id":ID,"op":OP,"params":P,"type":"request"}` to `out` (members
/// in the order a `serde_json::Map` keeps them); a `Null` params value leaves `params` out. The
/// JSON is written straight into the frame: no envelope `Value`, no copy of `params`.
pub fn encode_request(out: &mut Vec<u8>, id: &str, op: &str, params: &Value) -> Result<()> {
    let params = (!params.is_null()).then_some(params);
    encode(out, |out| write_json(out, id), op, params)
}

/// `encode_request` with a numeric id (sent as its decimal text, as a string) and any
/// serializable params (`None`: no `params` member): the async client's calls build neither
/// an id string nor a params `Value`.
pub fn encode_request_numbered<P: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    id: u64,
    op: &str,
    params: Option<&P>,
) -> Result<()> {
    let id = |out: &mut Vec<u8>| {
        out.push(b'"');
        write_json(out, &id)?;
        out.push(b'"');
        Ok(())
    };
    encode(out, id, op, params)
}

fn encode<P: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    write_id: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    op: &str,
    params: Option<&P>,
) -> Result<()> {
    let write_params = params.map(|p| move |out: &mut Vec<u8>| write_json(out, p));
    encode_envelope(out, write_id, op, write_params)
}

/// Appends one request frame around an id and params that the caller writes (`write_params`
/// `None`: no params member): the one place that knows the request envelope's layout, for
/// the functions above and for the async client's own params writer.
pub(crate) fn encode_envelope(
    out: &mut Vec<u8>,
    write_id: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    op: &str,
    write_params: Option<impl FnOnce(&mut Vec<u8>) -> Result<()>>,
) -> Result<()> {
    let start = begin_frame(out);
    out.extend_from_slice(b"{\"id\":");
    write_id(out)?;
    out.extend_from_slice(b",\"op\":");
    write_json(out, op)?;
    if let Some(write_params) = write_params {
        out.extend_from_slice(b",\"params\":");
        write_params(out)?;
    }
    out.extend_from_slice(b",\"type\":\"request\"}");
    finish_frame(out, start);
    Ok(())
}

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<()> {
    serde_json::to_writer(out, value).map_err(|e| Error::Protocol(e.to_string()))
}

/// One message from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A response: its request's id (`None` for `id: null`, a frame-level refusal) and the
    /// whole envelope.
    Response { id: Option<String>, envelope: Value },
    /// A subscription push (`type: "event"`).
    Event(Value),
    /// `subscription_lagged`: the subscription ended. `diverged` (`details.diverged`): the
    /// member's log no longer has what was delivered past `resume_cursor` (a failover cut it;
    /// docs/ha.md "Subscriptions across terms"): events after that point may not have happened.
    Lagged {
        subscription_id: Value,
        resume_cursor: String,
        diverged: bool,
    },
    /// Any other message type (kept, not dropped, so a newer server is not misread).
    Other(Value),
}

impl Incoming {
    /// Classifies a decoded frame payload.
    pub fn parse(payload: &[u8]) -> Result<Incoming> {
        let v: Value = serde_json::from_slice(payload)
            .map_err(|e| Error::Protocol(format!("frame payload is not JSON: {e}")))?;
        if !v.is_object() {
            return Err(Error::Protocol(format!(
                "message is not a JSON object: {v}"
            )));
        }
        Ok(match v.get("type").and_then(Value::as_str) {
            Some("response") => Incoming::Response {
                id: id_text(&v["id"]),
                envelope: v,
            },
            Some("event") => Incoming::Event(v),
            Some("subscription_lagged") => Incoming::Lagged {
                subscription_id: v["subscription_id"].clone(),
                resume_cursor: v["resume_cursor"].as_str().unwrap_or("0").to_string(),
                diverged: v["details"]["diverged"].as_bool().unwrap_or(false),
            },
            _ => Incoming::Other(v),
        })
    }

    /// Back to the JSON message (for callers that want raw values).
    pub fn into_value(self) -> Value {
        match self {
            Incoming::Response { envelope, .. } => envelope,
            Incoming::Event(v) | Incoming::Other(v) => v,
            Incoming::Lagged {
                subscription_id,
                resume_cursor,
                diverged,
            } => {
                let mut v = json!({"type": "subscription_lagged",
                                   "subscription_id": subscription_id,
                                   "resume_cursor": resume_cursor});
                if diverged {
                    v["details"] = json!({"diverged": true});
                }
                v
            }
        }
    }
}

/// A message as the async reader routes it: a response read without building its envelope
/// (only its id, and the raw text of its result or its error), anything else as `Incoming`.
#[derive(Debug)]
pub enum Received {
    Response {
        /// `None` for `id: null` (a frame-level refusal).
        id: Option<String>,
        /// The raw text of `result` (`null` when absent), or the server's error.
        result: Result<Box<RawValue>>,
    },
    Other(Incoming),
}

/// The members of a response that route it; the rest (`result`, `error`) is kept as raw text
/// borrowed from the frame, so nothing is allocated for them until their caller decodes them.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

impl Received {
    /// Classifies a frame payload. A response is read in one pass with no `Value`; its result
    /// is copied out as text for the caller to decode into its typed result. Anything else,
    /// and anything the fast read does not take (not an object, a repeated member), goes
    /// through `Incoming::parse`, with its errors.
    pub fn parse(payload: &[u8]) -> Result<Received> {
        let head = match serde_json::from_slice::<Head>(payload) {
            Ok(h) if h.kind.as_deref() == Some("response") => h,
            _ => return Incoming::parse(payload).map(Received::from_incoming),
        };
        let id = head.id.and_then(raw_id_text);
        let result = match head.status.as_deref() {
            Some("ok") => Ok(head
                .result
                .map_or_else(|| RawValue::NULL.to_owned(), RawValue::to_owned)),
            _ => {
                let error = head
                    .error
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .unwrap_or(Value::Null);
                Err(Error::from_wire(&error))
            }
        };
        Ok(Received::Response { id, result })
    }

    fn from_incoming(m: Incoming) -> Received {
        match m {
            Incoming::Response { id, envelope } => Received::Response {
                id,
                result: into_result(envelope).and_then(|v| {
                    serde_json::value::to_raw_value(&v).map_err(|e| Error::Protocol(e.to_string()))
                }),
            },
            other => Received::Other(other),
        }
    }
}

/// `id_text` of a raw id: a string without escapes and an integer are taken as written.
fn raw_id_text(raw: &RawValue) -> Option<String> {
    let t = raw.get();
    match t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(inner.to_string()),
        None if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => Some(t.to_string()),
        _ => id_text(&serde_json::from_str(t).ok()?),
    }
}

/// A response id as text: strings as they are, integers in decimal, anything else `None`.
fn id_text(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Turns a response envelope into its `result` or the server's error.
pub fn into_result(resp: Value) -> Result<Value> {
    let Value::Object(mut resp) = resp else {
        return Err(Error::from_wire(&Value::Null));
    };
    match resp.get("status").and_then(Value::as_str) {
        // Moved out of the envelope, not copied (it holds the instance's whole context).
        Some("ok") => Ok(resp.remove("result").unwrap_or(Value::Null)),
        _ => Err(Error::from_wire(resp.get("error").unwrap_or(&Value::Null))),
    }
}

/// Checks that a response answers request `id`. A frame-level refusal (`id: null`) is the
/// server rejecting our bytes: its error is surfaced.
pub fn check_id(resp: &Value, id: &str) -> Result<()> {
    match id_text(&resp["id"]) {
        Some(got) if got == id => Ok(()),
        None if resp.get("status").and_then(Value::as_str) == Some("error") => {
            into_result(resp.clone()).map(|_| ())
        }
        _ => Err(Error::Protocol(format!(
            "response id {} for request {id}",
            resp["id"]
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};

    #[test]
    fn requests_leave_null_params_out() {
        let mut out = Vec::new();
        encode_request(&mut out, "1", "PING", &Value::Null).unwrap();
        let (r, _) = decode_frame(&out, FRAME_PAYLOAD_BYTES_DEFAULT)
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_slice(&out[r]).unwrap();
        assert_eq!(v, json!({"type":"request","id":"1","op":"PING"}));
    }

    #[test]
    fn requests_are_the_bytes_of_their_json_envelope() {
        let params =
            json!({"instance_id": "a\"b", "event": "go", "payload": {"z": 1, "a": [true, null]}});
        for (id, op, params) in [("7", "APPLY_EVENT", params), ("x\\y", "PING", Value::Null)] {
            let mut out = vec![9u8; 3];
            encode_request(&mut out, id, op, &params).unwrap();
            let mut env = json!({"type": "request", "id": id, "op": op});
            if !params.is_null() {
                env["params"] = params.clone();
            }
            let mut want = vec![9u8; 3];
            crate::frame::encode_frame(&serde_json::to_vec(&env).unwrap(), &mut want);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn numbered_requests_are_the_bytes_of_the_text_id_form() {
        let params = json!({"event": "go", "instance_id": "a\"b", "payload": {"z": [1, null]}});
        for id in [0u64, 7, 1234567890123, u64::MAX] {
            for p in [None, Some(&params)] {
                let mut numbered = vec![5u8];
                encode_request_numbered(&mut numbered, id, "APPLY_EVENT", p).unwrap();
                let mut text = vec![5u8];
                let as_value = p.cloned().unwrap_or(Value::Null);
                encode_request(&mut text, &id.to_string(), "APPLY_EVENT", &as_value).unwrap();
                assert_eq!(numbered, text, "id {id}, params {p:?}");
            }
        }
    }

    #[test]
    fn messages_are_classified() {
        let r = Incoming::parse(br#"{"type":"response","id":"7","status":"ok","result":{}}"#);
        assert!(matches!(r.unwrap(), Incoming::Response { id: Some(i), .. } if i == "7"));
        let l = Incoming::parse(
            br#"{"type":"subscription_lagged","subscription_id":3,"resume_cursor":"c1-9"}"#,
        )
        .unwrap();
        assert_eq!(
            l,
            Incoming::Lagged {
                subscription_id: json!(3),
                resume_cursor: "c1-9".into(),
                diverged: false,
            }
        );
        let d = br#"{"type":"subscription_lagged","subscription_id":3,"resume_cursor":"c2-1.4","details":{"diverged":true}}"#;
        let v = Incoming::parse(d).unwrap().into_value();
        assert_eq!(v["details"]["diverged"], true);
        assert!(Incoming::parse(b"[1]").is_err());
        assert!(Incoming::parse(b"{\"type\":\"resp").is_err());
    }

    /// The async reader's one-pass read gives what the envelope read gives: the id, the
    /// result (as text) or the server's error; pushes and odd messages go the `Incoming` way.
    #[test]
    fn received_responses_match_the_envelope_read() {
        let cases: [&[u8]; 12] = [
            br#"{"type":"response","id":"7","status":"ok","result":{"b":[1,2],"a":"x\"y"}}"#,
            br#"{"type":"response","id":12,"status":"ok"}"#,
            br#"{"status":"ok","result":null,"id":"3","type":"response","extra":1}"#,
            br#"{"type":"response","id":"4","status":"error","error":{"code":"INSTANCE_NOT_FOUND","message":"m","retryable":false,"details":{"id":"k"}}}"#,
            br#"{"type":"response","id":null,"status":"error","error":{"code":"BAD_MAGIC","message":"m"}}"#,
            br#"{"type":"response","id":"5","status":"error"}"#,
            br#"{"type":"response","id":"a\"b\u0041","status":"ok","result":[]}"#,
            br#"{"type":"response","id":-3,"status":"ok","result":true}"#,
            br#"{"type":"response","id":1.5e3,"status":"ok","result":""}"#,
            br#"{"type":"response","id":"","status":"ok","result":{}}"#,
            br#"{"type":"response","id":[1],"status":"ok","result":0}"#,
            // A repeated member: the one-pass read refuses it, the envelope read keeps the last.
            br#"{"type":"response","id":"6","status":"ok","result":1,"result":2}"#,
        ];
        for payload in cases {
            let Ok(Incoming::Response { id, envelope }) = Incoming::parse(payload) else {
                panic!("not a response");
            };
            let Received::Response { id: got_id, result } = Received::parse(payload).unwrap()
            else {
                panic!("not read as a response");
            };
            assert_eq!(got_id, id);
            match (into_result(envelope), result) {
                (Ok(want), Ok(raw)) => {
                    assert_eq!(serde_json::from_str::<Value>(raw.get()).unwrap(), want)
                }
                (Err(want), Err(got)) => assert_eq!(format!("{got:?}"), format!("{want:?}")),
                (want, got) => panic!("{want:?} against {got:?}"),
            }
        }
        let push = br#"{"type":"event","subscription_id":1,"instance_id":"a"}"#;
        assert!(matches!(
            Received::parse(push).unwrap(),
            Received::Other(Incoming::Event(_))
        ));
        assert!(Received::parse(b"[1]").is_err());
        assert!(Received::parse(b"{\"type\":\"resp").is_err());
    }

    #[test]
    fn a_null_id_error_surfaces_its_code() {
        let resp = json!({"type":"response","id":null,"status":"error",
                          "error":{"code":"CHECKSUM_MISMATCH","message":"m","retryable":false}});
        assert_eq!(
            check_id(&resp, "1").unwrap_err().code(),
            Some("CHECKSUM_MISMATCH")
        );
    }
}
