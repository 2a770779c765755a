//! Fuzz bodies for the HTTP request parser and the path router: plain `fn(&[u8])`s, run by
//! the cargo-fuzz targets in `fuzz/` and by the property tests below on stable (whatever the
//! input: no panic, and memory bounded by the limits, not by what the input claims).

use smdb_protocol::op::HttpReply;

use super::call;
use super::chunked::Chunked;
use super::parse::{parse_head, Framing, Head, HEAD_BYTES_MAX};
use super::router::{route, Routed};
use super::target::parse_target;

/// Body limit the fuzz bodies decode chunked bodies with.
const BODY_MAX: usize = 64 * 1024;
/// The shards the built calls route over.
const HASH_4: shards::routing::Layout = shards::routing::Layout {
    routing: shards::routing::Routing::Hash,
    count: 4,
};

/// A request as bytes: head, target, route, params, and a chunked body after it.
pub fn request(data: &[u8]) {
    let (head, used) = match parse_head(data) {
        Ok(Some(found)) => found,
        Ok(None) => {
            assert!(
                data.len() < HEAD_BYTES_MAX,
                "a partial head stays under the limit"
            );
            return;
        }
        Err(_) => return,
    };
    assert!(used <= data.len() && used <= HEAD_BYTES_MAX);
    // Nothing after the head was looked at.
    assert_eq!(
        parse_head(&data[..used]).ok().flatten().map(|(_, n)| n),
        Some(used)
    );
    if head.framing == Framing::Chunked {
        let rest = &data[used..];
        let mut whole = Chunked::new(BODY_MAX);
        let one = whole.feed(rest);
        // Fed in two pieces, the decoder agrees with itself.
        let mut split = Chunked::new(BODY_MAX);
        let cut = rest.len() / 2;
        let two = split.feed(&rest[..cut]).and_then(|a| {
            if a < cut {
                return Ok(a);
            }
            split.feed(&rest[cut..]).map(|b| a + b)
        });
        assert_eq!(one.is_ok(), two.is_ok());
        if let (Ok(a), Ok(b)) = (one, two) {
            assert_eq!((a, whole.is_done()), (b, split.is_done()));
            let body = whole.into_body();
            assert!(body.len() <= BODY_MAX);
            assert_eq!(body, split.into_body());
        }
    }
    routed(&head, None);
}

/// A path (and a method, from the first byte) through the router and the params builder.
pub fn router(data: &[u8]) {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"][usize::from(m) % 6];
    let (path, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let head = Head {
        method: method.to_string(),
        target: String::from_utf8_lossy(path).into_owned(),
        http11: true,
        host: Some("h".into()),
        ..Head::default()
    };
    routed(&head, body);
}

fn routed(head: &Head, body: Option<&[u8]>) {
    let Ok(target) = parse_target(&head.target) else {
        return;
    };
    for seg in &target.segments {
        assert!(seg != "." && seg != ".." && !seg.contains('\0'));
    }
    let Ok(Routed::Op { op, route, params }) = route(&head.method, &target.segments, true) else {
        return;
    };
    let op = call::op_for(op, route, &target);
    if let Ok(c) = call::build(op, route, &params, &target, body, head, HASH_4) {
        // The params are one JSON object, whatever went in.
        let v: serde_json::Value = serde_json::from_slice(&c.params).expect("params are JSON");
        assert!(v.is_object(), "{v}");
        assert_eq!(c.diagram.is_some(), route.reply == HttpReply::Diagram);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Pieces of HTTP, so random requests get past the first line often.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"GET ".to_vec()),
            Just(b"POST ".to_vec()),
            Just(b"/instances/".to_vec()),
            Just(b"/machines/m/versions/".to_vec()),
            Just(b"/stream?".to_vec()),
            Just(b" HTTP/1.1\r\n".to_vec()),
            Just(b"Host: h\r\n".to_vec()),
            Just(b"Content-Length: 3\r\n".to_vec()),
            Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
            Just(b"If-Match: \"1.2\"\r\n".to_vec()),
            Just(b"Last-Event-ID: c1-1-2-3-4\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"5\r\nhello\r\n0\r\n\r\n".to_vec()),
            Just(b"%2F%00%zz..&=?".to_vec()),
            prop::collection::vec(any::<u8>(), 0..12),
        ]
    }

    fn requestish() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(piece(), 0..24).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn the_request_parser_never_panics(data in prop::collection::vec(any::<u8>(), 0..2048)) {
            request(&data);
        }

        #[test]
        fn structured_requests_never_panic(data in requestish()) {
            request(&data);
            router(&data);
        }

        #[test]
        fn the_router_never_panics(data in prop::collection::vec(any::<u8>(), 0..512)) {
            router(&data);
        }
    }

    #[test]
    fn seeds_that_reach_deep() {
        request(b"POST /instances/a/events HTTP/1.1\r\nHost: h\r\nIf-Match: \"0.3\"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
        router(b"\x01/instances/a%2Fb/events\n{\"event\":\"e\"}");
        router(b"\x00/stream?instance=x&from_cursor=c1-1-2-3-4");
        router(b"\x00/machines/m/versions/7/diagram?format=dot");
    }
}
