//! libFuzzer wrapper: the body is `smdb_fuzz::frame_decoder` (fuzz/src/), which the stable test
//! fuzz/tests/targets.rs also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smdb_fuzz::frame_decoder(data));
