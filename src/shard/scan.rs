//! SCAN_INSTANCES on a shard: at most `SCAN_EXAMINED_MAX` instances per call, examined in
//! slices of `SCAN_SLICE` with a yield between them, so a scan never holds the shard for
//! longer than one slice (docs/queries.md). Between slices the walk goes on from the last id
//! it examined: writes in between are seen or not, as with any cursor.

use shards::engine::{ScanQuery, ScanSlice};

use super::message::ReplyBody;
use super::runtime::{Needs, Outcome, Shard};

/// Instances one call examines on one shard (the contract's bound on a scan call).
pub const SCAN_EXAMINED_MAX: usize = 10_000;

/// Instances examined between two yields: ~0.2-0.5 ms of the shard's time.
pub const SCAN_SLICE: usize = 1_000;

const _: () = assert!(SCAN_SLICE >= 1 && SCAN_SLICE <= SCAN_EXAMINED_MAX);

impl Shard {
    /// One call of SCAN_INSTANCES, once the log is durable to the head: slices until
    /// `q.limit` matches, `SCAN_EXAMINED_MAX` examined, or the end of the machine.
    pub(super) async fn scan(&self, q: &ScanQuery) -> Outcome {
        let mut out = ScanSlice::default();
        let mut after = q.after.clone();
        loop {
            let budget = SCAN_SLICE.min(SCAN_EXAMINED_MAX - out.examined);
            let want = q.limit - out.instances.len();
            let slice = match self
                .engine
                .borrow()
                .scan_slice(q, after.as_deref(), budget, want)
            {
                Ok(slice) => slice,
                Err(rejection) => return (Err(rejection), Needs::NOTHING),
            };
            out.examined += slice.examined;
            out.instances.extend(slice.instances);
            out.through = slice.through;
            let done = out.through.is_none()
                || out.instances.len() >= q.limit
                || out.examined >= SCAN_EXAMINED_MAX;
            if done {
                break;
            }
            after = out.through.clone();
            futures_lite::future::yield_now().await;
        }
        (Ok(ReplyBody::Scanned(out)), Needs::durable(self.log.head()))
    }
}
