//! The token table: the configured SHA-256 digests with their names and scopes, built from the
//! `auth` (and `replication.token_hashes`) sections, and the bearer check against it.
//!
//! The server never holds a token in plaintext longer than one AUTH: the presented token is
//! hashed, compared in constant time with every digest, and wiped. No message built here
//! quotes the params, because a malformed AUTH may carry the secret in any field.

use std::sync::Arc;

use ring::digest::{digest, SHA256};
use serde::Deserialize;
use shards::{ErrorCode, Rejection};

use super::scope::{Scope, Scopes};
use crate::config::Config;

/// Longest bearer token accepted, in bytes: hashing is linear in the token, and a frame may be
/// 16 MiB; 4 KiB is far above any generated token (a 32-byte random token is 44 in base64).
pub const TOKEN_BYTES_MAX: usize = 4096;

/// Bytes of a SHA-256 digest.
pub const DIGEST_BYTES: usize = 32;

/// What a successful AUTH grants a session.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The token's configured name (`auth.tokens[].name`, or the key of an unnamed digest).
    pub name: Arc<str>,
    pub scopes: Scopes,
}

struct Token {
    grant: Grant,
    digest: [u8; DIGEST_BYTES],
}

/// Every accepted token, and whether a session must present one.
pub struct Table {
    pub required: bool,
    tokens: Vec<Token>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&Grant> = self.tokens.iter().map(|t| &t.grant).collect();
        f.debug_struct("Table")
            .field("required", &self.required)
            .field("tokens", &names)
            .finish()
    }
}

impl Table {
    /// Builds the table from a parsed config; the error names the offending key.
    pub fn from_config(c: &Config) -> Result<Table, String> {
        let mut tokens = Vec::new();
        for (i, hex) in c.auth.token_hashes.iter().enumerate() {
            let key = format!("auth.token_hashes[{i}]");
            tokens.push(token(&key, key.clone(), hex, Scopes::ALL, &tokens)?);
        }
        for (i, t) in c.auth.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            if t.name.is_empty() || tokens.iter().any(|o| *o.grant.name == *t.name) {
                return Err(format!("{key}.name: must be non-empty and unique"));
            }
            let scopes = parse_scopes(&key, &t.scopes)?;
            let name = t.name.clone();
            tokens.push(token(
                &format!("{key}.sha256"),
                name,
                &t.sha256,
                scopes,
                &tokens,
            )?);
        }
        for (i, hex) in c.replication.token_hashes.iter().enumerate() {
            let key = format!("replication.token_hashes[{i}]");
            let only = Scopes::default().with(Scope::Replicate);
            tokens.push(token(&key, key.clone(), hex, only, &tokens)?);
        }
        if c.auth.required && tokens.is_empty() {
            return Err("auth.required: true, but no token is configured \
                        (auth.token_hashes or auth.tokens)"
                .into());
        }
        Ok(Table {
            required: c.auth.required,
            tokens,
        })
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Checks AUTH params `{method: "bearer", token}` against every configured digest.
    pub fn authenticate(&self, params: Option<&[u8]>) -> Result<Grant, Rejection> {
        let p: AuthParams = serde_json::from_slice(params.unwrap_or(b"{}")).map_err(|_| {
            Rejection::new(
                ErrorCode::BadRequest,
                "AUTH params must be {\"method\": \"bearer\", \"token\": STRING}",
            )
        })?;
        if p.method != "bearer" {
            return Err(Rejection::new(
                ErrorCode::AuthFailed,
                "unsupported AUTH method; this server accepts \"bearer\"",
            )
            .with("supported", vec!["bearer"]));
        }
        self.verify(p.token.0.as_bytes())
    }

    /// Checks a presented bearer token (AUTH's, or HTTP's `Authorization: Bearer`) against
    /// every configured digest. The caller wipes its copy; nothing here keeps or logs it.
    pub fn verify(&self, token: &[u8]) -> Result<Grant, Rejection> {
        self.verify_digest(&Self::digest(token).ok_or_else(failed)?)
    }

    /// The digest a presented token is compared by (`None`: longer than `TOKEN_BYTES_MAX`).
    /// An HTTP event stream keeps it to check its token again after a reload.
    pub fn digest(token: &[u8]) -> Option<[u8; DIGEST_BYTES]> {
        (token.len() <= TOKEN_BYTES_MAX).then(|| sha256(token))
    }

    /// `verify` for a token already hashed by `digest`.
    pub fn verify_digest(&self, presented: &[u8; DIGEST_BYTES]) -> Result<Grant, Rejection> {
        // Every digest is compared, whatever matched before: the time taken does not depend on
        // which token (if any) the presented one is.
        let mut found = None;
        for t in &self.tokens {
            if equal_in_constant_time(presented, &t.digest) && found.is_none() {
                found = Some(&t.grant);
            }
        }
        found.cloned().ok_or_else(failed)
    }
}

fn failed() -> Rejection {
    Rejection::new(ErrorCode::AuthFailed, "authentication failed")
}

