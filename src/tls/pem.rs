//! PEM files to rustls types, with errors that name the config key (or command-line flag) the
//! path came from, e.g. `tls.key_path: no private key in /x.pem`. The loaders live in
//! `smdb-client` (the client needs them too; the server depends on it for the frame codec).

pub use smdb_protocol::tls::{certs, private_key, roots};
