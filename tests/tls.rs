//! TLS on the client port against the real binary, with certificates made at test time
//! (rcgen): TLS 1.2 and 1.3 clients, plaintext/garbage/silent clients harming no one, mutual
//! TLS, config errors, and the CLI over TLS.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::run::output;
use common::{put_order_machine, Client, Server};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::{json, Value};
use smdb_client::{ClientTlsOptions, ConnectOptions, Transport};

/// A CA and what it signed, as PEM files in a temp dir.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A client certificate from an unrelated CA.
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// Writes a leaf certificate signed by `issuer` and its key; returns (cert, key) paths.
fn leaf(
    dir: &Path,
    name: &str,
    issuer: &CertifiedIssuer<'static, KeyPair>,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, issuer).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn pki() -> Pki {
    let dir = common::temp_dir();
    let d = dir.path();
    let root = ca("smdb test CA");
    let other = ca("unrelated CA");
    let ca_path = d.join("ca.pem");
    std::fs::write(&ca_path, root.pem()).unwrap();
    let server_sans = ["localhost", "127.0.0.1"];
    let (server_cert, server_key) = leaf(
        d,
        "server",
        &root,
        &server_sans,
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    let (client_cert, client_key) = leaf(d, "client", &root, &[], client.clone());
    let (stranger_cert, stranger_key) = leaf(d, "stranger", &other, &[], client);
    Pki {
        _dir: dir,
        ca: ca_path,
        server_cert,
        server_key,
        client_cert,
        client_key,
        stranger_cert,
        stranger_key,
    }
}

fn tls_config(pki: &Pki, extra: &str) -> String {
    format!(
        "[tls]\nenabled = true\ncert_path = \"{}\"\nkey_path = \"{}\"\n{extra}",
        pki.server_cert.display(),
        pki.server_key.display()
    )
}

fn trust(pki: &Pki) -> ClientTlsOptions {
    ClientTlsOptions {
        ca: Some(pki.ca.clone()),
        ..ClientTlsOptions::default()
    }
}

fn connect(server: &Server, tls: ClientTlsOptions) -> Result<Client, smdb_client::ClientError> {
    let opts = ConnectOptions {
        client_name: "tls-tests".into(),
        timeout: Some(Duration::from_secs(10)),
        tls: Some(tls),
        ..ConnectOptions::default()
    };
    Client::connect_with(&server.addr.to_string(), &opts)
}

/// A TLS server with the test PKI, and a client that trusts its CA.
fn tls_server(pki: &Pki) -> (Server, common::TestDir, Client) {
    let (server, d) = Server::start(&tls_config(pki, ""));
    let c = connect(&server, trust(pki)).expect("TLS connect + HELLO");
    (server, d, c)
}

fn ping(c: &mut Client) {
    assert_eq!(c.call("PING", json!({})).unwrap()["pong"], true);
}

/// Reads until the server closes the socket; panics if it stays open for 10 s.
fn assert_closed_by_server(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // e.g. a TLS alert record before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("server did not close the connection: {e}"),
        }
    }
}

#[test]
fn a_tls_client_runs_hello_ping_create_and_get() {
    let pki = pki();
    let (_server, _d, mut c) = tls_server(&pki);
    assert_eq!(c.hello_result().unwrap()["server_name"], "smdb");
    ping(&mut c);
    put_order_machine(&mut c);
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": "o-1", "context": {"total": 5}}),
    )
    .unwrap();
    let got = c.call("GET_INSTANCE", json!({"id": "o-1"})).unwrap();
    assert_eq!(got["state"], "new");
    // A big response crosses many TLS records.
    let big = "x".repeat(200_000);
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": "o-2", "context": {"total": 1, "note": big}}),
    )
    .unwrap();
    let got = c.call("GET_INSTANCE", json!({"id": "o-2"})).unwrap();
    assert_eq!(got["context"]["note"].as_str().map(str::len), Some(200_000));
}

#[test]
fn plaintext_and_garbage_clients_are_closed_while_a_tls_client_keeps_working() {
    let pki = pki();
    let (server, _d, mut good) = tls_server(&pki);
    ping(&mut good);

    let mut plain = Client::connect(server.addr).unwrap();
    plain.set_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = plain.hello("plaintext");
    assert!(r.is_err(), "a plaintext HELLO must not be answered: {r:?}");
    ping(&mut good);

    let mut garbage = TcpStream::connect(server.addr).unwrap();
    garbage.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff]).unwrap();
    garbage.write_all(&[0xab; 4096]).unwrap();
    assert_closed_by_server(&mut garbage);
    ping(&mut good);
    let mut again = connect(&server, trust(&pki)).unwrap();
    ping(&mut again);
}

