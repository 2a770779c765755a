//! The listening sockets, bound exclusively before any executor starts, and the start-up
//! line that announces them.

use super::placement::Placements;
use crate::config::Config;
use std::io::Write;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long start-up retries a bind that fails with "address in use": a killed process's
/// listening socket lingers briefly while the kernel tears down its io_uring.
pub(super) const BIND_RETRY_FOR: Duration = Duration::from_secs(10);
/// Pause between bind attempts.
pub(super) const BIND_RETRY_EVERY: Duration = Duration::from_millis(50);

/// The listening sockets, bound exclusively before any executor starts.
pub(super) struct Listeners {
    pub(super) client: StdListener,
    pub(super) local: SocketAddr,
    pub(super) metrics: Option<StdListener>,
    pub(super) metrics_addr: Option<SocketAddr>,
    pub(super) http: Option<(StdListener, Arc<crate::front::http::Settings>)>,
}

impl Listeners {
    pub(super) fn bind(config: &Config) -> Result<Listeners, String> {
        let client = bind_exclusive("network.bind_addr", &config.network.bind_addr)?;
        let local = client.local_addr().map_err(|e| e.to_string())?;
        let metrics = match config.metrics.enabled {
            true => Some(bind_exclusive(
                "metrics.bind_addr",
                &config.metrics.bind_addr,
            )?),
            false => None,
        };
        let metrics_addr = (metrics.as_ref().map(StdListener::local_addr))
            .transpose()
            .map_err(|e| e.to_string())?;
        let http = bind_http(config)?;
        Ok(Listeners {
            client,
            local,
            metrics,
            metrics_addr,
            http,
        })
    }

    pub(super) fn bound(&self) -> Bound {
        Bound {
            addr: self.local,
            metrics: self.metrics_addr,
            http: self.http.as_ref().map(|(_, settings)| settings.bound),
        }
    }
}

/// Binds `http.bind_addr` (when `http.enabled`) and makes the settings every front shares.
/// A listener on every interface with no `http.allowed_hosts` answers every request 421
/// (no `Host` names it): said once at start-up.
pub(super) fn bind_http(
    config: &Config,
) -> Result<Option<(StdListener, Arc<crate::front::http::Settings>)>, String> {
    if !config.http.enabled {
        return Ok(None);
    }
    let listener = bind_exclusive("http.bind_addr", &config.http.bind_addr)?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    if bound.ip().is_unspecified() && config.http.allowed_hosts.is_empty() {
        log::warn!(
            "http.bind_addr {bound} listens on every interface: list the names clients use in \
             http.allowed_hosts, or every request is refused (421)"
        );
    }
    Ok(Some((
        listener,
        crate::front::http::Settings::new(bound, &config.http),
    )))
}

/// The addresses the server listens on.
pub(super) struct Bound {
    pub(super) addr: SocketAddr,
    pub(super) metrics: Option<SocketAddr>,
    pub(super) http: Option<SocketAddr>,
}

/// Prints the bound addresses on stdout (tests and scripts read them when binding port 0):
/// `smdb-server listening on ADDR shards=N metrics=MADDR http=HADDR` (no ` metrics=` or
/// ` http=` when disabled); with `logging.format = "json"`, one JSON line with the message
/// `smdb-server listening` and the fields `addr`, `shards`, `metrics_addr` and `http_addr`
/// (absent when disabled).
pub(super) fn announce(config: &Config, bound: &Bound, shards: u32, place: &Placements) {
    let (addr, metrics, http) = (&bound.addr, bound.metrics, bound.http);
    match config.logging.format {
        crate::config::LogFormat::Text => {
            let metrics = metrics.map(|m| format!(" metrics={m}")).unwrap_or_default();
            let http = http.map(|h| format!(" http={h}")).unwrap_or_default();
            println!("smdb-server listening on {addr} shards={shards}{metrics}{http}");
        }
        crate::config::LogFormat::Json => {
            let mut line = serde_json::json!({
                "timestamp": crate::logging::now_rfc3339(),
                "level": "INFO",
                "target": "smdb::server",
                "message": "smdb-server listening",
                "addr": addr.to_string(),
                "shards": shards,
            });
            if let Some(m) = metrics {
                line["metrics_addr"] = m.to_string().into();
            }
            if let Some(h) = http {
                line["http_addr"] = h.to_string().into();
            }
            println!("{line}");
        }
    }
    let _ = std::io::stdout().flush();
    log::info!(
        "listening on {addr}: {shards} shard(s) on cores {:?}, {} front(s) on cores {:?}",
        place.shards,
        place.fronts.len(),
        place.fronts
    );
}

/// Binds without SO_REUSEPORT (glommio's own bind sets it, letting a second server silently
/// share the port: docs/glommio.md pitfall 2), so a busy port fails with "address in use".
///
/// "Address in use" is retried every `BIND_RETRY_EVERY` for `BIND_RETRY_FOR` (logged once):
/// right after a SIGKILL the old process's socket lingers while its io_uring is torn down.
pub(super) fn bind_exclusive(key: &str, addr: &str) -> Result<StdListener, String> {
    let resolved = crate::config::resolve_addr(key, addr).map_err(|e| e.0)?;
    let started = Instant::now();
    loop {
        match StdListener::bind(resolved) {
            Ok(l) => {
                if started.elapsed() > BIND_RETRY_EVERY {
                    log::info!(
                        "{key}: bound {addr} after {} ms",
                        started.elapsed().as_millis()
                    );
                }
                return Ok(l);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if started.elapsed() >= BIND_RETRY_FOR {
                    return Err(format!(
                        "cannot listen on {addr} ({key}): address in use after retrying for {} s ({e})",
                        BIND_RETRY_FOR.as_secs()
                    ));
                }
                if started.elapsed() < BIND_RETRY_EVERY {
                    log::warn!(
                        "{key}: {addr} is in use; retrying for up to {} s",
                        BIND_RETRY_FOR.as_secs()
                    );
                }
                std::thread::sleep(BIND_RETRY_EVERY);
            }
            Err(e) => return Err(format!("cannot listen on {addr} ({key}): {e}")),
        }
    }
}
