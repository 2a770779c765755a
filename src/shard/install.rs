//! Receiving the primary's snapshot on a replica (`ShardCall::InstallSnapshot`), as a stream:
//! `Begin` opens a temp file in the log's snapshot directory (`Wal::incoming_snapshot`) and a
//! `SnapshotLoader`; each `Part` is written to the file and fed to the loader; `End` checks the
//! length and CRC the primary announced and that the payload loaded, then replaces the log with
//! the file (`Durability::rewind`, `Rewind::Install`) and swaps in the loaded engine. Nothing
//! holds the whole snapshot: the file takes the bytes, the loader builds the engine as they
//! come. Until `End` the shard serves its old state; no snapshot walk runs meanwhile.

use std::rc::Rc;

use shards::engine::SnapshotLoader;
use shards::wal::SnapshotWriter;
use shards::{ErrorCode, Rejection};

use super::durability::Rewind;
use super::message::{ReplyBody, SnapshotChunk};
use super::runtime::{Needs, Outcome, Shard};

/// A snapshot being received.
pub(super) struct Incoming {
    writer: SnapshotWriter,
    loader: SnapshotLoader,
    /// Payload bytes announced (0: not said).
    len: u64,
}

impl Shard {
    /// `ShardCall::InstallSnapshot`: one step of receiving the primary's snapshot.
    pub(super) async fn install_chunk(self: &Rc<Self>, chunk: SnapshotChunk) -> Outcome {
        let done = match chunk {
            SnapshotChunk::Begin {
                offset,
                version,
                len,
            } => self.begin_incoming(offset, version, len).await,
            SnapshotChunk::Part(data) => self.incoming_part(&data).await,
            SnapshotChunk::End { crc } => self.end_incoming(crc).await,
            SnapshotChunk::Abandon => {
                self.drop_incoming().await;
                Ok(())
            }
        };
        match done {
            Ok(()) => (Ok(ReplyBody::Json(b"{}".to_vec())), Needs::NOTHING),
            Err(rej) => (Err(rej), Needs::NOTHING),
        }
    }

    async fn begin_incoming(&self, offset: u64, version: u32, len: u64) -> Result<(), Rejection> {
        self.drop_incoming().await;
        self.snapshots.hold(true);
        self.cancel_snapshot().await;
        let loader = SnapshotLoader::new(version, len).map_err(refused)?;
        let writer = match self.log.wal().incoming_snapshot(offset, version).await {
            Ok(w) => w,
            Err(e) => {
                self.snapshots.hold(false);
                return Err(Rejection::new(ErrorCode::InternalError, e.to_string()));
            }
        };
        log::info!(
            "shard {}: receiving the primary's snapshot at offset {offset} ({len} bytes, \
             format {version})",
            self.index
        );
        *self.incoming.borrow_mut() = Some(Incoming {
            writer,
            loader,
            len,
        });
        Ok(())
    }

    async fn incoming_part(&self, data: &[u8]) -> Result<(), Rejection> {
        let mut inc = self
            .incoming
            .take()
            .ok_or_else(|| refused("a snapshot part before its begin".into()))?;
        if let Err(e) = inc.loader.feed(data) {
            return self
                .fail_incoming(inc, refused(format!("the snapshot does not load: {e}")))
                .await;
        }
        if let Err(e) = inc.writer.write(data).await {
            let rej = Rejection::new(ErrorCode::InternalError, e.to_string());
            return self.fail_incoming(inc, rej).await;
        }
        *self.incoming.borrow_mut() = Some(inc);
        Ok(())
    }

    async fn end_incoming(&self, crc: Option<u32>) -> Result<(), Rejection> {
        let inc = self
            .incoming
            .take()
            .ok_or_else(|| refused("a snapshot end before its begin".into()))?;
        let got = (inc.writer.len(), inc.writer.crc());
        if inc.len != 0 && got.0 != inc.len {
            let why = format!(
                "the snapshot is {} bytes; {} were announced",
                got.0, inc.len
            );
            return self.fail_incoming(inc, refused(why)).await;
        }
        if crc.is_some_and(|c| c != got.1) {
            return self
                .fail_incoming(inc, refused("the snapshot fails its CRC".into()))
                .await;
        }
        let Incoming { writer, loader, .. } = inc;
        let offset = writer.offset();
        let engine = match loader.finish() {
            Ok(e) => e,
            Err(e) => {
                writer.abort().await;
                self.snapshots.hold(false);
                return Err(refused(format!(
                    "the snapshot at offset {offset} does not load: {e}"
                )));
            }
        };
        let before = self.log.head();
        let rewound = self
            .rewind(Rewind::Install {
                writer: Box::new(writer),
                engine: Box::new(engine),
            })
            .await;
        self.snapshots.hold(false);
        rewound?;
        log::warn!(
            "shard {}: state replaced by a snapshot at offset {offset} ({} entries dropped)",
            self.index,
            before.saturating_sub(offset)
        );
        Ok(())
    }

    async fn fail_incoming(&self, inc: Incoming, rej: Rejection) -> Result<(), Rejection> {
        inc.writer.abort().await;
        self.snapshots.hold(false);
        Err(rej)
    }

    /// Deletes a snapshot being received (a new one begins, or the client went away).
    pub(super) async fn drop_incoming(&self) {
        if let Some(inc) = self.incoming.take() {
            inc.writer.abort().await;
            self.snapshots.hold(false);
        }
    }
}

fn refused(msg: String) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, msg)
}
