//! The AUTH path: the envelope parser, the session's authorization check and the token check
//! (`smdb::auth`) on arbitrary request payloads.

use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;
use smdb::auth::table::{hex, sha256};
use smdb::auth::{required_scope, AuthOutcome, SessionAuth, Table};
use smdb::config::Config;
use smdb::protocol::{parse_request, Op};

/// The one token the body's table knows (scope `read`).
pub const AUTH_TOKEN: &str = "fuzz-token";

/// A table with `AUTH_TOKEN` as its only token, built once.
fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let toml = format!(
            "[auth]\nrequired = true\n[[auth.tokens]]\nname = \"r\"\nsha256 = \"{}\"\n\
             scopes = [\"read\"]\n",
            hex(&sha256(AUTH_TOKEN.as_bytes()))
        );
        let table = (Config::from_toml(&toml).map_err(|e| e.to_string()))
            .and_then(|cfg| Table::from_config(&cfg));
        table.unwrap_or_else(|e| panic!("harness: the fuzz auth config is refused: {e}"))
    })
}

/// The two members of AUTH params that decide a grant, read leniently: other members are
/// skipped unread, as the server skips them (serde checks neither their UTF-8 nor their
/// numbers' range there, so such bytes in them cannot be what made a grant wrong).
#[derive(Deserialize)]
struct Claimed {
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    token: Option<Value>,
}

/// Whether `params` name the bearer method and the token (escaped or not).
fn holds_the_token(params: &[u8]) -> bool {
    serde_json::from_slice::<Claimed>(params).is_ok_and(|c| {
        c.method.is_some_and(|m| m == "bearer") && c.token.is_some_and(|t| t == AUTH_TOKEN)
    })
}

fn authenticate(session: &mut SessionAuth, params: &[u8]) {
    if let AuthOutcome::Granted(_) = session.authenticate(table(), Some(params)) {
        assert!(holds_the_token(params), "granted without the token");
    }
}

/// `data` as AUTH params, then as a request payload whose op is checked against the session
/// (and, for AUTH, authenticated with its params). Nothing panics, nothing but the configured
/// token ever authenticates, and an op needing a scope passes the check only once the session
/// holds the read grant (the only one the token gives).
pub fn auth(data: &[u8]) {
    let mut session = SessionAuth::new(true);
    authenticate(&mut session, data);
    let Ok(req) = parse_request(data) else {
        return;
    };
    let params = req.params.map(|p| p.get().as_bytes()).unwrap_or(b"{}");
    let Some(op) = Op::parse(&req.op) else {
        return;
    };
    let allowed = session.check(op).is_ok();
    if op == Op::Auth {
        authenticate(&mut session, params);
    }
    assert!(!allowed || session.may_read() || required_scope(op).is_none());
}
