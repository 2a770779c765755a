//! The TLS-wrapped frame reader: the server's TLS session (`smdb::tls::ServerTls`, built from a
//! fixed test certificate) fed client bytes, and whatever plaintext comes out fed to the frame
//! decoder and the request parser the way the connection's read loop does. Nothing may panic.
//!
//! The first byte picks the mode:
//! * 0: raw bytes as the client's side of the handshake (ClientHello parsing, alerts, junk);
//! * 1: a real in-memory handshake with a client, then the rest as application data, sent in
//!   chunks whose sizes come from the input (frames split across records);
//! * 2: a real handshake, then the rest sealed into records that are then corrupted
//!   (bit flips and truncation must be refused, not crash).
#![no_main]

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use smdb::protocol::frame::decode_frame;
use smdb::protocol::parse_request;

/// The server's `network.max_frame_bytes` default order of magnitude.
const MAX_FRAME: u32 = 1 << 20;

struct Setup {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// A CA and a server certificate for `localhost`, made once per process and loaded through
/// `ServerTls::load` like the server does.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let dir = std::env::temp_dir().join(format!("smdb-fuzz-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let cfg = smdb::config::Tls {
            enabled: true,
            cert_path: Some(cert_path),
            key_path: Some(key_path),
            ..smdb::config::Tls::default()
        };
        let server = smdb::tls::ServerTls::load(&cfg).unwrap().unwrap().config();
        let _ = std::fs::remove_dir_all(&dir);
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(smdb::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Setup {
            server,
            client: Arc::new(client),
        }
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
            match decode_frame(&self.buf[self.lo..], MAX_FRAME) {
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
    let name = ServerName::try_from("localhost").unwrap();
    let mut client = ClientConnection::new(s.client.clone(), name).unwrap();
    let mut server = ServerConnection::new(s.server.clone()).unwrap();
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        pump(&mut client, &mut server);
    }
    (client, server)
}

fn pump(client: &mut ClientConnection, server: &mut ServerConnection) {
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).unwrap();
    }
    let mut slice = &wire[..];
    while !slice.is_empty() && server.read_tls(&mut slice).unwrap() > 0 {}
    server.process_new_packets().unwrap();
    wire.clear();
    while server.wants_write() {
        server.write_tls(&mut wire).unwrap();
    }
    let mut slice = &wire[..];
    while !slice.is_empty() && client.read_tls(&mut slice).unwrap() > 0 {}
    client.process_new_packets().unwrap();
}

/// Seals `data` into client records, `chunk` plaintext bytes per write.
fn seal(client: &mut ClientConnection, data: &[u8], chunk: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for part in data.chunks(chunk.max(1)) {
        client.writer().write_all(part).unwrap();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
    }
    wire
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut frames = FrameReader::default();
    match mode % 3 {
        0 => {
            let mut server = ServerConnection::new(setup().server.clone()).unwrap();
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
        _ => {
            let Some((&flip, body)) = rest.split_first() else {
                return;
            };
            let (mut client, mut server) = handshake();
            let mut wire = seal(&mut client, body, 4096);
            if !wire.is_empty() {
                let at = usize::from(flip) * 31 % wire.len();
                wire[at] ^= flip | 1;
                let keep = wire.len() - usize::from(flip % 4);
                wire.truncate(keep);
            }
            server_takes(&mut server, &wire, &mut frames);
        }
    }
});
