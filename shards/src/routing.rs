//! The shard routing function. It decides which shard owns an instance id.
//!
//! This function is part of the on-disk format: a data directory written with one routing
//! function cannot be read with another. It must never change between versions. It is 64-bit
//! FNV-1a over the UTF-8 bytes of the id, reduced modulo the shard count.

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

/// The shard (0-based) that owns instance `id` among `shard_count` shards.
pub fn shard_for(id: &str, shard_count: u32) -> u32 {
    debug_assert!(shard_count > 0, "shard_count must be positive");
    (fnv1a64(id.as_bytes()) % u64::from(shard_count.max(1))) as u32
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
    }
}
