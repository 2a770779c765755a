//! Request frames of the async client, written straight into the connection's output buffer.
//! The bytes are those of `message::encode_request_numbered` (serde_json's compact form), but
//! strings that need no escape (nearly all) are copied as they are, found eight bytes at a
//! time (`scan::plain_len`), rather than escaped byte by byte; anything else (an escaped
//! string, a float) is written by serde_json itself.

use serde_json::{Number, Value};

use super::scan::plain_len;
use crate::error::{Error, Result};
use crate::message::encode_envelope;
use crate::ops::ApplyParams;

/// Params the async client sends: written as serde_json writes them.
pub(crate) trait Params {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<()>;
}

impl Params for Value {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<()> {
        write_value(out, self)
    }
}

impl Params for ApplyParams<'_> {
    /// The members in the order the `Serialize` derive writes them, the unset ones left out.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(b"{\"instance_id\":");
        write_str(out, self.instance_id)?;
        out.extend_from_slice(b",\"event\":");
        write_str(out, self.event)?;
        if let Some(p) = self.payload {
            out.extend_from_slice(b",\"payload\":");
            write_value(out, p)?;
        }
        if let Some(s) = self.expected_state {
            out.extend_from_slice(b",\"expected_state\":");
            write_str(out, s)?;
        }
        if let Some(n) = self.expected_wal_offset {
            out.extend_from_slice(b",\"expected_wal_offset\":");
            write_u64(out, n);
        }
        if let Some(k) = self.idempotency_key {
            out.extend_from_slice(b",\"idempotency_key\":");
            write_str(out, k)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// Appends one request frame, `{"id":"ID","op":OP,"params":P,"type":"request"}` (`params`
/// `None`: no params member), in `message`'s envelope, as `message::encode_request_numbered`
/// writes it.
pub(crate) fn encode_request<P: Params + ?Sized>(
    out: &mut Vec<u8>,
    id: u64,
    op: &str,
    params: Option<&P>,
) -> Result<()> {
    let write_id = |out: &mut Vec<u8>| {
        out.push(b'"');
        write_u64(out, id);
        out.push(b'"');
        Ok(())
    };
    let write_params = params.map(|p| move |out: &mut Vec<u8>| p.write_json(out));
    encode_envelope(out, write_id, op, write_params)
}

fn write_value(out: &mut Vec<u8>, v: &Value) -> Result<()> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_str(out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k)?;
                out.push(b':');
                write_value(out, item)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_number(out: &mut Vec<u8>, n: &Number) -> Result<()> {
    match n.as_u64() {
        Some(u) => write_u64(out, u),
        None => serde_json::to_writer(out, n).map_err(|e| Error::Protocol(e.to_string()))?,
    }
    Ok(())
}

/// A string as serde_json writes it: quoted, `"`, `\` and control characters escaped.
fn write_str(out: &mut Vec<u8>, s: &str) -> Result<()> {
    if plain_len(s.as_bytes()) < s.len() {
        return serde_json::to_writer(out, s).map_err(|e| Error::Protocol(e.to_string()));
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Decimal digits of `n`.
fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::encode_request_numbered;
    use crate::ops::ApplyOptions;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::asyncio::scan::tests::arbitrary_value;

    fn frames<P: Params + serde::Serialize>(
        id: u64,
        op: &str,
        p: Option<&P>,
    ) -> (Vec<u8>, Vec<u8>) {
        let (mut fast, mut serde) = (vec![7u8], vec![7u8]);
        encode_request(&mut fast, id, op, p).unwrap();
        encode_request_numbered(&mut serde, id, op, p).unwrap();
        (fast, serde)
    }

    #[test]
    fn the_usual_apply_is_the_serde_frame() {
        let payload = json!({"p": "x".repeat(64), "n": [1, -2, 2.5, null, true]});
        let opts = ApplyOptions {
            expected_state: Some("s\"1".into()),
            expected_wal_offset: Some(u64::MAX),
            idempotency_key: Some("k\n".into()),
        };
        for (payload, opts) in [
            (Some(&payload), &ApplyOptions::default()),
            (None, &opts),
            (Some(&payload), &opts),
        ] {
            let p = ApplyParams::new("order-1", "pay", payload, opts);
            let (fast, serde) = frames(u64::MAX, "APPLY_EVENT", Some(&p));
            assert_eq!(fast, serde);
        }
        let (fast, serde) = frames::<Value>(0, "PING", None);
        assert_eq!(fast, serde);
    }

    proptest! {
        /// Any params value, any op name, any id: the same bytes as serde's frame.
        #[test]
        fn value_params_are_the_serde_frame(
            v in arbitrary_value(),
            op in "[A-Z_\"]{1,12}",
            id in any::<u64>(),
        ) {
            let (fast, serde) = frames(id, &op, Some(&v));
            prop_assert_eq!(fast, serde);
        }

        /// APPLY_EVENT params with any strings and options: the same bytes as serde's frame.
        #[test]
        fn apply_params_are_the_serde_frame(
            instance in any::<String>(),
            event in "[a-z\\\\\"\u{1}]{0,8}",
            payload in proptest::option::of(arbitrary_value()),
            state in proptest::option::of(any::<String>()),
            offset in proptest::option::of(any::<u64>()),
            key in proptest::option::of("[a-z0-9\"]{0,8}"),
        ) {
            let opts = ApplyOptions {
                expected_state: state,
                expected_wal_offset: offset,
                idempotency_key: key,
            };
            let p = ApplyParams::new(&instance, &event, payload.as_ref(), &opts);
            let (fast, serde) = frames(3, "APPLY_EVENT", Some(&p));
            prop_assert_eq!(fast, serde);
        }
    }
}
