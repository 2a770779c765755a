//! `smdb-cli migrate` and `smdb-cli delete-instances` (MIGRATE_INSTANCES, DELETE_INSTANCES;
//! docs/lifecycle.md): the op called again with each reply's cursor until the machine is
//! walked, progress on stderr (a bar on a terminal, else one line per call), the summed totals
//! as JSON on stdout. Ctrl-C stops between calls and prints the cursor that resumes
//! (`--cursor C`); so does an error after the first call. `--dry-run` is one call, its reply
//! printed as it came. A call refused `TRYAGAIN` (a cluster member's walk reached a slot a move
//! froze, nothing executed; docs/cluster.md) is sent again after a pause, whatever the
//! session's retry policy, for longer than any freeze lasts.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};
use smdb_client::{
    lifecycle, Client, ClientError, DeleteReply, DeleteRequest, MigrateReply, MigrateRequest,
};

use super::commands::Output;
use super::error::{CliError, Kind};
use super::session::Session;
use super::{interrupt, query};

/// The code of a run stopped by Ctrl-C before the end (exit 1, like a refusal: not done).
const INTERRUPTED: &str = "INTERRUPTED";
/// Width of the progress bar, in cells.
const BAR_CELLS: usize = 30;

/// `migrate` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Machine name.
    pub machine: String,
    /// The version the instances are at.
    pub from: u64,
    /// The version they move to.
    pub to: u64,
    /// Rename a state on the way, OLD=NEW (repeatable, or comma-separated); other states keep
    /// their name, and an instance whose state the new version lacks is skipped.
    #[arg(long, value_name = "OLD=NEW", value_delimiter = ',')]
    pub states: Vec<String>,
    #[command(flatten)]
    pub bulk: BulkArgs,
}

/// `delete-instances` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DeleteArgs {
    /// Machine name.
    pub machine: String,
    /// Only instances last updated before this RFC 3339 time (`2024-01-31T00:00:00Z`).
    #[arg(long, value_name = "TIME")]
    pub updated_before: Option<String>,
    #[command(flatten)]
    pub bulk: BulkArgs,
}

