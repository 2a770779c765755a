//! Every fuzz target's body (`smdb_fuzz`, fuzz/src/) run on the stable toolchain under
//! proptest: on arbitrary bytes, and on generated inputs of the target's shape (frames,
//! request envelopes, PROXY headers, APPLY_EVENT params) that are valid and then bent by a few
//! byte edits, so the bodies reach past the first check. libFuzzer runs the same bodies with
//! coverage guidance where it can (fuzz/README.md); this is what runs in every `cargo test`.
//!
//! `SMDB_FUZZ_SCALE=N` runs N times the cases below (a longer hunt on stable).

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::FileFailurePersistence;
use serde_json::{json, Value};
use smdb::protocol::frame::encode_frame;
use smdb::protocol::Op;

/// `n` cases, times `SMDB_FUZZ_SCALE` when it is set. A failing input is kept in
/// `targets.proptest-regressions` beside this file and tried first on later runs.
fn cases(n: u32) -> ProptestConfig {
    let scale = std::env::var("SMDB_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok());
    let keep = FileFailurePersistence::WithSource("proptest-regressions");
    ProptestConfig {
        failure_persistence: Some(Box::new(keep)),
        ..ProptestConfig::with_cases(n.saturating_mul(scale.unwrap_or(1)))
    }
}

/// Arbitrary bytes, up to `max` of them.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// One byte edit of a valid input.
#[derive(Debug, Clone)]
enum Edit {
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

/// Bytes an edit inserts: mostly ones that mean something to JSON, PROXY or the frame header.
fn inserted_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => select(b"{}[]\":,\\ \t\r\n0123456789-+.eEnultrfa/u\x00\x1f\x7f".to_vec()),
        1 => any::<u8>(),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<Index>(), 1..=255u8).prop_map(|(at, bits)| Edit::Flip(at, bits)),
        3 => (any::<Index>(), inserted_byte()).prop_map(|(at, b)| Edit::Insert(at, b)),
        2 => any::<Index>().prop_map(Edit::Remove),
        1 => any::<Index>().prop_map(Edit::Truncate),
    ]
}

fn apply_edits(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        match e {
            Edit::Insert(at, b) => data.insert(at.index(data.len() + 1), *b),
            _ if data.is_empty() => {}
            Edit::Flip(at, bits) => {
                let i = at.index(data.len());
                data[i] ^= bits;
            }
            Edit::Remove(at) => drop(data.remove(at.index(data.len()))),
            Edit::Truncate(at) => data.truncate(at.index(data.len())),
        }
    }
    data
}

/// Inputs from `valid`, as they are half the time and with up to three edits otherwise.
fn bent(valid: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let edits = prop_oneof![Just(vec![]), prop::collection::vec(edit(), 1..=3)];
    (valid, edits).prop_map(|(data, edits)| apply_edits(data, &edits))
}

/// Short strings, dense in what JSON readers and the scans treat specially.
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("order-1".to_string()),
        Just("{t}:1".to_string()),
        Just(smdb_fuzz::AUTH_TOKEN.to_string()),
        Just(String::new()),
        Just("x".repeat(257)),
        "[a-z{}\\[\\]:,\"\\\\/ \u{e9}\u{2028}\u{1}]{0,8}",
    ]
}

/// The member names the params parsers look for, and one they do not.
fn key() -> impl Strategy<Value = String> {
    select(
        &[
            "id",
            "instance_id",
            "event",
            "payload",
            "machine",
            "version",
            "definition",
            "context",
            "idempotency_key",
            "expected_state",
            "expected_wal_offset",
            "from",
            "limit",
            "cursor",
            "state",
            "has_timer",
            "mode",
            "ops",
            "op",
            "params",
            "method",
            "token",
            "machines",
            "from_states",
            "to_states",
            "events",
            "include_context",
            "from_cursor",
            "from_offset",
            "subscription_id",
            "states",
            "initial",
            "transitions",
            "extra",
        ][..],
    )
    .prop_map(str::to_string)
}

