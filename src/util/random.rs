//! 64 random bits from the kernel's random source, for values that must differ between
//! processes and not be guessed: an HA member's instance id, a data dir's index key.

use std::hash::BuildHasher;

/// 64 bits from getrandom(2). It never fails for 8 bytes once the pool is initialised; should
/// it, std's randomly keyed hasher over the pid and the clock still gives every process its own
/// value.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid writable buffer of the given length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    match n == b.len() as isize {
        true => u64::from_le_bytes(b),
        false => std::collections::hash_map::RandomState::new()
            .hash_one((std::process::id(), std::time::SystemTime::now())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_draws_differ() {
        assert_ne!(super::random_u64(), super::random_u64());
    }
}
