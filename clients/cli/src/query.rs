//! `smdb-cli find` and `smdb-cli scan` (FIND_INSTANCES, SCAN_INSTANCES; docs/queries.md):
//! `--where PATH OP VALUE` arguments into a `where` object, pages followed with `--all`.

use serde_json::{json, Map, Value};
use smdb_client::{ClientError, FindQuery};
use smdb_protocol::op::where_value;

use super::args::QueryArgs;
use super::commands::Output;
use super::error::CliError;
use super::session::Session;

/// Runs `op` (FIND_INSTANCES or SCAN_INSTANCES) with `args`, printing the page (or, with
/// `--all`, every page's instances as one).
pub fn run(
    op: &str,
    args: &QueryArgs,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let mut params = json!({"machine": args.machine, "where": where_object(&args.conditions)?});
    if let Some(state) = &args.state {
        params["state"] = json!(state);
    }
    if let Some(limit) = args.limit {
        params["limit"] = json!(limit);
    }
    if let Some(cursor) = &args.cursor {
        params["cursor"] = json!(cursor);
    }
    if args.context {
        params["include_context"] = json!(true);
    }
    let mut page = one_page(op, &params, s)?;
    if args.all {
        let mut instances = take_array(&mut page["instances"]);
        while let Some(next) = page["next_cursor"].as_str() {
            params["cursor"] = json!(next);
            page = one_page(op, &params, s)?;
            instances.extend(take_array(&mut page["instances"]));
        }
        page["instances"] = Value::Array(instances);
    }
    // The instances render as LIST's do; the cursor line says how to go on.
    out.result("LIST_INSTANCES", &page)
}

/// One page of `op`. In cluster mode through the client's fan-out (every group's page merged
/// by id, one combined cursor; docs/cluster.md, "Clients"), shaped as a member's page: items
/// without `context` unless asked for, `versions` for FIND, `examined` for SCAN.
fn one_page(op: &str, params: &Value, s: &mut Session) -> Result<Value, CliError> {
    if !s.run(|c| Ok::<_, ClientError>(c.is_cluster()))? {
        return s.run(|c| c.call(op, params.clone()));
    }
    let text = |k: &str| params[k].as_str().map(str::to_string);
    let q = FindQuery {
        machine: text("machine").unwrap_or_default(),
        conditions: params["where"].as_object().cloned().unwrap_or_default(),
        state: text("state"),
        limit: params["limit"].as_u64(),
        cursor: text("cursor"),
        include_context: params["include_context"] == true,
    };
    let find = op == "FIND_INSTANCES";
    let mut page = s.value(|c| match find {
        true => c.find_instances(&q),
        false => c.scan_instances(&q),
    })?;
    if let Some(m) = page.as_object_mut() {
        m.remove(if find { "examined" } else { "versions" });
    }
    if !q.include_context {
        for item in page["instances"].as_array_mut().into_iter().flatten() {
            if let Some(m) = item.as_object_mut() {
                m.remove("context");
            }
        }
    }
    Ok(page)
}

fn take_array(v: &mut Value) -> Vec<Value> {
    match v.take() {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// The operators of a `--where` argument, longest spelling first.
const OPERATORS: [(&str, Option<&str>); 5] = [
    (">=", Some("gte")),
    ("<=", Some("lte")),
    (">", Some("gt")),
    ("<", Some("lt")),
    ("=", None),
];

/// `--where` arguments as a `where` object: `PATH=V` exact (`PATH=in:a,b` one of several), the
/// comparisons of one path merged into one range object.
pub fn where_object(conditions: &[String]) -> Result<Value, CliError> {
    let mut out = Map::new();
    for arg in conditions {
        let (at, op, name) = OPERATORS
            .iter()
            .filter_map(|(op, name)| arg.find(op).map(|at| (at, *op, *name)))
            .min_by_key(|(at, op, _)| (*at, usize::MAX - op.len()))
            .ok_or_else(|| CliError::usage(format!("--where {arg:?}: no =, >, >=, < or <=")))?;
        let (path, text) = (&arg[..at], &arg[at + op.len()..]);
        if path.is_empty() {
            return Err(CliError::usage(format!(
                "--where {arg:?}: no path before {op}"
            )));
        }
        let value = match (name, text.strip_prefix("in:")) {
            (None, Some(list)) => {
                json!({"in": list.split(',').map(where_value).collect::<Vec<_>>()})
            }
            _ => where_value(text),
        };
        match name {
            None => {
                out.insert(path.to_owned(), value);
            }
            Some(name) => {
                let range = out.entry(path.to_owned()).or_insert_with(|| json!({}));
                let Some(range) = range.as_object_mut() else {
                    return Err(CliError::usage(format!(
                        "--where {arg:?}: {path} has a value"
                    )));
                };
                range.insert(name.to_owned(), value);
            }
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(args: &[&str]) -> Value {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        where_object(&args).unwrap()
    }

    #[test]
    fn where_arguments_become_conditions() {
        assert_eq!(w(&["ctx.customer=c-9"]), json!({"ctx.customer": "c-9"}));
        assert_eq!(
            w(&["ctx.n=5", "ctx.ok=true", "ctx.s=\"5\""]),
            json!({"ctx.n": 5, "ctx.ok": true, "ctx.s": "5"})
        );
        assert_eq!(
            w(&["ctx.total>=5", "ctx.total<10.5"]),
            json!({"ctx.total": {"gte": 5, "lt": 10.5}})
        );
        assert_eq!(w(&["ctx.c=in:a,2"]), json!({"ctx.c": {"in": ["a", 2]}}));
        assert_eq!(w(&["ctx.t=a>b"]), json!({"ctx.t": "a>b"}));
        assert!(where_object(&["ctx.n".into()]).is_err());
        assert!(where_object(&["=1".into()]).is_err());
        assert!(where_object(&["ctx.n=1".into(), "ctx.n>2".into()]).is_err());
    }
}
