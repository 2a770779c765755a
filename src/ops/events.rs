//! APPLY_EVENT and GET_HISTORY params.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use shards::engine::{Command, EventCommand, JsonText};
use shards::{ErrorCode, Rejection};

use super::params::{check_id, parse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyParams {
    instance_id: String,
    event: String,
    #[serde(default)]
    payload: Option<Map<String, Value>>,
    #[serde(default)]
    expected_state: Option<String>,
    #[serde(default)]
    expected_wal_offset: Option<u64>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// APPLY_EVENT params as they usually come, read without copying: strings without escapes
/// borrowed, the payload as its raw text. Anything else (an escape, a payload to normalise,
/// any error) is read by `apply_params`, the reference for every command and error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyParamsRef<'a> {
    instance_id: &'a str,
    event: &'a str,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    expected_state: Option<&'a str>,
    #[serde(default)]
    expected_wal_offset: Option<u64>,
    #[serde(borrow, default)]
    idempotency_key: Option<&'a str>,
}

/// APPLY_EVENT params → the borrowed command the write path decides on: the command, and the
/// errors, `apply_command` gives, without its copies where the params allow.
pub fn apply_event_params(raw: Option<&[u8]>) -> Result<EventCommand<'_>, Rejection> {
    if let Some(cmd) = raw.and_then(borrowed_event) {
        return Ok(cmd);
    }
    // `apply_command` only makes APPLY_EVENT commands, which `Command::event` always converts.
    apply_command(raw)?
        .event()
        .map(EventCommand::into_owned)
        .ok_or_else(|| Rejection::new(ErrorCode::InternalError, "APPLY_EVENT params gave no event"))
}

/// The command read borrowed, when every string is free of escapes, the id is valid and the
/// payload text is already compact (what `JsonText::from_map` would write); else None.
fn borrowed_event(raw: &[u8]) -> Option<EventCommand<'_>> {
    let p: ApplyParamsRef<'_> = serde_json::from_slice(raw).ok()?;
    check_id(p.instance_id).ok()?;
    let payload = match p.payload.map(RawValue::get) {
        Some(text) if !JsonText::is_compact_object(text) => return None,
        payload => payload.map(Cow::Borrowed),
    };
    Some(EventCommand {
        instance_id: Cow::Borrowed(p.instance_id),
        event: Cow::Borrowed(p.event),
        payload,
        expected_state: p.expected_state.map(Cow::Borrowed),
        expected_wal_offset: p.expected_wal_offset,
        idempotency_key: p.idempotency_key.map(Cow::Borrowed),
    })
}

/// APPLY_EVENT params → command.
pub fn apply_command(raw: Option<&[u8]>) -> Result<Command, Rejection> {
    let p: ApplyParams = parse(raw)?;
    check_id(&p.instance_id)?;
    Ok(Command::ApplyEvent {
        instance_id: p.instance_id,
        event: p.event,
        payload: p.payload,
        expected_state: p.expected_state,
        expected_wal_offset: p.expected_wal_offset,
        idempotency_key: p.idempotency_key,
    })
}

/// Largest GET_HISTORY page.
pub const HISTORY_LIMIT_MAX: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    #[serde(alias = "instance_id")]
    id: String,
    #[serde(default)]
    from: Option<u64>,
    #[serde(default)]
    limit: Option<usize>,
}

/// GET_HISTORY params: (id, from seq, limit).
pub fn history_query(raw: Option<&[u8]>) -> Result<(String, u64, usize), Rejection> {
    let p: HistoryParams = parse(raw)?;
    check_id(&p.id)?;
    let limit = p
        .limit
        .unwrap_or(HISTORY_LIMIT_MAX)
        .clamp(1, HISTORY_LIMIT_MAX);
    Ok((p.id, p.from.unwrap_or(1).max(1), limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed read gives what the owned one gives (the command with its payload text, or
    /// the same error), whether it borrowed or fell back.
    #[test]
    fn apply_event_params_match_apply_command() {
        let cases: &[&[u8]] = &[
            br#"{"instance_id":"a","event":"go"}"#,
            br#"{"instance_id":"a","event":"go","payload":{"p":"xxx","n":-3}}"#,
            br#"{"instance_id":"a","event":"go","payload":{}}"#,
            br#"{"instance_id":"a","event":"go","payload":null}"#,
            br#"{"event":"go","instance_id":"{t}:1","expected_state":"s","expected_wal_offset":7,"idempotency_key":"k"}"#,
            // Borrowing cannot: escapes, and payloads that are not yet compact.
            br#"{"instance_id":"a\"b","event":"g\u006f","idempotency_key":"k\n"}"#,
            br#"{"instance_id":"a","event":"go","payload":{"b":1, "a":{"z":[1.5]}}}"#,
            br#"{"instance_id":"a","event":"go","payload":{"a":1,"a":2}}"#,
            br#" { "instance_id" : "a" , "event" : "go" , "payload" : { "x" : "y" } } "#,
            // Errors.
            br#"{"instance_id":"a","event":"go","payload":[1]}"#,
            br#"{"instance_id":"a","event":"go","payload":"text"}"#,
            br#"{"instance_id":"","event":"go"}"#,
            br#"{"instance_id":"a"}"#,
            br#"{"instance_id":"a","event":"go","extra":1}"#,
            br#"{"instance_id":"a","event":"go","event":"again"}"#,
            br#"{"instance_id":5,"event":"go"}"#,
            br#"{"instance_id":"a","event":"go","expected_wal_offset":-1}"#,
            br#"{"instance_id":"a","event":"go""#,
            b"[]",
        ];
        for raw in cases.iter().map(|raw| Some(*raw)).chain([None]) {
            let want = apply_command(raw).map(|cmd| cmd.event().map(EventCommand::into_owned));
            let got = apply_event_params(raw).map(|ev| Some(ev.into_owned()));
            assert_eq!(got, want, "{:?}", raw.map(String::from_utf8_lossy));
        }
        let long = format!(r#"{{"instance_id":"{}","event":"go"}}"#, "x".repeat(257));
        let raw = Some(long.as_bytes());
        assert_eq!(
            apply_event_params(raw).unwrap_err(),
            apply_command(raw).unwrap_err()
        );
    }

    #[test]
    fn usual_params_are_borrowed() {
        let raw = br#"{"instance_id":"a","event":"go","payload":{"p":"x"},"idempotency_key":"k"}"#;
        let ev = apply_event_params(Some(raw)).unwrap();
        assert!(matches!(ev.instance_id, Cow::Borrowed("a")));
        assert!(matches!(ev.event, Cow::Borrowed("go")));
        assert!(matches!(ev.payload, Some(Cow::Borrowed(r#"{"p":"x"}"#))));
        assert!(matches!(ev.idempotency_key, Some(Cow::Borrowed("k"))));
    }
}
