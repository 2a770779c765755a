//! Arbitrary bytes as a method, a path and a body through the router and the params builder
//! (`smdb::http::fuzz::router` holds the checks; its property tests run them on stable).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| smdb::http::fuzz::router(data));
