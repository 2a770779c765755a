//! Signals and the SIGTERM drain, as the main thread drives them.

use std::io::Write;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often main checks for a second signal while the fronts drain.
pub(super) const DRAIN_POLL: Duration = Duration::from_millis(10);

/// The SIGTERM drain (docs/protocol.md, "Behind a load balancer", `drain` module): `/health` 503 at once, serve on for
/// `grace`, then the fronts stop accepting and drain; a second signal or `timeout` (counted
/// from the first signal) makes them close every connection at once. Returns when every front
/// has finished.
pub(super) fn shut_down(
    signals: &mut Signals,
    draining: &crate::member::Draining,
    fronts: &mut [StdUnixStream],
    drained: &mpsc::Receiver<()>,
    grace: Duration,
    timeout: Duration,
) {
    let first = Instant::now();
    draining.begin();
    log::info!(
        "shutting down: /health answers 503; serving for {} ms, then draining (at most {} ms)",
        grace.as_millis(),
        timeout.as_millis()
    );
    let tell = |fronts: &mut [StdUnixStream], byte: u8| {
        for s in fronts.iter_mut() {
            let _ = s.write_all(&[byte]);
        }
    };
    let mut now = signals.wait(Some(grace));
    if now {
        log::info!("second signal: stopping at once");
    } else {
        log::info!("draining: no longer accepting; answering SHUTTING_DOWN to new requests");
    }
    tell(fronts, crate::front::drain::STOP_DRAIN);
    let mut left = fronts.len();
    while left > 0 {
        if !now && signals.wait(Some(DRAIN_POLL)) {
            log::info!("second signal: closing every connection now");
            now = true;
        }
        if !now && first.elapsed() >= timeout {
            log::warn!(
                "drain not finished after network.drain_timeout_ms = {} ms: closing every connection now",
                timeout.as_millis()
            );
            now = true;
        }
        if now {
            tell(fronts, crate::front::drain::STOP_NOW);
            // Fronts finish within crate::front::drain::STOP_NOW_WAIT of it; no further signal matters.
            while left > 0 && drained.recv().is_ok() {
                left -= 1;
            }
            break;
        }
        while left > 0 && drained.try_recv().is_ok() {
            left -= 1;
        }
    }
    log::info!("drained in {} ms", first.elapsed().as_millis());
}

/// SIGTERM/SIGINT delivery to the main thread: the handler writes a byte to a socketpair
/// (signal-hook's async-signal-safe pipe handler) and `wait` blocks reading it (the pattern
/// docs/glommio.md §6 measured working).
pub(super) struct Signals(StdUnixStream);

impl Signals {
    pub(super) fn install() -> Result<Signals, String> {
        let err = |e: std::io::Error| format!("cannot install signal handlers: {e}");
        let (read, write) = StdUnixStream::pair().map_err(err)?;
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            let w = write.try_clone().map_err(err)?;
            signal_hook::low_level::pipe::register(sig, w).map_err(err)?;
        }
        Ok(Signals(read))
    }

    /// Waits for a signal, at most `limit` (`None`: forever). True when one arrived.
    pub(super) fn wait(&mut self, limit: Option<Duration>) -> bool {
        use std::io::Read;
        // A zero timeout is refused by the socket; wait 1 ms at least.
        let limit = limit.map(|d| d.max(Duration::from_millis(1)));
        if self.0.set_read_timeout(limit).is_err() {
            return false;
        }
        let deadline = limit.map(|d| Instant::now() + d);
        let mut byte = [0u8; 1];
        loop {
            match self.0.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return false
                }
                Ok(_) => break,
                Err(_) => return false,
            }
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() || self.0.set_read_timeout(Some(left)).is_err() {
                    return false;
                }
            }
        }
        log::info!("received SIGTERM or SIGINT");
        true
    }
}