/// What both take: which instances, how many per call, where to resume.
#[derive(Debug, Clone, clap::Args)]
pub struct BulkArgs {
    /// Only instances in this state.
    #[arg(long, short = 's')]
    pub state: Option<String>,
    /// A condition on any context path, PATH OP VALUE as find's (repeatable), or `id=ID` for
    /// one instance.
    #[arg(long = "where", short = 'w', value_name = "COND")]
    pub conditions: Vec<String>,
    /// Only count what would change, per state (one call; nothing changes).
    #[arg(long, conflicts_with = "cursor")]
    pub dry_run: bool,
    /// Instances examined per call (server default 1000, at most 10000).
    #[arg(long, short = 'l')]
    pub limit: Option<u64>,
    /// Resume from the cursor an interrupted run printed.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// `migrate MACHINE FROM TO ...`.
pub fn migrate(args: &MigrateArgs, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let mut states = BTreeMap::new();
    for pair in &args.states {
        let Some((old, new)) = pair.split_once('=') else {
            return Err(CliError::usage(format!("--states {pair:?}: not OLD=NEW")));
        };
        states.insert(old.to_owned(), new.to_owned());
    }
    let b = &args.bulk;
    let req = MigrateRequest {
        machine: args.machine.clone(),
        from_version: args.from,
        to_version: args.to,
        states,
        state: b.state.clone(),
        conditions: conditions(&b.conditions)?,
        dry_run: b.dry_run,
        limit: b.limit,
        cursor: b.cursor.clone(),
    };
    match req.dry_run {
        true => dry_run(lifecycle::migrate_instances(&req), |c| req.call(c), s, out),
        false => walk(req, s, out),
    }
}

/// `delete-instances MACHINE ...`.
pub fn delete(args: &DeleteArgs, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let b = &args.bulk;
    let req = DeleteRequest {
        machine: args.machine.clone(),
        state: b.state.clone(),
        conditions: conditions(&b.conditions)?,
        updated_before: args.updated_before.clone(),
        dry_run: b.dry_run,
        limit: b.limit,
        cursor: b.cursor.clone(),
    };
    match req.dry_run {
        true => dry_run(lifecycle::delete_instances(&req), |c| req.call(c), s, out),
        false => walk(req, s, out),
    }
}

/// `--where` arguments as the `where` object: find's syntax, and `id=ID` taken as it is
/// (an id that looks like a number stays a string).
fn conditions(args: &[String]) -> Result<Map<String, Value>, CliError> {
    let (ids, rest): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| a.starts_with("id="));
    let rest: Vec<String> = rest.into_iter().cloned().collect();
    let mut map = match query::where_object(&rest)? {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    match ids.as_slice() {
        [] => {}
        [one] => {
            map.insert("id".into(), Value::from(&one["id=".len()..]));
        }
        _ => return Err(CliError::usage("--where id=ID names one instance")),
    }
    Ok(map)
}

/// A dry run's one call, its reply printed as it came; in cluster mode one call to every
/// group through the client (`typed`), the counts summed (docs/cluster.md, "Clients").
fn dry_run<T, R: Serialize>(
    req: smdb_client::ops::Request<T>,
    typed: impl FnMut(&mut Client) -> Result<R, ClientError>,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let r = match s.run(|c| Ok::<_, ClientError>(c.is_cluster()))? {
        true => s.value(typed)?,
        false => s.run(|c| c.call(req.op, req.params.clone()))?,
    };
    out.raw(&r)
}

/// One of the two ops, as the walk drives it.
trait Walk {
    type Reply: Default + Serialize;
    /// The count word of the op's reply (`migrated`, `deleted`).
    const WRITTEN: &'static str;
    fn call(&self, c: &mut Client) -> Result<Self::Reply, ClientError>;
    fn resume_at(&mut self, cursor: Option<String>);
    fn add(total: &mut Self::Reply, next: Self::Reply);
    /// Written, examined, remaining and the cursor of a (summed) reply.
    fn counts(r: &Self::Reply) -> (u64, u64, u64, Option<&str>);
}

impl Walk for MigrateRequest {
    type Reply = MigrateReply;
    const WRITTEN: &'static str = "migrated";
    fn call(&self, c: &mut Client) -> Result<MigrateReply, ClientError> {
        c.migrate_instances(self)
    }
    fn resume_at(&mut self, cursor: Option<String>) {
        self.cursor = cursor;
    }
    fn add(total: &mut MigrateReply, next: MigrateReply) {
        total.add(next);
    }
    fn counts(r: &MigrateReply) -> (u64, u64, u64, Option<&str>) {
        (r.migrated, r.examined, r.remaining, r.cursor.as_deref())
    }
}

impl Walk for DeleteRequest {
    type Reply = DeleteReply;
    const WRITTEN: &'static str = "deleted";
    fn call(&self, c: &mut Client) -> Result<DeleteReply, ClientError> {
        c.delete_instances(self)
    }
    fn resume_at(&mut self, cursor: Option<String>) {
        self.cursor = cursor;
    }
    fn add(total: &mut DeleteReply, next: DeleteReply) {
        total.add(next);
    }
    fn counts(r: &DeleteReply) -> (u64, u64, u64, Option<&str>) {
        (r.deleted, r.examined, r.remaining, r.cursor.as_deref())
    }
}

/// Calls `req` with each reply's cursor until there is none, Ctrl-C or an error; prints the
/// totals (with the cursor that resumes, when stopped early).
fn walk<W: Walk>(mut req: W, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    interrupt::install();
    interrupt::take();
    let mut progress = Progress::new(W::WRITTEN);
    let mut total = W::Reply::default();
    let mut calls = 0u64;
    loop {
        let reply = match s.run(|c| through_freezes(|| req.call(c))) {
            Ok(r) => r,
            Err(e) => {
                progress.finish();
                if calls > 0 {
                    eprintln!("stopped: {}", where_it_got::<W>(&total, calls));
                }
                return Err(e);
            }
        };
        calls += 1;
        W::add(&mut total, reply);
        let (written, examined, remaining, cursor) = W::counts(&total);
        progress.show(written, examined, remaining);
        let Some(cursor) = cursor.map(str::to_owned) else {
            progress.finish();
            return out.raw(&to_json(&total)?);
        };
        if interrupt::take() {
            progress.finish();
            out.raw(&to_json(&total)?)?;
            let text = format!("stopped by Ctrl-C: {}", where_it_got::<W>(&total, calls));
            return Err(CliError::new(Kind::Server, INTERRUPTED, text));
        }
        req.resume_at(Some(cursor));
    }
}

/// The first pause after a `TRYAGAIN`; it doubles up to `FROZEN_PAUSE_MAX`.
const FROZEN_PAUSE_MIN: Duration = Duration::from_millis(10);
const FROZEN_PAUSE_MAX: Duration = Duration::from_millis(500);
/// How long a call is retried through `TRYAGAIN`: past the longest freeze a move may hold
/// (`cluster.move_freeze_max_ms` is at most 10 s) plus its switch.
const FROZEN_WAIT_MAX: Duration = Duration::from_secs(30);

/// `call`, sent again while it is refused `TRYAGAIN` (nothing executed), pausing between.
fn through_freezes<T>(mut call: impl FnMut() -> Result<T, ClientError>) -> Result<T, ClientError> {
    let (since, mut pause) = (Instant::now(), FROZEN_PAUSE_MIN);
    loop {
        match call() {
            Err(e) if e.code() == Some("TRYAGAIN") && since.elapsed() < FROZEN_WAIT_MAX => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(FROZEN_PAUSE_MAX);
            }
            r => return r,
        }
    }
}

