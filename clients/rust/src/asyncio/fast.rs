//! The one-pass read of the usual APPLY_EVENT response, for the async reader.
//!
//! The general read (`message::Received::parse`) scans a response twice: once over the whole
//! envelope to find the raw text of `result` (copied out), then again when the caller decodes
//! that text into its typed result. The server writes every successful response as
//! `{"type":"response","id":"ID","status":"ok","result":RESULT}` (compact, in that order), so
//! for a call that expects an `Applied` the reader matches that envelope byte for byte and
//! reads `RESULT` straight into `Applied` with a byte scanner (`scan`). Anything else (an
//! error, another member order in the envelope, whitespace, an id that is not plain digits, a
//! result that is not a well-formed `Applied`, a member name with an escape, bytes after the
//! envelope) returns `None`, and the general read takes the payload as before; so this path
//! only ever gives what the general read followed by the caller's decode gives.

use super::scan::Scan;
use crate::ops::{Applied, Extra};

/// What opens a successful response, up to the digits of its id.
const HEAD: &[u8] = br#"{"type":"response","id":""#;
/// What follows the id, up to the result.
const AFTER_ID: &[u8] = br#"","status":"ok","result":"#;

/// The id of a successful response in the server's compact form, and where its result starts.
/// Only an id in the client's own form (decimal digits without a leading zero, within `u64`)
/// is taken, so that it is also the id's text in any error message; any other is left to the
/// general read.
pub(crate) fn ok_head(payload: &[u8]) -> Option<(u64, usize)> {
    payload.strip_prefix(HEAD)?;
    let mut s = Scan::new(payload, HEAD.len());
    let id = s.uint()?;
    payload[s.at..].strip_prefix(AFTER_ID)?;
    Some((id, s.at + AFTER_ID.len()))
}

