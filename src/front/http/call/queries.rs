//! `GET /instances` as FIND_INSTANCES or SCAN_INSTANCES (docs/http.md, docs/queries.md): a
//! `where.<path>=V` parameter makes the request a FIND, `scan=true` a SCAN, and the query
//! parameters become their params. `V` is JSON when it parses as a number, `true`, `false`,
//! `null` or a quoted string, else the text itself; `where.<path>.gte=V` (and `gt`, `lt`,
//! `lte`) is a bound, `where.<path>.in=a,b` one of several values.

use serde_json::{Map, Value};
use shards::Rejection;
use smdb_protocol::codes::quote;
use smdb_protocol::op::where_value;

use super::{bad, parse_bool, parse_u64, Obj};
use crate::front::http::target::Target;
use crate::protocol::Op;

/// The op a `GET /instances` runs: SCAN with `scan=true`, FIND with a `where.` parameter,
/// else LIST.
pub fn op_of(target: &Target) -> Op {
    let scan = target
        .get("scan")
        .is_some_and(|v| matches!(parse_bool("scan", v), Ok("true")));
    let find = target.query.iter().any(|(k, _)| k.starts_with("where."));
    match (scan, find) {
        (true, _) => Op::ScanInstances,
        (false, true) => Op::FindInstances,
        (false, false) => Op::ListInstances,
    }
}

/// The operators a `where.<path>.<op>` parameter may end with.
const OPERATORS: [&str; 5] = ["gt", "gte", "lt", "lte", "in"];

/// FIND's or SCAN's params from the query parameters.
pub fn params(obj: &mut Obj, target: &Target) -> Result<(), Rejection> {
    let mut conditions = Map::new();
    for (name, value) in &target.query {
        match name.as_str() {
            "machine" | "state" | "cursor" => obj.str(name, value),
            "limit" => obj.num(name, parse_u64(name, value)?),
            "include_context" => obj.raw(name, parse_bool(name, value)?.as_bytes()),
            "scan" => {
                parse_bool(name, value)?;
            }
            _ => match name.strip_prefix("where.") {
                Some(path) => condition(&mut conditions, path, value)?,
                None => {
                    return Err(bad(format!(
                        "query parameter {:?} is not taken by a query of /instances",
                        quote(name)
                    )))
                }
            },
        }
    }
    // A map of strings and scalars always serialises.
    obj.raw(
        "where",
        &serde_json::to_vec(&conditions).unwrap_or_default(),
    );
    Ok(())
}

/// Adds `where.<path>=value` to `conditions`: a trailing operator makes it a bound (or `in`)
/// when what is left is still a `ctx.` path, so a field named `gte` stays reachable.
fn condition(conditions: &mut Map<String, Value>, path: &str, text: &str) -> Result<(), Rejection> {
    let split = path
        .rsplit_once('.')
        .filter(|(rest, op)| OPERATORS.contains(op) && rest.starts_with("ctx.") && rest.len() > 4);
    let Some((path, op)) = split else {
        return match conditions.insert(path.to_owned(), where_value(text)) {
            None => Ok(()),
            Some(_) => Err(bad(format!(
                "where.{} has a value and a bound",
                quote(path)
            ))),
        };
    };
    let value = match op {
        "in" => Value::Array(text.split(',').map(where_value).collect()),
        _ => where_value(text),
    };
    let entry = conditions
        .entry(path.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    match entry.as_object_mut() {
        Some(ops) => {
            ops.insert(op.to_owned(), value);
            Ok(())
        }
        None => Err(bad(format!(
            "where.{} has a value and a bound",
            quote(path)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn target(query: &[(&str, &str)]) -> Target {
        Target {
            segments: vec!["instances".into()],
            query: query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn params_of(query: &[(&str, &str)]) -> Result<Value, Rejection> {
        let mut obj = Obj::new();
        params(&mut obj, &target(query))?;
        Ok(serde_json::from_slice(&obj.finish()).unwrap())
    }

    #[test]
    fn where_parameters_become_conditions_and_pick_the_op() {
        assert_eq!(op_of(&target(&[("machine", "m")])), Op::ListInstances);
        assert_eq!(op_of(&target(&[("where.ctx.a", "1")])), Op::FindInstances);
        assert_eq!(op_of(&target(&[("scan", "true")])), Op::ScanInstances);
        let p = params_of(&[
            ("machine", "order"),
            ("where.ctx.customer", "c-9"),
            ("where.ctx.total.gte", "10"),
            ("where.ctx.total.lt", "20.5"),
            ("where.ctx.flag", "true"),
            ("where.ctx.code", "\"7\""),
            ("where.ctx.region.in", "eu,us,3"),
            ("where.ctx.gte", "x"),
            ("limit", "5"),
            ("include_context", "1"),
        ])
        .unwrap();
        assert_eq!(
            p,
            json!({"machine": "order", "limit": 5, "include_context": true, "where": {
                "ctx.customer": "c-9", "ctx.total": {"gte": 10, "lt": 20.5}, "ctx.flag": true,
                "ctx.code": "7", "ctx.region": {"in": ["eu", "us", 3]}, "ctx.gte": "x"}})
        );
        assert!(params_of(&[("where.ctx.a", "1"), ("where.ctx.a.gt", "0")]).is_err());
        assert!(params_of(&[("where.ctx.a.gt", "0"), ("where.ctx.a", "1")]).is_err());
        assert!(params_of(&[("has_timer", "true")]).is_err());
        assert!(params_of(&[("limit", "x")]).is_err());
    }
}
