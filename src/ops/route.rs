//! The routing id of a request's params, read on the front core: `instance_id`, else `id`.
//!
//! Every routed request (and every op of a BATCH) needs only this one string on the front;
//! the shard parses the params in full. The usual params (an object whose id is a plain
//! string) are read by a byte scan over the top level that steps over the other values
//! (`scan`); anything the scan does not expect (escapes, a duplicate key, an id that is not a
//! string, not an object) goes to serde, which gives the same id or the error. The params are
//! valid JSON here: they are the raw value the envelope (or the batch) parse already checked.

use std::borrow::Cow;

use serde::Deserialize;
use shards::{ErrorCode, Rejection};

use super::params::check_object;
use super::scan::Scanner;

/// The routing id from raw params (absent means `{}`): `instance_id` first, then `id`.
/// `BAD_REQUEST` when neither is there, the params are not an object (`check_object`) or they
/// do not parse.
pub fn route_key(raw: Option<&[u8]>) -> Result<Cow<'_, str>, Rejection> {
    let raw = raw.unwrap_or(b"{}");
    if let Some(id) = scan(raw) {
        return Ok(Cow::Borrowed(id));
    }
    check_object(raw)?;
    let key: RouteKey<'_> = serde_json::from_slice(raw)
        .map_err(|e| Rejection::new(ErrorCode::BadRequest, format!("invalid params: {e}")))?;
    key.instance_id
        .or(key.id)
        .ok_or_else(|| Rejection::new(ErrorCode::BadRequest, "params.id is required"))
}

/// The instance id a routed request names, read leniently (other fields are skipped).
#[derive(Deserialize)]
struct RouteKey<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    instance_id: Option<Cow<'a, str>>,
}

/// The id where `RouteKey` would give it borrowed and without error: a top-level object whose
/// `instance_id` and `id` keys each appear at most once, with escape-free string values, and
/// at least one of them present. None for anything else.
fn scan(raw: &[u8]) -> Option<&str> {
    let mut s = Scanner::new(raw);
    let (mut instance_id, mut id) = (None, None);
    s.object(|key, s| {
        let slot = match key {
            b"instance_id" => &mut instance_id,
            b"id" => &mut id,
            _ => return s.skip_value(),
        };
        match slot {
            Some(_) => None, // a duplicate: serde's error
            None => {
                *slot = Some(s.plain_string()?);
                Some(())
            }
        }
    })?;
    shards::engine::utf8(instance_id.or(id)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_only(raw: &[u8]) -> Result<Option<String>, String> {
        serde_json::from_slice::<RouteKey<'_>>(raw)
            .map(|k| k.instance_id.or(k.id).map(Cow::into_owned))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn route_key_prefers_instance_id_and_skips_other_fields() {
        let raw = br#"{"payload":{"deep":[1,2,{"id":"no"}]},"instance_id":"a\"b"}"#;
        assert_eq!(route_key(Some(raw)).unwrap(), "a\"b");
        assert_eq!(route_key(Some(br#"{"id":"x"}"#)).unwrap(), "x");
        assert_eq!(route_key(None).unwrap_err().code, ErrorCode::BadRequest);
    }

    #[test]
    fn the_scan_agrees_with_serde_wherever_it_answers() {
        let cases: &[&[u8]] = &[
            br#"{"instance_id":"a","event":"go","payload":{"p":"x}]\"{"}}"#,
            br#"{"event":"go","payload":{"a":[1,{"instance_id":"no"}],"b":"]"},"instance_id":"{t}:1"}"#,
            br#" { "id" : "x" , "n" : -1.5e3 , "t" : true , "z" : null } "#,
            br#"{"id":"x","instance_id":"y"}"#,
            br#"{"instance_id":null,"id":"x"}"#,
            br#"{"instance_id":"y","id":5}"#,
            br#"{"instance_id":"y","instance_id":"z"}"#,
            br#"{"instance_id":"a\u0062"}"#,
            br#"{"instance_id":"caf\u00e9","payload":"\\"}"#,
            "{\"instance_id\":\"caf\u{e9}\"}".as_bytes(),
            br#"{"payload":"\\","id":"q"}"#,
            br#"{"event":"go"}"#,
            br#"{}"#,
            br#"[]"#,
            br#""x""#,
            br#"{"id":""}"#,
        ];
        for raw in cases {
            let want = serde_only(raw);
            if let Some(id) = scan(raw) {
                assert_eq!(
                    Ok(Some(id.to_string())),
                    want,
                    "{}",
                    String::from_utf8_lossy(raw)
                );
            }
            let got = route_key(Some(raw))
                .map(|c| Some(c.into_owned()))
                .map_err(|e| e.message);
            match &want {
                Ok(Some(_)) => assert_eq!(got, want, "{}", String::from_utf8_lossy(raw)),
                _ => assert!(got.is_err(), "{}", String::from_utf8_lossy(raw)),
            }
        }
        // The usual params take the scan.
        assert_eq!(scan(cases[0]), Some("a"));
        assert_eq!(scan(cases[1]), Some("{t}:1"));
        assert_eq!(scan(cases[2]), Some("x"));
        assert_eq!(scan(cases[3]), Some("y"));
    }

    #[test]
    fn the_scan_leaves_to_serde_what_it_does_not_expect() {
        for raw in [
            &br#"{"instance_id":null,"id":"x"}"#[..],
            br#"{"instance_id":"y","id":5}"#,
            br#"{"instance_id":"y","instance_id":"z"}"#,
            br#"{"instance_id":"a\u0062"}"#,
            br#"{"event":"go"}"#,
            br#"[]"#,
        ] {
            assert_eq!(scan(raw), None, "{}", String::from_utf8_lossy(raw));
        }
    }

    proptest::proptest! {
        #[test]
        fn the_scan_agrees_with_serde_on_random_params(text in crate::ops::scan::arb::params_text()) {
            let raw = text.as_bytes();
            if let Some(id) = scan(raw) {
                proptest::prop_assert_eq!(Ok(Some(id.to_string())), serde_only(raw), "{}", text);
            }
        }
    }

    /// The property above is not vacuous: the random texts take both readings.
    #[test]
    fn random_texts_reach_the_scan_and_serde_both() {
        let arb = crate::ops::scan::arb::params_text();
        crate::ops::scan::arb::assert_both_readings(arb, |raw| scan(raw).is_some());
    }
}