/// The `Applied` of a payload whose result starts at `at` (from `ok_head`), when the result
/// is an object the scanner reads whole (see `scan`), holding each member `Applied` needs
/// exactly once with a value of its type, and the envelope's closing brace is the payload's
/// last byte. Members it does not name go to `extra`, as the serde visitor puts them.
pub(crate) fn applied(payload: &[u8], at: usize) -> Option<Applied> {
    let mut s = Scan::new(payload, at);
    s.require(b'{')?;
    let (mut instance_id, mut from_state, mut to_state) = (None, None, None);
    let (mut context, mut wal_offset, mut applied) = (None, None, None);
    let mut extra = Extra::new();
    loop {
        match member(&mut s)? {
            Member::InstanceId => once(&mut instance_id, s.string()?)?,
            Member::FromState => once(&mut from_state, s.string()?)?,
            Member::ToState => once(&mut to_state, s.string()?)?,
            Member::Context => once(&mut context, s.value()?)?,
            Member::WalOffset => once(&mut wal_offset, s.uint()?)?,
            Member::Applied => once(&mut applied, s.boolean()?)?,
            Member::Other(name) => {
                let name = std::str::from_utf8(name).ok()?.to_owned();
                extra.insert(name, s.value()?);
            }
        }
        match s.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    s.require(b'}')?;
    if !s.at_end() {
        return None;
    }
    Some(Applied {
        instance_id: instance_id?,
        from_state: from_state?,
        to_state: to_state?,
        context: context?,
        wal_offset: wal_offset?,
        applied: applied?,
        extra,
    })
}

/// A member name of an APPLY_EVENT result.
enum Member<'a> {
    InstanceId,
    FromState,
    ToState,
    Context,
    WalOffset,
    Applied,
    /// Any other name, without escapes, as its bytes.
    Other(&'a [u8]),
}

/// The name of the next member and its colon. A known name is matched as a whole literal,
/// quotes and colon included (so it cannot be a prefix of a longer name, nor escaped).
fn member<'a>(s: &mut Scan<'a>) -> Option<Member<'a>> {
    let (literal, known): (&[u8], _) = match s.peek(1) {
        Some(b'i') => (br#""instance_id":"#, Member::InstanceId),
        Some(b'f') => (br#""from_state":"#, Member::FromState),
        Some(b't') => (br#""to_state":"#, Member::ToState),
        Some(b'c') => (br#""context":"#, Member::Context),
        Some(b'w') => (br#""wal_offset":"#, Member::WalOffset),
        Some(b'a') => (br#""applied":"#, Member::Applied),
        _ => (b"", Member::Other(b"")),
    };
    if !literal.is_empty() && s.eat_literal(literal) {
        return Some(known);
    }
    let name = s.plain_bytes()?;
    s.require(b':')?;
    Some(Member::Other(name))
}

/// Fills `slot`; `None` when it was filled already (serde refuses a repeated member).
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    slot.replace(v).is_none().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asyncio::scan::tests::arbitrary_value;
    use crate::message::{Incoming, Received};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// What the general read followed by the caller's decode gives for `payload`: the routing
    /// id and the decoded `Applied`, or `None` when that is not a successful, decodable
    /// response (a protocol error, a server error, or a result that does not decode).
    fn general(payload: &[u8]) -> Option<(u64, Applied)> {
        let Ok(Received::Response { id, result }) = Received::parse(payload) else {
            return None;
        };
        let id = id?.parse::<u64>().ok()?;
        let a = crate::ops::decode_raw::<Applied>("APPLY_EVENT", &result.ok()?).ok()?;
        Some((id, a))
    }

    fn fast(payload: &[u8]) -> Option<(u64, Applied)> {
        let (id, at) = ok_head(payload)?;
        Some((id, applied(payload, at)?))
    }

    const USUAL: &str = r#"{"type":"response","id":"41","status":"ok","result":{"applied":true,"context":{"a":1,"p":"xx"},"from_state":"s","instance_id":"i1","to_state":"t","wal_offset":326251}}"#;

    #[test]
    fn the_usual_response_is_read_in_one_pass() {
        let (id, a) = fast(USUAL.as_bytes()).expect("the fast path takes it");
        assert_eq!(id, 41);
        assert_eq!(
            (
                a.instance_id.as_str(),
                a.from_state.as_str(),
                a.to_state.as_str()
            ),
            ("i1", "s", "t")
        );
        assert_eq!((a.wal_offset, a.applied), (326251, true));
        assert_eq!(a.context, json!({"a": 1, "p": "xx"}));
        assert!(a.extra.is_empty());
        assert_eq!(Some((id, a)), general(USUAL.as_bytes()));
    }

    #[test]
    fn a_repeated_unknown_member_keeps_its_last_value_as_serde_does() {
        let p = USUAL.replace(r#""applied":true,"#, r#""x":1,"applied":true,"x":[2],"#);
        let (_, a) = fast(p.as_bytes()).expect("taken");
        assert_eq!(a.extra["x"], json!([2]));
        assert_eq!(Some((41, a)), general(p.as_bytes()));
    }

    /// Payloads the fast path must leave to the general read (which may accept them or not).
    #[test]
    fn anything_unusual_is_left_to_the_general_read() {
        let usual = USUAL;
        let cases = [
            usual.replace(r#""status":"ok""#, r#""status":"error""#),
            usual.replace(r#""id":"41""#, r#""id":41"#),
            usual.replace(r#""id":"41""#, r#""id":"""#),
            usual.replace(r#""id":"41""#, r#""id":"4a""#),
            usual.replace(r#""id":"41""#, r#""id":"18446744073709551616""#),
            usual.replace(r#"{"type""#, r#"{ "type""#),
            usual.replace(r#""result":{"#, r#""result": {"#),
            format!("{usual} "),
            format!("{},\"id\":\"42\"}}", &usual[..usual.len() - 1]),
            usual[..usual.len() - 1].to_string(),
            usual.replace(r#""wal_offset":326251"#, r#""wal_offset":-1"#),
            usual.replace(r#""applied":true,"#, ""),
            usual
                .replace(r#""result":{"#, r#""result":[{"#)
                .replace("}}", "}]}"),
        ];
        for c in &cases {
            assert_eq!(fast(c.as_bytes()), None, "{c}");
        }
    }

    #[test]
    fn ids_route_as_the_general_read_routes_them() {
        for (text, want) in [("0", 0), ("7", 7), ("18446744073709551615", u64::MAX)] {
            let p = USUAL.replace(r#""id":"41""#, &format!(r#""id":"{text}""#));
            assert_eq!(fast(p.as_bytes()).map(|(id, _)| id), Some(want));
            assert_eq!(fast(p.as_bytes()), general(p.as_bytes()));
        }
        // Routed to request 7 by the general read too, but written otherwise: left to it.
        let p = USUAL.replace(r#""id":"41""#, r#""id":"007""#);
        assert_eq!(fast(p.as_bytes()), None);
    }

    /// One member of a result: a known one (sometimes of the wrong type) or an unknown one.
    fn member() -> impl Strategy<Value = (String, Value)> {
        let name = prop_oneof![
            Just("instance_id".to_string()),
            Just("from_state".to_string()),
            Just("to_state".to_string()),
            Just("context".to_string()),
            Just("wal_offset".to_string()),
            Just("applied".to_string()),
            "[a-z_]{1,8}",
            // Few names: unknown members repeat.
            "[xy]",
        ];
        (name, arbitrary_value())
    }

    /// A result of the usual shape with random values, members dropped, repeated, added,
    /// reordered.
    fn result_text() -> impl Strategy<Value = String> {
        let usual = (
            "[a-z0-9\"\\\\é-]{0,10}",
            "[a-z\\\\]{1,4}",
            "[a-z]{1,4}",
            arbitrary_value(),
            any::<u64>(),
            any::<bool>(),
        );
        (usual, prop::collection::vec(member(), 0..3), any::<u64>()).prop_map(
            |((i, f, t, c, w, a), more, shuffle)| {
                let mut members = vec![
                    ("applied".to_string(), Value::from(a)),
                    ("context".to_string(), c),
                    ("from_state".to_string(), Value::from(f)),
                    ("instance_id".to_string(), Value::from(i)),
                    ("to_state".to_string(), Value::from(t)),
                    ("wal_offset".to_string(), Value::from(w)),
                ];
                members.extend(more);
                let n = members.len();
                if shuffle % 3 == 0 {
                    members.rotate_left((shuffle / 3) as usize % n);
                }
                if shuffle % 5 == 0 {
                    members.remove((shuffle / 5) as usize % n);
                }
                let body: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
                    .collect();
                format!("{{{}}}", body.join(","))
            },
        )
    }

    proptest! {
        /// On responses of the server's shape with random results, the fast path gives what
        /// the general read and the caller's decode give, and takes every one that decodes.
        #[test]
        fn the_fast_path_agrees_with_the_general_read(
            id in any::<u64>(),
            result in result_text(),
        ) {
            let p = format!(r#"{{"type":"response","id":"{id}","status":"ok","result":{result}}}"#);
            let want = general(p.as_bytes());
            let got = fast(p.as_bytes());
            if got.is_none() && p.contains('$') {
                // A `$` member name inside a value is left to serde (see `scan`).
                return Ok(());
            }
            prop_assert_eq!(got, want);
        }

        /// On arbitrary bytes around the usual response (cut, altered, extended), the fast
        /// path never takes what the general read would not give the same way.
        #[test]
        fn the_fast_path_never_disagrees_on_damaged_input(
            cut in 0..USUAL.len() + 1,
            at in 0..USUAL.len(),
            byte in any::<u8>(),
            tail in "[ ,}\"a-z0-9:]{0,6}",
        ) {
            let mut p = USUAL.as_bytes()[..cut].to_vec();
            if at < p.len() {
                p[at] = byte;
            }
            p.extend_from_slice(tail.as_bytes());
            if let Some(got) = fast(&p) {
                prop_assert_eq!(Some(got), general(&p));
            }
        }
    }

    #[test]
    fn incoming_sees_the_same_envelope() {
        // The general read and the envelope read agree on the usual response (so the fast
        // path, which agrees with the general read, agrees with both).
        let Ok(Incoming::Response { id, .. }) = Incoming::parse(USUAL.as_bytes()) else {
            panic!("not a response");
        };
        assert_eq!(id.as_deref(), Some("41"));
    }
}
