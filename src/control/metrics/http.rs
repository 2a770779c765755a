//! The HTTP listener on `metrics.bind_addr`, served by the control executor (docs/monitoring/README.md, "The metrics listener"):
//! `GET /metrics` (Prometheus text, or OpenMetrics when asked), `GET /health`, with failover on
//! `GET /health/primary` and `GET /health/replica` (docs/ha.md, "Behind a load balancer"),
//! 404 otherwise.
//!
//! One request per connection (`Connection: close`), its head at most `HEAD_BYTES_MAX` and
//! read within `REQUEST_READ_TIMEOUT`; at most `HTTP_CONNECTIONS_MAX` at once (above that a
//! connection is closed unanswered). A scrape asks every shard for its figures over the
//! control executor's router, bounded by `SCRAPE_TIMEOUT`.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Gate;
use serde_json::{json, Value};

use super::gather::{self, Sources};
use crate::mesh::router::Router;
use crate::metrics::exposition::{self, Format};
use crate::metrics::families;
use crate::util::notify::Notify;

/// Largest request head (request line plus headers) accepted: scrapers send a few hundred bytes.
pub const HEAD_BYTES_MAX: usize = 8 * 1024;
/// Most headers parsed in one request head.
const HEADERS_MAX: usize = 32;
/// Time a client has to send its request head.
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time the shards have to answer one scrape or health check.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to take the response.
const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP connections served at once; more are closed at once (scrapers retry next interval).
const HTTP_CONNECTIONS_MAX: usize = 64;
/// Longest wait at shutdown for HTTP exchanges in progress.
const HTTP_DRAIN_WAIT: Duration = Duration::from_secs(2);

/// What the control executor needs to serve metrics, built by `boot::run`.
pub struct MetricsSetup {
    /// Bound exclusively with std (docs/glommio.md pitfall 2), listening; owned from here on.
    pub listener: std::net::TcpListener,
    pub sources: Sources,
}

struct State {
    setup: Sources,
    router: Rc<Router>,
    shutting_down: Cell<bool>,
    open: Cell<usize>,
}

/// The running listener.
pub struct MetricsServer {
    state: Rc<State>,
    stop: Rc<Notify>,
    task: glommio::task::JoinHandle<()>,
}

/// Starts serving on `listener` (bound by `boot::run`).
pub fn start(setup: MetricsSetup, router: Rc<Router>) -> MetricsServer {
    // The bound, listening, exclusive std socket moves into the glommio listener.
    let listener: TcpListener = crate::util::fd::adopt(setup.listener.into());
    let state = Rc::new(State {
        setup: setup.sources,
        router,
        shutting_down: Cell::new(false),
        open: Cell::new(0),
    });
    let stop = Rc::new(Notify::default());
    let task = glommio::spawn_local(accept_loop(listener, state.clone(), stop.clone())).detach();
    MetricsServer { state, stop, task }
}

impl MetricsServer {
    /// Shutdown, once the fronts have drained (`/health` has answered 503 since the first
    /// SIGTERM: `Sources::draining`): the listener stops.
    pub async fn shut_down(self) {
        self.state.shutting_down.set(true);
        self.stop.notify();
        let _ = self.task.await;
    }
}

