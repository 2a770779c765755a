//! The client's byte stream: plain TCP, or TLS (rustls) over TCP. Both read and write through
//! `std::io`, so the client's framing does not care which it is.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

pub enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// Runs the TLS handshake on `sock` (within the socket's timeouts) and verifies the server
    /// as `server_name`.
    pub fn tls(
        sock: TcpStream,
        config: Arc<ClientConfig>,
        server_name: &str,
    ) -> io::Result<Transport> {
        let name = ServerName::try_from(server_name.to_string()).map_err(|e| {
            io::Error::new(
                ErrorKind::InvalidInput,
                format!("TLS server name {server_name:?}: {e}"),
            )
        })?;
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut stream = StreamOwned::new(conn, sock);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Transport::Tls(Box::new(stream)))
    }

    /// The TCP socket underneath.
    pub fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(s) => &s.sock,
        }
    }

    /// The TCP socket and, with TLS, its session (for a caller that drives both itself).
    pub fn into_parts(self) -> (TcpStream, Option<Box<ClientConnection>>) {
        match self {
            Transport::Plain(s) => (s, None),
            Transport::Tls(s) => {
                let StreamOwned { conn, sock } = *s;
                (sock, Some(Box::new(conn)))
            }
        }
    }

    /// Called when bytes wait on the (non-blocking) socket of an idle connection: plain TCP is
    /// alive; TLS takes in the waiting records and is alive unless the peer sent close_notify,
    /// closed the socket, or sent something that does not decrypt.
    pub fn take_in_waiting(&mut self) -> bool {
        let Transport::Tls(s) = self else {
            return true;
        };
        loop {
            match s.conn.read_tls(&mut s.sock) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        s.conn
            .process_new_packets()
            .is_ok_and(|st| !st.peer_has_closed())
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}
