//! JSON values in a version-2 snapshot (context members, idempotency results), as tagged
//! binary: one tag byte, then
//!
//! | tag | value | then |
//! |---|---|---|
//! | 0 | null | |
//! | 1 / 2 | false / true | |
//! | 3 | a non-negative integer | LEB128 |
//! | 4 | a negative integer n | LEB128 of -(n + 1) |
//! | 5 | a float | 8 bytes, IEEE 754 little-endian |
//! | 6 | a string | length, UTF-8 |
//! | 7 | an array | count, then each value |
//! | 8 | an object | count, then each member's name (a string) and value, in name order |
//!
//! Reading is several times faster than parsing the JSON text, and the value comes back exactly
//! (the same `serde_json::Number` kind: u64, i64 or f64).

use serde_json::{Map, Number, Value};
use smdb_format::snapshot_items::{put_str, put_uint, Cursor};

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const UINT: u8 = 3;
const NEG_INT: u8 = 4;
const FLOAT: u8 = 5;
const STRING: u8 = 6;
const ARRAY: u8 = 7;
const OBJECT: u8 = 8;

/// Nesting a reader follows at most: serde_json parses client JSON to depth 128, so a value
/// written from one is never deeper; deeper is damage, refused before it exhausts the stack.
const DEPTH_MAX: usize = 128;

pub(crate) fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => put_number(out, n),
        Value::String(s) => {
            out.push(STRING);
            put_str(out, s);
        }
        Value::Array(items) => {
            out.push(ARRAY);
            put_uint(out, items.len() as u64);
            for item in items {
                put_value(out, item);
            }
        }
        Value::Object(map) => {
            out.push(OBJECT);
            put_uint(out, map.len() as u64);
            for (k, item) in map {
                put_str(out, k);
                put_value(out, item);
            }
        }
    }
}

fn put_number(out: &mut Vec<u8>, n: &Number) {
    if let Some(u) = n.as_u64() {
        out.push(UINT);
        put_uint(out, u);
    } else if let Some(i) = n.as_i64() {
        // Negative here (a non-negative i64 is also a u64): -(i + 1) fits u64.
        out.push(NEG_INT);
        put_uint(out, !(i as u64));
    } else {
        out.push(FLOAT);
        out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
    }
}

pub(crate) fn value(c: &mut Cursor<'_>) -> Result<Value, String> {
    value_at(c, 0)
}

fn value_at(c: &mut Cursor<'_>, depth: usize) -> Result<Value, String> {
    if depth > DEPTH_MAX {
        return Err(format!("value nested deeper than {DEPTH_MAX}"));
    }
    Ok(match c.byte()? {
        NULL => Value::Null,
        FALSE => Value::Bool(false),
        TRUE => Value::Bool(true),
        UINT => Value::from(c.uint()?),
        NEG_INT => Value::from(!c.uint()? as i64),
        FLOAT => {
            let mut b = [0u8; 8];
            b.copy_from_slice(c.take(8)?);
            let f = f64::from_le_bytes(b);
            Value::Number(Number::from_f64(f).ok_or("a float that JSON cannot hold")?)
        }
        STRING => Value::String(c.str()?.to_owned()),
        ARRAY => {
            let n = c.len()?;
            let mut items = Vec::with_capacity(n.min(c.remaining()));
            for _ in 0..n {
                items.push(value_at(c, depth + 1)?);
            }
            Value::Array(items)
        }
        OBJECT => {
            let n = c.len()?;
            let mut map = Map::new();
            for _ in 0..n {
                let k = c.str()?.to_owned();
                map.insert(k, value_at(c, depth + 1)?);
            }
            Value::Object(map)
        }
        tag => return Err(format!("unknown value tag {tag}")),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_kind_of_value_comes_back_exactly() {
        let v = json!({
            "null": null, "t": true, "f": false, "zero": 0, "big": u64::MAX,
            "neg": -1, "min": i64::MIN, "pi": 3.25, "negf": -0.5, "s": "héllo \"q\"",
            "arr": [1, [2, [3, {"deep": []}]], {}], "obj": {"b": 1, "a": 2}
        });
        let mut out = Vec::new();
        put_value(&mut out, &v);
        let mut c = Cursor::new(&out);
        let back = value(&mut c).unwrap();
        assert!(c.end().is_ok());
        assert_eq!(back, v);
        assert_eq!(back["min"].as_i64(), Some(i64::MIN));
        assert!(back["pi"].is_f64() && back["big"].is_u64() && back["neg"].is_i64());
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
    }

    #[test]
    fn damage_is_refused_not_followed() {
        let mut deep = [ARRAY, 1].repeat(DEPTH_MAX + 2);
        deep.push(NULL);
        assert!(value(&mut Cursor::new(&deep))
            .unwrap_err()
            .contains("deeper"));
        assert!(value(&mut Cursor::new(&[9])).unwrap_err().contains("tag 9"));
        let mut huge = vec![ARRAY];
        put_uint(&mut huge, u64::MAX >> 1);
        assert!(value(&mut Cursor::new(&huge)).is_err());
    }
}