async fn accept_loop(listener: TcpListener, state: Rc<State>, stop: Rc<Notify>) {
    let gate = Gate::new();
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            stop.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) if state.open.get() < HTTP_CONNECTIONS_MAX => {
                let s = state.clone();
                s.open.set(s.open.get() + 1);
                let spawned = gate.spawn(async move {
                    serve(stream, &s).await;
                    s.open.set(s.open.get() - 1);
                });
                if let Ok(task) = spawned {
                    drop(task.detach());
                }
            }
            Some(Ok(_)) => {
                log::debug!("metrics: {HTTP_CONNECTIONS_MAX} connections open, closing one more")
            }
            Some(Err(e)) => {
                log::warn!("metrics: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(listener);
    let closed = glommio::timer::timeout(HTTP_DRAIN_WAIT, async { Ok(gate.close().await) }).await;
    if closed.is_err() {
        log::debug!("metrics: HTTP exchanges still open at shutdown");
    }
}

/// One request and its response.
async fn serve(mut stream: TcpStream, state: &State) {
    let _ = stream.set_write_timeout(Some(RESPONSE_WRITE_TIMEOUT));
    let read = glommio::timer::timeout(REQUEST_READ_TIMEOUT, async {
        Ok(read_head(&mut stream).await)
    });
    let response = match read.await {
        Ok(Ok(head)) => respond(&head, state).await,
        Ok(Err(ReadError::Gone)) => return,
        Ok(Err(ReadError::Status(status))) => Response::text(status, status.reason()),
        Err(_) => Response::text(Status::RequestTimeout, "request head not received in time"),
    };
    let _ = stream.write_all(&response.encode()).await;
    let _ = stream.close().await;
}

async fn respond(head: &Head, state: &State) -> Response {
    let mut r = match (head.path.as_str(), head.method.as_str()) {
        ("/metrics", "GET" | "HEAD") => metrics(head, state).await,
        ("/health", "GET" | "HEAD") => health(state).await,
        ("/health/primary", "GET" | "HEAD") => health_role(state, true).await,
        ("/health/replica", "GET" | "HEAD") => health_role(state, false).await,
        ("/metrics" | "/health" | "/health/primary" | "/health/replica", _) => {
            Response::text(Status::MethodNotAllowed, "use GET")
        }
        _ => Response::text(Status::NotFound, "not found: try /metrics or /health"),
    };
    r.head_only = head.method == "HEAD";
    r
}

async fn metrics(head: &Head, state: &State) -> Response {
    let gathered = glommio::timer::timeout(SCRAPE_TIMEOUT, async {
        Ok(gather::gather(&state.setup, &state.router).await)
    })
    .await;
    let scrape = match gathered {
        Ok(Ok(s)) => s,
        Ok(Err(rej)) => return Response::text(Status::Unavailable, &rej.message),
        Err(_) => return Response::text(Status::Unavailable, "shards did not answer in time"),
    };
    let format = Format::negotiate(head.accept.as_deref());
    match exposition::encode(&families::registry(&scrape), format) {
        Ok(body) => Response {
            status: Status::Ok,
            content_type: format.content_type(),
            body: body.into_bytes(),
            head_only: false,
        },
        Err(_) => Response::text(Status::Internal, "cannot encode metrics"),
    }
}

async fn health(state: &State) -> Response {
    match healthy(state).await {
        Ok(body) => Response::json(Status::Ok, body),
        Err(refusal) => refusal,
    }
}

/// `/health/primary` (`primary`) or `/health/replica`: `/health`'s checks, then the role
/// failover gives this member now. Primary: it holds the leader key with a valid lease, its
/// term's epoch records are durable and it accepts writes (the role flips only then).
/// Replica: it follows a live primary, connected, within `ha.maximum_lag_on_failover`.
async fn health_role(state: &State, primary: bool) -> Response {
    let Some(ha) = &state.setup.ha else {
        let body = json!({"status": "unavailable", "reason": "ha.enabled is false"});
        return Response::json(Status::Unavailable, body);
    };
    let mut body = match healthy(state).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let repl = &state.setup.replication;
    let is_primary = repl.role() == Some(crate::config::Role::Primary) && !repl.fenced();
    body["role"] = json!(if is_primary { "primary" } else { "follower" });
    body["epoch"] = json!(repl.epoch());
    let refusal = match primary {
        true => (!is_primary).then(|| "this member is not a primary with a valid lease".into()),
        false => replica_refusal(repl, is_primary, ha.maximum_lag),
    };
    match refusal {
        None => Response::json(Status::Ok, body),
        Some(reason) => {
            body["status"] = json!("unavailable");
            body["reason"] = json!(reason);
            Response::json(Status::Unavailable, body)
        }
    }
}

/// Why this member is not a healthy replica now (None: it is).
fn replica_refusal(
    repl: &crate::member::ReplState,
    is_primary: bool,
    maximum_lag: u64,
) -> Option<String> {
    if is_primary {
        return Some("this member is the primary".into());
    }
    if repl.primary().is_none() {
        return Some("no live primary is known".into());
    }
    let Ok(f) = repl.stats.follower.lock() else {
        return Some("follower figures unavailable".into());
    };
    if !f.connected {
        return Some("not connected to the primary".into());
    }
    (f.lag_entries > maximum_lag).then(|| {
        format!(
            "lag {} entries exceeds ha.maximum_lag_on_failover {maximum_lag}",
            f.lag_entries
        )
    })
}

/// `/health`'s checks: Ok with the body of a 200, or the 503 to answer.
async fn healthy(state: &State) -> Result<Value, Response> {
    if state.shutting_down.get() || state.setup.draining.is_set() {
        return Err(Response::json(
            Status::Unavailable,
            json!({"status": "shutting_down"}),
        ));
    }
    let stats = glommio::timer::timeout(SCRAPE_TIMEOUT, async {
        Ok(gather::shard_stats(&state.router).await)
    })
    .await;
    let shards = match stats {
        Ok(Ok(s)) => s,
        Ok(Err(rej)) => {
            let body = json!({"status": "unavailable", "reason": rej.message});
            return Err(Response::json(Status::Unavailable, body));
        }
        Err(_) => {
            let body = json!({"status": "unavailable", "reason": "shards did not answer in time"});
            return Err(Response::json(Status::Unavailable, body));
        }
    };
    let poisoned: Vec<u32> = shards
        .iter()
        .filter(|s| s.log.poisoned)
        .map(|s| s.shard)
        .collect();
    if !poisoned.is_empty() {
        let body = json!({"status": "log_poisoned", "poisoned_shards": poisoned});
        return Err(Response::json(Status::Unavailable, body));
    }
    let diverged: Vec<Value> = (shards.iter())
        .filter_map(|s| s.diverged.as_ref().map(|d| (s.shard, d)))
        .map(|(shard, d)| json!({"shard": shard, "offset": d.offset, "reason": d.reason}))
        .collect();
    if !diverged.is_empty() {
        let body = json!({"status": "diverged", "diverged_shards": diverged});
        return Err(Response::json(Status::Unavailable, body));
    }
    let full: Vec<u32> = (shards.iter())
        .filter(|s| s.log.storage_full)
        .map(|s| s.shard)
        .collect();
    // A full disk still serves reads: healthy, but the body names who refuses writes.
    let status = if full.is_empty() {
        "ok"
    } else {
        "storage_full"
    };
    let mut body = json!({
        "status": status,
        "shards": shards.len(),
        "uptime_seconds": state.setup.started.elapsed().as_secs(),
    });
    if !full.is_empty() {
        body["storage_full_shards"] = json!(full);
    }
    Ok(body)
}

/// The parts of a request head the listener uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The path without its query string.
    pub path: String,
    pub accept: Option<String>,
}

