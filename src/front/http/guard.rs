//! The checks a request passes before its op (docs/http.md, "Limits and hardening"): the
//! listener is on by default, so a web page the operator happens to visit must not be able to
//! use it.
//!
//! * `Host` must name this listener (its bound address; `localhost:PORT` too when bound to a
//!   loopback address) or one of `http.allowed_hosts`: a DNS-rebinding page sends its own
//!   name. Else 421.
//! * A state-changing request (POST, PUT, DELETE) whose `Origin` is not this listener's, or
//!   whose `Sec-Fetch-Site` is `cross-site`, is refused (403) whatever its token.
//! * A body must be `application/json` (else 415): a form cannot send that cross-origin
//!   without a CORS preflight, which this server never grants.

use std::net::SocketAddr;

use shards::ErrorCode;

use super::parse::Head;
use super::response::{plain, Response};

/// What the checks compare against, fixed at start-up.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// Accepted `Host` values, lower case: `host:port`, or `host` for any port.
    accepted: Vec<String>,
}

impl Hosts {
    pub fn new(bound: SocketAddr, allowed: &[String]) -> Hosts {
        let port = bound.port();
        let mut accepted = vec![match bound {
            SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
            SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
        }];
        if bound.ip().is_loopback() {
            accepted.push(format!("localhost:{port}"));
        }
        accepted.extend(allowed.iter().map(|h| h.to_ascii_lowercase()));
        Hosts { accepted }
    }

    /// Whether `host` (a `Host` header value) names this listener.
    pub fn accepts(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let name = strip_port(&host);
        (self.accepted.iter()).any(|a| *a == host || (!has_port(a) && a == name))
    }
}

/// `host` without its `:port` (IPv6 literals keep their brackets).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

fn has_port(host: &str) -> bool {
    strip_port(host).len() != host.len()
}

/// Checks `Host`, and for state-changing methods `Origin` and `Sec-Fetch-Site`.
pub fn check(head: &Head, hosts: &Hosts, tls: bool) -> Result<(), Response> {
    let host = head.host.as_deref().unwrap_or("");
    if !head.http11 && head.host.is_none() {
        // HTTP/1.0 may omit Host; such a request was not sent by a browser page.
    } else if !hosts.accepts(host) {
        return Err(plain(
            421,
            ErrorCode::BadRequest,
            format!(
                "Host {:?} is not this server; add it to http.allowed_hosts",
                smdb_protocol::codes::quote(host)
            ),
        ));
    }
    if !matches!(head.method.as_str(), "POST" | "PUT" | "DELETE") {
        return Ok(());
    }
    let scheme = if tls { "https" } else { "http" };
    let foreign_origin = match &head.origin {
        Some(origin) => !origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")),
        None => false,
    };
    let cross_site = head
        .sec_fetch_site
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("cross-site"));
    if foreign_origin || cross_site {
        return Err(plain(
            403,
            ErrorCode::Forbidden,
            "a state-changing request from another origin is refused",
        ));
    }
    Ok(())
}

/// A request with a body must send `Content-Type: application/json` (parameters allowed).
pub fn check_json(head: &Head) -> Result<(), Response> {
    let media = head
        .content_type
        .as_deref()
        .and_then(|ct| ct.split(';').next())
        .map(str::trim);
    match media {
        Some(m) if m.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(plain(
            415,
            ErrorCode::BadRequest,
            "a request body must be Content-Type: application/json",
        )),
    }
}

/// An `Authorization` header that is not `Bearer <token>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotBearer;

/// The token of `Authorization: Bearer <token>`; `NotBearer` for another scheme or a
/// malformed value.
pub fn bearer(head: &Head) -> Result<Option<&str>, NotBearer> {
    let Some(value) = head.authorization.as_deref() else {
        return Ok(None);
    };
    let (scheme, token) = value.split_once(' ').ok_or(NotBearer)?;
    let token = token.trim();
    match scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() {
        true => Ok(Some(token)),
        false => Err(NotBearer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, host: &str) -> Head {
        Head {
            method: method.into(),
            target: "/".into(),
            http11: true,
            host: Some(host.into()),
            ..Head::default()
        }
    }

    #[test]
    fn hosts_accept_the_bound_address_localhost_and_the_allowed_list() {
        let h = Hosts::new(
            "127.0.0.1:7480".parse().unwrap(),
            &["smdb.example.com".into()],
        );
        for ok in [
            "127.0.0.1:7480",
            "LOCALHOST:7480",
            "smdb.example.com",
            "smdb.example.com:443",
        ] {
            assert!(h.accepts(ok), "{ok}");
        }
        for bad in [
            "127.0.0.1:7481",
            "evil.example:7480",
            "localhost",
            "",
            "127.0.0.1",
        ] {
            assert!(!h.accepts(bad), "{bad}");
        }
        let v6 = Hosts::new("[::1]:80".parse().unwrap(), &[]);
        assert!(v6.accepts("[::1]:80") && v6.accepts("localhost:80") && !v6.accepts("[::2]:80"));
        let pinned = Hosts::new(
            "0.0.0.0:7480".parse().unwrap(),
            &["db.internal:7480".into()],
        );
        assert!(pinned.accepts("db.internal:7480") && !pinned.accepts("db.internal:80"));
    }

    #[test]
    fn foreign_origins_and_cross_site_writes_are_refused() {
        let hosts = Hosts::new("127.0.0.1:7480".parse().unwrap(), &[]);
        let mut h = head("POST", "127.0.0.1:7480");
        assert!(check(&h, &hosts, false).is_ok());
        h.origin = Some("http://127.0.0.1:7480".into());
        assert!(check(&h, &hosts, false).is_ok());
        assert_eq!(
            check(&h, &hosts, true).unwrap_err().status,
            403,
            "scheme differs"
        );
        h.origin = Some("http://evil.example".into());
        assert_eq!(check(&h, &hosts, false).unwrap_err().status, 403);
        h.origin = Some("null".into());
        assert_eq!(check(&h, &hosts, false).unwrap_err().status, 403);
        let mut h = head("DELETE", "127.0.0.1:7480");
        h.sec_fetch_site = Some("cross-site".into());
        assert_eq!(check(&h, &hosts, false).unwrap_err().status, 403);
        let mut get = head("GET", "127.0.0.1:7480");
        get.origin = Some("http://evil.example".into());
        assert!(
            check(&get, &hosts, false).is_ok(),
            "reads are not state-changing"
        );
        assert_eq!(
            check(&head("GET", "evil:7480"), &hosts, false)
                .unwrap_err()
                .status,
            421
        );
    }

    #[test]
    fn json_bodies_and_bearer_tokens() {
        let mut h = head("POST", "x");
        assert_eq!(check_json(&h).unwrap_err().status, 415);
        h.content_type = Some("Application/JSON; charset=utf-8".into());
        assert!(check_json(&h).is_ok());
        h.content_type = Some("text/plain".into());
        assert!(check_json(&h).is_err());
        assert_eq!(bearer(&h), Ok(None));
        h.authorization = Some("Bearer abc".into());
        assert_eq!(bearer(&h), Ok(Some("abc")));
        h.authorization = Some("Basic abc".into());
        assert_eq!(bearer(&h), Err(NotBearer));
        h.authorization = Some("Bearer ".into());
        assert_eq!(bearer(&h), Err(NotBearer));
    }
}
