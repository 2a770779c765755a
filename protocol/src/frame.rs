//! The RCP1 frame codec (docs/protocol.md, "Frames"): 16-byte header, then the JSON payload.
//!
//! | bytes | field |
//! |---|---|
//! | 0-3 | magic `RCP1` |
//! | 4-7 | flags (reserved; written as zero, ignored on read) |
//! | 8-11 | payload length, u32 big-endian |
//! | 12-15 | CRC32C (Castagnoli) of the payload, u32 big-endian |

/// The four magic bytes that open every frame.
pub const MAGIC: [u8; 4] = *b"RCP1";
/// Header length in bytes; fixed by the specification.
pub const HEADER_LEN: usize = 16;
/// Default payload limit (docs/protocol.md, "Frames"): large definitions and contexts fit, a hostile length
/// cannot make the server allocate gigabytes.
pub const FRAME_PAYLOAD_BYTES_DEFAULT: u32 = 16 * 1024 * 1024;
/// Largest response frame a client accepts: twice a log record's limit (64 MiB), so a read of
/// the largest record (its data plus the envelope) fits with room for large pages. The server
/// checks the relation in `smdb::limits`.
pub const RESPONSE_FRAME_BYTES_MAX: u32 = 128 * 1024 * 1024;

/// Why bytes could not be decoded as a frame. Each maps to one wire error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The first four bytes are not `RCP1`.
    BadMagic([u8; 4]),
    /// The payload's CRC32C differs from the header's.
    ChecksumMismatch { expected: u32, actual: u32 },
    /// The header announces more payload than the configured limit.
    TooLarge { len: u32, max: u32 },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadMagic(m) => write!(f, "bad frame magic {m:02x?}, expected RCP1"),
            FrameError::ChecksumMismatch { expected, actual } => write!(
                f,
                "payload CRC32C mismatch: header says {expected:08x}, payload has {actual:08x}"
            ),
            FrameError::TooLarge { len, max } => {
                write!(
                    f,
                    "frame payload of {len} bytes exceeds the limit of {max} bytes"
                )
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub payload_len: u32,
    pub checksum: u32,
}

/// Parses and checks a header: magic first, then the length against `max_payload`, so an
/// oversize frame is refused before anything is allocated for it.
pub fn decode_header(bytes: &[u8; HEADER_LEN], max_payload: u32) -> Result<Header, FrameError> {
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let payload_len = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if payload_len > max_payload {
        return Err(FrameError::TooLarge {
            len: payload_len,
            max: max_payload,
        });
    }
    let checksum = u32::from_be_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    Ok(Header {
        payload_len,
        checksum,
    })
}

/// Decodes one frame from the front of `buf`.
///
/// Returns `Ok(Some((payload_range, consumed)))` for a complete valid frame, `Ok(None)` when more
/// bytes are needed, or the frame error. The header is validated (magic, length) as soon as its
/// 16 bytes are present, before waiting for the payload.
pub fn decode_frame(
    buf: &[u8],
    max_payload: u32,
) -> Result<Option<(std::ops::Range<usize>, usize)>, FrameError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let header = decode_header(head, max_payload)?;
    let end = HEADER_LEN + header.payload_len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let payload = &buf[HEADER_LEN..end];
    let actual = crc32c::crc32c(payload);
    if actual != header.checksum {
        return Err(FrameError::ChecksumMismatch {
            expected: header.checksum,
            actual,
        });
    }
    Ok(Some((HEADER_LEN..end, end)))
}

/// Appends one frame carrying `payload` to `out`.
pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    // Payloads come from our own encoders and are bounded by the frame limit; a payload over
    // u32::MAX would be a bug upstream, so saturate rather than wrap.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Writes a frame header for a payload that will be appended by the caller, returning the
/// position of the header so `finish_frame` can fill in length and checksum. Lets encoders write
/// the JSON straight into the output buffer without an intermediate copy.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0u8; 12]);
    start
}

/// Completes the header written by `begin_frame` at `start` over everything after it.
pub fn finish_frame(out: &mut [u8], start: usize) {
    let payload = &out[start + HEADER_LEN..];
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let crc = crc32c::crc32c(payload);
    out[start + 8..start + 12].copy_from_slice(&len.to_be_bytes());
    out[start + 12..start + 16].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u32 = FRAME_PAYLOAD_BYTES_DEFAULT;

    #[test]
    fn needs_more_bytes_until_complete() {
        let mut f = Vec::new();
        encode_frame(br#"{"a":1}"#, &mut f);
        for cut in 0..f.len() {
            assert_eq!(decode_frame(&f[..cut], MAX), Ok(None), "cut at {cut}");
        }
        assert_eq!(decode_frame(&f, MAX), Ok(Some((16..23, 23))));
    }

    #[test]
    fn bad_magic_is_rejected_from_the_header_alone() {
        let mut f = Vec::new();
        encode_frame(b"{}", &mut f);
        f[0] = b'X';
        assert!(matches!(
            decode_frame(&f[..16], MAX),
            Err(FrameError::BadMagic(_))
        ));
    }

    #[test]
    fn oversize_length_is_rejected_before_the_payload_arrives() {
        let mut h = Vec::from(MAGIC);
        h.extend_from_slice(&[0; 4]);
        h.extend_from_slice(&(MAX + 1).to_be_bytes());
        h.extend_from_slice(&[0; 4]);
        assert_eq!(
            decode_frame(&h, MAX),
            Err(FrameError::TooLarge {
                len: MAX + 1,
                max: MAX
            })
        );
    }

    #[test]
    fn checksum_mismatch_is_rejected() {
        let mut f = Vec::new();
        encode_frame(b"{\"x\":2}", &mut f);
        let last = f.len() - 1;
        f[last] ^= 1;
        assert!(matches!(
            decode_frame(&f, MAX),
            Err(FrameError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn flags_are_ignored_on_read() {
        let mut f = Vec::new();
        encode_frame(b"{}", &mut f);
        f[4..8].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(decode_frame(&f, MAX), Ok(Some((16..18, 18))));
    }

    #[test]
    fn begin_finish_matches_encode() {
        let mut a = Vec::new();
        encode_frame(b"hello", &mut a);
        let mut b = Vec::new();
        let s = begin_frame(&mut b);
        b.extend_from_slice(b"hello");
        finish_frame(&mut b, s);
        assert_eq!(a, b);
    }

    proptest! {
        #[test]
        fn round_trip(payloads in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 1..8)) {
            let mut buf = Vec::new();
            for p in &payloads { encode_frame(p, &mut buf); }
            let mut at = 0;
            for p in &payloads {
                let (range, used) = decode_frame(&buf[at..], MAX).unwrap().unwrap();
                prop_assert_eq!(&buf[at + range.start..at + range.end], &p[..]);
                at += used;
            }
            prop_assert_eq!(at, buf.len());
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_frame(&bytes, 32);
        }
    }
}
