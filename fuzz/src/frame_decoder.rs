//! The RCP1 frame decoder (`smdb::protocol::frame`) on arbitrary bytes.

use smdb::protocol::frame::{decode_frame, encode_frame, FrameError, HEADER_LEN};

/// The payload limit the body decodes with: the order of magnitude of the server's
/// `network.max_frame_bytes` default, and small enough that a fuzzer reaches it.
pub const FRAME_PAYLOAD_MAX: u32 = 1 << 20;

/// Decodes frames one after another from the front of `data` until one is incomplete or bad.
/// Never panics; a frame it accepts re-encodes to the same bytes (past the reserved header
/// bytes 4..8, which the decoder ignores), every shorter prefix of it reads as "need more",
/// and a lower limit gives the same frame or `TooLarge`.
pub fn frame_decoder(data: &[u8]) {
    let mut at = 0;
    loop {
        let rest = &data[at..];
        let Ok(Some((range, used))) = decode_frame(rest, FRAME_PAYLOAD_MAX) else {
            return;
        };
        assert!(range.end == used && range.start == HEADER_LEN && used <= rest.len());
        let payload = &rest[range.clone()];
        let mut again = Vec::new();
        encode_frame(payload, &mut again);
        assert_eq!(&again[8..], &rest[8..used], "length and CRC round trip");
        for cut in [0, HEADER_LEN - 1, HEADER_LEN, used - 1] {
            if cut < used {
                assert_eq!(
                    decode_frame(&rest[..cut], FRAME_PAYLOAD_MAX),
                    Ok(None),
                    "{cut}"
                );
            }
        }
        let limit = 64;
        match decode_frame(rest, limit) {
            Ok(Some((r, n))) => assert!(r == range && n == used && payload.len() <= 64),
            Err(FrameError::TooLarge { len, max }) => {
                assert!(len as usize == payload.len() && max == limit && len > limit)
            }
            other => panic!("a valid frame under a lower limit gave {other:?}"),
        }
        at += used;
    }
}
