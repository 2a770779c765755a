//! Frames and sessions against the real server: bad frames, malformed requests, ordering,
//! limits, HELLO rules.

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use smdb::protocol::frame::{encode_frame, MAGIC};

fn header(magic: &[u8; 4], len: u32, crc: u32) -> Vec<u8> {
    let mut h = magic.to_vec();
    h.extend_from_slice(&[0; 4]);
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&crc.to_be_bytes());
    h
}

/// Reads the single error frame the server sends before closing, then checks the close.
fn expect_error_then_close(c: &mut Client, code: &str) {
    let v = c.read_message().expect("error frame");
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(
        bytes_until_close(c).unwrap_or(0),
        0,
        "connection must be closed after a frame error"
    );
}

/// Reads until the server closes the connection; the number of bytes that came first.
fn bytes_until_close(c: &Client) -> std::io::Result<usize> {
    let mut rest = Vec::new();
    c.stream().try_clone()?.read_to_end(&mut rest)
}

fn assert_still_serves(s: &Server) {
    let mut c = s.client();
    assert_eq!(c.call("PING", Value::Null).unwrap()["pong"], true);
}

#[test]
fn bad_magic_gets_invalid_frame_and_close() {
    let (s, _d) = Server::start("");
    let mut c = s.raw_client();
    let mut bytes = header(b"XXXX", 2, crc32c::crc32c(b"{}"));
    bytes.extend_from_slice(b"{}");
    c.send_raw(&bytes).unwrap();
    expect_error_then_close(&mut c, "INVALID_FRAME");
    assert_still_serves(&s);
}

#[test]
fn bad_crc_gets_checksum_mismatch_and_close() {
    let (s, _d) = Server::start("");
    let mut c = s.raw_client();
    let mut bytes = header(&MAGIC, 2, 12345);
    bytes.extend_from_slice(b"{}");
    c.send_raw(&bytes).unwrap();
    expect_error_then_close(&mut c, "CHECKSUM_MISMATCH");
    assert_still_serves(&s);
}

#[test]
fn oversize_length_is_refused_from_the_header() {
    let (s, _d) = Server::start("[network]\nmax_frame_bytes = 4096");
    let mut c = s.raw_client();
    // Only the header is sent: the server must answer without waiting for 5000 bytes.
    c.send_raw(&header(&MAGIC, 5000, 0)).unwrap();
    expect_error_then_close(&mut c, "FRAME_TOO_LARGE");
    let mut c = s.raw_client();
    c.send_raw(&header(&MAGIC, u32::MAX, 0)).unwrap();
    expect_error_then_close(&mut c, "FRAME_TOO_LARGE");
    assert_still_serves(&s);
}

