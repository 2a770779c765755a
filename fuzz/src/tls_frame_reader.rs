//! The TLS-wrapped frame reader: the server's TLS session (`smdb::tls::ServerTls`, built from a
//! test certificate made once per process) fed client bytes, and whatever plaintext comes out
//! fed to the frame decoder and the request parser the way the connection's read loop does.
//!
//! The first byte of the input picks the mode:
//! * 0: raw bytes as the client's side of the handshake (ClientHello parsing, alerts, junk);
//! * 1: a real in-memory handshake with a client, then the rest as application data, sent in
//!   chunks whose sizes come from the input (frames split across records);
//! * 2: a real handshake, then the rest sealed into records that are then corrupted
//!   (bit flips and truncation must be refused, not crash).

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use smdb::protocol::frame::decode_frame;
use smdb::protocol::parse_request;

use crate::FRAME_PAYLOAD_MAX;

/// Rounds of the in-memory handshake before giving up (TLS 1.3 needs two, 1.2 three).
const HANDSHAKE_ROUNDS_MAX: usize = 10;

struct Setup {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// The server and client configs, made once per process; a failure is a harness bug.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| make_setup().unwrap_or_else(|e| panic!("harness: TLS setup: {e}")))
}

/// A CA and a server certificate for `localhost`, written to a temp dir and loaded through
/// `ServerTls::load` like the server does; a client that trusts the CA.
fn make_setup() -> Result<Setup, String> {
    let err = |e: rcgen::Error| e.to_string();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().map_err(err)?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).map_err(err)?;
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .and_then(|params| params.signed_by(&key, &ca))
        .map_err(err)?;
    let dir = std::env::temp_dir().join(format!("smdb-fuzz-tls-{}", std::process::id()));
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(io)?;
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_path, cert.pem()).map_err(io)?;
    std::fs::write(&key_path, key.serialize_pem()).map_err(io)?;
    let cfg = smdb::config::Tls {
        enabled: true,
        cert_path: Some(cert_path),
        key_path: Some(key_path),
        ..smdb::config::Tls::default()
    };
    let loaded = smdb::tls::ServerTls::load(&cfg);
    let _ = std::fs::remove_dir_all(&dir);
    let server = loaded?
        .ok_or("tls.enabled is set, yet no server TLS")?
        .config();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).map_err(|e| e.to_string())?;
    let client = ClientConfig::builder_with_provider(smdb::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Setup {
        server,
        client: Arc::new(client),
    })
}

/// The connection's read loop, minus the socket: decode every complete frame, parse its
/// request, stop at a frame error.
#[derive(Default)]
struct FrameReader {
    buf: Vec<u8>,
    lo: usize,
    failed: bool,
}

impl FrameReader {
    fn feed(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        self.buf.extend_from_slice(bytes);
        loop {
            match decode_frame(&self.buf[self.lo..], FRAME_PAYLOAD_MAX) {
                Ok(Some((range, used))) => {
                    let payload = &self.buf[self.lo + range.start..self.lo + range.end];
                    let _ = parse_request(payload);
                    self.lo += used;
                }
                Ok(None) => break,
                Err(_) => {
                    self.failed = true;
                    return;
                }
            }
        }
        self.buf.drain(..self.lo);
        self.lo = 0;
    }
}

/// Moves client records into the server and the server's plaintext into the frame reader.
/// Returns false once the server session has failed.
fn server_takes(
    server: &mut ServerConnection,
    mut records: &[u8],
    frames: &mut FrameReader,
) -> bool {
    while !records.is_empty() {
        match server.read_tls(&mut records) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        if server.process_new_packets().is_err() {
            return false;
        }
        let mut plain = Vec::new();
        let _ = server.reader().read_to_end(&mut plain);
        frames.feed(&plain);
    }
    true
}

/// Runs the handshake between a fresh client and server in memory.
fn handshake() -> (ClientConnection, ServerConnection) {
    let s = setup();
    // `localhost` is a valid DNS name, so the conversion cannot fail.
    let name = ServerName::try_from("localhost")
        .unwrap_or_else(|e| panic!("harness: `localhost` as a server name: {e}"));
    let client = ClientConnection::new(s.client.clone(), name);
    let server = ServerConnection::new(s.server.clone());
    let (Ok(mut client), Ok(mut server)) = (client, server) else {
        panic!("harness: a TLS session could not be made from the fuzz configs");
    };
    for _ in 0..HANDSHAKE_ROUNDS_MAX {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        pump(&mut client, &mut server);
    }
    assert!(
        !client.is_handshaking() && !server.is_handshaking(),
        "the handshake did not finish in {HANDSHAKE_ROUNDS_MAX} rounds"
    );
    (client, server)
}

/// One round of the honest handshake: the client's records to the server, the server's back.
/// A failure here is the server refusing a well-behaved client, which is a finding.
fn pump(client: &mut ClientConnection, server: &mut ServerConnection) {
    let mut wire = Vec::new();
    while client.wants_write() {
        // Writing records into a Vec cannot fail.
        let _ = client.write_tls(&mut wire);
    }
    let mut slice = &wire[..];
    while !slice.is_empty() && server.read_tls(&mut slice).is_ok_and(|n| n > 0) {}
    if let Err(e) = server.process_new_packets() {
        panic!("the server refused an honest handshake: {e}");
    }
    wire.clear();
    while server.wants_write() {
        let _ = server.write_tls(&mut wire);
    }
    let mut slice = &wire[..];
    while !slice.is_empty() && client.read_tls(&mut slice).is_ok_and(|n| n > 0) {}
    if let Err(e) = client.process_new_packets() {
        panic!("the client refused the server's handshake: {e}");
    }
}

/// Seals `data` into client records, `chunk` plaintext bytes per write.
fn seal(client: &mut ClientConnection, data: &[u8], chunk: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for part in data.chunks(chunk.max(1)) {
        // The session buffers plaintext without limit (none was set), so this takes it all.
        let _ = client.writer().write_all(part);
        while client.wants_write() {
            let _ = client.write_tls(&mut wire);
        }
    }
    wire
}

/// Feeds `data` to the server's TLS session in the mode its first byte picks (module doc).
/// Nothing may panic.
pub fn tls_frame_reader(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut frames = FrameReader::default();
    match mode % 3 {
        0 => {
            let Ok(mut server) = ServerConnection::new(setup().server.clone()) else {
                panic!("harness: a TLS server session could not be made");
            };
            server_takes(&mut server, rest, &mut frames);
        }
        1 => {
            let Some((&chunk, body)) = rest.split_first() else {
                return;
            };
            let (mut client, mut server) = handshake();
            let wire = seal(&mut client, body, usize::from(chunk) * 8 + 1);
            // Hand the records over in pieces too, so records arrive split.
            for piece in wire.chunks(usize::from(chunk) + 1) {
                if !server_takes(&mut server, piece, &mut frames) {
                    break;
                }
            }
        }
        _ => corrupted_records(rest, &mut frames),
    }
}

/// Mode 2: records sealed by an honest client, then one byte flipped and the tail cut.
fn corrupted_records(rest: &[u8], frames: &mut FrameReader) {
    let Some((&flip, body)) = rest.split_first() else {
        return;
    };
    let (mut client, mut server) = handshake();
    let mut wire = seal(&mut client, body, 4096);
    if !wire.is_empty() {
        let at = usize::from(flip) * 31 % wire.len();
        wire[at] ^= flip | 1;
        let keep = wire.len().saturating_sub(usize::from(flip % 4));
        wire.truncate(keep);
    }
    server_takes(&mut server, &wire, frames);
}
