//! Feeds arbitrary payloads to the request envelope parser and the params parsers of every
//! op: they must return a value or a BAD_REQUEST, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smdb::ops;
use smdb::protocol::parse_request;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = parse_request(data) {
        let params = req.params.map(|p| p.get().as_bytes());
        let _ = ops::params::route_key(params);
        let _ = ops::instances::create_command(params);
        let _ = ops::instances::list_query(params);
        let _ = ops::events::apply_command(params);
        let _ = ops::events::history_query(params);
        let _ = ops::machines::put_command(params);
    }
});
