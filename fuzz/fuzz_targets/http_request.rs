//! Arbitrary bytes as an HTTP request: head, framing, chunked body, target, route and params
//! (`smdb::http::fuzz::request` holds the checks; its property tests run them on stable).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| smdb::http::fuzz::request(data));
