//! The HTTP request parser and the path router (src/http): their checks live beside the
//! parser in `smdb::front::http::fuzz` (no panic, bounded memory, the same error for the same bytes);
//! these are the targets' entry points for both drivers.

/// Arbitrary bytes as an HTTP request: head, framing, chunked body, target, route and params.
pub fn http_request(data: &[u8]) {
    smdb::front::http::fuzz::request(data);
}

/// Arbitrary bytes as a method, a path and a body through the router and the params builder.
pub fn http_router(data: &[u8]) {
    smdb::front::http::fuzz::router(data);
}
