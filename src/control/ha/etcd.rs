//! How the HA thread reaches etcd (docs/ha.md, "Reaching etcd"): one connection per endpoint,
//! each endpoint's health, and one pinned endpoint that every call goes to, as etcd's own Go
//! client does.
//!
//! Why not one balanced channel over all endpoints: an endpoint whose packets are dropped (a
//! partitioned host; a SIGSTOPped etcd) is not a refused connection, so a balancer never marks
//! it down and keeps sending a share of the calls (lease keep-alives, campaigns) into the void
//! until each times out. Here a call that times out, fails in transport, or is answered "no
//! leader" (`require_leader`: an etcd member cut off from its quorum answers at once instead of
//! waiting) marks its endpoint down for `DOWN_FOR` and moves the pin to the next endpoint that is
//! not down, so one silent endpoint costs one call's deadline, not a term. Every call is bounded
//! by `call_timeout`, shorter than the lease's safety margin, so a failed renewal still leaves
//! time to renew on another endpoint before the deadline. HTTP/2 keep-alive pings (at etcd's
//! own minimum interval) also close a connection that went silent while streams were open.
//!
//! Bound: one client per configured endpoint, made lazily; no queue (each call runs on the HA
//! thread, one at a time, or on the watch task).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, ConnectOptions, DeleteResponse, GetOptions, GetResponse, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, PutResponse, Txn, TxnResponse, WatchOptions, WatchStream,
};

use super::error::{Fault, HaError};
use crate::config::ha::Ha;

/// How long an endpoint whose call failed is passed over (unless every endpoint is down).
const DOWN_FOR: Duration = Duration::from_secs(5);
/// The upper bound of one call's deadline.
const CALL_TIMEOUT_MAX: Duration = Duration::from_secs(1);
/// The lower bound (an etcd under load answers a linearizable read in well under this).
const CALL_TIMEOUT_MIN: Duration = Duration::from_millis(250);
/// HTTP/2 keep-alive ping interval: etcd's server refuses pings more frequent than its
/// `--grpc-keepalive-min-time` (5 s by default) and closes the connection.
const PING_EVERY: Duration = Duration::from_secs(5);

/// One call's deadline: at most 4/5 of `safety_margin_ms` and a sixth of `ttl_ms` (a renewal
/// every `ttl_ms / 6` that fails on one endpoint can then be tried again on another before the
/// lease deadline), clamped to `[CALL_TIMEOUT_MIN, CALL_TIMEOUT_MAX]`.
pub fn call_timeout(ttl_ms: u64, margin_ms: u64) -> Duration {
    let ms = (margin_ms * 4 / 5).min(ttl_ms / 6);
    Duration::from_millis(ms).clamp(CALL_TIMEOUT_MIN, CALL_TIMEOUT_MAX)
}

/// The endpoints, their clients and health.
pub struct Etcd {
    urls: Vec<String>,
    opts: ConnectOptions,
    timeout: Duration,
    state: Mutex<Pins>,
}

#[derive(Default)]
struct Pins {
    /// The endpoint calls go to.
    pinned: usize,
    endpoints: Vec<Endpoint>,
}

#[derive(Default, Clone)]
struct Endpoint {
    client: Option<Client>,
    /// Passed over until then (a call on it failed).
    down_until: Option<Instant>,
}

/// Whether an error says the endpoint (not the request) is at fault.
fn endpoint_fault(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => status_fault(s.code() as i32),
        E::InvalidArgs(_) | E::InvalidUri(_) | E::Utf8Error(_) | E::InvalidMetadataValue(_) => {
            false
        }
        _ => true,
    }
}

/// gRPC status codes (the numbers fixed by gRPC) that blame the endpoint: CANCELLED (1),
/// UNKNOWN (2), DEADLINE_EXCEEDED (4), ABORTED (10), INTERNAL (13), UNAVAILABLE (14, also
/// etcd's "no leader" on a member cut off from its quorum). The others answer the request.
fn status_fault(code: i32) -> bool {
    matches!(code, 1 | 2 | 4 | 10 | 13 | 14)
}

