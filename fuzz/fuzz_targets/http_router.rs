//! libFuzzer wrapper: the body is `smdb_fuzz::http_router` (fuzz/src/http.rs), which the stable test
//! fuzz/tests/targets.rs also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smdb_fuzz::http_router(data));
