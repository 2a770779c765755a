//! The shard routing function. It decides which shard owns an instance id.
//!
//! This function is part of the on-disk format: a data directory written with one routing
//! function cannot be read with another. It must never change between versions. It is 64-bit
//! FNV-1a over the UTF-8 bytes of the routing key, reduced modulo the shard count.
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

/// The bytes of `id` that choose its shard: the hash tag if it has a non-empty one, else the
/// whole id.
pub fn routing_key(id: &str) -> &str {
    if let Some(open) = id.find('{') {
        let rest = &id[open + 1..];
        if let Some(close) = rest.find('}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    id
}

/// The shard (0-based) that owns instance `id` among `shard_count` shards.
pub fn shard_for(id: &str, shard_count: u32) -> u32 {
    debug_assert!(shard_count > 0, "shard_count must be positive");
    if shard_count <= 1 {
        return 0; // one shard owns every id: no need to hash it
    }
    (fnv1a64(routing_key(id).as_bytes()) % u64::from(shard_count)) as u32
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
        assert_eq!(shard_for("order-1", 1), 0);
        let spread: Vec<u32> = (0..8)
            .map(|i| shard_for(&format!("order-{i}"), 4))
            .collect();
        assert_eq!(spread, vec![2, 1, 0, 3, 2, 1, 0, 3]);
        // Tagged ids route by the tag alone: `{order-3}:x` lives where `order-3` does.
        let tagged: Vec<u32> = (0..8)
            .map(|i| shard_for(&format!("{{order-{i}}}:payment"), 4))
            .collect();
        assert_eq!(tagged, vec![2, 1, 0, 3, 2, 1, 0, 3]);
        assert_eq!(shard_for("pre{order-5}post", 4), 1);
    }

    #[test]
    fn hash_tag_rules_follow_redis_cluster() {
        assert_eq!(routing_key("plain"), "plain");
        assert_eq!(routing_key("{a}"), "a");
        assert_eq!(routing_key("{a}:b"), "a");
        assert_eq!(routing_key("x{a}y{b}"), "a");
        // The first `}` after the first `{` closes the tag.
        assert_eq!(routing_key("{a{b}c}"), "a{b");
        // An empty tag, or no closing brace: the whole id.
        assert_eq!(routing_key("{}a"), "{}a");
        assert_eq!(routing_key("{}{a}"), "{}{a}");
        assert_eq!(routing_key("{abc"), "{abc");
        assert_eq!(routing_key("abc}"), "abc}");
        assert_eq!(routing_key("}{a}"), "a");
        assert_eq!(routing_key("{é}x"), "é");
        for n in [1, 2, 3, 8] {
            assert_eq!(shard_for("{t1}:a", n), shard_for("{t1}:b", n));
            assert_eq!(shard_for("{t1}:a", n), shard_for("t1", n));
        }
    }
}
