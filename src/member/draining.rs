//! Whether the server is draining (docs/protocol.md, "Behind a load balancer"): set at the
//! first SIGTERM by `boot`, read by `/health` on the control executor and by the fronts.

use std::sync::atomic::{AtomicBool, Ordering};

/// Process-wide: set at the first SIGTERM; `/health` answers 503 from then on.
#[derive(Debug, Default)]
pub struct Draining(AtomicBool);

impl Draining {
    pub fn begin(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
