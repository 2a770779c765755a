//! `JsonText`: a JSON object kept as its compact text.
//!
//! Event payloads are written to the log as text, kept in history as text and only parsed when
//! merged into a context or shown to a client. A parsed `Map` costs a B-tree node (~600 bytes)
//! per payload; the text costs its own length.
//!
//! The text is made by serializing a `Map` or read back from a CRC-checked log record, so it is
//! valid; still, nothing trusts that blindly: serializing re-checks it (an error, never broken
//! JSON on the wire) and merging parses it.

use std::borrow::Cow;
use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::context::Members;

#[derive(Clone, PartialEq, Eq)]
pub struct JsonText(Box<str>);

impl JsonText {
    /// The compact text of `map`.
    pub fn from_map(map: &Map<String, Value>) -> JsonText {
        // A Map has string keys and serde_json values, which always serialize.
        let text = serde_json::to_string(map).unwrap_or_else(|_| "{}".to_string());
        JsonText(text.into_boxed_str())
    }

    /// Text read from a log record (see the module doc for why it is not parsed here).
    pub(crate) fn from_log(text: &str) -> JsonText {
        JsonText(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0.into_string()
    }

    /// The length of the object at the start of `b` when it is in the compact form, already
    /// what `from_map` writes for it; else None. The compact form: an object with no
    /// whitespace, member names in strictly ascending order (so no duplicates) and without
    /// escapes, and only values that serialize back unchanged: strings without escapes or
    /// control characters, `true`, `false`, `null`, and integers of at most 18 digits without
    /// leading zeros (not `-0`). Nested arrays and objects, floats and escapes give None (the
    /// caller then parses the text into a `Map` and writes it with `from_map`). For the usual
    /// flat payload this spares the parse, the map and the re-serialisation.
    ///
    /// Needs no prior parse: the form is valid JSON by itself, so a byte scan of params may
    /// take such a payload as it is; the caller checks that it is UTF-8.
    pub fn compact_object_len(b: &[u8]) -> Option<usize> {
        compact_object_len(b)
    }

    /// The object, parsed.
    pub fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// Inserts every top-level member of the object `text` into `context`, replacing members
    /// of the same name, without building an intermediate map. Takes the text borrowed, as a
    /// log record holds it.
    pub(crate) fn merge_str_into<M: Members>(
        text: &str,
        context: &mut M,
    ) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        MergeInto(context).deserialize(&mut de)?;
        de.end()
    }
}

/// Most digits of an integer the compact form accepts (`JsonText::compact_object_len`): any such integer is an i64 and a
/// u64 alike, so serde_json writes it back digit for digit.
const COMPACT_INT_DIGITS_MAX: usize = 18;

/// The length of the compact object at the start of `b` (see `JsonText::compact_object_len`),
/// or None.
fn compact_object_len(b: &[u8]) -> Option<usize> {
    let mut at = 1;
    if b.first() != Some(&b'{') {
        return None;
    }
    if b.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    let mut last_name: Option<&[u8]> = None;
    loop {
        let name = plain_string(b, at)?;
        if last_name.is_some_and(|last| last >= name) {
            return None;
        }
        last_name = Some(name);
        at += name.len() + 2;
        if b.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        at += compact_scalar_len(b, at)?;
        match b.get(at) {
            Some(b',') => at += 1,
            Some(b'}') => return Some(at + 1),
            _ => return None,
        }
    }
}

/// The content of the string starting at `b[at]` when it has no escapes.
fn plain_string(b: &[u8], at: usize) -> Option<&[u8]> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let rest = b.get(at + 1..)?;
    let end = rest
        .iter()
        .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20)?;
    (rest[end] == b'"').then(|| &rest[..end])
}

/// The length of the value at `b[at]` when it is a scalar that serializes back unchanged.
fn compact_scalar_len(b: &[u8], at: usize) -> Option<usize> {
    let rest = b.get(at..)?;
    match rest.first()? {
        b'"' => plain_string(b, at).map(|s| s.len() + 2),
        b't' => rest.starts_with(b"true").then_some(4),
        b'f' => rest.starts_with(b"false").then_some(5),
        b'n' => rest.starts_with(b"null").then_some(4),
        b'-' | b'0'..=b'9' => {
            let sign = usize::from(rest[0] == b'-');
            let digits = rest[sign..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            let zero_neg = sign == 1 && rest.get(1) == Some(&b'0');
            let leading_zero = digits > 1 && rest[sign] == b'0';
            let ok = (1..=COMPACT_INT_DIGITS_MAX).contains(&digits) && !zero_neg && !leading_zero;
            // A fraction or exponent makes a float: not accepted.
            let next = rest.get(sign + digits);
            (ok && !matches!(next, Some(b'.' | b'e' | b'E'))).then_some(sign + digits)
        }
        _ => None,
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_text(&self.0, s)
    }
}

/// Writes stored JSON text as the JSON it is, checking it first: an error, never broken JSON
/// on the wire. (`JsonText`, and history payloads kept as text.)
pub(crate) fn serialize_text<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    let raw: &RawValue = serde_json::from_str(text)
        .map_err(|e| serde::ser::Error::custom(format!("stored JSON text: {e}")))?;
    raw.serialize(s)
}

