//! The backup barrier on a shard (docs/backup.md, "The cut"): `ShardCall::BackupPause` stops
//! this shard from executing requests (they wait in its receive loops: one per client channel,
//! each holding at most the one request it read, the rest waiting in the bounded channels),
//! pins the log from its newest snapshot on (`LogPin`), and answers its head once that is
//! durable: the in-flight group commit finishes, nothing new is appended by a client. The
//! shard resumes when the backup says every shard has answered (`BackupRelease`) or, at the
//! latest, after the pause's timeout.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shards::wal::{LogHandle, LogPin};

use super::message::ReplyBody;
use super::runtime::{Needs, Outcome, Shard};
use crate::util::notify::Notify;

/// How often a paused shard looks whether the backup released it.
const RELEASE_POLL: Duration = Duration::from_micros(200);

/// Set by the backup once every shard has answered its pause (or it gave up).
#[derive(Debug, Default)]
pub struct BackupRelease {
    released: AtomicBool,
}

impl BackupRelease {
    pub fn release(&self) {
        self.released.store(true, Ordering::Release);
    }

    fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }
}

/// What a paused shard answers: its cut (the head, durable), the snapshot the backup starts
/// from and the pin that keeps it and the log after it, and a handle to read them.
pub struct BackupCut {
    pub head: u64,
    pub pin: LogPin,
    pub handle: LogHandle,
}

/// The shard's side: whether requests wait, and what wakes them.
#[derive(Default)]
pub struct Pause {
    paused: Cell<bool>,
    resumed: Notify,
}

impl Pause {
    /// Waits while a backup pause holds this shard.
    pub async fn wait(&self) {
        while self.paused.get() {
            self.resumed.wait().await;
        }
    }

    fn resume(&self) {
        self.paused.set(false);
        self.resumed.notify();
    }
}

impl Shard {
    /// `ShardCall::BackupPause`: pauses now, answers the head once durable (the reply's
    /// `needs`), resumes at `release` or after `timeout`.
    pub(super) fn backup_pause(
        self: &Rc<Self>,
        release: Arc<BackupRelease>,
        timeout: Duration,
    ) -> Outcome {
        self.pause.paused.set(true);
        let head = self.log.head();
        let wal = self.log.wal();
        let handle = wal.handle();
        let pin = handle.pin(wal.newest_snapshot_offset());
        let shard = self.clone();
        glommio::spawn_local(async move {
            let since = Instant::now();
            while !release.is_released() && since.elapsed() < timeout {
                glommio::timer::sleep(RELEASE_POLL).await;
            }
            if !release.is_released() {
                log::warn!(
                    "shard {}: backup pause timed out after {} ms; resuming",
                    shard.index,
                    timeout.as_millis()
                );
            }
            shard.pause.resume();
        })
        .detach();
        let cut = BackupCut { head, pin, handle };
        (
            Ok(ReplyBody::BackupCut(Box::new(cut))),
            Needs::durable(head),
        )
    }
}
