//! The routing functions: which shard of a member owns an instance id, and (cluster mode)
//! which of the 16384 hash slots it lies in (docs/cluster.md, "Slots").
//!
//! Each function is part of the on-disk format: a data directory written with one routing
//! cannot be read with another (the data dir records which one made it). Neither may ever
//! change between versions. `Routing::Hash` (standalone, a replicated pair, one HA group) is
//! 64-bit FNV-1a over the UTF-8 bytes of the routing key, reduced modulo the shard count.
//! `Routing::Slots` (cluster mode) is the key's slot, `CRC16-XMODEM(key) mod 16384`, reduced
//! modulo the shard count, so one slot lives in one log.
//!
//! The routing key is the whole id, unless the id carries a hash tag (the Redis Cluster
//! convention): if the id contains a `{`, and a `}` follows it, and the text between the first
//! `{` and the first `}` after it is not empty, the routing key is that text alone. So
//! `{order-7}`, `{order-7}:payment` and `x{order-7}y` all live on one shard and can change
//! together in one atomic BATCH. `{}` (an empty tag) and ids without a closing brace route by
//! the whole id. (Before hash tags existed, ids with braces routed by the whole id; a data
//! directory holding such ids and more than one shard must be reloaded, not reopened.)

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

pub use smdb_protocol::slot::{crc16_xmodem, routing_key, slot_of, SLOT_COUNT};

/// Which function spreads a member's instances over its shards. Fixed for a data dir's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// FNV-1a of the routing key mod the shard count (every server without `[cluster]`).
    #[default]
    Hash,
    /// The id's slot mod the shard count (cluster mode).
    Slots,
}

impl Routing {
    /// The name the data dir's metadata records.
    pub const fn as_str(self) -> &'static str {
        match self {
            Routing::Hash => "hash",
            Routing::Slots => "slots",
        }
    }

    /// The routing a recorded name names, or `None` for one this build does not know.
    pub fn parse(name: &str) -> Option<Routing> {
        [Routing::Hash, Routing::Slots]
            .into_iter()
            .find(|r| r.as_str() == name)
    }

    /// The shard (0-based) that owns instance `id` among `shard_count` shards.
    pub fn shard_for(self, id: &str, shard_count: u32) -> u32 {
        debug_assert!(shard_count > 0, "shard_count must be positive");
        if shard_count <= 1 {
            return 0; // one shard owns every id: no need to hash it
        }
        match self {
            Routing::Hash => (fnv1a64(routing_key(id).as_bytes()) % u64::from(shard_count)) as u32,
            Routing::Slots => u32::from(slot_of(id)) % shard_count,
        }
    }
}

/// A member's shards as ids see them: how many, and the routing that picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub routing: Routing,
    /// At least 1.
    pub count: u32,
}

impl Layout {
    /// The shard that owns instance `id`.
    pub fn shard_of(&self, id: &str) -> u32 {
        self.routing.shard_for(id, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned values: if this test fails, the routing function changed and existing data
    /// directories would be read with instances on the wrong shard.
    #[test]
    fn routing_function_is_pinned() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(Routing::Hash.shard_for("order-1", 1), 0);
        let spread: Vec<u32> = (0..8)
            .map(|i| Routing::Hash.shard_for(&format!("order-{i}"), 4))
            .collect();
        assert_eq!(spread, vec![2, 1, 0, 3, 2, 1, 0, 3]);
        // Tagged ids route by the tag alone: `{order-3}:x` lives where `order-3` does.
        let tagged: Vec<u32> = (0..8)
            .map(|i| Routing::Hash.shard_for(&format!("{{order-{i}}}:payment"), 4))
            .collect();
        assert_eq!(tagged, vec![2, 1, 0, 3, 2, 1, 0, 3]);
        assert_eq!(Routing::Hash.shard_for("pre{order-5}post", 4), 1);
    }

    /// The tag rule itself is tested with the slots (`smdb_protocol::slot`); here, that hash
    /// routing follows it.
    #[test]
    fn hash_routing_follows_the_tag() {
        for n in [1, 2, 3, 8] {
            assert_eq!(
                Routing::Hash.shard_for("{t1}:a", n),
                Routing::Hash.shard_for("{t1}:b", n)
            );
            assert_eq!(
                Routing::Hash.shard_for("{t1}:a", n),
                Routing::Hash.shard_for("t1", n)
            );
        }
    }

    #[test]
    fn slot_routing_is_the_slot_mod_the_shard_count() {
        for id in ["123456789", "foo", "hello", "{o-7}:pay", "é", "x{a}y"] {
            for n in [1, 2, 3, 7, 16] {
                let want = u32::from(slot_of(id)) % n;
                assert_eq!(Routing::Slots.shard_for(id, n), want, "{id} {n}");
                let layout = Layout {
                    routing: Routing::Slots,
                    count: n,
                };
                assert_eq!(layout.shard_of(id), want);
            }
        }
        // Tagged ids share a slot, hence a shard, whatever the count.
        assert_eq!(
            Routing::Slots.shard_for("{o-7}:pay", 5),
            Routing::Slots.shard_for("o-7", 5)
        );
        // The two routings differ (so a data dir must say which made it).
        let differ = (0..64).any(|i| {
            let id = format!("order-{i}");
            Routing::Slots.shard_for(&id, 4) != Routing::Hash.shard_for(&id, 4)
        });
        assert!(differ);
    }

    #[test]
    fn routing_names_round_trip() {
        for r in [Routing::Hash, Routing::Slots] {
            assert_eq!(Routing::parse(r.as_str()), Some(r));
        }
        assert_eq!(Routing::parse("fnv"), None);
        assert_eq!(Routing::default(), Routing::Hash);
    }
}