impl<'de> Deserialize<'de> for JsonText {
    /// Through a `Map`, so it also works inside buffered (internally tagged) enums.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Ok(JsonText::from_map(&map))
    }
}

/// Deserializes a JSON object straight into an existing map.
///
/// A member whose name the map already has is overwritten in place (`Overwrite`): the name is
/// not allocated, and a string replacing a string reuses its buffer. Replaying a log is mostly
/// this (the same few context keys written again and again), and the old value's memory is
/// rarely in cache: freeing it and allocating a new one cost two cache misses per event.
struct MergeInto<'a, M>(&'a mut M);

impl<'de, M: Members> DeserializeSeed<'de> for MergeInto<'_, M> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, M: Members> Visitor<'de> for MergeInto<'_, M> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        while let Some(key) = access.next_key_seed(KeyText)? {
            match self.0.member_mut(&key) {
                Some(slot) => access.next_value_seed(Overwrite(slot))?,
                None => {
                    let value: Value = access.next_value()?;
                    self.0.add_member(&key, value);
                }
            }
        }
        Ok(())
    }
}

/// A member name, borrowed from the text when it has no escapes.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Deserializes a value over an existing one, giving exactly what `Value::deserialize` gives.
/// Scalars are written in place; a string replacing a string keeps the old buffer when it fits
/// and is not more than twice too big (so a once-large value does not pin its memory);
/// arrays and objects are built as `Value`s.
struct Overwrite<'a>(&'a mut Value);

/// Capacity a reused string buffer may have beyond twice the new text (small strings always
/// fit in the allocator's smallest chunk anyway).
const REUSE_SLACK_BYTES: usize = 64;

