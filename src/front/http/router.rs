//! The path router: the op table's `http` rows (`smdb_protocol::op`) are the API's paths, so
//! an op's paths are stated once, next to its other facts. Besides them only the console is
//! served: `GET /` and `GET /assets/<name>` (a table compiled into the binary).
//!
//! Pure: a method and decoded segments in, the op (or console file) and path parameters out,
//! or 404 / 405 with the methods the path allows.

use std::sync::OnceLock;

use smdb_protocol::op::HttpRoute;

use super::console;
use crate::protocol::Op;

/// A path's `{name}` segments, decoded, in order.
pub type PathParams = Vec<(&'static str, String)>;

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// An op's path (its row's `HttpRoute`: what the request takes and the reply gives);
    /// `params` are its `{name}` segments in order, by name.
    Op {
        op: Op,
        route: &'static HttpRoute,
        params: PathParams,
    },
    /// A console file (`GET /` is `index.html`).
    Asset(&'static console::Asset),
}

/// Why nothing was routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// 404.
    NotFound,
    /// 405: the path exists for these methods.
    MethodNotAllowed(Vec<&'static str>),
}

/// One op-table row, its template split once.
struct Row {
    op: Op,
    route: &'static HttpRoute,
    /// `None`: a literal segment; `Some(name)`: a parameter.
    parts: Vec<(Option<&'static str>, &'static str)>,
}

fn rows() -> &'static [Row] {
    static ROWS: OnceLock<Vec<Row>> = OnceLock::new();
    ROWS.get_or_init(|| {
        let mut rows = Vec::new();
        for &op in Op::ALL {
            for r in op.facts().http {
                let parts = r.path[1..]
                    .split('/')
                    .map(
                        |p| match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                            Some(name) => (Some(name), p),
                            None => (None, p),
                        },
                    )
                    .collect();
                rows.push(Row {
                    op,
                    route: r,
                    parts,
                });
            }
        }
        rows
    })
}

/// Routes `method` on `segments`; `console` says whether the console is served.
pub fn route(method: &str, segments: &[String], console: bool) -> Result<Routed, RouteError> {
    if let Some(found) = console_file(segments, console) {
        return match method {
            "GET" | "HEAD" => found.map(Routed::Asset).ok_or(RouteError::NotFound),
            _ => Err(RouteError::MethodNotAllowed(vec!["GET", "HEAD"])),
        };
    }
    let mut allow = Vec::new();
    for row in rows() {
        let Some(params) = matches(row, segments) else {
            continue;
        };
        let row_method = row.route.method.as_str();
        if row_method == method {
            return Ok(Routed::Op {
                op: row.op,
                route: row.route,
                params,
            });
        }
        if !allow.contains(&row_method) {
            allow.push(row_method);
        }
    }
    match allow.is_empty() {
        true => Err(RouteError::NotFound),
        false => Err(RouteError::MethodNotAllowed(allow)),
    }
}

/// `Some(file or None)` when the path is the console's (`/`, `/assets/<name>`).
fn console_file(segments: &[String], console: bool) -> Option<Option<&'static console::Asset>> {
    if !console {
        return None;
    }
    match segments {
        [] => Some(console::find("index.html")),
        [assets, name] if assets == "assets" => Some(console::find(name)),
        _ => None,
    }
}

/// The row's parameters when `segments` fit its template.
fn matches(row: &Row, segments: &[String]) -> Option<PathParams> {
    if row.parts.len() != segments.len() {
        return None;
    }
    let mut params = Vec::new();
    for ((param, literal), seg) in row.parts.iter().zip(segments) {
        match param {
            Some(name) if !seg.is_empty() => params.push((*name, seg.clone())),
            Some(_) => return None,
            None if literal == seg => {}
            None => return None,
        }
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        super::super::target::parse_target(path).unwrap().segments
    }

    fn op_of(method: &str, path: &str) -> Result<(Op, PathParams), RouteError> {
        match route(method, &segs(path), true)? {
            Routed::Op { op, params, .. } => Ok((op, params)),
            Routed::Asset(_) => panic!("{path} is an asset"),
        }
    }

    #[test]
    fn every_table_row_routes_to_its_op() {
        for &op in Op::ALL {
            for r in op.facts().http {
                let path = r.path.replace('{', "x").replace('}', "");
                let (got, _) = op_of(r.method.as_str(), &path).unwrap();
                let stream = [Op::WatchAll, Op::WatchInstance];
                assert!(
                    got == op || (stream.contains(&got) && stream.contains(&op)),
                    "{path}"
                );
            }
        }
    }

    #[test]
    fn parameters_come_decoded_by_name() {
        let (op, params) = op_of("POST", "/instances/a%2Fb/events").unwrap();
        assert_eq!(op, Op::ApplyEvent);
        assert_eq!(params, vec![("id", "a/b".to_string())]);
        let (op, params) = op_of("GET", "/machines/m/versions/3/diagram").unwrap();
        assert_eq!(op, Op::GetMachine);
        assert_eq!(
            params,
            vec![("machine", "m".into()), ("version", "3".into())]
        );
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_405_with_allow() {
        assert_eq!(op_of("GET", "/nope"), Err(RouteError::NotFound));
        assert_eq!(op_of("GET", "/instances/"), Err(RouteError::NotFound));
        assert_eq!(op_of("GET", "/instances/a/b/c"), Err(RouteError::NotFound));
        match op_of("PATCH", "/instances/a") {
            Err(RouteError::MethodNotAllowed(allow)) => assert_eq!(allow, vec!["GET", "DELETE"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            route("POST", &[], true),
            Err(RouteError::MethodNotAllowed(vec!["GET", "HEAD"]))
        );
        assert_eq!(route("GET", &[], false), Err(RouteError::NotFound));
        assert!(matches!(
            route("GET", &segs("/assets/app.js"), true),
            Ok(Routed::Asset(_))
        ));
        assert_eq!(
            route("GET", &segs("/assets/nope.js"), true),
            Err(RouteError::NotFound)
        );
    }
}