#[test]
fn truncated_frame_is_dropped_quietly_and_server_keeps_serving() {
    let (s, _d) = Server::start("");
    let mut c = s.raw_client();
    let mut f = Vec::new();
    encode_frame(br#"{"type":"request","id":"1","op":"PING"}"#, &mut f);
    c.send_raw(&f[..f.len() - 5]).unwrap();
    c.stream().shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let n = c
        .stream()
        .try_clone()
        .unwrap()
        .read_to_end(&mut rest)
        .unwrap();
    assert_eq!(n, 0, "no response to a truncated frame");
    assert_still_serves(&s);
}

#[test]
fn malformed_json_keeps_the_connection() {
    let (s, _d) = Server::start("");
    let mut c = s.client();
    c.send_payload(b"this is not json").unwrap();
    let v = c.recv_response().unwrap();
    assert_eq!(v["error"]["code"], "BAD_REQUEST");
    assert_eq!(v["id"], Value::Null);
    c.send_payload(br#"{"type":"request","id":"9"}"#).unwrap();
    let v = c.recv_response().unwrap();
    assert_eq!(v["error"]["code"], "BAD_REQUEST");
    assert_eq!(v["id"], "9", "id echoed when readable");
    c.send_payload(br#"{"type":"request","id":"10","op":"PING","params":[1]}"#)
        .unwrap();
    assert_eq!(c.recv_response().unwrap()["error"]["code"], "BAD_REQUEST");
    assert_eq!(c.call("PING", Value::Null).unwrap()["pong"], true);
}

#[test]
fn hello_rules() {
    let (s, _d) = Server::start("");
    let mut c = s.raw_client();
    assert_eq!(
        c.call("PING", Value::Null).unwrap()["pong"],
        true,
        "PING allowed before HELLO"
    );
    assert_eq!(
        err_code(c.call("GET_INSTANCE", json!({"id": "x"}))),
        "HELLO_REQUIRED"
    );
    assert_eq!(err_code(c.call("INFO", Value::Null)), "HELLO_REQUIRED");
    let e = c.call("HELLO", json!({"protocol_version": 2})).unwrap_err();
    match e {
        ClientError::Server { code, details, .. } => {
            assert_eq!(code, "UNSUPPORTED_PROTOCOL");
            assert_eq!(details["supported"], json!([1]));
        }
        other => panic!("{other}"),
    }
    assert_eq!(err_code(c.call("HELLO", json!({}))), "BAD_REQUEST");
    let r = c
        .call("HELLO", json!({"protocol_version": 1, "client_name": "t"}))
        .unwrap();
    assert_eq!(r["protocol_version"], 1);
    assert_eq!(r["server_name"], "smdb");
    assert_eq!(r["auth_required"], false);
    assert_eq!(r["role"], "standalone");
    assert!(r["features"].is_array() && r["server_version"].is_string());
    assert_eq!(
        err_code(c.call("NO_SUCH_OP", Value::Null)),
        "UNKNOWN_OPERATION"
    );
    assert_eq!(
        err_code(c.call("GET_INSTANCE", json!({"id": "nope"}))),
        "INSTANCE_NOT_FOUND"
    );
}

#[test]
fn bye_answers_then_closes() {
    let (s, _d) = Server::start("");
    let mut c = s.raw_client();
    assert!(c.call("BYE", Value::Null).is_ok());
    let mut rest = Vec::new();
    let n = c
        .stream()
        .try_clone()
        .unwrap()
        .read_to_end(&mut rest)
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn info_reports_shards_limits_and_totals() {
    let (s, _d) = Server::start("[shards]\ncount = 2\n[network]\nmax_connections = 77");
    let mut c = s.order_client();
    create_order(&mut c, "i1", 1);
    let info = c.call("INFO", Value::Null).unwrap();
    assert_eq!(info["shards"], 2);
    assert_eq!(info["limits"]["max_connections"], 77);
    assert_eq!(info["instances"], 1);
    assert_eq!(info["machines"], 1);
    assert!(info["wal"]["offset"].as_u64().unwrap() >= 3, "{info}");
    assert!(info["uptime_seconds"].is_u64());
}

#[test]
fn pipelined_requests_across_shards_come_back_in_order() {
    let (s, _d) = Server::start("[shards]\ncount = 3");
    let mut c = s.order_client();
    let mut ids = Vec::new();
    for i in 0..100 {
        let p = json!({"machine":"order","version":1,"id":format!("p{i}"),"context":{"total":5}});
        ids.push(c.send("CREATE_INSTANCE", &p).unwrap());
    }
    for i in 0..100 {
        // Mix single-shard and fan-out ops in the same pipeline.
        let op = if i % 10 == 0 {
            "LIST_INSTANCES"
        } else {
            "GET_INSTANCE"
        };
        let params = if op == "GET_INSTANCE" {
            json!({"id": format!("p{i}")})
        } else {
            json!({})
        };
        ids.push(c.send(op, &params).unwrap());
    }
    for (n, id) in ids.iter().enumerate() {
        let v = c.recv_response().unwrap();
        assert_eq!(v["id"], id.as_str(), "response {n} out of order");
        assert_eq!(v["status"], "ok", "{v}");
        if n >= 100 && n % 10 != 0 {
            assert_eq!(v["result"]["id"], format!("p{}", n - 100));
        }
    }
}

#[test]
fn connection_limit_rejects_with_code() {
    let (s, _d) = Server::start("[network]\nmax_connections = 2");
    let _a = s.client();
    let _b = s.client();
    let mut c = s.raw_client();
    let v = c.read_message().expect("rejection frame");
    assert_eq!(v["error"]["code"], "CONNECTION_LIMIT");
    assert_eq!(v["error"]["retryable"], true);
    drop(_a);
    // The slot frees once the server notices the close.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = s.raw_client();
        match c.call("PING", Value::Null) {
            Ok(_) => break,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("slot never freed: {e}"),
        }
    }
}

#[test]
fn fifty_clients_unaffected_by_one_sending_garbage() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.order_client();
    let addr = s.addr;
    let garbage = std::thread::spawn(move || {
        for i in 0..200u32 {
            let Ok(mut g) = Client::connect(addr) else {
                continue;
            };
            let junk: Vec<u8> = (0..64).map(|j| (i * 31 + j * 7) as u8).collect();
            let _ = g.send_raw(&junk);
            let _ = g.send_raw(b"RCP1\0\0\0\0\0\0\0\x05\0\0\0\0{}{}{");
        }
    });
    let workers: Vec<_> = (0..50)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Client::connect_hello(addr, "w").unwrap();
                for i in 0..20 {
                    let id = format!("w{w}-{i}");
                    let p = json!({"machine":"order","version":1,"id":id,"context":{"total":1}});
                    c.call("CREATE_INSTANCE", p).unwrap();
                    let r = c
                        .call(
                            "APPLY_EVENT",
                            json!({"instance_id": id, "event": "pay",
                        "payload": {"amount": 1}}),
                        )
                        .unwrap();
                    assert_eq!(r["to_state"], "paid");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker saw an error");
    }
    garbage.join().unwrap();
    let page = c.call("LIST_INSTANCES", json!({"limit": 1000})).unwrap();
    assert_eq!(page["instances"].as_array().unwrap().len(), 1000);
}

#[test]
fn an_idle_connection_is_closed_after_the_limit_and_an_active_one_is_not() {
    let (s, _d) = Server::start("[network]\nidle_timeout_secs = 1");
    let started = std::time::Instant::now();
    let mut idle = s.client();
    let mut busy = s.client();
    // `busy` sends something every 300 ms for 2.4 s: never idle for a whole second.
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(busy.call("PING", Value::Null).unwrap()["pong"], true);
    }
    // `idle` sent nothing after HELLO: the server has closed it (EOF, no frame).
    let n = bytes_until_close(&idle).expect("a clean close");
    assert_eq!(n, 0, "no frame before the idle close");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(idle.call("PING", Value::Null).is_err());
    assert_eq!(busy.call("PING", Value::Null).unwrap()["pong"], true);
}
