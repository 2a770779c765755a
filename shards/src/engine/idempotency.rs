//! Per-instance idempotency records: key -> first result of the APPLY_EVENT that used it.
//!
//! At most `IDEMPOTENCY_KEYS_PER_INSTANCE_MAX` keys are kept; the oldest is evicted first.
//! Serialized as a list of `[key, result]` pairs, oldest first, so eviction order survives a
//! snapshot.

use std::collections::{HashMap, VecDeque};

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::limits::IDEMPOTENCY_KEYS_PER_INSTANCE_MAX;

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IdempotencyStore {
    /// Keys, oldest first.
    order: VecDeque<String>,
    results: HashMap<String, Value>,
}

impl IdempotencyStore {
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.results.get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Every key with its first result, oldest first (a snapshot's order).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        (self.order.iter()).filter_map(|k| self.results.get(k).map(|v| (k.as_str(), v)))
    }

    /// Records `result` for `key`; a key already present keeps its place and first result.
    pub(crate) fn insert(&mut self, key: String, result: Value) {
        if self.results.contains_key(&key) {
            return;
        }
        self.results.insert(key.clone(), result);
        self.order.push_back(key);
        if self.order.len() > IDEMPOTENCY_KEYS_PER_INSTANCE_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.results.remove(&oldest);
            }
        }
    }
}

impl Serialize for IdempotencyStore {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.order.len()))?;
        for key in &self.order {
            if let Some(result) = self.results.get(key) {
                seq.serialize_element(&(key, result))?;
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for IdempotencyStore {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(String, Value)>::deserialize(d)?;
        let mut store = IdempotencyStore::default();
        for (key, result) in pairs {
            store.insert(key, result);
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn first_result_wins_for_a_repeated_key() {
        let mut s = IdempotencyStore::default();
        s.insert("k".into(), json!(1));
        s.insert("k".into(), json!(2));
        assert_eq!(s.get("k"), Some(&json!(1)));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn oldest_key_is_evicted_beyond_the_cap() {
        let mut s = IdempotencyStore::default();
        for i in 0..=IDEMPOTENCY_KEYS_PER_INSTANCE_MAX {
            s.insert(format!("k{i}"), json!(i));
        }
        assert_eq!(s.len(), IDEMPOTENCY_KEYS_PER_INSTANCE_MAX);
        assert_eq!(s.get("k0"), None);
        assert_eq!(s.get("k1"), Some(&json!(1)));
    }

    #[test]
    fn serde_round_trip_keeps_order() {
        let mut s = IdempotencyStore::default();
        s.insert("b".into(), json!({"x": 1}));
        s.insert("a".into(), json!(2));
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(text, r#"[["b",{"x":1}],["a",2]]"#);
        let back: IdempotencyStore = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
    }
}