impl Etcd {
    pub fn new(cfg: &Ha) -> Result<Arc<Etcd>, HaError> {
        let timeout = call_timeout(cfg.ttl_ms, cfg.safety_margin_ms);
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_require_leader(true)
            .with_keep_alive(PING_EVERY, timeout.max(Duration::from_secs(1)))
            .with_keep_alive_while_idle(false);
        if let (Some(u), Some(p)) = (&cfg.etcd_username, &cfg.etcd_password) {
            opts = opts.with_user(u.clone(), p.clone());
        }
        if let Some(tls) = super::tls::options(cfg)? {
            opts = opts.with_tls(tls);
        }
        let urls = super::tls::endpoints(cfg);
        if urls.is_empty() {
            return Err(HaError::Config("ha.etcd_endpoints is empty"));
        }
        let state = Mutex::new(Pins {
            pinned: 0,
            endpoints: vec![Endpoint::default(); urls.len()],
        });
        Ok(Arc::new(Etcd {
            urls,
            opts,
            timeout,
            state,
        }))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Marks endpoint `i` down and moves the pin off it; returns `why`.
    pub fn failed<E: std::fmt::Display>(&self, i: usize, why: E) -> E {
        let Ok(mut s) = self.state.lock() else {
            return why;
        };
        let now = Instant::now();
        s.endpoints[i].down_until = Some(now + DOWN_FOR);
        if s.pinned == i {
            let n = s.endpoints.len();
            // The next endpoint that is up, else the one whose down time ends first.
            let next = (1..=n)
                .map(|k| (i + k) % n)
                .min_by_key(|&j| match s.endpoints[j].down_until {
                    Some(t) if t > now => (1, t),
                    _ => (0, now),
                })
                .unwrap_or(i);
            if next != i {
                log::info!(
                    "ha: etcd endpoint {} failed ({why}); calls go to {} now",
                    self.urls[i],
                    self.urls[next]
                );
            }
            s.pinned = next;
        }
        why
    }

    /// Runs `f` on the pinned endpoint's client, bounded by the call deadline; an endpoint
    /// fault moves the pin (the caller's next call goes elsewhere).
    async fn on_pinned<T, Fut>(
        &self,
        what: &str,
        f: impl FnOnce(Client) -> Fut,
    ) -> Result<(usize, T), HaError>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let i = self.state.lock().map(|s| s.pinned).unwrap_or(0);
        let client = self.client(i).await?;
        let call = |fault| HaError::Call {
            what: what.to_string(),
            endpoint: self.urls[i].clone(),
            fault,
        };
        match tokio::time::timeout(self.timeout, f(client)).await {
            Ok(Ok(v)) => Ok((i, v)),
            Ok(Err(e)) if endpoint_fault(&e) => Err(self.failed(i, call(Fault::Etcd(e)))),
            Ok(Err(e)) => Err(call(Fault::Etcd(e))),
            Err(_) => Err(self.failed(i, call(Fault::NoAnswerWithin(self.timeout)))),
        }
    }

    pub async fn get(
        &self,
        what: &str,
        key: String,
        o: GetOptions,
    ) -> Result<GetResponse, HaError> {
        let f = |mut c: Client| async move { c.get(key, Some(o)).await };
        Ok(self.on_pinned(what, f).await?.1)
    }

    pub async fn put(
        &self,
        what: &str,
        key: String,
        value: Vec<u8>,
        o: Option<PutOptions>,
    ) -> Result<PutResponse, HaError> {
        let f = |mut c: Client| async move { c.put(key, value, o).await };
        Ok(self.on_pinned(what, f).await?.1)
    }

    pub async fn delete(&self, what: &str, key: String) -> Result<DeleteResponse, HaError> {
        let f = |mut c: Client| async move { c.delete(key, None).await };
        Ok(self.on_pinned(what, f).await?.1)
    }

    pub async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, HaError> {
        let f = |mut c: Client| async move { c.txn(txn).await };
        Ok(self.on_pinned(what, f).await?.1)
    }

