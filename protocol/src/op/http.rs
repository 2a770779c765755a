//! The HTTP facts of an op's paths (docs/http.md): each `HttpRoute` of a row's `http` says its
//! method and path, and what the HTTP layer (`src/front/http/`) makes of a request to it and of
//! the reply: the query parameters it takes, its body, `If-Match`, and the success's status
//! and headers. The HTTP layer reads these and decides nothing per op, but which of the stream
//! path's two ops runs (`HttpReply::Stream`).

/// An HTTP method of the API (docs/http.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// What an HTTP path answers with, made from its op's result (docs/http.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpReply {
    /// The op's `result` object as the JSON body.
    Result,
    /// GET_MACHINE's definition drawn (`?format=svg|dot|mermaid`).
    Diagram,
    /// A subscription's events as Server-Sent Events: WATCH_INSTANCE when the request names an
    /// instance (`?instance=`), WATCH_ALL otherwise; `Last-Event-ID` or `?from_cursor=` says
    /// where it starts.
    Stream,
}

/// How a query value becomes a params member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKind {
    /// A string.
    Str,
    /// A non-negative integer (400 otherwise).
    U64,
    /// `true` (also an empty value and `1`) or `false` (also `0`).
    Bool,
    /// Comma-separated, sent as a list of strings (empty items dropped).
    List,
}

/// A `where.<path>=V` value (`GET /instances`, `smdb-cli find -w`; docs/queries.md): JSON
/// when it parses as a number, `true`, `false`, `null` or a quoted string, else the text.
pub fn where_value(text: &str) -> serde_json::Value {
    use serde_json::Value;
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Null | Value::String(_))) => v,
        _ => Value::String(text.to_owned()),
    }
}

/// A query parameter a path takes: copied into the op's params as `member`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub name: &'static str,
    pub member: &'static str,
    pub kind: QueryKind,
}

impl Query {
    const fn new(name: &'static str, kind: QueryKind) -> Query {
        Query {
            name,
            member: name,
            kind,
        }
    }

    pub const fn str(name: &'static str) -> Query {
        Query::new(name, QueryKind::Str)
    }

    pub const fn u64(name: &'static str) -> Query {
        Query::new(name, QueryKind::U64)
    }

    pub const fn bool(name: &'static str) -> Query {
        Query::new(name, QueryKind::Bool)
    }

    pub const fn list(name: &'static str) -> Query {
        Query::new(name, QueryKind::List)
    }

    /// The same parameter, sent as params member `member` (`?instance=` is `instance_id`).
    pub const fn member(self, member: &'static str) -> Query {
        Query { member, ..self }
    }
}

/// What a path does with a request body (a JSON object where one is taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// None is taken: one sent is refused (400).
    No,
    /// Required; its members join the params.
    Members,
    /// Optional; its members join the params (SWITCHOVER's `{to?}`).
    OptionalMembers,
    /// Required, and sent whole as this params member (PUT_MACHINE's `definition`).
    Member(&'static str),
}

/// When a success is `201 Created` rather than `200 OK`, by one boolean member of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Always 200.
    Never,
    /// 201 when the member is `true` (PUT_MACHINE's `created`: false for an identical
    /// definition).
    IfTrue(&'static str),
    /// 201 unless the member is `false` (CREATE_INSTANCE's `applied`: false for an
    /// `Idempotency-Key` replay).
    UnlessFalse(&'static str),
}

/// One HTTP path that runs an op; `{name}` segments are path parameters, each sent as the
/// params member of its name (`version` as a number) unless `rename` names another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpRoute {
    pub method: Method,
    pub path: &'static str,
    pub reply: HttpReply,
    /// `(path parameter, params member)` where the two names differ.
    pub rename: &'static [(&'static str, &'static str)],
    /// The query parameters taken; any other is refused (400), but for `format` on a
    /// `Diagram` path and `from_cursor` (read on a `Stream` path, ignored elsewhere).
    pub query: &'static [Query],
    pub body: Body,
    /// A success carries `ETag: "<epoch>.<wal_offset>"`, the instance's version.
    pub etag: bool,
    /// `If-Match` is taken: the op's `expected_wal_offset`, and a version `CONFLICT` is 412.
    pub if_match: bool,
    pub created: Created,
    /// `Location` of a 201: this path with each `{name}` segment the result's string member
    /// of that name, percent-encoded.
    pub location: Option<&'static str>,
    /// A success carries the caller's scopes in `Smdb-Scopes` (the console shows write
    /// controls only to a token that may write).
    pub scopes: bool,
}

impl HttpRoute {
    /// A path with no query, no body and a plain `200` with the op's result: what `http!`
    /// fills in for the facts a row does not name.
    pub const PLAIN: HttpRoute = HttpRoute {
        method: Method::Get,
        path: "/",
        reply: HttpReply::Result,
        rename: &[],
        query: &[],
        body: Body::No,
        etag: false,
        if_match: false,
        created: Created::Never,
        location: None,
        scopes: false,
    };

    /// The params member path parameter `param` is sent as.
    pub fn member(&self, param: &'static str) -> &'static str {
        let renamed = self.rename.iter().find(|(p, _)| *p == param);
        renamed.map_or(param, |&(_, member)| member)
    }

    /// `"METHOD /path"`, as refusals name a path.
    pub fn name(&self) -> String {
        format!("{} {}", self.method.as_str(), self.path)
    }
}
