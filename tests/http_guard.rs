//! The HTTP API's auth, limits and hardening against the real binary (docs/http.md, "Auth"
//! and "Limits and hardening"): 401 with WWW-Authenticate, 403 for a missing scope, no token
//! in a URL, body and header limits, strict framing, Host/Origin/Content-Type checks, the
//! connection limit, the PROXY header, and TLS.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::http::Http;
use common::tokens::{http_required, token, ALL_SCOPES};
use common::{order_definition, Server};
use serde_json::json;

const ADMIN: &str = "admin-secret-51c0";
const READER: &str = "reader-secret-77aa";

fn auth_config() -> String {
    http_required(&[
        token("admin", ADMIN, ALL_SCOPES),
        token("reader", READER, &["read"]),
    ])
}

fn http(s: &Server) -> Http {
    Http::connect(s.http_addr.expect("http listener"))
}

#[test]
fn tokens_scopes_and_no_token_in_a_url() {
    let (s, _d) = Server::start(&auth_config());
    let mut admin = http(&s).with_token(ADMIN);
    assert_eq!(
        admin
            .put("/machines/order/versions/1", &order_definition())
            .status,
        201
    );

    let mut anon = http(&s);
    let r = anon.get("/machines");
    r.assert_error(401, "UNAUTHORIZED");
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"smdb\""));
    let r = anon.get(&format!("/machines?access_token={ADMIN}"));
    assert_eq!(
        (r.status, r.code()),
        (401, "UNAUTHORIZED".into()),
        "a token in the URL is not a token"
    );
    assert!(!r.text().contains(ADMIN), "the token is not echoed");
    let r = anon.request(
        "GET",
        "/machines",
        &[("Authorization", "Bearer not-a-token")],
        None,
    );
    r.assert_error(401, "AUTH_FAILED");
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .contains("invalid_token"));
    let r = anon.request(
        "GET",
        "/machines",
        &[("Authorization", &format!("Basic {ADMIN}"))],
        None,
    );
    assert_eq!(r.status, 401);

    let mut reader = http(&s).with_token(READER);
    assert_eq!(reader.get("/machines").status, 200);
    assert_eq!(reader.get("/info").header("smdb-scopes"), Some("read"));
    let scopes = admin.get("/info");
    assert_eq!(scopes.header("smdb-scopes"), Some("read write admin"));
    assert_eq!(reader.get("/machines/order/versions/1/diagram").status, 200);
    let body = json!({"machine": "order", "version": 1, "id": "x", "context": {}});
    let r = reader.post("/instances", &body);
    r.assert_error(403, "FORBIDDEN");
    assert_eq!(r.json()["details"]["scope"], "write");
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .contains("insufficient_scope"));
    let r = reader.put("/machines/m/versions/1", &order_definition());
    assert_eq!(
        (r.status, r.json()["details"]["scope"].clone()),
        (403, json!("admin"))
    );
    let r = reader.post(
        "/batch",
        &json!({"mode": "atomic", "ops": [{"op": "CREATE_INSTANCE", "params": body}]}),
    );
    r.assert_error(403, "FORBIDDEN");
    assert_eq!(
        reader.get("/instances/x").status,
        404,
        "nothing was created"
    );

    // The console's files hold no data: served without a token.
    let page = anon.get("/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-security-policy")
        .unwrap()
        .contains("frame-ancestors 'none'"));
    assert_eq!(anon.get("/assets/app.js").status, 200);
}

#[test]
fn body_and_header_limits() {
    let (s, _d) = Server::start("[http]\nenabled = true\n[network]\nmax_frame_bytes = 4096");
    let mut h = http(&s);
    h.put("/machines/order/versions/1", &order_definition());
    let big =
        json!({"machine": "order", "version": 1, "id": "x", "context": {"pad": "x".repeat(5000)}});
    let r = h.post("/instances", &big);
    r.assert_error(413, "FRAME_TOO_LARGE");
    assert!(
        h.closed_within(Duration::from_secs(5)),
        "closed after a 413"
    );

    let mut h = http(&s);
    let long = "x".repeat(17 * 1024);
    let r = h.request("GET", "/info", &[("X-Long", &long)], None);
    r.assert_error(431, "BAD_REQUEST");

    // Chunked bodies are decoded, and held to the same limit.
    let mut h = http(&s);
    let body = r#"{"machine":"order","version":1,"id":"ch","context":{}}"#;
    let chunked = format!(
        "POST /instances HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n5\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        h.host,
        &body[..5],
        body.len() - 5,
        &body[5..]
    );
    assert_eq!(h.raw(chunked.as_bytes()).status, 201);
    let huge = format!(
        "POST /instances HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n2000\r\n{}\r\n",
        h.host,
        "x".repeat(0x2000)
    );
    assert_eq!(h.raw(huge.as_bytes()).status, 413);
}

#[test]
fn strict_framing_closes_after_any_parse_error() {
    let (s, _d) = Server::start("[http]\nenabled = true");
    let host = s.http_addr.unwrap().to_string();
    let smuggling = [
        "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 2\r\nContent-Length: 2\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Content-Length: -1\r\n",
    ];
    for extra in smuggling {
        let mut h = http(&s);
        let req = format!(
            "POST /instances HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\r\n{{}}\
             GET /info HTTP/1.1\r\nHost: {host}\r\n\r\n"
        );
        let r = h.raw(req.as_bytes());
        assert_eq!(
            (r.status, r.code()),
            (400, "BAD_REQUEST".into()),
            "{extra:?}"
        );
        assert_eq!(r.header("connection"), Some("close"));
        assert!(
            h.read_response().is_none(),
            "nothing after the bad request is served: {extra:?}"
        );
    }
    let mut h = http(&s);
    let r = h.raw(b"GET /info HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 400, "HTTP/1.1 without Host");
    // A malformed path is refused but the connection lives on.
    let mut h = http(&s);
    for bad in [
        "/instances/..",
        "/instances/%2e%2e",
        "/instances/a%00",
        "/instances/%zz",
    ] {
        let r = h.get(bad);
        assert_eq!((r.status, r.code()), (400, "BAD_REQUEST".into()), "{bad}");
    }
    let r = h.get("/nowhere");
    r.assert_error(404, "NOT_FOUND");
    let r = h.request("PATCH", "/instances/x", &[], None);
    r.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("GET, DELETE"));
    assert_eq!(h.get("/info").status, 200, "still the same connection");
}

