//! The PROXY protocol header parser (`smdb::proxy::parse`) on arbitrary bytes.

use smdb::proxy::{encode_v2, parse, ParseError};

/// Parses `data` as the start of a connection behind a balancer. Never panics, never claims
/// more bytes than it was given, never asks for bytes past the end of a header it then
/// accepts, and a v2 header it encodes parses back to the same addresses.
pub fn proxy_header(data: &[u8]) {
    match parse(data) {
        Ok((header, used)) => {
            assert!(used <= data.len());
            // The header alone parses the same way (nothing after it was looked at).
            assert_eq!(parse(&data[..used]), Ok((header, used)));
            if let (Some(s), Some(d)) = (header.source, header.destination) {
                if s.is_ipv4() == d.is_ipv4() {
                    let again = encode_v2(s, d);
                    let parsed = parse(&again).map(|(h, n)| (h.source, h.destination, n));
                    assert_eq!(parsed, Ok((Some(s), Some(d), again.len())), "own encoding");
                }
            }
        }
        Err(ParseError::Incomplete(n)) => {
            assert!(n > 0);
            // Reading exactly the missing bytes never overshoots a header that then parses.
            let mut more = data.to_vec();
            more.extend(std::iter::repeat_n(b'\n', n));
            if let Ok((_, used)) = parse(&more) {
                assert_eq!(used, more.len(), "the header ends exactly where it said");
            }
        }
        Err(ParseError::Invalid(_)) => {}
    }
}
