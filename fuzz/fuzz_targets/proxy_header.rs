//! Feeds arbitrary bytes to the PROXY header parser: it must never panic, never claim more
//! bytes than it was given, never ask for bytes past the end of a header it then accepts, and a v2 header
//! it encodes must parse back to the same addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smdb::proxy::{encode_v2, parse, ParseError};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok((header, used)) => {
            assert!(used <= data.len());
            // The header alone parses the same way (nothing after it was looked at).
            assert_eq!(parse(&data[..used]), Ok((header, used)));
            if let (Some(s), Some(d)) = (header.source, header.destination) {
                if s.is_ipv4() == d.is_ipv4() {
                    let again = encode_v2(s, d);
                    let (h2, n2) = parse(&again).expect("own encoding parses");
                    assert_eq!((h2.source, h2.destination, n2), (Some(s), Some(d), again.len()));
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
});