#[test]
fn a_silent_client_blocks_no_one_and_is_closed_after_the_handshake_timeout() {
    let pki = pki();
    let (server, _d) = Server::start(&tls_config(&pki, "handshake_timeout_ms = 500"));
    let mut silent = TcpStream::connect(server.addr).unwrap();
    let started = Instant::now();
    let mut c = connect(&server, trust(&pki)).unwrap();
    ping(&mut c);
    assert_closed_by_server(&mut silent);
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "closed before the handshake timeout: {:?}",
        started.elapsed()
    );
    ping(&mut c);
}

#[test]
fn mutual_tls_serves_only_clients_with_a_certificate_from_its_ca() {
    let pki = pki();
    let ca = format!("client_ca_path = \"{}\"", pki.ca.display());
    let (server, _d) = Server::start(&tls_config(&pki, &ca));
    // Without a certificate (TLS 1.3: the client learns on its first read).
    assert!(connect(&server, trust(&pki)).is_err());
    let stranger = ClientTlsOptions {
        cert: Some(pki.stranger_cert.clone()),
        key: Some(pki.stranger_key.clone()),
        ..trust(&pki)
    };
    assert!(connect(&server, stranger).is_err());
    let member = ClientTlsOptions {
        cert: Some(pki.client_cert.clone()),
        key: Some(pki.client_key.clone()),
        ..trust(&pki)
    };
    let mut c = connect(&server, member).expect("a client with a good certificate");
    ping(&mut c);
}

#[test]
fn over_the_connection_limit_a_tls_client_reads_connection_limit() {
    let pki = pki();
    let cfg = tls_config(&pki, "[network]\nmax_connections = 1");
    let (server, _d) = Server::start(&cfg);
    let mut first = connect(&server, trust(&pki)).unwrap();
    match connect(&server, trust(&pki)) {
        Err(e) => assert_eq!(e.code(), Some("CONNECTION_LIMIT"), "{e}"),
        Ok(_) => panic!("a second connection was served"),
    }
    ping(&mut first);
}

/// A rustls client limited to one protocol version.
fn connect_version(
    server: &Server,
    pki: &Pki,
    version: &'static rustls::SupportedProtocolVersion,
) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    for c in smdb::tls::pem::certs("ca", &pki.ca).unwrap() {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(smdb::tls::provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let sock = TcpStream::connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t = Transport::tls(sock, Arc::new(config), "localhost").unwrap();
    if let Transport::Tls(s) = &t {
        assert_eq!(s.conn.protocol_version(), Some(version.version));
    }
    Client::from_transport(t)
}

#[test]
fn tls12_only_and_tls13_only_clients_both_work() {
    let pki = pki();
    let (server, _d) = Server::start(&tls_config(&pki, ""));
    for v in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut c = connect_version(&server, &pki, v);
        c.hello("versions").unwrap();
        ping(&mut c);
    }
}