enum ReadError {
    /// The peer left before a complete head: nothing to answer.
    Gone,
    Status(Status),
}

async fn read_head(stream: &mut TcpStream) -> Result<Head, ReadError> {
    let mut buf = vec![0u8; HEAD_BYTES_MAX];
    let mut n = 0;
    loop {
        if let Some(head) = parse_head(&buf[..n]).map_err(ReadError::Status)? {
            return Ok(head);
        }
        if n == buf.len() {
            return Err(ReadError::Status(Status::HeadTooLarge));
        }
        match stream.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => return Err(ReadError::Gone),
            Ok(got) => n += got,
        }
    }
}

/// Parses a request head: `Ok(None)` when more bytes are needed.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, Status> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let target = req.path.unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or("/").to_string();
            let accept = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("accept"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            Ok(Some(Head {
                method: req.method.unwrap_or("").to_string(),
                path,
                accept,
            }))
        }
        Err(httparse::Error::TooManyHeaders) => Err(Status::HeadTooLarge),
        Err(_) => Err(Status::BadRequest),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    HeadTooLarge,
    Internal,
    Unavailable,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::HeadTooLarge => 431,
            Status::Internal => 500,
            Status::Unavailable => 503,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::HeadTooLarge => "Request Header Fields Too Large",
            Status::Internal => "Internal Server Error",
            Status::Unavailable => "Service Unavailable",
        }
    }
}

pub struct Response {
    pub status: Status,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// HEAD: headers only (Content-Length still names the body's size).
    pub head_only: bool,
}

impl Response {
    fn text(status: Status, msg: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{msg}\n").into_bytes(),
            head_only: false,
        }
    }

    fn json(status: Status, v: serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(&v).unwrap_or_default(),
            head_only: false,
        }
    }

    /// The response bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status.code(),
            self.status.reason(),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if self.status == Status::MethodNotAllowed {
            out.extend_from_slice(b"Allow: GET, HEAD\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_head_gives_method_path_and_accept() {
        let raw = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: text/plain\r\n\r\n";
        let head = parse_head(raw).unwrap().unwrap();
        assert_eq!(head.method, "GET");
        assert_eq!(head.path, "/metrics");
        assert_eq!(head.accept.as_deref(), Some("text/plain"));
        assert_eq!(
            parse_head(&raw[..20]),
            Ok(None),
            "partial head needs more bytes"
        );
    }

    #[test]
    fn malformed_or_oversized_heads_are_refused() {
        assert_eq!(
            parse_head(b"GET\x00 / HTTP/1.1\r\n\r\n"),
            Err(Status::BadRequest)
        );
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=HEADERS_MAX {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&many), Err(Status::HeadTooLarge));
    }

    #[test]
    fn responses_carry_length_and_close() {
        let mut r = Response::text(Status::NotFound, "nope");
        let text = String::from_utf8(r.encode()).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(text.contains("Content-Length: 5\r\n"), "{text}");
        assert!(text.contains("Connection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nnope\n"), "{text}");
        r.head_only = true;
        let head = String::from_utf8(r.encode()).unwrap();
        assert!(head.ends_with("\r\n\r\n"), "{head}");
    }
}
