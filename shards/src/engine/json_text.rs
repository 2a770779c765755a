//! `JsonText`: a JSON object kept as its compact text.
//!
//! Event payloads are written to the log as text, kept in history as text and only parsed when
//! merged into a context or shown to a client. A parsed `Map` costs a B-tree node (~600 bytes)
//! per payload; the text costs its own length.
//!
//! The text is made by serializing a `Map` or read back from a CRC-checked log record, so it is
//! valid; still, nothing trusts that blindly: serializing re-checks it (an error, never broken
//! JSON on the wire) and merging parses it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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

    /// The object, parsed.
    pub fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// Inserts every top-level member into `context`, replacing members of the same name,
    /// without building an intermediate map.
    pub fn merge_into(&self, context: &mut Map<String, Value>) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(&self.0);
        MergeInto(context).deserialize(&mut de)?;
        de.end()
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.0)
            .map_err(|e| serde::ser::Error::custom(format!("stored JSON text: {e}")))?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    /// Through a `Map`, so it also works inside buffered (internally tagged) enums.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Ok(JsonText::from_map(&map))
    }
}

/// Deserializes a JSON object straight into an existing map.
struct MergeInto<'a>(&'a mut Map<String, Value>);

impl<'de> DeserializeSeed<'de> for MergeInto<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MergeInto<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        while let Some(key) = access.next_key::<String>()? {
            let value: Value = access.next_value()?;
            self.0.insert(key, value);
        }
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
        text.merge_into(&mut ctx).unwrap();
        assert_eq!(
            Value::Object(ctx),
            json!({"a": 1, "b": {"c": [1, "x"]}, "z": true})
        );
    }

    #[test]
    fn bad_text_is_an_error_not_broken_output() {
        let bad = JsonText::from_log(r#"{"a":"#);
        assert!(serde_json::to_string(&bad).is_err());
        assert!(bad.merge_into(&mut Map::new()).is_err());
        assert!(JsonText::from_log("[1]")
            .merge_into(&mut Map::new())
            .is_err());
    }
}
