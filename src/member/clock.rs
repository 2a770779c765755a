//! CLOCK_BOOTTIME in nanoseconds: monotonic, and it keeps counting through a host suspend, so a
//! lease deadline measured on it cannot be outlived by a sleeping primary (docs/ha.md,
//! "Self-fencing").

/// Nanoseconds on CLOCK_BOOTTIME.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // CLOCK_BOOTTIME exists on every Linux glommio runs on (5.8+); should it fail, the
        // answer "the end of time" fences a primary rather than trusting an unknown clock.
        return u64::MAX - 1;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn boottime_moves_forward() {
        let a = super::boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::boottime_ns();
        assert!(b >= a + 2_000_000, "{a} then {b}");
    }
}
