//! The AUTH path: arbitrary request payloads go through the envelope parser, the session's
//! authorization check and, for AUTH (or any payload used as AUTH params), the token check.
//! Nothing may panic, and nothing but the one configured token may ever authenticate.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use smdb::auth::table::{hex, sha256};
use smdb::auth::{AuthOutcome, SessionAuth, Table};
use smdb::config::Config;
use smdb::protocol::{parse_request, Op};

const TOKEN: &str = "fuzz-token";

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let toml = format!(
            "[auth]\nrequired = true\n[[auth.tokens]]\nname = \"r\"\nsha256 = \"{}\"\n\
             scopes = [\"read\"]\n",
            hex(&sha256(TOKEN.as_bytes()))
        );
        Table::from_config(&Config::from_toml(&toml).expect("fuzz config")).expect("table")
    })
}

fn holds_the_token(params: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(params)
        .map(|v| v["method"] == "bearer" && v["token"] == TOKEN)
        .unwrap_or(false)
}

fn auth(session: &mut SessionAuth, params: &[u8]) {
    if let AuthOutcome::Granted(_) = session.authenticate(table(), Some(params)) {
        assert!(holds_the_token(params), "granted without the token");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut session = SessionAuth::new(true);
    auth(&mut session, data);
    if let Ok(req) = parse_request(data) {
        let params = req.params.map(|p| p.get().as_bytes()).unwrap_or(b"{}");
        if let Some(op) = Op::parse(&req.op) {
            let allowed = session.check(op).is_ok();
            if op == Op::Auth {
                auth(&mut session, params);
            }
            let granted_read = session.may_read();
            assert!(!allowed || granted_read || smdb::auth::required_scope(op).is_none());
        }
    }
});
