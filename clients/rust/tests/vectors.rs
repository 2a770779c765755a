//! The client's codec against the shared wire vectors (`clients/testdata/frames.json`, written
//! by the server's codec in `tests/wire_vectors.rs`).

use serde_json::Value;
use smdb_client::frame::{decode_frame, encode_frame, FrameError, HEADER_LEN};
use smdb_client::Incoming;

fn vectors() -> Value {
    let text = include_str!("../../testdata/frames.json");
    serde_json::from_str(text).expect("frames.json is JSON")
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn every_vector_decodes_as_the_server_says() {
    let v = vectors();
    let max = v["max_payload"].as_u64().unwrap() as u32;
    let frames = v["frames"].as_array().unwrap();
    assert!(frames.len() >= 15);
    for f in frames {
        let name = f["name"].as_str().unwrap();
        let bytes = unhex(f["hex"].as_str().unwrap());
        let got = decode_frame(&bytes, max);
        match (f["complete"].as_bool().unwrap(), f["error"].as_str()) {
            (false, _) => assert_eq!(got, Ok(None), "{name}"),
            (true, Some(code)) => {
                let e = got.expect_err(name);
                let mine = match e {
                    FrameError::BadMagic(_) => "INVALID_FRAME",
                    FrameError::ChecksumMismatch { .. } => "CHECKSUM_MISMATCH",
                    FrameError::TooLarge { .. } => "FRAME_TOO_LARGE",
                };
                assert_eq!(mine, code, "{name}");
            }
            (true, None) => {
                let (range, used) = got.expect(name).expect(name);
                assert_eq!(used, bytes.len(), "{name}");
                let payload: Value = serde_json::from_slice(&bytes[range.clone()]).unwrap();
                assert_eq!(payload, f["payload"], "{name}");
                // The client's messages classify every valid payload.
                Incoming::parse(&bytes[range]).expect(name);
                if bytes[4..8] == [0, 0, 0, 0] {
                    let mut again = Vec::new();
                    encode_frame(&bytes[HEADER_LEN..], &mut again);
                    assert_eq!(again, bytes, "{name}: the client encodes it byte for byte");
                }
            }
        }
    }
}
