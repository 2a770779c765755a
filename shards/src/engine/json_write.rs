//! Hand-written JSON output for the hottest results (APPLY_EVENT's, once per instance change),
//! byte for byte what `serde_json::to_writer` writes for the same values, faster: a string
//! with nothing to escape (the usual one) is copied whole after a word-at-a-time check, an
//! integer is written digit by digit, and only what is rare (escapes, floats, nested arrays and
//! objects) goes through serde_json itself.

use serde_json::Value;

use super::context::Context;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of `word` is below 0x20, `"` or `\`: what serde_json escapes.
fn word_needs_escape(word: u64) -> bool {
    // Exact per word: a byte below n (n <= 0x80) sets its high bit in (w - n*ONES) & !w.
    let below_space = word.wrapping_sub(0x20 * ONES) & !word;
    let q = word ^ (b'"' as u64 * ONES);
    let quote = q.wrapping_sub(ONES) & !q;
    let b = word ^ (b'\\' as u64 * ONES);
    let backslash = b.wrapping_sub(ONES) & !b;
    (below_space | quote | backslash) & HIGHS != 0
}

fn byte_needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether serde_json would escape anything in `s`.
fn needs_escape(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if word_needs_escape(u64::from_le_bytes(word)) {
            return true;
        }
    }
    chunks.remainder().iter().any(|b| byte_needs_escape(*b))
}

/// `s` as a JSON string.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    if needs_escape(s) {
        // Serialising a str into a Vec cannot fail (no I/O).
        let _ = serde_json::to_writer(out, s);
        return;
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// The decimal digits of `v` (no allocation, unlike `format!`).
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Any JSON value.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => write_str(out, s),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Null => out.extend_from_slice(b"null"),
        Value::Number(n) if n.is_u64() => write_u64(out, n.as_u64().unwrap_or_default()),
        Value::Number(n) if n.is_i64() => {
            let v = n.as_i64().unwrap_or_default();
            if v < 0 {
                out.push(b'-');
            }
            write_u64(out, v.unsigned_abs());
        }
        // Floats, arrays and objects: rare in contexts, and serde_json's own forms (ryu,
        // nested maps) are the reference. Writing a Value into a Vec cannot fail.
        other => {
            let _ = serde_json::to_writer(out, other);
        }
    }
}

/// A context as its JSON object.
pub(crate) fn write_context(out: &mut Vec<u8>, context: &Context) {
    out.push(b'{');
    for (i, (name, value)) in context.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, name);
        out.push(b':');
        write_value(out, value);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn written(value: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        let values = [
            json!(""),
            json!("plain ascii, longer than one word of eight bytes"),
            json!("quote \" here"),
            json!("back\\slash"),
            json!("ctl \u{1} \n \t \r \u{1f} end"),
            json!("del \u{7f} é ü 日本 🎉"),
            json!(" !#[]~"),
            json!(0),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(-1),
            json!(1.5),
            json!(-0.0),
            json!(1e300),
            json!(true),
            json!(false),
            json!(null),
            json!([1, "a\"b", {"z": 1, "a": [null]}]),
            json!({"k\"ey": "v", "a": {"b": "c"}}),
        ];
        for v in values {
            assert_eq!(written(&v), serde_json::to_string(&v).unwrap(), "{v}");
        }
    }

    #[test]
    fn contexts_are_written_as_their_serialisation() {
        let map = match json!({"p": "x".repeat(64), "n": -7, "a\"b": [1.25], "z": {"y": null}}) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let context = Context::from(map);
        let mut out = Vec::new();
        write_context(&mut out, &context);
        assert_eq!(out, serde_json::to_vec(&context).unwrap());
        let mut out = Vec::new();
        write_context(&mut out, &Context::new());
        assert_eq!(out, b"{}");
    }

    proptest! {
        /// Every byte position and value of the escape check, against serde_json.
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(s in "\\PC{0,40}|[\\x00-\\x7f]{0,40}") {
            let v = Value::String(s);
            prop_assert_eq!(written(&v), serde_json::to_string(&v).unwrap());
        }

        #[test]
        fn any_integer_is_written_as_serde_json_writes_it(u in any::<u64>(), i in any::<i64>()) {
            prop_assert_eq!(written(&json!(u)), u.to_string());
            prop_assert_eq!(written(&json!(i)), i.to_string());
        }
    }
}
