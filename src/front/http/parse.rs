//! The request head and its framing (docs/http.md, "Limits and hardening"): a pure function
//! from bytes to `Ok(Some(head))`, `Ok(None)` (need more) or an error, so tests and the fuzz
//! target call it directly.
//!
//! Strict on purpose, against request smuggling: one `Content-Length` (digits only), or
//! `Transfer-Encoding: chunked` alone; both, a duplicate, or another coding is an error, and
//! the connection closes after any error. Headers whose duplicates would be ambiguous (`Host`,
//! `Authorization`, `Content-Type`, `Origin`, `If-Match`, `Idempotency-Key`, `Last-Event-ID`)
//! may appear once.

/// Largest request head (request line and headers), in bytes: over it, 431.
pub const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most header lines in one head: over it, 431.
pub const HEADERS_MAX: usize = 64;

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// No body.
    #[default]
    None,
    /// `Content-Length: n` (n > 0).
    Length(u64),
    /// `Transfer-Encoding: chunked` (`chunked.rs`).
    Chunked,
}

/// The parts of a request head the server reads; everything else is ignored.
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The request target as sent (`target.rs` splits it).
    pub target: String,
    /// HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    pub host: Option<String>,
    /// The `Authorization` value: a secret, never printed (`Debug` hides it).
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub origin: Option<String>,
    pub sec_fetch_site: Option<String>,
    pub if_match: Option<String>,
    pub idempotency_key: Option<String>,
    pub last_event_id: Option<String>,
    /// `Connection: close` (HTTP/1.1), or HTTP/1.0 without `Connection: keep-alive`.
    pub close: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    pub framing: Framing,
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Head")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("host", &self.host)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

/// Why a head was refused; the connection closes after the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// Over `HEAD_BYTES_MAX` or `HEADERS_MAX`: 431.
    TooLarge,
    /// Malformed or ambiguous: 400, with the reason.
    Bad(&'static str),
}

/// Parses the head at the start of `buf`: the head and its length in bytes, `Ok(None)` when
/// more bytes are needed (and `buf` is still under `HEAD_BYTES_MAX`).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= HEAD_BYTES_MAX => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Bad("malformed request head")),
    };
    if used > HEAD_BYTES_MAX {
        return Err(HeadError::TooLarge);
    }
    let mut head = Head {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        http11: req.version == Some(1),
        ..Head::default()
    };
    let mut fields = Fields::default();
    for h in req.headers.iter() {
        fields.read(&mut head, h.name, h.value)?;
    }
    head.close = match head.http11 {
        true => fields.connection_close,
        false => !fields.connection_keep_alive,
    };
    head.framing = framing(fields.content_length, fields.chunked)?;
    if head.http11 && head.host.is_none() {
        return Err(HeadError::Bad("HTTP/1.1 needs a Host header"));
    }
    Ok(Some((head, used)))
}

/// What the header loop collected besides the `Head` fields.
#[derive(Default)]
struct Fields {
    content_length: Option<u64>,
    chunked: bool,
    connection_close: bool,
    connection_keep_alive: bool,
}

impl Fields {
    fn read(&mut self, head: &mut Head, name: &str, value: &[u8]) -> Result<(), HeadError> {
        let text = || {
            std::str::from_utf8(value)
                .map(|v| v.trim().to_string())
                .map_err(|_| HeadError::Bad("a header value is not UTF-8"))
        };
        let once = |slot: &mut Option<String>, why| match slot {
            Some(_) => Err(HeadError::Bad(why)),
            None => {
                *slot = Some(text()?);
                Ok(())
            }
        };
        match name.to_ascii_lowercase().as_str() {
            "host" => once(&mut head.host, "more than one Host header")?,
            "authorization" => once(&mut head.authorization, "more than one Authorization")?,
            "content-type" => once(&mut head.content_type, "more than one Content-Type")?,
            "origin" => once(&mut head.origin, "more than one Origin header")?,
            "sec-fetch-site" => once(&mut head.sec_fetch_site, "more than one Sec-Fetch-Site")?,
            "if-match" => once(&mut head.if_match, "more than one If-Match header")?,
            "idempotency-key" => once(&mut head.idempotency_key, "more than one Idempotency-Key")?,
            "last-event-id" => once(&mut head.last_event_id, "more than one Last-Event-ID")?,
            "content-length" => {
                if self.content_length.is_some() {
                    return Err(HeadError::Bad("more than one Content-Length"));
                }
                self.content_length = Some(length(value)?);
            }
            "transfer-encoding" => {
                if self.chunked || !text()?.eq_ignore_ascii_case("chunked") {
                    return Err(HeadError::Bad("Transfer-Encoding must be `chunked`, once"));
                }
                self.chunked = true;
            }
            "connection" => {
                for token in text()?.split(',').map(str::trim) {
                    self.connection_close |= token.eq_ignore_ascii_case("close");
                    self.connection_keep_alive |= token.eq_ignore_ascii_case("keep-alive");
                }
            }
            "expect" => {
                if !text()?.eq_ignore_ascii_case("100-continue") {
                    return Err(HeadError::Bad("the only Expect understood is 100-continue"));
                }
                head.expect_continue = true;
            }
            _ => {}
        }
        Ok(())
    }
}

