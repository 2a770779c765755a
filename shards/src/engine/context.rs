//! `Context`: an instance's context object, stored compactly.
//!
//! A `serde_json::Map` is a B-tree whose first node costs ~640 bytes of heap however few
//! members it holds; most contexts hold a handful. A `Context` is one exact-size boxed slice of
//! (name, value) members sorted by name (the order a `Map` iterates in, so both serialize to
//! the same bytes), with short names inline (`SmallStr`): `{"n":0}` is one 64-byte heap chunk.
//! Lookups are a binary search; adding a member reallocates the slice (rare: contexts change
//! values far more often than shape). Nested objects inside values stay `Map`s.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::index::prefetch;
use super::small_str::SmallStr;

/// An instance context: a JSON object's members, sorted by name.
#[derive(Clone, Default, PartialEq)]
pub struct Context(Box<[(SmallStr, Value)]>);

impl Context {
    pub fn new() -> Self {
        Context::default()
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    /// The value of member `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.find(name).ok().map(|i| &mut self.0[i].1)
    }

    /// Sets member `name` (added, or replaced when present).
    pub fn insert(&mut self, name: &str, value: Value) {
        match self.find(name) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => {
                let mut members = std::mem::take(&mut self.0).into_vec();
                members.insert(i, (SmallStr::from(name), value));
                self.0 = members.into_boxed_slice();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// A context of `members`, which must be in strictly ascending name order (as `iter`
    /// gives them): a snapshot's members, checked instead of sorted.
    pub(crate) fn from_sorted(members: Vec<(SmallStr, Value)>) -> Result<Context, String> {
        if members
            .windows(2)
            .any(|w| w[0].0.as_str() >= w[1].0.as_str())
        {
            return Err("context members are not in ascending name order".into());
        }
        Ok(Context(members.into_boxed_slice()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Members in name order.
    /// Asks the CPU to load the members (the first two cache lines; a snapshot walk reads
    /// them a few instances later, `snapshot::walk`).
    pub(crate) fn prefetch_members(&self) {
        prefetch(self.0.as_ptr());
        prefetch(self.0.as_ptr().cast::<u8>().wrapping_add(64));
    }

    /// Asks the CPU to load the heap text of the first members' string and array values
    /// (after `prefetch_members` has brought the members in).
    pub(crate) fn prefetch_values(&self) {
        for (_, v) in self.0.iter().take(4) {
            match v {
                Value::String(s) => prefetch(s.as_ptr()),
                Value::Array(a) => prefetch(a.as_ptr()),
                _ => {}
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The context as a `Map`.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        for (k, v) in self.iter() {
            map.insert(k.to_owned(), v.clone());
        }
        map
    }

    /// The context as a JSON object value (what `json!` would make of it, by cloning the
    /// members instead of running them through serde's value serializer).
    pub fn to_json(&self) -> Value {
        Value::Object(self.to_map())
    }
}

impl From<Map<String, Value>> for Context {
    fn from(map: Map<String, Value>) -> Self {
        // A `Map` iterates in name order with unique names: already the slice's order.
        Context(
            map.into_iter()
                .map(|(k, v)| (SmallStr::from(k), v))
                .collect(),
        )
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Context {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Context {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ContextVisitor)
    }
}

struct ContextVisitor;

impl<'de> Visitor<'de> for ContextVisitor {
    type Value = Context;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Context, A::Error> {
        // Through a `Map`: sorted, later duplicates replacing earlier ones, as before.
        let mut map = Map::new();
        while let Some((k, v)) = access.next_entry::<String, Value>()? {
            map.insert(k, v);
        }
        Ok(Context::from(map))
    }
}

/// Where `JsonText::merge_str_into` writes: a member to overwrite in place, or a new member.
pub(crate) trait Members {
    fn member_mut(&mut self, name: &str) -> Option<&mut Value>;
    fn add_member(&mut self, name: &str, value: Value);
}

impl Members for Context {
    fn member_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.get_mut(name)
    }
    fn add_member(&mut self, name: &str, value: Value) {
        self.insert(name, value);
    }
}

impl Members for Map<String, Value> {
    fn member_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.get_mut(name)
    }
    fn add_member(&mut self, name: &str, value: Value) {
        self.insert(name.to_owned(), value);
    }
}

/// What a guard or a timer path reads from: a context or a payload object.
pub trait Fields {
    /// The top-level member `name`.
    fn field(&self, name: &str) -> Option<&Value>;
}

impl Fields for Context {
    fn field(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

impl Fields for Map<String, Value> {
    fn field(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::tests::obj as map;

    #[test]
    fn behaves_and_serializes_as_the_map_it_came_from() {
        let m =
            map(json!({"z": 1, "a": {"b": [1, 2]}, "m": "x", "long-member-name-over-22": null}));
        let mut c = Context::from(m.clone());
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            serde_json::to_string(&m).unwrap()
        );
        assert_eq!(c.to_map(), m);
        assert_eq!(c.get("m"), Some(&json!("x")));
        assert_eq!(c.field("nope"), None);
        let back: Context = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        c.insert("b", json!(2));
        c.insert("z", json!(3));
        let mut m2 = m;
        m2.insert("b".into(), json!(2));
        m2.insert("z".into(), json!(3));
        assert_eq!(c.to_map(), m2);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            serde_json::to_string(&m2).unwrap()
        );
        let dup: Context = serde_json::from_str(r#"{"a":1,"a":2}"#).unwrap();
        assert_eq!(dup.to_map(), map(json!({"a": 2})));
    }

    #[test]
    fn a_small_context_is_one_small_allocation() {
        assert_eq!(size_of::<Context>(), 16);
        assert_eq!(size_of::<(SmallStr, Value)>(), 56);
        let c = Context::from(map(json!({"n": 0})));
        assert!(c.0.iter().all(|(k, _)| k.is_inline()));
    }
}
