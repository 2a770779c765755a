//! One truth for the wire: writes the RCP1 test vectors (frames as hex, their decoded JSON,
//! and the frames the server must refuse) with the server's own codec and envelope encoders,
//! and fails when `clients/testdata/frames.json` differs from what it generates. The Rust and
//! Python clients' tests read that file, so codec, server and clients cannot drift apart.
//!
//! After a deliberate change: `SMDB_WRITE_VECTORS=1 cargo test --test wire_vectors`, then
//! commit the file.

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};
use smdb::protocol::frame::{decode_frame, encode_frame, FrameError, FRAME_PAYLOAD_BYTES_DEFAULT};
use smdb::protocol::{encode_error, encode_ok};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/testdata/frames.json");
const MAX: u32 = FRAME_PAYLOAD_BYTES_DEFAULT;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn frame(payload: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(payload.as_bytes(), &mut out);
    out
}

/// What the server's decoder says about `bytes`: the payload, "incomplete", or the code of
/// the error response it sends.
fn verdict(bytes: &[u8]) -> (Option<Value>, Option<&'static str>, bool) {
    match decode_frame(bytes, MAX) {
        Ok(Some((range, used))) => {
            assert_eq!(used, bytes.len(), "one frame per vector");
            let v = serde_json::from_slice(&bytes[range]).expect("vector payloads are JSON");
            (Some(v), None, true)
        }
        Ok(None) => (None, None, false),
        Err(FrameError::BadMagic(_)) => (None, Some("INVALID_FRAME"), true),
        Err(FrameError::ChecksumMismatch { .. }) => (None, Some("CHECKSUM_MISMATCH"), true),
        Err(FrameError::TooLarge { .. }) => (None, Some("FRAME_TOO_LARGE"), true),
    }
}

fn vector(name: &str, note: &str, bytes: &[u8]) -> Value {
    let (payload, error, complete) = verdict(bytes);
    json!({"name": name, "note": note, "hex": hex(bytes), "complete": complete,
           "payload": payload, "error": error})
}

fn generate() -> Value {
    let mut v = Vec::new();
    let req = r#"{"type":"request","id":"1","op":"PING"}"#;
    v.push(vector(
        "request_ping",
        "a request without params",
        &frame(req),
    ));
    let hello = r#"{"type":"request","id":"2","op":"HELLO","params":{"protocol_version":1,"client_name":"vectors"}}"#;
    v.push(vector(
        "request_hello",
        "a request with params",
        &frame(hello),
    ));
    let apply = r#"{"type":"request","id":"3","op":"APPLY_EVENT","params":{"instance_id":"order-1","event":"pay","payload":{"amount":30,"note":"caf\u00e9 ☕"}}}"#;
    v.push(vector(
        "request_unicode",
        "non-ASCII UTF-8 in the payload",
        &frame(apply),
    ));

    let mut ok = Vec::new();
    encode_ok(&mut ok, "\"1\"", br#"{"pong":true}"#);
    v.push(vector("response_ok", "server encode_ok", &ok));
    let mut err = Vec::new();
    let rej = Rejection::new(
        ErrorCode::GuardFailed,
        "no guard held for event `pay` in state `new`",
    )
    .with("event", "pay")
    .with("state", "new");
    encode_error(&mut err, Some("\"3\""), &rej);
    v.push(vector("response_error", "server encode_error", &err));
    let mut shutting = Vec::new();
    encode_error(
        &mut shutting,
        Some("\"4\""),
        &Rejection::new(ErrorCode::ShuttingDown, "the server is shutting down"),
    );
    v.push(vector("response_retryable", "a retryable error", &shutting));
    let mut null_id = Vec::new();
    encode_error(
        &mut null_id,
        None,
        &Rejection::new(ErrorCode::ChecksumMismatch, "payload CRC32C mismatch"),
    );
    v.push(vector(
        "response_null_id",
        "a frame-level refusal: id null",
        &null_id,
    ));

    let event = r#"{"type":"event","subscription_id":1,"instance_id":"order-1","machine":"order","version":1,"event":"pay","from_state":"new","to_state":"paid","payload":{"amount":30},"shard":1,"wal_offset":3,"cursor":"c1-0-3"}"#;
    v.push(vector("push_event", "a subscription push", &frame(event)));
    let lagged = r#"{"type":"subscription_lagged","subscription_id":1,"resume_cursor":"c1-219-4"}"#;
    v.push(vector(
        "push_lagged",
        "a subscription that fell behind",
        &frame(lagged),
    ));
    v.push(vector(
        "empty_object",
        "the smallest JSON object",
        &frame("{}"),
    ));

    let mut flags = frame(req);
    flags[4..8].copy_from_slice(&[1, 2, 3, 4]);
    v.push(vector(
        "flags_ignored",
        "flag bytes are reserved and ignored on read",
        &flags,
    ));

    let mut magic = frame(req);
    magic[0..4].copy_from_slice(b"RCP2");
    v.push(vector("bad_magic", "magic is not RCP1", &magic));
    let mut crc = frame(req);
    let last = crc.len() - 1;
    crc[last] ^= 0x01;
    v.push(vector("bad_crc", "one payload bit flipped", &crc));
    let mut big = Vec::from(*b"RCP1");
    big.extend_from_slice(&[0; 4]);
    big.extend_from_slice(&(MAX + 1).to_be_bytes());
    big.extend_from_slice(&[0; 4]);
    v.push(vector(
        "oversized_length",
        "length over the 16 MiB default limit, header only",
        &big,
    ));
    let whole = frame(req);
    v.push(vector(
        "truncated_payload",
        "the header and part of the payload",
        &whole[..whole.len() - 5],
    ));
    v.push(vector(
        "truncated_header",
        "fewer than 16 bytes",
        &whole[..9],
    ));

    json!({
        "comment": "RCP1 test vectors, written by tests/wire_vectors.rs from the server's codec. \
                    complete=false: a reader needs more bytes. error: the code the server answers \
                    (with id null) before closing. Do not edit by hand.",
        "max_payload": MAX,
        "frames": v,
    })
}

#[test]
fn the_committed_vectors_are_what_the_server_codec_generates() {
    let text = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    if std::env::var_os("SMDB_WRITE_VECTORS").is_some() {
        std::fs::write(PATH, &text).unwrap();
    }
    let committed = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        committed == text,
        "{PATH} differs from what the server codec generates; if the change is deliberate, \
         run SMDB_WRITE_VECTORS=1 cargo test --test wire_vectors and commit the file"
    );
}

#[test]
fn the_vectors_cover_every_frame_error() {
    let g = generate();
    let errors: Vec<&str> = g["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["error"].as_str())
        .collect();
    assert_eq!(
        errors,
        ["INVALID_FRAME", "CHECKSUM_MISMATCH", "FRAME_TOO_LARGE"]
    );
}