impl Overwrite<'_> {
    fn set_str(self, v: &str) {
        match self.0 {
            Value::String(s)
                if s.capacity() >= v.len() && s.capacity() <= 2 * v.len() + REUSE_SLACK_BYTES =>
            {
                s.clear();
                s.push_str(v);
            }
            slot => *slot = Value::String(v.to_owned()),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Overwrite<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Overwrite<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        *self.0 = Value::Bool(v);
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        *self.0 = Value::from(v);
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        *self.0 = Value::from(v);
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // As `Value::deserialize`: a non-finite float (never produced by a JSON parser) is null.
        *self.0 = Value::from(v);
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.set_str(v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        *self.0 = Value::Null;
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        *self.0 = Value::deserialize(SeqAccessDeserializer::new(seq))?;
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        *self.0 = Value::deserialize(MapAccessDeserializer::new(map))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn round_trips_and_merges() {
        let text = JsonText::from_map(&map(json!({"a": 1, "b": {"c": [1, "x"]}})));
        assert_eq!(text.as_str(), r#"{"a":1,"b":{"c":[1,"x"]}}"#);
        assert_eq!(serde_json::to_string(&text).unwrap(), text.as_str());
        let back: JsonText = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(back, text);
        let mut ctx = map(json!({"a": 0, "z": true}));
        JsonText::merge_str_into(text.as_str(), &mut ctx).unwrap();
        assert_eq!(
            Value::Object(ctx),
            json!({"a": 1, "b": {"c": [1, "x"]}, "z": true})
        );
    }

    /// The merge as the spec states it: parse the payload, insert each member.
    fn merged_naively(context: &Map<String, Value>, payload: &str) -> Map<String, Value> {
        let mut out = context.clone();
        let parsed: Map<String, Value> = serde_json::from_str(payload).unwrap();
        out.extend(parsed);
        out
    }

    #[test]
    fn overwriting_in_place_gives_what_inserting_gives() {
        let context = map(json!({
            "s": "a string long enough to have a buffer of its own",
            "short": "x", "n": 1, "f": 1.5, "b": true, "z": null,
            "arr": [1, 2], "obj": {"k": "v"}, "keep": "me"
        }));
        let payloads = [
            r#"{"s":"shorter","short":"a much longer string than the buffer it replaces"}"#,
            r#"{"s":1,"n":"now a string","f":-3,"b":null,"z":false}"#,
            r#"{"arr":"x","obj":[{"a":1}],"s":{"deep":{"er":[null]}}}"#,
            r#"{"s":"esc\"aped \u00e9","new":"added","n":18446744073709551615}"#,
            r#"{"n":-9223372036854775808,"f":1e308,"s":"twice","s":"last wins"}"#,
            r#"{"k\u0065y":"escaped name","short":""}"#,
            r#"{}"#,
        ];
        for payload in payloads {
            let mut ctx = context.clone();
            JsonText::merge_str_into(payload, &mut ctx).unwrap();
            assert_eq!(ctx, merged_naively(&context, payload), "payload {payload}");
        }
    }

    #[test]
    fn a_reused_buffer_does_not_keep_a_large_value_alive() {
        let big = "x".repeat(4096);
        let mut ctx = map(json!({ "s": big }));
        JsonText::merge_str_into(r#"{"s":"tiny"}"#, &mut ctx).unwrap();
        let Some(Value::String(s)) = ctx.get("s") else {
            panic!("not a string")
        };
        assert_eq!(s, "tiny");
        assert!(s.capacity() < 4096, "capacity {}", s.capacity());
    }

    /// Whether the whole of `text` is one object in the compact form.
    fn is_compact(text: &str) -> bool {
        JsonText::compact_object_len(text.as_bytes()) == Some(text.len())
    }

    /// The compact form is accepted only where `from_map` writes the very same text.
    #[test]
    fn compact_objects_are_what_from_map_writes() {
        let compact = [
            "{}",
            r#"{"p":"xxxx"}"#,
            r#"{"a":1,"b":-2,"c":true,"d":false,"e":null,"f":"é ü / 日本"}"#,
            r#"{"":0,"a":"","ab":123456789012345678,"b":-123456789012345678}"#,
        ];
        for text in compact {
            assert!(is_compact(text), "{text}");
            let map: Map<String, Value> = serde_json::from_str(text).unwrap();
            assert_eq!(JsonText::from_map(&map).as_str(), text);
        }
        let not_compact = [
            r#"{ "p":"x"}"#,
            r#"{"p" :"x"}"#,
            r#"{"p":"x" }"#,
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":"x\"y"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"\u0061":1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":1234567890123456789}"#,
            r#"{"a":[1]}"#,
            r#"{"a":{}}"#,
            "[]",
            "1",
            r#""{}""#,
        ];
        for text in not_compact {
            assert!(!is_compact(text), "{text}");
        }
    }

    /// A member of a random payload text: names and values with and without escapes, every
    /// kind of scalar, nested values, and optional whitespace around the colon.
    fn arb_member() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let name = prop_oneof![
            "[a-c]{0,2}",
            Just(r#"\u0061"#.to_string()),
            Just("é".to_string())
        ];
        let value = prop_oneof![
            "\"[a-z/ é]{0,3}\"",
            Just(r#""x\"y""#.to_string()),
            any::<i64>().prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
            Just("-0".to_string()),
            Just("0".to_string()),
            Just("1.5".to_string()),
            Just("2e3".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            Just("null".to_string()),
            Just(r#"[1,"a"]"#.to_string()),
            Just(r#"{"z":1}"#.to_string()),
        ];
        (name, value, prop_oneof![Just(""), Just(" ")])
            .prop_map(|(n, v, ws)| format!(r#""{n}"{ws}:{v}"#))
    }

    proptest::proptest! {
        /// Whatever text the compact form accepts is the text `from_map` writes for it.
        #[test]
        fn accepted_text_is_from_maps_text(
            members in proptest::collection::vec(arb_member(), 0..5),
        ) {
            let text = format!("{{{}}}", members.join(","));
            let map: Map<String, Value> = serde_json::from_str(&text).unwrap();
            let canonical = JsonText::from_map(&map);
            if is_compact(&text) {
                proptest::prop_assert_eq!(canonical.as_str(), text.as_str());
            }
            // from_map's text of a map of plain scalars is always accepted.
            let flat = map.iter().all(|(k, v)| !k.contains('"') && match v {
                Value::String(s) => !s.contains(['"', '\\']),
                Value::Number(n) => n.as_i64().is_some_and(|i| i.unsigned_abs() < 10u64.pow(18)),
                Value::Bool(_) | Value::Null => true,
                _ => false,
            });
            if flat {
                proptest::prop_assert!(is_compact(canonical.as_str()), "{}", canonical.as_str());
            }
        }
    }

    proptest::proptest! {
        /// The compact form is valid JSON by itself: whatever prefix of arbitrary bytes
        /// `compact_object_len` accepts, serde parses as an object.
        #[test]
        fn accepted_prefixes_are_valid_json(
            text in r#"\{("[ab\x01\\]{0,2}":(-?0?[0-9]{0,2}|"[ab\x01\\]{0,2}"|true|tru|null|fals|1\.5),?){0,3}\}?x?"#,
        ) {
            if let Some(n) = JsonText::compact_object_len(text.as_bytes()) {
                let parsed = serde_json::from_slice::<Map<String, Value>>(&text.as_bytes()[..n]);
                proptest::prop_assert!(parsed.is_ok(), "{:?}", &text[..n]);
            }
        }
    }

    #[test]
    fn compact_form_refuses_what_json_does() {
        for text in [
            "{\"a\":01}",
            "{\"a\":-01}",
            "{\"a\":\"x\u{1}y\"}",
            "{\"a\tb\":1}",
            "{\"a\":-}",
        ] {
            assert_eq!(
                JsonText::compact_object_len(text.as_bytes()),
                None,
                "{text:?}"
            );
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
        }
        assert_eq!(
            JsonText::compact_object_len(br#"{"a":0,"b":-7}tail"#),
            Some(14)
        );
    }

    #[test]
    fn bad_text_is_an_error_not_broken_output() {
        let bad = JsonText::from_log(r#"{"a":"#);
        assert!(serde_json::to_string(&bad).is_err());
        assert!(JsonText::merge_str_into(bad.as_str(), &mut Map::new()).is_err());
        assert!(JsonText::merge_str_into("[1]", &mut Map::new()).is_err());
    }
}