/// SHA-256 of `bytes`: what `auth.token_hashes` and `smdb-cli hash-token` hold.
pub fn sha256(bytes: &[u8]) -> [u8; DIGEST_BYTES] {
    let mut out = [0u8; DIGEST_BYTES];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

/// Lower-case hex of a digest.
pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two digests touching every byte whatever differs (no early exit).
fn equal_in_constant_time(a: &[u8; DIGEST_BYTES], b: &[u8; DIGEST_BYTES]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

fn token(
    key: &str,
    name: String,
    hex: &str,
    scopes: Scopes,
    earlier: &[Token],
) -> Result<Token, String> {
    let digest =
        parse_digest(hex).ok_or_else(|| format!("{key}: must be 64 hex digits (SHA-256)"))?;
    if earlier.iter().any(|t| t.digest == digest) {
        return Err(format!("{key}: the same digest is configured twice"));
    }
    Ok(Token {
        grant: Grant {
            name: name.into(),
            scopes,
        },
        digest,
    })
}

fn parse_digest(hex: &str) -> Option<[u8; DIGEST_BYTES]> {
    let b = hex.as_bytes();
    if b.len() != 2 * DIGEST_BYTES {
        return None;
    }
    let mut out = [0u8; DIGEST_BYTES];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let s = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

fn parse_scopes(key: &str, names: &[String]) -> Result<Scopes, String> {
    if names.is_empty() {
        return Err(format!("{key}.scopes: must name at least one scope"));
    }
    names.iter().try_fold(Scopes::default(), |acc, n| {
        Scope::parse(n).map(|s| acc.with(s)).ok_or_else(|| {
            format!("{key}.scopes: unknown scope {n:?} (read, write, admin, replicate)")
        })
    })
}

#[derive(Deserialize)]
struct AuthParams {
    method: String,
    token: Secret,
}

/// A presented token: never printed, wiped when dropped.
#[derive(Deserialize)]
#[serde(transparent)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // SAFETY: zero bytes are valid UTF-8, so the String stays well-formed.
        unsafe { self.0.as_bytes_mut() }.fill(0);
        std::hint::black_box(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-a";

    fn table(extra: &str) -> Result<Table, String> {
        let cfg = format!(
            "[auth]\nrequired = true\ntoken_hashes = [\"{}\"]\n{extra}",
            hex(&sha256(A.as_bytes()))
        );
        let c: Config = toml::from_str(&cfg).map_err(|e| e.to_string())?;
        Table::from_config(&c)
    }

    fn auth(t: &Table, params: &str) -> Result<Grant, Rejection> {
        t.authenticate(Some(params.as_bytes()))
    }

    #[test]
    fn digest_matches_the_sha256_test_vector() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_configured_token_is_granted_every_scope() {
        let t = table("").unwrap();
        let g = auth(&t, r#"{"method":"bearer","token":"token-a"}"#).unwrap();
        assert_eq!(g.scopes, Scopes::ALL);
        assert_eq!(&*g.name, "auth.token_hashes[0]");
    }

    #[test]
    fn named_tokens_carry_their_scopes() {
        let extra = format!(
            "[[auth.tokens]]\nname = \"dash\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            hex(&sha256(b"dash-secret"))
        );
        let t = table(&extra).unwrap();
        let g = auth(&t, r#"{"method":"bearer","token":"dash-secret"}"#).unwrap();
        assert_eq!((&*g.name, g.scopes.names()), ("dash", vec!["read"]));
    }

    #[test]
    fn wrong_tokens_and_methods_fail_without_quoting_the_params() {
        let t = table("").unwrap();
        for p in [
            r#"{"method":"bearer","token":"token-b"}"#,
            r#"{"method":"basic","token":"token-a"}"#,
        ] {
            let e = auth(&t, p).unwrap_err();
            assert_eq!(e.code, ErrorCode::AuthFailed);
            assert!(!e.message.contains("token-"), "{}", e.message);
        }
        let long = format!(r#"{{"method":"bearer","token":"{}"}}"#, "x".repeat(5000));
        assert_eq!(auth(&t, &long).unwrap_err().code, ErrorCode::AuthFailed);
        for p in [
            r#"{"token":"sekrit"}"#,
            r#"{"method":"bearer","token":123456}"#,
            "[1]",
        ] {
            let e = auth(&t, p).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest);
            assert!(!e.message.contains("sekrit") && !e.message.contains("123456"));
        }
    }

    #[test]
    fn bad_config_names_the_key() {
        let bad = |extra: &str| table(extra).unwrap_err();
        let scopes = "[[auth.tokens]]\nname = \"x\"\nsha256 = \"".to_string()
            + &"ab".repeat(32)
            + "\"\nscopes = [\"reed\"]\n";
        assert!(
            bad(&scopes).starts_with("auth.tokens[0].scopes"),
            "{}",
            bad(&scopes)
        );
        let dup = format!(
            "[[auth.tokens]]\nname = \"x\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            hex(&sha256(A.as_bytes()))
        );
        assert!(
            bad(&dup).starts_with("auth.tokens[0].sha256"),
            "{}",
            bad(&dup)
        );
        let short = "[[auth.tokens]]\nname = \"x\"\nsha256 = \"abc\"\nscopes = [\"read\"]\n";
        assert!(bad(short).contains("64 hex digits"));
        let c: Config = toml::from_str("[auth]\nrequired = true").unwrap();
        assert!(Table::from_config(&c)
            .unwrap_err()
            .starts_with("auth.required"));
    }
}