/// Any JSON value, nested a few levels, with the keys above.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        string().prop_map(Value::String),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6..1e6f64).prop_map(Value::from),
        Just(json!(0)),
        Just(json!(1)),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Request envelopes for every op, with params-like objects.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let op = prop_oneof![
        9 => select(Op::ALL).prop_map(|op| op.as_str().to_string()),
        1 => string(),
    ];
    let params = prop::collection::btree_map(key(), value(), 0..6);
    let id = prop_oneof![Just(json!(1)), Just(json!("r-1")), Just(json!(null))];
    (op, params, id).prop_map(|(op, params, id)| {
        let params: serde_json::Map<String, Value> = params.into_iter().collect();
        json!({"type": "request", "id": id, "op": op, "params": params})
            .to_string()
            .into_bytes()
    })
}

/// A stream of valid frames (reserved header bytes set or not) around payloads of any bytes
/// or request texts.
fn frames() -> impl Strategy<Value = Vec<u8>> {
    let payload = prop_oneof![bytes(48), request()];
    prop::collection::vec((payload, any::<bool>()), 0..4).prop_map(|frames| {
        let mut out = Vec::new();
        for (payload, reserved) in frames {
            let at = out.len();
            encode_frame(&payload, &mut out);
            if reserved {
                out[at + 4..at + 8].copy_from_slice(b"rsvd");
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(cases(16384))]

    #[test]
    fn frame_decoder_on_arbitrary_bytes(data in bytes(256)) {
        smdb_fuzz::frame_decoder(&data);
    }

    #[test]
    fn frame_decoder_on_bent_frames(data in bent(frames())) {
        smdb_fuzz::frame_decoder(&data);
    }

    #[test]
    fn request_parser_on_arbitrary_bytes(data in bytes(256)) {
        smdb_fuzz::request_parser(&data);
    }

    #[test]
    fn request_parser_on_bent_requests(data in bent(request())) {
        smdb_fuzz::request_parser(&data);
    }
}

/// AUTH params: the method and the token right, nearly right, or escaped into the right text.
fn auth_params() -> impl Strategy<Value = Value> {
    let token = prop_oneof![
        Just(json!(smdb_fuzz::AUTH_TOKEN)),
        Just(json!("fuzz-tokeN")),
        Just(json!("fuzz-token ")),
        Just(json!("fuzz")),
        Just(json!(null)),
        Just(json!(["fuzz-token"])),
        string().prop_map(Value::String),
    ];
    let method = prop_oneof![Just(json!("bearer")), Just(json!("Bearer")), Just(json!(7))];
    (method, token, prop::option::of((key(), value()))).prop_map(|(method, token, extra)| {
        let mut params = json!({"method": method, "token": token});
        if let Some((k, v)) = extra {
            params[k] = v;
        }
        params
    })
}

/// AUTH params alone (the body's first reading) or inside a request for AUTH or another op,
/// written as serde writes them or with the token's `-` escaped (`\u002d`).
fn auth_input() -> impl Strategy<Value = Vec<u8>> {
    let op = prop_oneof![3 => Just("AUTH"), 1 => Just("GET_INSTANCE"), 1 => Just("PUT_MACHINE")];
    (auth_params(), op, any::<bool>(), any::<bool>()).prop_map(|(params, op, alone, escape)| {
        let text = match alone {
            true => params.to_string(),
            false => json!({"type": "request", "id": 1, "op": op, "params": params}).to_string(),
        };
        match escape {
            true => text.replace("fuzz-token", "fuzz\\u002dtoken").into_bytes(),
            false => text.into_bytes(),
        }
    })
}

fn socket_addr() -> impl Strategy<Value = std::net::SocketAddr> {
    let ip = prop_oneof![
        any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
        any::<[u8; 16]>().prop_map(std::net::IpAddr::from),
        Just(std::net::IpAddr::from([127, 0, 0, 1])),
    ];
    (ip, any::<u16>()).prop_map(|(ip, port)| std::net::SocketAddr::new(ip, port))
}

/// v1 lines and v2 headers as a balancer sends them, with bytes after them now and then.
fn proxy_headers() -> impl Strategy<Value = Vec<u8>> {
    let v1 = (socket_addr(), socket_addr()).prop_map(|(s, d)| {
        let family = if s.is_ipv4() { "TCP4" } else { "TCP6" };
        let (si, sp, di, dp) = (s.ip(), s.port(), d.ip(), d.port());
        format!("PROXY {family} {si} {di} {sp} {dp}\r\n").into_bytes()
    });
    let v2 = (socket_addr(), socket_addr()).prop_map(|(s, d)| smdb::proxy::encode_v2(s, d));
    let local = Just([&smdb::proxy::V2_SIGNATURE[..], &[0x20, 0x00, 0, 0]].concat());
    let unknown = Just(b"PROXY UNKNOWN\r\n".to_vec());
    let header = prop_oneof![3 => v1, 3 => v2, 1 => local, 1 => unknown];
    (header, bytes(8)).prop_map(|(mut h, after)| {
        h.extend_from_slice(&after);
        h
    })
}

/// The TLS body's input: a mode byte, then junk (mode 0) or a chunk-size or flip byte and a
/// stream of frames to send through an honest handshake.
fn tls_input() -> impl Strategy<Value = Vec<u8>> {
    let junk = bytes(200).prop_map(|b| [&[0u8][..], &b].concat());
    let sealed = (1..=2u8, any::<u8>(), bent(frames()))
        .prop_map(|(mode, byte, frames)| [&[mode, byte][..], &frames].concat());
    prop_oneof![1 => junk, 3 => sealed]
}

proptest! {
    #![proptest_config(cases(8192))]

    #[test]
    fn auth_on_arbitrary_bytes(data in bytes(256)) {
        smdb_fuzz::auth(&data);
    }

    #[test]
    fn auth_on_bent_auth_requests(data in bent(auth_input())) {
        smdb_fuzz::auth(&data);
    }

    #[test]
    fn proxy_header_on_arbitrary_bytes(data in bytes(128)) {
        smdb_fuzz::proxy_header(&data);
    }

    #[test]
    fn proxy_header_on_bent_headers(data in bent(proxy_headers())) {
        smdb_fuzz::proxy_header(&data);
    }
}

proptest! {
    // A handshake per case: fewer cases, each covering a whole session.
    #![proptest_config(cases(1024))]

    #[test]
    fn tls_frame_reader_on_arbitrary_bytes(data in bytes(512)) {
        smdb_fuzz::tls_frame_reader(&data);
    }

    #[test]
    fn tls_frame_reader_on_sessions(data in tls_input()) {
        smdb_fuzz::tls_frame_reader(&data);
    }
}

/// APPLY_EVENT member names: the six, one escaped into a known name, and an unknown one.
fn apply_key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just(r#""instance_id""#),
        4 => Just(r#""event""#),
        3 => Just(r#""payload""#),
        1 => Just(r#""expected_state""#),
        1 => Just(r#""expected_wal_offset""#),
        1 => Just(r#""idempotency_key""#),
        1 => Just(r#""instance\u005fid""#),
        1 => Just(r#""extra""#),
    ]
}

/// Values the scan takes as they are (when in the right member).
const CLEAN_VALUES: &[&str] = &[
    r#""a""#,
    r#""b-2""#,
    r#""{t}:1""#,
    "\"\u{e9}\"",
    "null",
    "0",
    "7",
    r#"{"p":"x"}"#,
    r#"{"a":1,"b":"x","c":true}"#,
    "{}",
    r#"{"p":-3,"q":null}"#,
];

/// Values each reading treats its own way: escapes, raw control and non-ASCII characters,
/// every spelling of a number, and payloads compact or not (unsorted, duplicate or escaped
/// names, nesting, floats, `-0`, integers past 18 digits or past u64).
const APPLY_VALUES: &[&str] = &[
    r#""a""#,
    r#""{t}:1""#,
    r#""x\"y""#,
    r#""\u0061""#,
    r#""a\/b""#,
    "\"\u{e9}\"",
    r#""\u00e9""#,
    "\"c\u{1}\"",
    "\"t\tb\"",
    "\"\u{2028}\"",
    "\"\u{7f}\"",
    r#""""#,
    "null",
    "true",
    "0",
    "7",
    "-0",
    "-1",
    "1.5",
    "1.0",
    "07",
    "1e2",
    "1E2",
    "0e0",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678",
    "1234567890123456789",
    "[1]",
    "{}",
    r#"{"p":"x","q":-3}"#,
    r#"{"b":1,"a":2}"#,
    r#"{"a":1,"a":2}"#,
    r#"{ "p" : 1 }"#,
    r#"{"p":{"z":1}}"#,
    r#"{"p":[]}"#,
    r#"{"p":-0}"#,
    r#"{"p":1.0}"#,
    r#"{"p":1e2}"#,
    r#"{"p":"\u00e9"}"#,
    "{\"p\":\"\u{e9}\"}",
    "{\"\u{e9}\":1,\"e\":2}",
    r#"{"p":"a\/b"}"#,
    r#"{"p":123456789012345678}"#,
    r#"{"p":-123456789012345678}"#,
    r#"{"p":1234567890123456789}"#,
    r#"{"p":18446744073709551616}"#,
    r#"{"p":true,"q":false,"r":null}"#,
    r#"{"":1}"#,
    r#"{"a":1,"":2}"#,
    r#"{"a":1,"aa":2}"#,
    r#"{"A":1,"a":2}"#,
    r#"{"p\u0071":1}"#,
    "{\"p\":\"\u{0}\"}",
    r#"{"p":"\u0000"}"#,
    r#"{"p":"\ud83d\ude00"}"#,
    "{\"p\":\"\u{1f600}\"}",
    "{\"p\":1}\u{a0}",
    r#"{"p":01}"#,
    r#"{"p":tru}"#,
    r#"{"p":nul}"#,
];

/// A value of a member: one of `CLEAN_VALUES` or `APPLY_VALUES`, any JSON value as serde
/// writes it, or a string of any bytes (alone or as a payload member).
fn apply_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => select(CLEAN_VALUES).prop_map(|v| v.as_bytes().to_vec()),
        6 => select(APPLY_VALUES).prop_map(|v| v.as_bytes().to_vec()),
        2 => value().prop_map(|v| v.to_string().into_bytes()),
        1 => bytes(6).prop_map(|b| [&b"\""[..], &b, b"\""].concat()),
        1 => bytes(6).prop_map(|b| [&b"{\"p\":\""[..], &b, b"\"}"].concat()),
    ]
}

/// JSON's own whitespace.
const JSON_GAPS: &[&[u8]] = &[b" ", b"\n", b"\t", b"\r\n  "];
/// Bytes JSON does not allow between tokens: form feed, a no-break space, NUL.
const BAD_GAPS: &[&[u8]] = &[b"\x0c", b"\xc2\xa0", b"\x00"];

/// Whitespace between tokens: none, JSON's own, or bytes JSON does not allow there.
fn gap() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![
        16 => Just(&b""[..]),
        4 => select(JSON_GAPS),
        1 => select(BAD_GAPS),
    ]
}

/// APPLY_EVENT params: usually an object, `instance_id` and `event` first, then members in
/// any order, maybe repeated, with a gap around every token; now and then an array of values
/// (which serde reads into a struct by position).
fn apply_params() -> impl Strategy<Value = Vec<u8>> {
    let array = prop::collection::vec(apply_value(), 0..4)
        .prop_map(|values| [&b"["[..], &values.join(&b","[..]), b"]"].concat());
    prop_oneof![9 => apply_object(), 1 => array]
}

fn apply_object() -> impl Strategy<Value = Vec<u8>> {
    let member = (apply_key(), apply_value(), gap(), gap());
    (prop::collection::vec(member, 0..4), any::<bool>(), gap()).prop_map(
        |(members, usual, outer)| {
            let mut out = [outer, b"{"].concat();
            if usual {
                out.extend_from_slice(br#""instance_id":"order-1","event":"go""#);
            }
            for (i, (k, v, before, after)) in members.iter().enumerate() {
                if usual || i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&[*before, k.as_bytes(), b":", *after, v].concat());
            }
            out.extend_from_slice(&[b"}", outer].concat());
            out
        },
    )
}

proptest! {
    #![proptest_config(cases(16384))]

    #[test]
    fn apply_event_differential_on_arbitrary_bytes(data in bytes(128)) {
        smdb_fuzz::apply_event_differential(&data);
    }

    #[test]
    fn apply_event_differential_on_params(data in apply_params()) {
        smdb_fuzz::apply_event_differential(&data);
    }

    #[test]
    fn apply_event_differential_on_bent_params(data in bent(apply_params())) {
        smdb_fuzz::apply_event_differential(&data);
    }
}

/// The generated params reach both readings: the scan answers for a good share of them, and
/// serde alone for another (else the differential would compare serde with itself).
#[test]
fn generated_params_reach_the_scan_and_serde_both() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let total = 2000;
    let scanned = (0..total)
        .filter(|_| {
            let tree = apply_params().new_tree(&mut runner);
            let data = tree.map(|t| t.current()).unwrap_or_default();
            smdb::ops::events::scanned_event(&data).is_some()
        })
        .count();
    assert!(
        scanned > total / 10 && scanned < total * 9 / 10,
        "{scanned} of {total} scanned"
    );
}

/// Every value of `CLEAN_VALUES` and `APPLY_VALUES` in every member, after the usual two and in their place.
#[test]
fn every_tricky_value_in_every_member_reads_alike() {
    let keys = [
        "instance_id",
        "event",
        "payload",
        "expected_state",
        "expected_wal_offset",
        "idempotency_key",
        "extra",
    ];
    for key in keys {
        for value in CLEAN_VALUES.iter().chain(APPLY_VALUES) {
            let after = format!(r#"{{"instance_id":"a","event":"go","{key}":{value}}}"#);
            smdb_fuzz::apply_event_differential(after.as_bytes());
            let alone = format!(r#"{{"{key}":{value},"event":"go"}}"#);
            smdb_fuzz::apply_event_differential(alone.as_bytes());
        }
    }
}

/// What libFuzzer found (fuzz/README.md): APPLY_EVENT params that are an array, which serde
/// read into a command by position (`["x","go"]`: instance `x`, event `go`) while the routing
/// id read them as `{id, instance_id}` and routed by `go`. A BATCH op's params reached both
/// unchecked; now params that are not an object are refused (`ops::params::check_object`).
#[test]
fn libfuzzer_findings_stay_fixed() {
    let found: [&[u8]; 4] = [
        b"\r\r\r\r\r[\"[#\" \n,\"[\"]",
        b"\r\r\r\r\r[\"{\" \n,\"[\"]",
        b"\r\r\r\r\r[\"1\" \n,\"[\"]",
        br#"["x","go"]"#,
    ];
    for data in found {
        smdb_fuzz::apply_event_differential(data);
        let params = String::from_utf8_lossy(data);
        let request = format!(
            r#"{{"type":"request","id":1,"op":"BATCH","params":{{"mode":"atomic","ops":[{{"op":"APPLY_EVENT","params":{params}}}]}}}}"#
        );
        smdb_fuzz::request_parser(request.as_bytes());
    }
}

/// Well-formed HTTP requests to the API's paths, for the parser and router to bend.
fn http_requests() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH"]);
    let path = prop::sample::select(vec![
        "/machines",
        "/machines/order/versions/1",
        "/machines/order/versions/1/diagram?format=svg",
        "/instances?machine=order&limit=2",
        "/instances/o%2F1/events",
        "/stream?machines=order",
        "/batch",
        "/",
    ]);
    let body = prop::sample::select(vec!["", r#"{"event":"pay","payload":{"amount":1}}"#]);
    (method, path, body).prop_map(|(m, p, b)| {
        let framing = if b.is_empty() {
            String::new()
        } else {
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            )
        };
        format!("{m} {p} HTTP/1.1\r\nHost: 127.0.0.1:7480\r\n{framing}\r\n{b}").into_bytes()
    })
}

proptest! {
    #![proptest_config(cases(8192))]

    #[test]
    fn http_request_on_arbitrary_bytes(data in bytes(256)) {
        smdb_fuzz::http_request(&data);
    }

    #[test]
    fn http_request_on_bent_requests(data in bent(http_requests())) {
        smdb_fuzz::http_request(&data);
    }

    #[test]
    fn http_router_on_arbitrary_bytes(data in bytes(256)) {
        smdb_fuzz::http_router(&data);
    }
}
