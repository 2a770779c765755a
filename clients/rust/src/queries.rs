//! FIND_INSTANCES and SCAN_INSTANCES (the server's docs/queries.md): the query, its pages, and
//! the requests. `Client::find_pages` walks every page by cursor.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ops::{Instance, Request, Retry};

/// FIND_INSTANCES / SCAN_INSTANCES params: `conditions` is the `where` object
/// (`{"ctx.customer": "c-9", "ctx.total": {"gte": 10}}`; FIND needs at least one, each a
/// declared index).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FindQuery {
    pub machine: String,
    #[serde(rename = "where")]
    pub conditions: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub include_context: bool,
}

impl FindQuery {
    /// A query on `machine` with one condition (`path`, `condition`).
    pub fn new(machine: &str, path: &str, condition: Value) -> FindQuery {
        let mut conditions = Map::new();
        conditions.insert(path.to_owned(), condition);
        FindQuery {
            machine: machine.to_owned(),
            conditions,
            ..FindQuery::default()
        }
    }

    /// This query with another condition (they intersect).
    pub fn and(mut self, path: &str, condition: Value) -> FindQuery {
        self.conditions.insert(path.to_owned(), condition);
        self
    }
}

/// One page of FIND_INSTANCES or SCAN_INSTANCES. Items carry `context` only with
/// `include_context` (`Instance::context` is null otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FoundPage {
    pub instances: Vec<Instance>,
    /// Pass back as `cursor` for the next page; `None` on the last.
    pub next_cursor: Option<String>,
    /// FIND: the machine versions searched (those declaring every condition's index).
    #[serde(default)]
    pub versions: Vec<u64>,
    /// SCAN: instances examined for this page.
    #[serde(default)]
    pub examined: u64,
}

pub fn find_instances(q: &FindQuery) -> Request<FoundPage> {
    Request::new("FIND_INSTANCES", params(q), Retry::Safe)
}

pub fn scan_instances(q: &FindQuery) -> Request<FoundPage> {
    Request::new("SCAN_INSTANCES", params(q), Retry::Safe)
}

fn params(q: &FindQuery) -> Value {
    // A struct of strings, maps and numbers always serialises.
    serde_json::to_value(q).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_query_sends_its_where_and_leaves_defaults_out() {
        let q = FindQuery::new("order", "ctx.customer", json!("c-9"))
            .and("ctx.total", json!({"gte": 10}));
        assert_eq!(
            find_instances(&q).params,
            json!({"machine": "order", "where": {"ctx.customer": "c-9", "ctx.total": {"gte": 10}}})
        );
        let page: FoundPage = serde_json::from_value(json!({"instances": [{"id": "a",
            "machine": "order", "version": 1, "state": "new", "wal_offset": 3}],
            "next_cursor": null, "versions": [1]}))
        .unwrap();
        assert_eq!(
            (page.instances[0].context.clone(), page.versions),
            (Value::Null, vec![1])
        );
    }
}
