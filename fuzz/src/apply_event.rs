//! A differential target: the APPLY_EVENT params byte scan against serde on the same bytes.
//!
//! The shard reads the usual APPLY_EVENT params with a byte scan that borrows from the request
//! (`smdb::ops::events::scanned_event`; docs/architecture.md, "The path of one APPLY_EVENT")
//! and falls back to serde (`apply_command`) for anything else. serde's reading is the
//! reference: wherever the scan answers, it must give serde's command, and the entry points
//! built on it (`apply_event_params`, the spans an atomic BATCH keeps, the routing id) must
//! give serde's command or an error with serde's code.

use serde_json::value::RawValue;
use shards::engine::{BatchOp, EventCommand};
use shards::{ErrorCode, Rejection};
use smdb::ops::batch::{engine_op, parse_batch};
use smdb::ops::events::{apply_command, apply_event_params, scanned_event, EventSpans};
use smdb::ops::route::route_key;

/// serde's reading of APPLY_EVENT params: the command, or the error.
type Reading = Result<EventCommand<'static>, Rejection>;

/// Checks every reading of `data` as APPLY_EVENT params against serde's (module doc).
pub fn apply_event_differential(data: &[u8]) {
    let serde = serde_reading(data);
    let text = String::from_utf8_lossy(data);
    let scanned = scanned_event(data);
    if let Some(cmd) = &scanned {
        assert_eq!(
            Ok(cmd),
            serde.as_ref(),
            "the scan reads {text:?} unlike serde"
        );
    }
    let params = apply_event_params(Some(data)).map(EventCommand::into_owned);
    assert_eq!(
        params, serde,
        "apply_event_params reads {text:?} unlike serde"
    );
    spans_give_the_scanned_command(data, scanned.as_ref());
    // The front's readings below assume params the envelope parse already checked: JSON, and
    // UTF-8 throughout (a `RawValue` checks both; `IgnoredAny` would not check the UTF-8).
    if serde_json::from_slice::<&RawValue>(data).is_err() {
        return;
    }
    if let Ok(cmd) = &serde {
        let id = route_key(Some(data)).map_err(|e| e.code);
        assert_eq!(
            id.as_deref(),
            Ok(&*cmd.instance_id),
            "routing id of {text:?}"
        );
    }
    let want = match &serde {
        Ok(cmd) => Ok(cmd.clone()),
        Err(e) => Err(e.code),
    };
    for op_first in [true, false] {
        assert_eq!(
            in_an_atomic_batch(data, op_first),
            want,
            "{text:?} in a BATCH"
        );
    }
}

fn serde_reading(data: &[u8]) -> Reading {
    let cmd = apply_command(Some(data))?;
    // `apply_command` makes only APPLY_EVENT commands, which `event` always converts.
    match cmd.event() {
        Some(event) => Ok(event.into_owned()),
        None => panic!("apply_command gave a command that is not an APPLY_EVENT: {cmd:?}"),
    }
}

/// The spans exist exactly where the scan reads the params and give its command, also from a
/// copy of the text (as the shard gets it, inside the batch's buffer).
fn spans_give_the_scanned_command(data: &[u8], scanned: Option<&EventCommand<'_>>) {
    let spans = EventSpans::scan(data);
    assert_eq!(
        spans.is_some(),
        scanned.is_some(),
        "spans where the scan reads"
    );
    if let (Some(spans), Some(cmd)) = (spans, scanned) {
        let copy = data.to_vec();
        assert_eq!(spans.command(&copy).as_ref(), Some(cmd));
        assert_eq!(spans.instance_id(&copy), Some(&*cmd.instance_id));
    }
}

/// `data` as the params of the one APPLY_EVENT of an atomic BATCH (before or after its `op`
/// member, so both the batch's own scan and its later one are reached), read as the shard
/// reads it: the command, or the error's code.
fn in_an_atomic_batch(data: &[u8], op_first: bool) -> Result<EventCommand<'static>, ErrorCode> {
    let (before, after): (&[u8], &[u8]) = match op_first {
        true => (br#"{"op":"APPLY_EVENT","params":"#, b"}"),
        false => (br#"{"params":"#, br#","op":"APPLY_EVENT"}"#),
    };
    let ops = [before, data, after].concat();
    let text = [&br#"{"mode":"atomic","ops":["#[..], &ops, b"]}"].concat();
    let batch = parse_batch(Some(&text))
        .unwrap_or_else(|e| panic!("a BATCH around valid JSON params is refused: {e:?}"));
    let [item] = batch.ops.iter().collect::<Vec<_>>()[..] else {
        panic!("a BATCH of one op read as {} ops", batch.ops.len());
    };
    let cmd = match engine_op(&batch.ops, item).map_err(|e| e.code)? {
        BatchOp::Event(cmd) => cmd.into_owned(),
        other => panic!("APPLY_EVENT in a BATCH read as {other:?}"),
    };
    let id = batch.ops.route_key(item).map_err(|e| e.code);
    assert_eq!(
        id.as_deref(),
        Ok(&*cmd.instance_id),
        "the batched op's routing id"
    );
    Ok(cmd)
}
