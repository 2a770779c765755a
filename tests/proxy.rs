//! `network.proxy_protocol` (docs/protocol.md, "Behind a load balancer") against the real server: PROXY v1 and v2 headers name
//! the client in log lines and INFO; a missing, late or garbage header closes only that
//! connection; with the option off a PROXY header is an invalid frame.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use smdb::proxy::encode_v2;

const PROXIED: &str =
    "[network]\nproxy_protocol = true\n[logging]\nformat = \"json\"\nlevel = \"debug\"";

fn start() -> (Server, common::TestDir) {
    // RUST_LOG from the test environment would override logging.level.
    Server::start_with_env(PROXIED, &[("RUST_LOG", "")])
}

/// A client whose connection starts with `header`.
fn client_after(s: &Server, header: &[u8]) -> Client {
    let mut tcp = TcpStream::connect(s.addr).unwrap();
    tcp.write_all(header).unwrap();
    let mut c = Client::from_stream(tcp).unwrap();
    c.set_timeout(Some(Duration::from_secs(10))).unwrap();
    c.hello("proxy-test").expect("HELLO after a PROXY header");
    c
}

/// The JSON log lines of the server so far.
fn log_lines(s: &Server) -> Vec<Value> {
    s.log()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Waits until a log line with `message` and `peer` appears.
fn wait_log(s: &Server, message: &str, peer: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = log_lines(s)
            .into_iter()
            .find(|v| v["message"] == message && v["peer"] == peer);
        if let Some(v) = found {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no {message:?} line for {peer}:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True once the server closed `tcp` (EOF or reset) within `within`.
fn closed_by_server(tcp: &mut TcpStream, within: Duration) -> bool {
    tcp.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an error frame is allowed; the close must follow
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

fn top_clients(info: &Value) -> Vec<(String, u64)> {
    info["connections"]["top_clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["address"].as_str().unwrap().to_string(),
                c["connections"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn v1_and_v2_headers_name_the_client_in_logs_and_info() {
    let (s, _d) = start();
    let mut v1 = client_after(&s, b"PROXY TCP4 203.0.113.7 10.0.0.1 40001 7401\r\n");
    let src6: SocketAddr = "[2001:db8::5]:5000".parse().unwrap();
    let mut v2 = client_after(&s, &encode_v2(src6, "[2001:db8::1]:7401".parse().unwrap()));
    let src4: SocketAddr = "198.51.100.9:6000".parse().unwrap();
    let mut v2b = client_after(&s, &encode_v2(src4, "10.0.0.1:7401".parse().unwrap()));
    assert!(v1.ping().unwrap().pong);
    assert!(v2.ping().unwrap().pong);

    let opened = wait_log(&s, "connection opened", "203.0.113.7:40001");
    assert_eq!(opened["target"], "smdb::connection");
    let balancer = opened["via"].as_str().expect("via: the balancer's address");
    assert!(balancer.starts_with("127.0.0.1:"), "{opened}");
    wait_log(&s, "connection opened", "[2001:db8::5]:5000");
    wait_log(&s, "connection opened", "198.51.100.9:6000");

    let info = v2b.call("INFO", serde_json::Value::Null).unwrap();
    let conns = &info["connections"];
    assert_eq!(conns["proxy_protocol"], true);
    assert_eq!(conns["active"], 3, "{info}");
    assert_eq!(conns["clients"], 3, "{info}");
    let top = top_clients(&info);
    for ip in ["203.0.113.7", "2001:db8::5", "198.51.100.9"] {
        assert!(top.contains(&(ip.to_string(), 1)), "{ip} in {top:?}");
    }
    assert!(
        !top.iter().any(|(a, _)| a == "127.0.0.1"),
        "the balancer is not a client: {top:?}"
    );

    v1.bye().unwrap();
    wait_log(&s, "connection closed", "203.0.113.7:40001");
    let info = v2b.call("INFO", serde_json::Value::Null).unwrap();
    assert_eq!(info["connections"]["active"], 2, "{info}");

    // v2 LOCAL (a balancer's own health check) is served as the balancer itself.
    let mut local = encode_v2(src4, src4)[..16].to_vec();
    local[12] = 0x20;
    local[14..16].copy_from_slice(&[0, 0]);
    let mut hc = client_after(&s, &local);
    assert!(hc.ping().unwrap().pong);
}

#[test]
fn missing_late_or_garbage_headers_close_only_their_connection() {
    let (s, _d) = start();
    // A healthy proxied connection with pipelined work in flight throughout.
    let mut good = client_after(&s, b"PROXY TCP4 192.0.2.1 10.0.0.1 1111 7401\r\n");
    put_order_machine(&mut good);

    // Silent: never sends a header; closed after the header read limit (3 s).
    let mut silent = TcpStream::connect(s.addr).unwrap();
    let silent_since = Instant::now();

    // No header: a protocol frame first.
    let mut plain = TcpStream::connect(s.addr).unwrap();
    let mut hello = Vec::new();
    smdb::protocol::frame::encode_frame(
        br#"{"type":"request","id":1,"op":"HELLO","params":{"protocol_version":1}}"#,
        &mut hello,
    );
    plain.write_all(&hello).unwrap();
    assert!(
        closed_by_server(&mut plain, Duration::from_secs(2)),
        "no header: closed"
    );

    // Garbage: a broken v1 line, a v2 signature with a bad version, random bytes.
    let mut v2_bad = encode_v2("1.2.3.4:5".parse().unwrap(), "6.7.8.9:10".parse().unwrap());
    v2_bad[12] = 0x31;
    let garbage: Vec<Vec<u8>> = vec![
        b"PROXY TCP4 999.1.1.1 10.0.0.1 1 2\r\nmore".to_vec(),
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(),
        [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 200]].concat(),
        v2_bad,
        (0..64u8).map(|i| i.wrapping_mul(37)).collect(),
    ];
    for (i, g) in garbage.iter().enumerate() {
        let mut t = TcpStream::connect(s.addr).unwrap();
        let _ = t.write_all(g);
        assert!(
            closed_by_server(&mut t, Duration::from_secs(2)),
            "garbage #{i} closes"
        );
        // The healthy connection is untouched, pipelining included.
        let ids: Vec<String> = (0..8)
            .map(|k| {
                let id = format!("g{i}-{k}");
                good.send(
                    "CREATE_INSTANCE",
                    &json!({"machine":"order","version":1,"id":id,"context":{"total":1}}),
                )
                .unwrap()
            })
            .collect();
        for id in ids {
            let r = good.recv_response().unwrap();
            assert_eq!(r["id"], id.as_str());
            assert_eq!(r["status"], "ok", "{r}");
        }
    }

    assert!(
        closed_by_server(&mut silent, Duration::from_secs(6)),
        "a silent connection is closed"
    );
    let waited = silent_since.elapsed();
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_secs(6),
        "closed after the 3 s header limit, took {waited:?}"
    );

    let info = good.call("INFO", serde_json::Value::Null).unwrap();
    let rejected = info["connections"]["proxy_headers_rejected"]
        .as_u64()
        .unwrap();
    assert_eq!(rejected, 1 + 1 + garbage.len() as u64, "{info}");
    assert_eq!(info["connections"]["active"], 1, "{info}");
    // The refusals are logged at debug with the balancer's (the TCP peer's) address.
    let refused: Vec<Value> = log_lines(&s)
        .into_iter()
        .filter(|v| {
            v["target"] == "smdb::connection"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("PROXY header"))
        })
        .collect();
    assert_eq!(refused.len() as u64, rejected, "{refused:?}");
    assert!(refused
        .iter()
        .all(|v| v["level"] == "DEBUG" && v["peer"].as_str().unwrap().starts_with("127.0.0.1:")));
    assert!(good.ping().unwrap().pong);
}

#[test]
fn without_the_option_a_proxy_header_is_an_invalid_frame() {
    let (s, _d) = Server::start("");
    let mut tcp = TcpStream::connect(s.addr).unwrap();
    tcp.write_all(b"PROXY TCP4 203.0.113.7 10.0.0.1 40001 7401\r\n")
        .unwrap();
    let mut c = Client::from_stream(tcp).unwrap();
    c.set_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = c.recv_response().expect("an error frame");
    assert_eq!(r["error"]["code"], "INVALID_FRAME", "{r}");
    let mut again = s.client();
    let deadline = Instant::now() + Duration::from_secs(5);
    let info = loop {
        let info = again.call("INFO", serde_json::Value::Null).unwrap();
        if info["connections"]["active"] == 1 || Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(info["connections"]["proxy_protocol"], false);
    assert_eq!(top_clients(&info), vec![("127.0.0.1".to_string(), 1)]);
}