/// A `Content-Length` value: ASCII digits only (no sign, no list), at most 19 of them.
fn length(value: &[u8]) -> Result<u64, HeadError> {
    let bad = HeadError::Bad("Content-Length must be one decimal number");
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad);
    }
    digits
        .iter()
        .try_fold(0u64, |n, d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or(bad)
}

fn framing(length: Option<u64>, chunked: bool) -> Result<Framing, HeadError> {
    match (length, chunked) {
        (Some(_), true) => Err(HeadError::Bad(
            "Content-Length and Transfer-Encoding together",
        )),
        (Some(0) | None, false) => Ok(Framing::None),
        (Some(n), false) => Ok(Framing::Length(n)),
        (None, true) => Ok(Framing::Chunked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<(Head, usize)>, HeadError> {
        parse_head(text.as_bytes())
    }

    fn ok(text: &str) -> Head {
        head(text).unwrap().unwrap().0
    }

    #[test]
    fn a_complete_head_gives_its_fields_and_length() {
        let text = "POST /instances HTTP/1.1\r\nHost: a:1\r\nContent-Type: application/json\r\n\
                    Content-Length: 12\r\nIdempotency-Key: k\r\nAuthorization: Bearer s3cret\r\n\r\n{}";
        let (h, used) = head(text).unwrap().unwrap();
        assert_eq!(used, text.len() - 2);
        assert_eq!(
            (h.method.as_str(), h.target.as_str()),
            ("POST", "/instances")
        );
        assert_eq!(h.framing, Framing::Length(12));
        assert_eq!(h.idempotency_key.as_deref(), Some("k"));
        assert!(h.http11 && !h.close);
        assert!(
            !format!("{h:?}").contains("s3cret"),
            "Debug hides the token"
        );
    }

    #[test]
    fn partial_heads_ask_for_more_until_the_limit() {
        assert_eq!(head("GET / HTTP/1.1\r\nHost: a"), Ok(None));
        let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(HEAD_BYTES_MAX));
        assert_eq!(head(&long), Err(HeadError::TooLarge));
        let many: String = (0..=HEADERS_MAX).map(|i| format!("X{i}: 1\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(head(&text), Err(HeadError::TooLarge));
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        let refused = [
            "Content-Length: 1\r\nContent-Length: 1\r\n",
            "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Content-Length: +1\r\n",
            "Content-Length: 1,1\r\n",
            "Content-Length: 99999999999999999999\r\n",
            "Host: b\r\n",
            "Expect: something\r\n",
        ];
        for extra in refused {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\n{extra}\r\n");
            assert!(matches!(head(&text), Err(HeadError::Bad(_))), "{extra:?}");
        }
        let chunked = ok("POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: Chunked\r\n\r\n");
        assert_eq!(chunked.framing, Framing::Chunked);
        let empty = ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(empty.framing, Framing::None);
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection_header() {
        assert!(ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n").close);
        assert!(ok("GET / HTTP/1.0\r\n\r\n").close);
        assert!(!ok("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").close);
        assert!(matches!(
            head("GET / HTTP/1.1\r\n\r\n"),
            Err(HeadError::Bad(_))
        ));
        assert!(matches!(head("GET /\r\n\r\n"), Err(HeadError::Bad(_))));
    }
}
