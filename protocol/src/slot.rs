//! Hash slots of cluster mode (docs/cluster.md, "Slots"): the routing key of an id (its hash
//! tag, the Redis Cluster convention) and its slot, `CRC16-XMODEM(key) mod 16384`. Shared by
//! the server (`shards::routing`, which re-exports these) and every client that routes by slot.
//!
//! Part of the on-disk format and of the wire contract: neither function may ever change.

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

/// The number of hash slots of cluster mode; a slot is `0..SLOT_COUNT`.
pub const SLOT_COUNT: u16 = 16384;

/// CRC-16/XMODEM of `bytes`: polynomial 0x1021, initial value 0, no reflection, no final
/// xor (Redis Cluster's key hash).
pub fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = match crc & 0x8000 {
                0 => crc << 1,
                _ => (crc << 1) ^ 0x1021,
            };
        }
    }
    crc
}

/// The hash slot of instance `id` (cluster mode): CRC16 of its routing key, mod `SLOT_COUNT`.
pub fn slot_of(id: &str) -> u16 {
    crc16_xmodem(routing_key(id).as_bytes()) % SLOT_COUNT
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    /// docs/cluster.md's vectors (Redis Cluster's): if this fails, slots changed and every
    /// cluster's map and data would disagree with the ids.
    #[test]
    fn slots_are_pinned_to_the_documented_vectors() {
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        let vectors: &[(&str, u16)] = &[
            ("123456789", 12739),
            ("foo", 12182),
            ("hello", 866),
            ("{user1000}.following", 3443),
            ("{user1000}.followers", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("{o-7}", 340),
            ("{o-7}:pay", 340),
            ("o-7", 340),
            ("é", 10180),
        ];
        for &(id, slot) in vectors {
            assert_eq!(slot_of(id), slot, "{id}");
        }
        assert_eq!(routing_key("foo{{bar}}zap"), "{bar");
        assert_eq!(routing_key("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(crc16_xmodem(b""), 0);
    }
}
