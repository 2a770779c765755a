//! The request target split into path segments and query pairs (docs/http.md, "Paths").
//!
//! The path is split on `/` before each segment is percent-decoded, so `%2F` may appear inside
//! an instance id; `.`, `..` and a segment holding NUL are refused (after decoding too), so no
//! path can mean another. Query values decode `+` as a space (as browsers' `URLSearchParams`
//! encode it). Everything decoded must be UTF-8.

use std::borrow::Cow;

/// Most path segments: the longest API path has five.
pub const SEGMENTS_MAX: usize = 16;
/// Most query parameters in one request.
pub const QUERY_PAIRS_MAX: usize = 32;

/// A request target, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// `/` is no segment; `/a/b` is `["a", "b"]`; a trailing `/` gives an empty last one.
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
}

impl Target {
    /// The value of query parameter `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Splits and decodes `raw` (an origin-form target: `/path?query`); the error says why.
pub fn parse_target(raw: &str) -> Result<Target, &'static str> {
    if !raw.starts_with('/') {
        return Err("the request target must be a path starting with /");
    }
    if raw.contains('#') {
        return Err("a request target holds no fragment");
    }
    let (path, query) = raw.split_once('?').unwrap_or((raw, ""));
    let mut segments = Vec::new();
    if path != "/" {
        for piece in path[1..].split('/') {
            if segments.len() == SEGMENTS_MAX {
                return Err("too many path segments");
            }
            let seg = decode(piece, false)?;
            if seg == "." || seg == ".." || seg.contains('\0') {
                return Err("`.`, `..` and NUL are not path segments");
            }
            segments.push(seg.into_owned());
        }
    }
    let mut pairs = Vec::new();
    for piece in query.split('&').filter(|p| !p.is_empty()) {
        if pairs.len() == QUERY_PAIRS_MAX {
            return Err("too many query parameters");
        }
        let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
        let k = decode(k, true)?.into_owned();
        if pairs.iter().any(|(seen, _)| *seen == k) {
            return Err("a query parameter is given twice");
        }
        pairs.push((k, decode(v, true)?.into_owned()));
    }
    Ok(Target {
        segments,
        query: pairs,
    })
}

/// Percent-decodes `s` (and `+` as a space in a query); the result must be UTF-8.
fn decode(s: &str, plus_is_space: bool) -> Result<Cow<'_, str>, &'static str> {
    if !(s.contains('%') || plus_is_space && s.contains('+')) {
        return Ok(Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .ok_or("a % is not followed by two hex digits")?;
                let hex = std::str::from_utf8(hex).map_err(|_| "bad percent-encoding")?;
                let byte = u8::from_str_radix(hex, 16)
                    .map_err(|_| "a % is not followed by two hex digits")?;
                out.push(byte);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| "a percent-decoded value is not UTF-8")
}

/// Percent-encodes one path segment (for `Location`): everything but unreserved characters.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_split_before_decoding() {
        let t = parse_target("/instances/a%2Fb%20c/events?limit=5&from=2").unwrap();
        assert_eq!(t.segments, vec!["instances", "a/b c", "events"]);
        assert_eq!(
            (t.get("limit"), t.get("from"), t.get("x")),
            (Some("5"), Some("2"), None)
        );
        assert_eq!(parse_target("/").unwrap(), Target::default());
        assert_eq!(
            parse_target("/machines/").unwrap().segments,
            vec!["machines", ""]
        );
        let q = parse_target("/stream?machines=a+b,c%2Cd&include_context").unwrap();
        assert_eq!(q.get("machines"), Some("a b,c,d"));
        assert_eq!(q.get("include_context"), Some(""));
    }

    #[test]
    fn dot_segments_nul_and_bad_escapes_are_refused() {
        for bad in [
            "/instances/..",
            "/instances/%2e%2E/x",
            "/a/./b",
            "/instances/a%00b",
            "/instances/%zz",
            "/instances/%4",
            "/instances/%ff",
            "instances",
            "http://evil/instances",
            "/x#frag",
            "/x?a=1&a=2",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
        let deep = "/a".repeat(SEGMENTS_MAX + 1);
        assert!(parse_target(&deep).is_err());
    }

    #[test]
    fn encode_segment_round_trips() {
        let id = "a/b c?é%";
        let enc = encode_segment(id);
        assert!(!enc.contains('/') && !enc.contains(' '));
        let t = parse_target(&format!("/instances/{enc}")).unwrap();
        assert_eq!(t.segments[1], id);
    }
}