    /// A new lease of `ttl` seconds: its id.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, HaError> {
        let f = |mut c: Client| async move { c.lease_grant(ttl, None).await };
        Ok(self.on_pinned("lease grant", f).await?.1.id())
    }

    /// Revokes `lease` (best effort: its keys go at once instead of at its expiry).
    pub async fn lease_revoke(&self, lease: i64) -> Result<(), HaError> {
        let f = |mut c: Client| async move { c.lease_revoke(lease).await };
        self.on_pinned("lease revoke", f).await.map(|_| ())
    }

    /// A keep-alive stream for `lease` on the pinned endpoint, and that endpoint.
    pub async fn keep_alive(
        &self,
        lease: i64,
    ) -> Result<(usize, LeaseKeeper, LeaseKeepAliveStream), HaError> {
        let f = |mut c: Client| async move { c.lease_keep_alive(lease).await };
        let (i, (keeper, stream)) = self.on_pinned("lease keep-alive", f).await?;
        Ok((i, keeper, stream))
    }

    /// A new keep-alive stream for `lease` and its first renewal, tried on every endpoint but
    /// `failed` at once (each bounded by the call deadline): the first that answers wins and
    /// becomes the pin. Returns its endpoint, the stream and the lease's TTL (seconds; 0 or
    /// less: the lease is gone). Used when a renewal failed: the next endpoint in turn may be
    /// silent too (a partition takes a host's etcd member and the one an election is under
    /// way on), and trying them one after another would outlast the lease deadline.
    pub async fn renew_anywhere(
        &self,
        lease: i64,
        failed: usize,
    ) -> Result<(usize, LeaseKeeper, LeaseKeepAliveStream, i64), HaError> {
        let mut attempts = tokio::task::JoinSet::new();
        for i in (0..self.urls.len()).filter(|&i| i != failed || self.urls.len() == 1) {
            let client = match self.client(i).await {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("ha: {e}");
                    continue;
                }
            };
            let timeout = self.timeout;
            attempts.spawn(async move {
                let renewed = tokio::time::timeout(timeout, first_renewal(client, lease)).await;
                (i, renewed)
            });
        }
        let mut why = Vec::new();
        while let Some(joined) = attempts.join_next().await {
            let Ok((i, renewed)) = joined else { continue };
            match renewed {
                Ok(Ok((keeper, stream, ttl))) => {
                    self.pin(i);
                    return Ok((i, keeper, stream, ttl));
                }
                Ok(Err(e)) => why.push(self.failed(i, self.on(i, Fault::Etcd(e)))),
                Err(_) => why.push(self.failed(i, self.on(i, Fault::NoAnswer))),
            }
        }
        Err(HaError::Nowhere(why))
    }

    /// Endpoint `i`'s client, connected now if it has none yet (bounded by the deadline).
    async fn client(&self, i: usize) -> Result<Client, HaError> {
        let known = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.endpoints[i].client.clone());
        if let Some(c) = known {
            return Ok(c);
        }
        let url = &self.urls[i];
        let connect = Client::connect([url.as_str()], Some(self.opts.clone()));
        let failed = |fault| HaError::Connect {
            endpoint: url.clone(),
            fault,
        };
        let c = match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(self.failed(i, failed(Fault::Etcd(e)))),
            Err(_) => return Err(self.failed(i, failed(Fault::TimedOut))),
        };
        if let Ok(mut s) = self.state.lock() {
            s.endpoints[i].client = Some(c.clone());
        }
        Ok(c)
    }

    /// Endpoint `i`'s part of a renewal tried on every endpoint.
    fn on(&self, i: usize, fault: Fault) -> HaError {
        HaError::Endpoint {
            endpoint: self.urls[i].clone(),
            fault,
        }
    }

    /// Calls go to endpoint `i` from now on.
    fn pin(&self, i: usize) {
        if let Ok(mut s) = self.state.lock() {
            if s.pinned != i {
                log::info!("ha: etcd calls go to {} now", self.urls[i]);
            }
            s.pinned = i;
            s.endpoints[i].down_until = None;
        }
    }

    /// A watch of `prefix` on the pinned endpoint.
    pub async fn watch(&self, prefix: String) -> Result<WatchStream, HaError> {
        let opts = WatchOptions::new().with_prefix();
        let f = |mut c: Client| async move { c.watch(prefix, Some(opts)).await };
        Ok(self.on_pinned("watch", f).await?.1)
    }

    /// The URL of endpoint `i`.
    pub fn url(&self, i: usize) -> &str {
        &self.urls[i]
    }
}

/// Opens a keep-alive stream for `lease` on `client` and renews once on it: the stream and
/// the TTL etcd answered.
async fn first_renewal(
    mut client: Client,
    lease: i64,
) -> Result<(LeaseKeeper, LeaseKeepAliveStream, i64), etcd_client::Error> {
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
    keeper.keep_alive().await?;
    let ended = || etcd_client::Error::LeaseKeepAliveError("the stream ended".into());
    let ttl = stream.message().await?.ok_or_else(ended)?.ttl();
    Ok((keeper, stream, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_deadline_is_shorter_than_the_margin_and_a_sixth_of_the_ttl() {
        assert_eq!(call_timeout(3000, 500), Duration::from_millis(400));
        assert_eq!(call_timeout(2000, 500), Duration::from_millis(333));
        assert_eq!(call_timeout(30_000, 5_000), CALL_TIMEOUT_MAX);
        assert_eq!(call_timeout(1000, 100), CALL_TIMEOUT_MIN);
    }

    fn three() -> Arc<Etcd> {
        let cfg = Ha {
            etcd_endpoints: vec!["a:1".into(), "b:2".into(), "c:3".into()],
            ..Default::default()
        };
        Etcd::new(&cfg).unwrap()
    }

    fn pinned(e: &Etcd) -> usize {
        e.state.lock().unwrap().pinned
    }

    #[test]
    fn a_failed_endpoint_moves_the_pin_to_the_next_one_up() {
        let e = three();
        assert_eq!(pinned(&e), 0);
        e.failed(0, "silent");
        assert_eq!(pinned(&e), 1);
        e.failed(1, "silent");
        assert_eq!(pinned(&e), 2, "0 and 1 are down: 2 is the one up");
        e.failed(2, "silent");
        assert_eq!(
            pinned(&e),
            0,
            "all down: the one whose down time ends first"
        );
        e.failed(1, "a call on an endpoint not pinned");
        assert_eq!(pinned(&e), 0, "the pin stays");
    }

    #[test]
    fn only_transport_faults_and_unavailable_count_against_an_endpoint() {
        for (code, fault) in [(14, true), (4, true), (5, false), (9, false), (3, false)] {
            assert_eq!(status_fault(code), fault, "gRPC code {code}");
        }
        assert!(!endpoint_fault(&etcd_client::Error::InvalidArgs(
            "x".into()
        )));
        assert!(endpoint_fault(&etcd_client::Error::Internal("x".into())));
    }
}