/// `after N calls: migrated X, examined Y, remaining ~Z; resume with --cursor C`.
fn where_it_got<W: Walk>(total: &W::Reply, calls: u64) -> String {
    let (written, examined, remaining, cursor) = W::counts(total);
    let resume = match cursor {
        Some(c) => format!("; resume with --cursor {c}"),
        None => String::new(),
    };
    format!(
        "after {calls} calls: {} {written}, examined {examined}, remaining ~{remaining}{resume}",
        W::WRITTEN
    )
}

fn to_json(v: &impl Serialize) -> Result<Value, CliError> {
    serde_json::to_value(v).map_err(|e| CliError::usage(format!("cannot print the totals: {e}")))
}

/// Progress on stderr: a bar redrawn in place on a terminal, else one line per call.
struct Progress {
    tty: bool,
    written: &'static str,
    drawn: bool,
}

impl Progress {
    fn new(written: &'static str) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            written,
            drawn: false,
        }
    }

    fn show(&mut self, written: u64, examined: u64, remaining: u64) {
        let text = format!(
            "{} {written}, examined {examined}, remaining ~{remaining}",
            self.written
        );
        let mut err = std::io::stderr().lock();
        // Progress is a courtesy: a closed or full stderr does not stop the walk.
        let _ = match self.tty {
            true => write!(err, "\r{} {text}\x1b[K", bar(examined, remaining)),
            false => writeln!(err, "{text}"),
        };
        let _ = err.flush();
        self.drawn = true;
    }

    /// Ends the bar's line (before anything else is printed).
    fn finish(&mut self) {
        if self.tty && self.drawn {
            eprintln!();
        }
        self.drawn = false;
    }
}

/// `[#########.....]  64%`: examined out of examined + remaining.
fn bar(examined: u64, remaining: u64) -> String {
    let whole = examined.saturating_add(remaining).max(1);
    let filled = ((examined.min(whole) as u128 * BAR_CELLS as u128) / whole as u128) as usize;
    let pct = (examined.min(whole) as u128 * 100) / whole as u128;
    format!(
        "[{}{}] {pct:>3}%",
        "#".repeat(filled),
        ".".repeat(BAR_CELLS - filled)
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_stay_strings_and_other_conditions_parse_as_finds() {
        let c = conditions(&["id=123".into(), "ctx.n>=2".into()]).unwrap();
        assert_eq!(Value::Object(c), json!({"id": "123", "ctx.n": {"gte": 2}}));
        assert!(conditions(&["id=a".into(), "id=b".into()]).is_err());
    }

    #[test]
    fn the_bar_fills_with_what_was_examined() {
        assert!(bar(0, 10).starts_with(&format!("[{}]", ".".repeat(BAR_CELLS))));
        assert!(bar(5, 5).ends_with(" 50%"));
        assert!(bar(7, 0).starts_with(&format!("[{}] 100%", "#".repeat(BAR_CELLS))));
        assert!(bar(0, 0).ends_with("  0%"));
    }
}
