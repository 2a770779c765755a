//! PROXY protocol (HAProxy's spec, v1 text and v2 binary): the header a TCP load balancer puts
//! at the start of a connection to name the client it accepted (docs/protocol.md, "Behind a load balancer").
//!
//! `parse` is pure (fuzzed: fuzz/src/proxy_header.rs); `read_header` reads exactly the
//! header's bytes from a stream, never more, so whatever follows (TLS, frames) is untouched.
//!
//! A small parser rather than the `ppp` crate: the reader has to know the header's length
//! before reading it anyway (v2: 16 bytes then their length field; v1: up to CRLF), which is
//! most of the work, and what is left (two address layouts and one text line) is short, fuzzed,
//! and adds no dependency.

mod read;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub use read::{read_header, ReadError, HEADER_READ_TIMEOUT};

/// The v2 signature (12 bytes).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// v2 fixed part: signature, version/command, family/protocol, 2-byte length.
pub const V2_FIXED_BYTES: usize = 16;
/// A whole v2 `LOCAL` header (no address): what a member sends first on its own connections
/// to another member that expects PROXY headers (`network.proxy_protocol`), as a balancer's
/// health check does, so that replication reaches a primary behind the same setting.
pub const V2_LOCAL_HEADER: [u8; V2_FIXED_BYTES] = {
    let mut h = [0u8; V2_FIXED_BYTES];
    let mut i = 0;
    while i < V2_SIGNATURE.len() {
        h[i] = V2_SIGNATURE[i];
        i += 1;
    }
    h[12] = 0x20; // version 2, command LOCAL
    h
};
/// Largest v2 address block (addresses plus TLVs) accepted. Balancers send 12 (IPv4) or 36
/// (IPv6) bytes plus a few TLVs; 216 for UNIX sockets.
pub const V2_BODY_BYTES_MAX: usize = 2048;
/// v1: the longest line the spec allows, CRLF included.
pub const V1_LINE_BYTES_MAX: usize = 107;
/// v1 starts with this.
pub const V1_PREFIX: &[u8] = b"PROXY ";
/// The shortest possible header (`PROXY UNKNOWN\r\n`); a reader may always read this many
/// bytes first without over-reading.
pub const HEADER_BYTES_MIN: usize = 15;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1 or 2.
    pub version: u8,
    /// The client's address; `None` for v1 `UNKNOWN`, v2 `LOCAL` (the balancer's own health
    /// checks) and non-IP families: the connection's own peer address stands.
    pub source: Option<SocketAddr>,
    /// The address the client connected to, when given.
    pub destination: Option<SocketAddr>,
}

/// Why `parse` cannot return a header yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The bytes so far are a valid beginning; at least this many more belong to the header.
    Incomplete(usize),
    /// Not a valid PROXY header.
    Invalid(&'static str),
}

/// Parses a header at the start of `buf`: `Ok((header, bytes used))`, or how many more bytes
/// to read, or why it is invalid.
pub fn parse(buf: &[u8]) -> Result<(Header, usize), ParseError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] && !buf.is_empty() {
        return parse_v2(buf);
    }
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] == V1_PREFIX[..n] {
        return parse_v1(buf);
    }
    Err(ParseError::Invalid("not a PROXY protocol header"))
}

fn parse_v2(buf: &[u8]) -> Result<(Header, usize), ParseError> {
    if buf.len() < V2_FIXED_BYTES {
        return Err(ParseError::Incomplete(V2_FIXED_BYTES - buf.len()));
    }
    let ver_cmd = buf[12];
    let fam = buf[13];
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 {
        return Err(ParseError::Invalid("v2: version is not 2"));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return Err(ParseError::Invalid("v2: unknown command")),
    };
    if len > V2_BODY_BYTES_MAX {
        return Err(ParseError::Invalid("v2: address block too long"));
    }
    let total = V2_FIXED_BYTES + len;
    if buf.len() < total {
        return Err(ParseError::Incomplete(total - buf.len()));
    }
    let body = &buf[V2_FIXED_BYTES..total];
    let header = |source, destination| Header {
        version: 2,
        source,
        destination,
    };
    if local {
        // LOCAL: the balancer speaking for itself; the address block is ignored.
        return Ok((header(None, None), total));
    }
    let (family, transport) = (fam >> 4, fam & 0x0f);
    if !matches!(transport, 0 | 1) {
        return Err(ParseError::Invalid("v2: not a stream protocol"));
    }
    let (src, dst) = v2_addresses(family, body)?;
    if family != 0 && transport == 0 {
        return Err(ParseError::Invalid("v2: address without a protocol"));
    }
    Ok((header(src, dst), total))
}

