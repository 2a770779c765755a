//! libFuzzer wrapper: the body is `smdb_fuzz::proxy_header` (fuzz/src/), which the stable test
//! fuzz/tests/targets.rs also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smdb_fuzz::proxy_header(data));
