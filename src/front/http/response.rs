//! HTTP responses: status lines, the headers every response carries, and RFC 9457 problem
//! bodies for failures (docs/http.md, "Errors").

use std::fmt::Write;

use serde_json::{json, Map, Value};
use shards::{ErrorCode, Rejection};

use super::console::CSP;

/// Seconds a client is told to wait before retrying a retryable 503 (`Retry-After`).
pub const RETRY_AFTER_SECS: u32 = 1;

/// One response, before encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Headers beyond the ones every response has.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    /// A console file: served with the console's Content-Security-Policy.
    pub console: bool,
    /// HEAD: the headers only.
    pub head_only: bool,
    /// A problem's error code (counted in the request metrics).
    pub code: Option<ErrorCode>,
}

impl Response {
    /// A JSON body.
    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
            console: false,
            head_only: false,
            code: None,
        }
    }

    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The problem response for `rej` with the status its code maps to (`status` overrides
    /// it: 412, 415, 421, 431 have no code of their own).
    pub fn problem(rej: &Rejection, status: Option<u16>) -> Response {
        let status = status.unwrap_or_else(|| rej.code.http_status());
        let body = json!({
            "type": format!("urn:smdb:error:{}", rej.code.as_str()),
            "title": title(rej.code),
            "status": status,
            "detail": rej.message,
            "code": rej.code.as_str(),
            "retryable": rej.code.retryable(),
            "details": Value::Object(rej.details.clone()),
        });
        let mut r = Response::json(status, serde_json::to_vec(&body).unwrap_or_default());
        r.content_type = "application/problem+json";
        r.code = Some(rej.code);
        if status == 503 && rej.code.retryable() {
            r = r.with("Retry-After", RETRY_AFTER_SECS.to_string());
        }
        r
    }

    /// Appends the encoded response to `out`; `close` adds `Connection: close`.
    pub fn encode(&self, out: &mut Vec<u8>, close: bool) {
        let mut head = String::with_capacity(256);
        // Writing into a String cannot fail.
        let _ = write!(
            head,
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.console {
            let _ = write!(
                head,
                "Content-Security-Policy: {CSP}\r\nX-Frame-Options: DENY\r\n\
                 Cache-Control: no-cache\r\n"
            );
        } else {
            head.push_str("Cache-Control: no-store\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        if close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        out.extend_from_slice(head.as_bytes());
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

/// A problem with no wire code of its own, e.g. `plain(404, NotFound, "no such path")`.
pub fn plain(status: u16, code: ErrorCode, message: impl Into<String>) -> Response {
    Response::problem(&Rejection::new(code, message), Some(status))
}

/// A problem with details.
pub fn with_details(
    status: u16,
    code: ErrorCode,
    message: &str,
    details: Map<String, Value>,
) -> Response {
    let mut rej = Rejection::new(code, message);
    rej.details = details;
    Response::problem(&rej, Some(status))
}

/// The problem's `title`: its code in words (`GUARD_FAILED` is "Guard failed").
fn title(code: ErrorCode) -> String {
    let words = code.as_str().replace('_', " ").to_lowercase();
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => words,
    }
}

/// The reason phrase of every status the server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Response, close: bool) -> String {
        let mut out = Vec::new();
        r.encode(&mut out, close);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn problems_carry_the_code_status_and_details() {
        let rej = Rejection::new(ErrorCode::GuardFailed, "no guard held").with("event", "pay");
        let r = Response::problem(&rej, None);
        assert_eq!(r.status, 422);
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body,
            json!({"type": "urn:smdb:error:GUARD_FAILED", "title": "Guard failed", "status": 422,
                   "detail": "no guard held", "code": "GUARD_FAILED", "retryable": false,
                   "details": {"event": "pay"}})
        );
        let t = text(&r, true);
        assert!(
            t.starts_with("HTTP/1.1 422 Unprocessable Content\r\n"),
            "{t}"
        );
        assert!(t.contains("Content-Type: application/problem+json\r\n"));
        assert!(t.contains("Connection: close\r\n"));
        let busy = Response::problem(&Rejection::new(ErrorCode::ShuttingDown, "bye"), None);
        assert!(text(&busy, false).contains("Retry-After: 1\r\n"));
    }

    #[test]
    fn every_status_of_the_code_table_has_a_reason() {
        for code in ErrorCode::ALL {
            assert_ne!(reason(code.http_status()), "Status", "{code}");
        }
    }
}