/// A header's source and destination.
type Addresses = (Option<SocketAddr>, Option<SocketAddr>);

/// The addresses of a v2 PROXY (not LOCAL) header's address block, by family: unspecified,
/// IPv4, IPv6, or UNIX (its paths are not addresses a client has here).
fn v2_addresses(family: u8, body: &[u8]) -> Result<Addresses, ParseError> {
    Ok(match family {
        0 => (None, None),
        1 => {
            let a = body
                .first_chunk::<12>()
                .ok_or(ParseError::Invalid("v2: IPv4 block too short"))?;
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(a[o], a[o + 1], a[o + 2], a[o + 3]));
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Some(SocketAddr::new(ip(0), port(8))),
                Some(SocketAddr::new(ip(4), port(10))),
            )
        }
        2 => {
            let a = body
                .first_chunk::<36>()
                .ok_or(ParseError::Invalid("v2: IPv6 block too short"))?;
            let ip = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&a[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            };
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Some(SocketAddr::new(ip(0), port(32))),
                Some(SocketAddr::new(ip(16), port(34))),
            )
        }
        3 => {
            if body.len() < 216 {
                return Err(ParseError::Invalid("v2: UNIX block too short"));
            }
            (None, None)
        }
        _ => return Err(ParseError::Invalid("v2: unknown address family")),
    })
}

fn parse_v1(buf: &[u8]) -> Result<(Header, usize), ParseError> {
    let window = &buf[..buf.len().min(V1_LINE_BYTES_MAX)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if window.len() >= V1_LINE_BYTES_MAX {
            return Err(ParseError::Invalid("v1: line longer than 107 bytes"));
        }
        if window.len() < HEADER_BYTES_MIN {
            return Err(ParseError::Incomplete(HEADER_BYTES_MIN - window.len()));
        }
        return Err(ParseError::Incomplete(1));
    };
    let used = lf + 1;
    let line = window[..lf]
        .strip_suffix(b"\r")
        .ok_or(ParseError::Invalid("v1: line does not end with CRLF"))?;
    let line = std::str::from_utf8(line).map_err(|_| ParseError::Invalid("v1: not ASCII"))?;
    let mut words = line.split(' ');
    words.next(); // "PROXY", matched by the caller
    let header = |source, destination| Header {
        version: 1,
        source,
        destination,
    };
    let v6 = match words.next() {
        // Whatever follows UNKNOWN is ignored (the spec says so).
        Some("UNKNOWN") => return Ok((header(None, None), used)),
        Some("TCP4") => false,
        Some("TCP6") => true,
        _ => {
            return Err(ParseError::Invalid(
                "v1: protocol is not TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    let mut next = || words.next().ok_or(ParseError::Invalid("v1: missing field"));
    let (src, dst) = (ip(next()?, v6)?, ip(next()?, v6)?);
    let (sport, dport) = (port(next()?)?, port(next()?)?);
    if words.next().is_some() {
        return Err(ParseError::Invalid("v1: extra fields"));
    }
    Ok((
        header(
            Some(SocketAddr::new(src, sport)),
            Some(SocketAddr::new(dst, dport)),
        ),
        used,
    ))
}

fn ip(s: &str, v6: bool) -> Result<IpAddr, ParseError> {
    let bad = ParseError::Invalid("v1: bad address");
    match v6 {
        false => s.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad),
        true => s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad),
    }
}

fn port(s: &str) -> Result<u16, ParseError> {
    let bad = ParseError::Invalid("v1: bad port");
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad);
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(bad);
    }
    s.parse().map_err(|_| bad)
}

