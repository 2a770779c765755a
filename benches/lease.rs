//! The lease check on the commit path (issue 37, docs/ha.md "Self-fencing"): what
//! `ReplState::fenced()` costs a shard before every append and at reply release. With failover
//! off it is one atomic load; with it on, one load plus a CLOCK_BOOTTIME read (vDSO).
//!
//! `cargo bench --bench lease`; figures in benches/RESULTS.md.

use divan::{black_box, Bencher};
use smdb::config::Role;
use smdb::member::ReplState;

fn main() {
    divan::main();
}

/// Failover off: the check is a load and a compare.
#[divan::bench]
fn fenced_failover_off(b: Bencher) {
    let s = ReplState::new(Some(Role::Primary));
    b.bench(|| black_box(&s).fenced());
}

/// Failover on, a lease valid for an hour: the load and the clock read.
#[divan::bench]
fn fenced_lease_valid(b: Bencher) {
    let s = ReplState::new_ha();
    s.set_lease_until(smdb::member::clock::boottime_ns() + 3_600_000_000_000);
    b.bench(|| black_box(&s).fenced());
}

/// Failover on, no lease: fenced at once.
#[divan::bench]
fn fenced_no_lease(b: Bencher) {
    let s = ReplState::new_ha();
    b.bench(|| black_box(&s).fenced());
}

/// The clock read alone.
#[divan::bench]
fn boottime_read() -> u64 {
    smdb::member::clock::boottime_ns()
}
