//! APPLY_EVENT and GET_HISTORY params.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::{Map, Value};
use shards::engine::{Command, EventCommand};
use shards::{ErrorCode, Rejection};

use super::params::{check_id, parse};
use super::scan::Scanner;

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

/// APPLY_EVENT params → the borrowed command the write path decides on: the command, and the
/// errors, `apply_command` gives, without its copies where the params allow.
pub fn apply_event_params(raw: Option<&[u8]>) -> Result<EventCommand<'_>, Rejection> {
    if let Some(cmd) = raw.and_then(scanned_event) {
        return Ok(cmd);
    }
    // `apply_command` only makes APPLY_EVENT commands, which `Command::event` always converts.
    apply_command(raw)?
        .event()
        .map(EventCommand::into_owned)
        .ok_or_else(|| Rejection::new(ErrorCode::InternalError, "APPLY_EVENT params gave no event"))
}

/// Members of APPLY_EVENT params, as bits of the set `scanned_event` has seen.
const MEMBERS: [&[u8]; 6] = [
    b"instance_id",
    b"event",
    b"payload",
    b"expected_state",
    b"expected_wal_offset",
    b"idempotency_key",
];

/// The command read borrowed, by a byte scan that needs no prior parse: an object of the known
/// members, each at most once, whose strings are free of escapes and control characters, whose
/// payload text is already compact (what `JsonText::from_map` would write) and whose offset is
/// a plain integer (a `null` reads as absent), with a valid id. None for anything else;
/// `apply_command` then reads it.
///
/// Public (and hidden) only for the fuzz crate's differential target
/// (fuzz/src/apply_event.rs), which checks this reading against `apply_command`'s.
#[doc(hidden)]
pub fn scanned_event(raw: &[u8]) -> Option<EventCommand<'_>> {
    let mut s = Scanner::new(raw);
    let cmd = scan_event(&mut s)?;
    s.at_end().then_some(cmd)
}

/// `scanned_event`'s reading of the object at the scanner's position, which it steps over
/// (whatever follows is the caller's): a BATCH op's params are read this way in the front's
/// one pass over the batch.
pub(crate) fn scan_event<'a>(s: &mut Scanner<'a>) -> Option<EventCommand<'a>> {
    let mut seen = 0u8;
    let mut cmd = EventCommand {
        instance_id: Cow::Borrowed(""),
        event: Cow::Borrowed(""),
        payload: None,
        expected_state: None,
        expected_wal_offset: None,
        idempotency_key: None,
    };
    s.object(|name, s| {
        let member = MEMBERS.iter().position(|m| *m == name)?;
        let bit = 1u8 << member;
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        match member {
            0 => cmd.instance_id = Cow::Borrowed(s.clean_str()?),
            1 => cmd.event = Cow::Borrowed(s.clean_str()?),
            _ if s.null() => {}
            2 => cmd.payload = Some(Cow::Borrowed(s.compact_object()?)),
            3 => cmd.expected_state = Some(Cow::Borrowed(s.clean_str()?)),
            4 => cmd.expected_wal_offset = Some(s.uint()?),
            _ => cmd.idempotency_key = Some(Cow::Borrowed(s.clean_str()?)),
        }
        Some(())
    })?;
    let required = 0b11;
    if seen & required != required {
        return None;
    }
    check_id(&cmd.instance_id).ok()?;
    Some(cmd)
}

/// Where `scanned_event` found the members of the usual APPLY_EVENT params, as byte ranges of
/// the params text. The front scans each op of an atomic batch once, for its routing id, and
/// keeps these; the shard then builds the op's command from them (`command`) instead of
/// scanning the params again.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpans {
    instance_id: Range<usize>,
    event: Range<usize>,
    payload: Option<Range<usize>>,
    expected_state: Option<Range<usize>>,
    expected_wal_offset: Option<u64>,
    idempotency_key: Option<Range<usize>>,
}

impl EventSpans {
    /// The spans of `raw` where `scanned_event` reads it, else None.
    pub fn scan(raw: &[u8]) -> Option<EventSpans> {
        EventSpans::of(&scanned_event(raw)?, raw)
    }

