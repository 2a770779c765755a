//! The HTTP listener of one front: accepts on its copy of `http.bind_addr` until the drain,
//! enforces `http.max_connections` across fronts (503 `CONNECTION_LIMIT`, then close), reads
//! the PROXY header when `network.proxy_protocol` is on, runs the TLS handshake when
//! `tls.enabled` (the client port's certificate), then serves the connection. Connections are
//! tracked with the front's RCP1 ones, so the drain and the stop-now path cover both.

use std::rc::Rc;
use std::time::Duration;

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
    let listener: TcpListener = crate::util::fd::adopt(listener_fd);
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
    crate::front::executor::send_refusal(stream, tls, &out).await;
}
