//! Divergence: a logged entry that does not fit the state it is applied to (an event for an
//! unknown instance or from another state, a second create of one id, a delete of an unknown
//! id, a definition stored differently, an epoch that does not rise, a nested batch).
//!
//! `decide` never writes such an entry, so on a primary it means a bug, and on a replica or in
//! recovery it means the state and the log disagree: applying on would silently fork this
//! member's state from its log and from every other member's. None of these cases is
//! legitimate (docs/wal.md, "Divergence"). `apply` skips the entry, as before, and the engine
//! keeps the first divergence; the shard then refuses writes, naming the entry, and `/health`
//! shows it (TigerBeetle and openraft stop a state machine that cannot apply its log).

use super::Engine;

/// The first entry that did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The entry's log offset.
    pub offset: u64,
    /// What did not fit, naming the instance, machine or epoch.
    pub reason: String,
}

/// Records that the entry at `offset` did not fit: the first divergence is kept and logged at
/// error; later ones (usually consequences of the first) are logged at warn.
pub(crate) fn record(slot: &mut Option<Divergence>, offset: u64, reason: String) {
    match slot {
        None => {
            log::error!(
                "the log entry at offset {offset} does not fit the state ({reason}): the \
                 shard refuses writes until the divergence is repaired"
            );
            *slot = Some(Divergence { offset, reason });
        }
        Some(first) => log::warn!(
            "the log entry at offset {offset} does not fit the state either ({reason}); the \
             first was at offset {}",
            first.offset
        ),
    }
}

impl Engine {
    /// The first entry applied to this engine that did not fit its state, if any.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.divergence.as_ref()
    }

    pub(crate) fn diverge(&mut self, offset: u64, reason: String) {
        record(&mut self.divergence, offset, reason);
    }
}
