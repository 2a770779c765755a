//! Auth tokens in a test server's config (docs/auth.md): `[[auth.tokens]]` entries, each
//! stored as the SHA-256 of its secret.

use smdb::auth::table::{hex, sha256};

/// The scopes of an administrator's token.
pub const ALL_SCOPES: &[&str] = &["read", "write", "admin"];

/// A `[[auth.tokens]]` entry: token `name`, whose secret is `secret`, with `scopes`.
pub fn token(name: &str, secret: &str, scopes: &[&str]) -> String {
    format!(
        "[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nscopes = {scopes:?}\n",
        hex(&sha256(secret.as_bytes()))
    )
}

/// `[auth] required = true` with `tokens` (entries made by `token`).
pub fn required(tokens: &[String]) -> String {
    format!("[auth]\nrequired = true\n{}", tokens.concat())
}

/// The HTTP listener on, and `required(tokens)`.
pub fn http_required(tokens: &[String]) -> String {
    format!("[http]\nenabled = true\n{}", required(tokens))
}