#[test]
fn tls_config_errors_exit_78_naming_the_key() {
    let pki = pki();
    let dir = common::temp_dir();
    let cases = [
        ("[tls]\nenabled = true\n".to_string(), "tls.cert_path"),
        (
            tls_config(&pki, "").replace(
                &pki.server_key.display().to_string(),
                "/nonexistent/server.key",
            ),
            "tls.key_path",
        ),
        // A key file holding no key.
        (
            tls_config(&pki, "").replace(
                &pki.server_key.display().to_string(),
                &pki.server_cert.display().to_string(),
            ),
            "tls.key_path",
        ),
        // A key that is not the certificate's.
        (
            tls_config(&pki, "").replace(
                &pki.server_key.display().to_string(),
                &pki.client_key.display().to_string(),
            ),
            "tls.key_path",
        ),
        (
            tls_config(&pki, "client_ca_path = \"/nonexistent/ca.pem\""),
            "tls.client_ca_path",
        ),
    ];
    for (i, (cfg, key)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        let (code, _, err) =
            common::run_config_to_exit(&path, &common::base_config(dir.path(), cfg));
        assert_eq!(code, 78, "{cfg}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(key), "{key} not named in: {err}");
    }
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(common::cli_bin());
    output(
        cmd.args(args)
            .env_remove("SMDB_ADDR")
            .env_remove("SMDB_TOKEN"),
    )
}

#[test]
fn the_cli_speaks_tls() {
    let pki = pki();
    let (server, _d) = Server::start(&tls_config(&pki, ""));
    let addr = server.addr.to_string();
    let ca = pki.ca.to_str().unwrap();
    let (code, out, err) = cli(&["--addr", &addr, "--tls", "--ca", ca, "--json", "ping"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["pong"], true);
    // Plaintext against the TLS port: a connection error (exit 3), not a hang.
    let (code, _, err) = cli(&["--addr", &addr, "--timeout", "5", "ping"]);
    assert_eq!(code, 3, "{err}");
    // The wrong CA: the certificate is refused.
    let other = pki.stranger_cert.to_str().unwrap();
    let (code, _, err) = cli(&["--addr", &addr, "--ca", other, "ping"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("certificate"), "{err}");
}

#[test]
fn a_backup_streams_over_tls_and_verifies() {
    let pki = pki();
    let (server, d, mut c) = tls_server(&pki);
    put_order_machine(&mut c);
    for i in 0..20 {
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "order", "version": 1, "id": format!("t-{i}"), "context": {"total": 1}}),
        )
        .unwrap();
    }
    let addr = server.addr.to_string();
    let ca = pki.ca.to_str().unwrap();
    let out = d.path().join("backup");
    let out = out.to_str().unwrap();
    let (code, stdout, err) = cli(&["--addr", &addr, "--tls", "--ca", ca, "backup", "--out", out]);
    assert_eq!(code, 0, "{stdout} {err}");
    let (code, stdout, err) = cli(&["backup", "--verify", out]);
    assert_eq!(code, 0, "{stdout} {err}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("backup/backup.json")).unwrap())
            .unwrap();
    let sum: u64 = m["positions"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sum, 21, "every write is in the backup: {m}");
}

#[test]
fn sighup_rotates_the_certificate_and_an_open_connection_survives() {
    let (old, new) = (pki(), pki());
    let dir = common::temp_dir();
    let (cert, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    std::fs::copy(&old.server_cert, &cert).unwrap();
    std::fs::copy(&old.server_key, &key).unwrap();
    let cfg = format!(
        "[tls]\nenabled = true\ncert_path = \"{}\"\nkey_path = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let (s, _sdir) = Server::start(&cfg);
    let mut open = connect(&s, trust(&old)).expect("TLS client of the old certificate");
    put_order_machine(&mut open);

    std::fs::copy(&new.server_cert, &cert).unwrap();
    std::fs::copy(&new.server_key, &key).unwrap();
    s.signal(libc::SIGHUP);
    s.wait_for_log("SIGHUP: reloaded", 1);
    ping(&mut open);
    open.call("LIST_MACHINES", json!({}))
        .expect("the open connection keeps working on the old certificate");
    assert!(
        connect(&s, trust(&old)).is_err(),
        "a new connection is served with the new certificate"
    );
    ping(&mut connect(&s, trust(&new)).expect("a client trusting the new CA"));

    std::fs::write(&key, "not a key").unwrap();
    s.signal(libc::SIGHUP);
    let log = s.wait_for_log("SIGHUP: reload failed", 1);
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    assert!(line.contains("tls.key_path"), "{line}");
    ping(&mut connect(&s, trust(&new)).expect("a failed reload keeps the running certificate"));
    ping(&mut open);
}

#[test]
fn behind_a_proxy_header_the_tls_handshake_follows_it() {
    let pki = pki();
    let cfg = tls_config(&pki, "[network]\nproxy_protocol = true\n");
    let (s, _dir) = Server::start_with_env(&cfg, &[("RUST_LOG", "info,smdb::connection=debug")]);
    let mut sock = TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(b"PROXY TCP4 192.0.2.44 10.0.0.1 40123 7401\r\n")
        .unwrap();
    let config = smdb::tls::client_config(&trust(&pki)).unwrap();
    let transport = Transport::tls(sock, config, "localhost").expect("TLS after the header");
    let mut c = Client::from_transport(transport);
    c.hello("proxy-tls").unwrap();
    ping(&mut c);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.log().contains("192.0.2.44:40123") {
        assert!(
            Instant::now() < deadline,
            "no log line names the client:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
