//! `watch`: subscribe (WATCH_INSTANCE or WATCH_ALL), print each pushed event as it arrives,
//! and on Ctrl-C (or after `--count` events) UNWATCH and return. Everything after the
//! subscription stays on one connection: a reconnect would silently lose the subscription, so a
//! broken connection ends the watch with an error instead.

use std::time::Duration;

use serde_json::Value;
use smdb_client::{WatchAllFilter, WatchOptions};

use super::args::WatchArgs;
use super::commands::Output;
use super::error::{CliError, Kind, CONNECTION_LOST, SUBSCRIPTION_LAGGED};
use super::session::Session;
use super::{interrupt, render};

/// How long one wait for a push lasts before Ctrl-C is checked again.
const POLL: Duration = Duration::from_millis(200);

pub fn run(args: &WatchArgs, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    interrupt::install();
    interrupt::take();
    let ack = s.run(|c| match &args.id {
        Some(id) => c.watch_instance(
            id,
            &WatchOptions {
                include_context: args.include_context,
                from_offset: args.from_offset,
            },
        ),
        None => c.watch_all(&filter(args)),
    })?;
    let sub = ack.subscription_id.clone();
    eprintln!(
        "watching: subscription {} from cursor {}; Ctrl-C stops",
        render::cell(&sub),
        render::cell(&serde_json::Value::from(ack.cursor.as_str()))
    );
    let streamed = stream(args, &sub, s, out);
    if streamed.is_ok() {
        // Best effort: the server also drops the subscription when the connection closes.
        let _ = s.run(|c| c.unwatch(&sub));
    }
    streamed
}

fn filter(args: &WatchArgs) -> WatchAllFilter {
    WatchAllFilter {
        machines: args.machines.clone(),
        from_states: args.from_states.clone(),
        to_states: args.to_states.clone(),
        events: args.events.clone(),
        include_context: args.include_context,
        from_cursor: args.from_cursor.clone(),
    }
}

/// Prints pushes of subscription `sub` until Ctrl-C, `--count`, or the subscription ends.
fn stream(
    args: &WatchArgs,
    sub: &Value,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let timeout = s.timeout();
    let mut seen = 0u64;
    while args.count.is_none_or(|n| seen < n) && !interrupt::take() {
        let next = match s.current() {
            Some(c) => c.next_push(Some(POLL)),
            None => {
                return Err(CliError::new(
                    Kind::Connection,
                    CONNECTION_LOST,
                    "not connected",
                ))
            }
        };
        let push = match next {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => {
                s.reset();
                return Err(CliError::from_call(e, timeout));
            }
        };
        if push.get("subscription_id").is_some_and(|id| id != sub) {
            continue;
        }
        match push["type"].as_str() {
            Some("subscription_lagged") => {
                if out.json {
                    out.line(&push.to_string())?;
                }
                return Err(CliError::new(
                    Kind::Server,
                    SUBSCRIPTION_LAGGED,
                    render::push(&push),
                ));
            }
            Some("event") => {
                seen += 1;
                let text = if out.json {
                    push.to_string()
                } else {
                    render::push(&push)
                };
                out.line(&text)?;
            }
            _ => {}
        }
    }
    Ok(())
}
