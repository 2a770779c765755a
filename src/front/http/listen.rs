//! The HTTP listener of one front: accepts on its copy of `http.bind_addr` until the drain,
//! enforces `http.max_connections` across fronts (503 `CONNECTION_LIMIT`, then close), reads
//! the PROXY header when `network.proxy_protocol` is on, runs the TLS handshake when
//! `tls.enabled` (the client port's certificate), then serves the connection. Connections are
//! tracked with the front's RCP1 ones, so the drain and the stop-now path cover both.

use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncWriteExt;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Gate;
use shards::ErrorCode;

use super::response::plain;
use crate::front::executor::{ConnLimit, Front};
use crate::tls::ServerTls;

/// How long a refused connection gets to receive its 503.
const REJECT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Accepts until the front drains.
pub async fn run(front: Rc<Front>, listener_fd: std::os::fd::OwnedFd, gate: Gate) {
    // SAFETY: `into_raw_fd` hands over the only owner of this socket (an `OwnedFd` dup of the
    // bound, listening socket, made at boot for this front); the listener takes it.
    let listener = unsafe { TcpListener::from_raw_fd(listener_fd.into_raw_fd()) };
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            front.drain.stopped().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => admit(&front, &gate, stream),
            Some(Err(e)) => {
                log::warn!("http: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn admit(front: &Rc<Front>, gate: &Gate, stream: TcpStream) {
    let Some(http) = front.http.clone() else {
        return;
    };
    let limit = ConnLimit {
        active: &http.active,
        max: http.max_connections,
    };
    let refused = "http: cannot serve a connection during shutdown";
    crate::front::executor::admit(front, gate, stream, limit, serve, reject, refused);
}

/// With TLS on, the handshake first (bounded); a failed one closes this connection only.
async fn serve(stream: TcpStream, front: Rc<Front>, client: std::net::SocketAddr) {
    let Some(tls) = front.tls_for_new_connection() else {
        return super::conn::serve(stream, front, false).await;
    };
    match tls.accept(stream).await {
        Ok(tls_stream) => super::conn::serve(tls_stream, front, true).await,
        Err(e) => log::debug!("http: TLS handshake with {client} failed: {e}"),
    }
}

/// One 503 `CONNECTION_LIMIT` response, then close (over TLS when it is on).
async fn reject(stream: TcpStream, limit: u64, tls: Option<ServerTls>) {
    let _ = stream.set_write_timeout(Some(REJECT_WRITE_TIMEOUT));
    let msg = format!("http.max_connections ({limit}) connections are open");
    let mut out = Vec::new();
    plain(503, ErrorCode::ConnectionLimit, msg).encode(&mut out, true);
    match tls {
        None => send_and_close(stream, &out).await,
        Some(tls) => {
            if let Ok(s) = tls.accept(stream).await {
                send_and_close(s, &out).await;
            }
        }
    }
}

async fn send_and_close<S: futures_lite::AsyncWrite + Unpin>(mut stream: S, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
    let _ = stream.flush().await;
    let _ = stream.close().await;
}
