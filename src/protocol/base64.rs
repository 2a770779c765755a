//! Standard base64 (RFC 4648, with padding) for log records inside JSON stream frames: the
//! `base64` crate's standard engine behind the two calls `wire.rs` makes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// Appends the base64 text of `bytes` to `out`.
pub fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    // 4 output bytes per 3 input bytes, rounded up, padded: exactly the padded encoding's
    // length (a record is at most a segment, far below usize::MAX / 2: no overflow).
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    // encode_slice fails only when the output slice is shorter than the encoding, and it was
    // sized to the encoding's exact length just above.
    let written = STANDARD
        .encode_slice(bytes, &mut out[start..])
        .expect("the output was sized to the padded encoding");
    out.truncate(start + written);
}

/// Decodes padded base64; `None` for anything malformed.
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_rfc4648_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut out = Vec::new();
            encode_into(plain.as_bytes(), &mut out);
            assert_eq!(out, coded.as_bytes());
            assert_eq!(decode(coded.as_bytes()).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        encode_into(&all, &mut out);
        assert_eq!(decode(&out).unwrap(), all);
        assert!(decode(b"Zg=").is_none());
        assert!(decode(b"Z===").is_none());
        assert!(decode(b"Zg==Zg==").is_none());
        assert!(decode(b"Z!==").is_none());
    }
}
