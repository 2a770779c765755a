//! The source's connection to the target group's primary (docs/cluster.md, "Moving slots"):
//! RCP1 as any client speaks it, HELLO then AUTH with `replication.auth_token` (scope
//! `replicate`), TLS and the PROXY header as the member's replication link has them, then one
//! `CLUSTER_IMPORT` request at a time, each answered once the target holds what it carried.

use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use serde_json::Value;

use crate::control::replication::follower::link::{handshake, request, FrameReader};
use crate::control::replication::follower::{LinkError, Settings, CONNECT_TIMEOUT};

type Reader = FrameReader<Box<dyn AsyncRead + Unpin>>;
type Writer = Box<dyn AsyncWrite + Unpin>;

/// An open link to the target's primary.
pub struct Link {
    r: Reader,
    w: Writer,
    /// Where it goes (for log lines).
    pub addr: String,
}

impl Link {
    /// Connects to `addr` with the member's replication link settings (`template`).
    pub async fn open(template: &Settings, addr: &str) -> Result<Link, LinkError> {
        let connect = |e: glommio::GlommioError<()>| LinkError::Connect(e.to_string());
        let tcp = glommio::timer::timeout(CONNECT_TIMEOUT, async {
            Ok(TcpStream::connect(addr).await)
        })
        .await
        .map_err(connect)?
        .map_err(connect)?;
        let mut tcp = tcp;
        let _ = tcp.set_nodelay(true);
        if template.proxy_local {
            use futures_lite::AsyncWriteExt;
            (tcp.write_all(&crate::proxy::V2_LOCAL_HEADER).await)
                .map_err(|e| LinkError::ProxyHeader(e.to_string()))?;
        }
        let mut cfg = template.clone();
        cfg.upstream = addr.to_string();
        let (r, mut w): (Box<dyn AsyncRead + Unpin>, Writer) = match &template.tls {
            None => {
                let (r, w) = futures_lite::io::split(tcp);
                (Box::new(r), Box::new(w))
            }
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_matches(|c| c == '[' || c == ']').to_string();
                let name = template.server_name.clone();
                let name = if name.is_empty() { host } else { name };
                let name = rustls::pki_types::ServerName::try_from(name)
                    .map_err(|e| LinkError::ServerName(e.to_string()))?;
                let stream = futures_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| LinkError::TlsHandshake(e.to_string()))?;
                let (r, w) = futures_lite::io::split(stream);
                (Box::new(r), Box::new(w))
            }
        };
        let mut r = FrameReader::new(r);
        handshake(&cfg, &mut r, &mut w).await?;
        Ok(Link {
            r,
            w,
            addr: addr.to_string(),
        })
    }

    /// One `CLUSTER_IMPORT` request: its result, or the target's error object; `within`
    /// bounds the answer.
    pub async fn import(
        &mut self,
        params: Value,
        within: Duration,
    ) -> Result<Result<Value, Value>, LinkError> {
        let call = request(&mut self.r, &mut self.w, "CLUSTER_IMPORT", params);
        glommio::timer::timeout(within, async { Ok(call.await) })
            .await
            .map_err(|_| LinkError::Silent {
                ms: within.as_millis(),
            })?
    }
}