/// Encodes a v2 PROXY header for `source` -> `destination` (both the same family), as a
/// balancer would: used by tests and the load-balancer check.
pub fn encode_v2(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x21);
    let mut body = Vec::new();
    match (source, destination) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            out.push(0x11);
            body.extend_from_slice(&s.ip().octets());
            body.extend_from_slice(&d.ip().octets());
        }
        (s, d) => {
            out.push(0x21);
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
                IpAddr::V6(ip) => ip.octets(),
            };
            body.extend_from_slice(&v6(s));
            body.extend_from_slice(&v6(d));
        }
    }
    body.extend_from_slice(&source.port().to_be_bytes());
    body.extend_from_slice(&destination.port().to_be_bytes());
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn a_members_own_local_header_parses_as_local() {
        let mut raw = V2_LOCAL_HEADER.to_vec();
        raw.extend_from_slice(b"RCP1");
        let (h, used) = parse(&raw).unwrap();
        assert_eq!((h.version, h.source, used), (2, None, V2_FIXED_BYTES));
    }

    #[test]
    fn v1_tcp4_tcp6_and_unknown() {
        let raw = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 7401\r\nREST";
        let (h, used) = parse(raw).unwrap();
        assert_eq!(used, raw.len() - 4);
        assert_eq!(h.version, 1);
        assert_eq!(h.source, addr("192.0.2.7:56324"));
        assert_eq!(h.destination, addr("10.0.0.1:7401"));
        let (h, _) = parse(b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n").unwrap();
        assert_eq!(h.source, addr("[2001:db8::1]:1"));
        let (h, used) = parse(b"PROXY UNKNOWN whatever\r\nX").unwrap();
        assert_eq!((h.source, used), (None, 24));
    }

    #[test]
    fn v1_asks_for_bytes_until_crlf_and_refuses_bad_lines() {
        assert_eq!(parse(b"PRO"), Err(ParseError::Incomplete(12)));
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4"), Err(ParseError::Incomplete(1)));
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"GET / HTTP/1.1\r\n",
        ] {
            assert!(
                matches!(parse(bad), Err(ParseError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 100]].concat();
        assert!(matches!(parse(&long), Err(ParseError::Invalid(_))));
    }

    #[test]
    fn v2_round_trips_and_asks_for_its_length() {
        for (s, d) in [
            ("192.0.2.7:56324", "10.0.0.1:7401"),
            ("[2001:db8::7]:1", "[::1]:7401"),
        ] {
            let (s, d) = (s.parse().unwrap(), d.parse().unwrap());
            let mut raw = encode_v2(s, d);
            let len = raw.len();
            for cut in 1..len {
                assert!(
                    matches!(parse(&raw[..cut]), Err(ParseError::Incomplete(n)) if n > 0 && cut + n <= len),
                    "cut {cut}"
                );
            }
            raw.extend_from_slice(b"frame");
            let (h, used) = parse(&raw).unwrap();
            assert_eq!(
                (h.version, h.source, h.destination, used),
                (2, Some(s), Some(d), len)
            );
        }
    }

    #[test]
    fn v2_local_is_accepted_without_an_address_and_bad_fields_are_refused() {
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(parse(&local).unwrap().0.source, None);
        let good = encode_v2(addr("1.2.3.4:5").unwrap(), addr("6.7.8.9:10").unwrap());
        let with = |i: usize, b: u8| {
            let mut v = good.clone();
            v[i] = b;
            v
        };
        for bad in [
            with(12, 0x11),
            with(12, 0x22),
            with(13, 0x12),
            with(13, 0x41),
        ] {
            assert!(
                matches!(parse(&bad), Err(ParseError::Invalid(_))),
                "{bad:?}"
            );
        }
        // IPv6 family with an IPv4-sized block.
        assert!(matches!(
            parse(&with(13, 0x21)),
            Err(ParseError::Invalid(_))
        ));
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert!(matches!(parse(&huge), Err(ParseError::Invalid(_))));
    }
}