#[test]
fn foreign_hosts_origins_and_bodies_that_are_not_json() {
    let (s, _d) = Server::start("[http]\nenabled = true\nallowed_hosts = [\"smdb.test\"]");
    let mut h = http(&s);
    h.put("/machines/order/versions/1", &order_definition());
    let r = h.request("GET", "/info", &[], None);
    assert_eq!(r.status, 200);
    let mut rebound = http(&s);
    rebound.host = "evil.example:80".into();
    let r = rebound.get("/info");
    r.assert_error(421, "BAD_REQUEST");
    rebound.host = "smdb.test".into();
    assert_eq!(rebound.get("/info").status, 200, "an allowed name");
    let port = s.http_addr.unwrap().port();
    rebound.host = format!("localhost:{port}");
    assert_eq!(
        rebound.get("/info").status,
        200,
        "localhost on a loopback listener"
    );

    let body = json!({"machine": "order", "version": 1, "id": "o", "context": {}}).to_string();
    let evil = [("Origin", "http://evil.example")];
    let r = h.request("POST", "/instances", &evil, Some(body.as_bytes()));
    r.assert_error(403, "FORBIDDEN");
    let r = h.request(
        "POST",
        "/instances",
        &[("Sec-Fetch-Site", "cross-site")],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 403);
    let own = format!("http://{}", s.http_addr.unwrap());
    let r = h.request(
        "POST",
        "/instances",
        &[("Origin", &own)],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.text());

    let form = format!(
        "POST /instances HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        h.host,
        body.len()
    );
    let r = h.raw(form.as_bytes());
    r.assert_error(415, "BAD_REQUEST");
    let mut no_type = http(&s);
    let req = format!(
        "POST /batch HTTP/1.1\r\nHost: {}\r\nContent-Length: 2\r\n\r\n{{}}",
        h.host
    );
    assert_eq!(no_type.raw(req.as_bytes()).status, 415);
}

#[test]
fn connection_limit_and_a_slow_head() {
    let (s, _d) = Server::start("[http]\nenabled = true\nmax_connections = 2");
    let mut a = http(&s);
    let mut b = http(&s);
    assert_eq!(a.get("/info").status, 200);
    assert_eq!(b.get("/info").status, 200);
    let mut c = http(&s);
    let r = c.read_response().expect("a 503 without asking");
    r.assert_error(503, "CONNECTION_LIMIT");
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(a);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(http(&s).get("/info").status, 200, "room again");

    // A head that never finishes is answered 408 and closed after 10 s.
    drop(b);
    std::thread::sleep(Duration::from_millis(200));
    let mut slow = TcpStream::connect(s.http_addr.unwrap()).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    slow.write_all(b"GET /info HTTP/1.1\r\nHo").unwrap();
    let started = std::time::Instant::now();
    let mut h = Http::over(Box::new(slow), String::new());
    let r = h.read_response().expect("a 408");
    assert_eq!(r.status, 408);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "{took:?}"
    );
}

#[test]
fn proxy_protocol_applies_to_the_http_listener() {
    let (s, _d) = Server::start("[http]\nenabled = true\n[network]\nproxy_protocol = true");
    let mut plain = http(&s);
    plain.send(plain.encode("GET", "/info", &[], None).as_slice());
    assert!(
        plain.read_response().is_none(),
        "no PROXY header: closed unanswered"
    );
    let mut proxied = http(&s);
    let mut req = b"PROXY TCP4 10.1.2.3 10.0.0.1 5555 7480\r\n".to_vec();
    req.extend(proxied.encode("GET", "/info", &[], None));
    let r = proxied.raw(&req);
    assert_eq!(r.status, 200);
    let clients = r.json()["connections"]["top_clients"].to_string();
    assert!(clients.contains("10.1.2.3"), "{clients}");
}

/// With `tls.enabled` the HTTP listener speaks HTTPS with the client port's certificate.
#[test]
fn https_with_the_client_ports_certificate() {
    let dir = common::temp_dir();
    let key =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert_path, key.cert.pem()).unwrap();
    std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
    let (s, _d) = Server::start(&format!(
        "[http]\nenabled = true\n[tls]\nenabled = true\ncert_path = \"{}\"\nkey_path = \"{}\"",
        cert_path.display(),
        key_path.display()
    ));
    let addr = s.http_addr.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(key.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(smdb::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut h = Http::over(
        Box::new(rustls::StreamOwned::new(conn, tcp)),
        addr.to_string(),
    );
    let r = h.get("/info");
    assert_eq!(
        (r.status, r.json()["server_name"].clone()),
        (200, json!("smdb"))
    );
    assert_eq!(h.get("/machines").status, 200, "keep-alive over TLS");
    // A plaintext request on the TLS listener gets no HTTP answer.
    let mut plain = http(&s);
    plain.send(plain.encode("GET", "/info", &[], None).as_slice());
    let answered = plain.read_response();
    assert!(answered.is_none(), "{answered:?}");
}