    /// The spans of `cmd`, a command `scan_event` read borrowed from `raw`, in `raw`. None if
    /// one of its strings is not a slice of `raw`.
    pub(crate) fn of(cmd: &EventCommand<'_>, raw: &[u8]) -> Option<EventSpans> {
        let span = |text: &Cow<'_, str>| match text {
            Cow::Borrowed(t) => {
                let start = (t.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
                (start + t.len() <= raw.len()).then_some(start..start + t.len())
            }
            Cow::Owned(_) => None,
        };
        let opt = |text: &Option<Cow<'_, str>>| match text {
            Some(t) => span(t).map(Some),
            None => Some(None),
        };
        Some(EventSpans {
            instance_id: span(&cmd.instance_id)?,
            event: span(&cmd.event)?,
            payload: opt(&cmd.payload)?,
            expected_state: opt(&cmd.expected_state)?,
            expected_wal_offset: cmd.expected_wal_offset,
            idempotency_key: opt(&cmd.idempotency_key)?,
        })
    }

    /// The instance id (the routing key) in `raw`, the text these spans were scanned from.
    pub fn instance_id<'a>(&self, raw: &'a [u8]) -> Option<&'a str> {
        text_at(raw, &self.instance_id)
    }

    /// The command `scanned_event` gave for `raw`, the text these spans were scanned from,
    /// without scanning it again (None if the spans do not fit `raw`).
    pub fn command<'a>(&self, raw: &'a [u8]) -> Option<EventCommand<'a>> {
        let opt = |range: &Option<Range<usize>>| match range {
            Some(r) => text_at(raw, r).map(|t| Some(Cow::Borrowed(t))),
            None => Some(None),
        };
        Some(EventCommand {
            instance_id: Cow::Borrowed(text_at(raw, &self.instance_id)?),
            event: Cow::Borrowed(text_at(raw, &self.event)?),
            payload: opt(&self.payload)?,
            expected_state: opt(&self.expected_state)?,
            expected_wal_offset: self.expected_wal_offset,
            idempotency_key: opt(&self.idempotency_key)?,
        })
    }
}

fn text_at<'a>(raw: &'a [u8], range: &Range<usize>) -> Option<&'a str> {
    shards::engine::utf8(raw.get(range.clone())?).ok()
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

    use crate::ops::scan::arb::apply_text as arb_apply_text;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// The byte scan and serde read random params alike: the same command or error.
        #[test]
        fn the_scan_reads_params_as_serde_does(text in arb_apply_text()) {
            let raw = Some(text.as_bytes());
            let want = apply_command(raw).map(|cmd| cmd.event().map(EventCommand::into_owned));
            let got = apply_event_params(raw).map(|ev| Some(ev.into_owned()));
            proptest::prop_assert_eq!(got, want, "{}", text);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// Spans exist exactly where the scan reads the params, and give its command, also
        /// from a copy of the text (as the shard gets it, inside the batch's buffer).
        #[test]
        fn spans_give_the_scanned_command(text in arb_apply_text()) {
            let raw = text.as_bytes();
            let spans = EventSpans::scan(raw);
            proptest::prop_assert_eq!(spans.is_some(), scanned_event(raw).is_some());
            if let Some(spans) = spans {
                let copy = raw.to_vec();
                let want = scanned_event(raw).map(EventCommand::into_owned);
                proptest::prop_assert_eq!(spans.command(&copy).map(EventCommand::into_owned), want.clone());
                proptest::prop_assert_eq!(spans.instance_id(&copy), want.as_ref().map(|c| &*c.instance_id));
            }
        }
    }

    #[test]
    fn spans_that_do_not_fit_the_text_give_nothing() {
        let raw = br#"{"instance_id":"abc","event":"go"}"#;
        let spans = EventSpans::scan(raw).unwrap();
        assert_eq!(spans.instance_id(raw), Some("abc"));
        assert_eq!(spans.command(&raw[..10]), None);
        assert_eq!(spans.instance_id(b"{}"), None);
    }

    #[test]
    fn random_params_reach_the_scan_and_serde_both() {
        crate::ops::scan::arb::assert_both_readings(arb_apply_text(), |raw| {
            scanned_event(raw).is_some()
        });
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
