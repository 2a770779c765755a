//! Loading a snapshot from its payload fed in chunks: version 2 item by item (nothing but the
//! item being read is buffered), version 1 (one JSON document) gathered and parsed whole, as
//! before.

use smdb_format::snapshot::{payload_max, SNAPSHOT_VERSION_ITEMS, SNAPSHOT_VERSION_JSON};
use smdb_format::snapshot_items::{
    Cursor, ItemSplitter, TAG_END, TAG_EPOCHS, TAG_INSTANCE, TAG_MACHINE, TAG_META, TAG_NAMES,
    TAG_STATS,
};

use super::preamble::{read_end, read_epochs, read_machine, read_names, read_stats, Meta};
use super::record::record;
use crate::engine::index::InstanceMap;
use crate::engine::Engine;

/// Bytes. The smallest instance item: tag, length, a one-byte id and eleven one-byte fields.
const MIN_INSTANCE_ITEM_BYTES: u64 = 16;

/// Builds an engine from a snapshot payload fed in order, in chunks of any size.
pub struct SnapshotLoader {
    inner: Inner,
    /// `defer_indexes`: the engine comes out without its indexes (a recovery builds them once
    /// its log replay is done).
    defer_indexes: bool,
}

enum Inner {
    Json(Vec<u8>),
    Items(Box<Items>),
}

struct Items {
    splitter: ItemSplitter,
    engine: Engine,
    /// Bounds the table reserved for the announced instances (see `MIN_INSTANCE_ITEM_BYTES`).
    payload_len: u64,
    meta: Option<Meta>,
    /// Tag of the last item read (items come in tag order).
    last: u8,
    machines: u64,
    instances: u64,
    end: Option<u64>,
}

impl SnapshotLoader {
    /// A loader for a payload of snapshot `version` and `payload_len` bytes (the file
    /// header's).
    pub fn new(version: u32, payload_len: u64) -> Result<SnapshotLoader, String> {
        let inner = match version {
            SNAPSHOT_VERSION_JSON => Inner::Json(Vec::new()),
            SNAPSHOT_VERSION_ITEMS => Inner::Items(Box::new(Items {
                splitter: ItemSplitter::default(),
                engine: Engine::new(),
                payload_len,
                meta: None,
                last: 0,
                machines: 0,
                instances: 0,
                end: None,
            })),
            v => return Err(format!("snapshot version {v} is not one this build reads")),
        };
        Ok(SnapshotLoader {
            inner,
            defer_indexes: false,
        })
    }

    /// The loaded engine will keep no indexes until `Engine::build_indexes` (module
    /// `engine::indexes`): for a recovery that replays the log after the snapshot.
    pub fn defer_indexes(mut self) -> SnapshotLoader {
        self.defer_indexes = true;
        self
    }

    /// The next bytes of the payload.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        match &mut self.inner {
            Inner::Json(bytes) => {
                if (bytes.len() + chunk.len()) as u64 > payload_max(SNAPSHOT_VERSION_JSON) {
                    return Err("a version-1 snapshot over its size limit".into());
                }
                bytes.extend_from_slice(chunk);
                Ok(())
            }
            Inner::Items(items) => {
                let Items { splitter, .. } = &mut **items;
                let mut splitter = std::mem::take(splitter);
                let fed = splitter.feed(chunk, &mut |tag, body| items.item(tag, body));
                items.splitter = splitter;
                fed
            }
        }
    }

    /// The payload is over: the engine it holds.
    pub fn finish(self) -> Result<Engine, String> {
        let mut engine = match self.inner {
            Inner::Json(bytes) => Engine::restore(&bytes)?,
            Inner::Items(items) => items.finish()?,
        };
        engine.recompute_last_time();
        match self.defer_indexes {
            true => engine.defer_indexes(),
            false => engine.build_indexes(),
        }
        Ok(engine)
    }
}

impl Items {
    fn item(&mut self, tag: u8, body: &[u8]) -> Result<(), String> {
        let repeats = matches!(tag, TAG_MACHINE | TAG_INSTANCE);
        if tag < self.last || (tag == self.last && !repeats) || (self.last == 0 && tag != TAG_META)
        {
            return Err(format!(
                "snapshot item {tag} out of order (after {})",
                self.last
            ));
        }
        self.last = tag;
        let mut c = Cursor::new(body);
        let e = &mut self.engine;
        match tag {
            TAG_META => {
                let meta = Meta::read(&mut c)?;
                // The count is read before the payload's CRC is checked: reserve no more than
                // the payload can hold.
                let room = meta
                    .instances
                    .min(self.payload_len / MIN_INSTANCE_ITEM_BYTES);
                e.instances = InstanceMap::with_capacity(usize::try_from(room).unwrap_or(0));
                self.meta = Some(meta);
            }
            TAG_NAMES => read_names(&mut c, &mut e.names)?,
            TAG_MACHINE => {
                read_machine(body, e)?;
                self.machines += 1;
            }
            TAG_STATS => e.stats = read_stats(&mut c, &e.names)?,
            TAG_EPOCHS => {
                let (epochs, moved_in) = read_epochs(&mut c)?;
                e.set_epochs(epochs)?;
                e.moved_in = moved_in;
            }
            TAG_INSTANCE => {
                let r = record(&mut c, e.names.names())?;
                if let Err(r) = e.instances.insert(Box::new(r)) {
                    return Err(format!("snapshot holds instance `{}` twice", r.instance.id));
                }
                self.instances += 1;
            }
            TAG_END => self.end = Some(read_end(&mut c)?),
            _ => return Err(format!("unknown snapshot item tag {tag}")),
        }
        Ok(())
    }

    fn finish(self) -> Result<Engine, String> {
        self.splitter.finish()?;
        let meta = self.meta.ok_or("the snapshot has no meta item")?;
        let counts = [
            ("instances", meta.instances, self.instances),
            ("machines", meta.machines, self.machines),
            ("names", meta.names, self.engine.names.len() as u64),
            (
                "instances (end item)",
                self.end.unwrap_or(u64::MAX),
                self.instances,
            ),
        ];
        for (what, said, found) in counts {
            if said != found {
                return Err(format!(
                    "the snapshot announces {said} {what} and holds {found}"
                ));
            }
        }
        Ok(self.engine)
    }
}
