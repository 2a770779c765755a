//! The interactive shell, started when `smdb-cli` gets no subcommand.
//!
//! A line is `OP [JSON]` (an upper-case op name sends that request as is), a subcommand form
//! (`get order-1`), `help [TOPIC]`, or `exit`. JSON may span lines: input continues while braces
//! or brackets are open. On a terminal, rustyline gives line editing, a history file and
//! completion of op and command names; otherwise commands are read from stdin one per line
//! (`#` starts a comment), which is how scripts and tests drive it.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use super::args::{Command, GlobalOpts, ReplLine};
use super::commands::{self, Output};
use super::error::{CliError, Kind};
use super::session::Session;
use super::{render, sub_error_text};

/// Every op a session can send (the op table's, but for REPLICATE and BACKUP, which turn the
/// connection into a stream, and the label-only ones) with its params, for `help` and
/// completion; a test checks it against `Op::ALL`.
pub const OPS: &[(&str, &str)] = &[
    (
        "HELLO",
        r#"{"protocol_version":1,"client_name":N?}  (done on connect)"#,
    ),
    ("AUTH", r#"{"method":"bearer","token":T}"#),
    ("PING", ""),
    ("INFO", ""),
    ("BYE", "  (the server closes; the next command reconnects)"),
    (
        "PUT_MACHINE",
        r#"{"machine":M,"version":V,"definition":{...}}"#,
    ),
    ("GET_MACHINE", r#"{"machine":M,"version":V?}"#),
    ("LIST_MACHINES", ""),
    ("MACHINE_STATS", r#"{"machine":M}"#),
    (
        "CREATE_INSTANCE",
        r#"{"machine":M,"version":V,"id":I,"context":{...}}"#,
    ),
    ("GET_INSTANCE", r#"{"id":I}"#),
    (
        "LIST_INSTANCES",
        r#"{"machine":M?,"state":S?,"limit":N?,"cursor":C?}"#,
    ),
    (
        "FIND_INSTANCES",
        r#"{"machine":M,"where":{"ctx.P":V},"state":S?,"limit":N?,"cursor":C?,"include_context":B?}"#,
    ),
    (
        "SCAN_INSTANCES",
        r#"{"machine":M,"where":{"ctx.P":V}?,"state":S?,"limit":N?,"cursor":C?,"include_context":B?}"#,
    ),
    (
        "MIGRATE_INSTANCES",
        r#"{"machine":M,"from_version":V,"to_version":V,"states":{"old":"new"}?,"state":S?,"where":{..}?,"dry_run":B?,"limit":N?,"cursor":C?}"#,
    ),
    (
        "DELETE_INSTANCES",
        r#"{"machine":M,"state":S?,"where":{..}?,"updated_before":T?,"dry_run":B?,"limit":N?,"cursor":C?}"#,
    ),
    ("DELETE_INSTANCE", r#"{"id":I}"#),
    (
        "APPLY_EVENT",
        r#"{"instance_id":I,"event":E,"payload":{...}?,"expected_state":S?,"expected_wal_offset":N?}"#,
    ),
    ("GET_HISTORY", r#"{"id":I,"from":N?,"limit":N?}"#),
    (
        "WATCH_INSTANCE",
        r#"{"instance_id":I,"include_context":B?,"from_offset":N?}"#,
    ),
    (
        "WATCH_ALL",
        r#"{"machines":[..]?,"events":[..]?,"from_cursor":C?}"#,
    ),
    ("UNWATCH", r#"{"subscription_id":S}"#),
    (
        "BATCH",
        r#"{"mode":"atomic"|"best_effort","ops":[{"op":OP,"params":{...}}]}"#,
    ),
    ("REPLICATION_STATUS", ""),
    ("PROMOTE", r#"{"force":B?}"#),
    ("HA_PAUSE", ""),
    ("HA_RESUME", ""),
    ("SWITCHOVER", r#"{"to":NODE?}"#),
    ("TIMERS_RESUME", ""),
    ("CLUSTER_KEYSLOT", r#"{"id":I}"#),
    ("CLUSTER_SHARDS", ""),
    ("CLUSTER_SLOTS", ""),
    ("CLUSTER_INFO", ""),
    ("CLUSTER_CREATE", r#"{"groups":[G,..]?,"timeout_ms":N?}"#),
    ("CLUSTER_ADD_GROUP", r#"{"group":G,"timeout_ms":N?}"#),
    (
        "CLUSTER_MOVE_SLOTS",
        r#"{"slots":[LO,HI],"to":G,"wait":B?}"#,
    ),
    ("CLUSTER_CANCEL_MOVE", r#"{"id":ID}"#),
];

const META: &[&str] = &["help", "exit", "quit"];

/// One complete command read from the user.
#[derive(Debug, PartialEq)]
enum Line {
    Empty,
    Exit,
    Help(Option<String>),
    /// `OP [JSON]`.
    Raw {
        op: String,
        params: Option<String>,
    },
    /// A subcommand form, split into words.
    Sub(Vec<String>),
}

/// True while `text` has more `{`/`[` than `}`/`]` outside JSON strings: the command goes on
/// on the next line.
pub fn json_open(text: &str) -> bool {
    let (mut depth, mut in_str, mut esc) = (0i64, false, false);
    for ch in text.chars() {
        if in_str {
            match (esc, ch) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ => {}
        }
    }
    depth > 0
}

/// Splits a subcommand line into words: whitespace separates, single quotes keep everything,
/// double quotes keep everything but `\"` and `\\`, a backslash outside quotes escapes.
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(cur.take()),
            '\'' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => w.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => cur.get_or_insert_with(String::new).extend(chars.next()),
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(cur);
    Ok(words)
}

fn parse_line(text: &str) -> Result<Line, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(Line::Empty);
    }
    let (first, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    let is_op = first
        .chars()
        .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        && first.chars().any(|c| c.is_ascii_uppercase());
    if is_op {
        let params = (!rest.is_empty()).then(|| rest.to_string());
        return Ok(Line::Raw {
            op: first.to_string(),
            params,
        });
    }
    match first {
        "exit" | "quit" | "\\q" => Ok(Line::Exit),
        "help" | "?" => Ok(Line::Help((!rest.is_empty()).then(|| rest.to_string()))),
        _ => split_words(text).map(Line::Sub),
    }
}

/// What a command did to the session.
enum Flow {
    Continue,
    Exit,
}

/// Runs one complete command, printing its result (and any pushes that came with it).
fn execute(text: &str, s: &mut Session, out: &mut Output<'_>) -> Result<Flow, CliError> {
    let line = parse_line(text).map_err(CliError::usage)?;
    let r = match line {
        Line::Empty => Ok(()),
        Line::Exit => return Ok(Flow::Exit),
        Line::Help(topic) => out.line(&help(topic.as_deref())),
        Line::Raw { op, params } => {
            let p = match params {
                Some(p) => commands::object_arg(&p, "params")?,
                None => serde_json::Value::Null,
            };
            s.run(|c| c.call(&op, p.clone())).and_then(|r| out.raw(&r))
        }
        Line::Sub(words) => match ReplLine::try_parse_from(&words) {
            // It reads the token from standard input, which is the shell's own input here.
            Ok(l) if matches!(l.command, Command::HashToken) => Err(CliError::usage(
                "hash-token reads standard input: run `smdb-cli hash-token < FILE` instead",
            )),
            Ok(l) => commands::run(&l.command, s, out),
            Err(e) if !e.use_stderr() => out.line(e.to_string().trim_end()),
            Err(e) => Err(CliError::usage(sub_error_text(&e))),
        },
    };
    for p in s.take_pushes() {
        let text = if out.json {
            p.to_string()
        } else {
            render::push(&p)
        };
        out.line(&text)?;
    }
    r.map(|()| Flow::Continue)
}

fn help(topic: Option<&str>) -> String {
    if let Some(t) = topic {
        if let Some((op, params)) = OPS.iter().find(|(op, _)| op.eq_ignore_ascii_case(t)) {
            return format!("{op} {params}");
        }
        let mut cmd = ReplLine::command();
        if let Some(sub) = cmd.find_subcommand_mut(t) {
            return sub.render_long_help().to_string().trim_end().to_string();
        }
        return format!("no op or command named {t}; `help` lists them");
    }
    let mut s = String::from(
        "Commands:\n  OP [JSON]        send one request, e.g. GET_INSTANCE {\"id\":\"order-1\"}\n\
         \x20 COMMAND ARGS     a smdb-cli subcommand, e.g. apply order-1 pay -p '{\"amount\":30}'\n\
         \x20 help [TOPIC]     this list, or the params of an op / the help of a command\n\
         \x20 exit             leave (also Ctrl-D)\n\
         JSON may span lines; the command runs once braces and brackets balance.\n\nOps:\n",
    );
    for (op, params) in OPS {
        s.push_str(format!("  {op:<16} {params}").trim_end());
        s.push('\n');
    }
    s.push_str("\nCommands:\n");
    for sub in ReplLine::command().get_subcommands() {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        s.push_str(&format!("  {:<16} {about}\n", sub.get_name()));
    }
    s.trim_end().to_string()
}

/// Runs the REPL until `exit` or end of input.
pub fn run(g: &GlobalOpts) -> ExitCode {
    let mut s = match Session::new(g) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}", e.render());
            return ExitCode::from(e.exit_code());
        }
    };
    let code = if std::io::stdin().is_terminal() {
        interactive(&mut s, g.json)
    } else {
        piped(&mut s, g.json)
    };
    s.close();
    ExitCode::from(code)
}

/// Reads commands from a non-terminal stdin; exits with the status of the last failed command
/// (0 when all succeeded).
fn piped(s: &mut Session, json: bool) -> u8 {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let mut out = Output {
        out: &mut lock,
        json,
    };
    let mut status = 0;
    let mut pending = String::new();
    let mut lines = std::io::stdin().lock().lines();
    loop {
        let line = match lines.next().transpose() {
            Ok(l) => l,
            Err(e) => {
                report(&CliError::usage(format!("cannot read stdin: {e}")));
                return super::error::EXIT_USAGE;
            }
        };
        let eof = line.is_none();
        if let Some(l) = line {
            pending.push_str(&l);
            pending.push('\n');
            if json_open(&pending) {
                continue;
            }
        }
        // At end of input a command with open JSON still runs, so its error is shown.
        let command = std::mem::take(&mut pending);
        match execute(&command, s, &mut out) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Exit) => break,
            Err(e) => {
                status = e.exit_code();
                report(&e);
            }
        }
        if eof {
            break;
        }
    }
    status
}

fn report(e: &CliError) {
    let _ = std::io::stdout().flush();
    eprintln!("{}", e.render());
    if e.kind == Kind::Connection {
        eprintln!("  (the next command reconnects)");
    }
}

/// The history file: `$SMDB_HISTORY`, else `~/.smdb_history`.
fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SMDB_HISTORY").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".smdb_history"))
}

fn interactive(s: &mut Session, json: bool) -> u8 {
    let mut ed: Editor<ReplHelper, _> = match Editor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: USAGE: cannot start line editing: {e}; falling back to plain input");
            return piped(s, json);
        }
    };
    ed.set_helper(Some(ReplHelper::new()));
    let history = history_path();
    if let Some(h) = &history {
        // A missing history file is normal on first use.
        let _ = ed.load_history(h);
    }
    greet(s);
    let prompt = format!("smdb {}> ", s.addr);
    let stdout = std::io::stdout();
    loop {
        let text = match ed.readline(&prompt) {
            Ok(t) => t,
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: USAGE: cannot read input: {e}");
                return super::error::EXIT_USAGE;
            }
        };
        if !text.trim().is_empty() {
            let _ = ed.add_history_entry(text.as_str());
            if let Some(h) = &history {
                let _ = ed.append_history(h);
            }
        }
        let mut lock = stdout.lock();
        let mut out = Output {
            out: &mut lock,
            json,
        };
        match execute(&text, s, &mut out) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Exit) => break,
            Err(e) => report(&e),
        }
    }
    0
}

/// Connects up front, so a wrong address shows at once; the shell starts either way.
fn greet(s: &mut Session) {
    let addr = s.addr.clone();
    match s.client() {
        Ok(c) => {
            let v = c.hello_result().map_or(String::new(), |h| {
                format!(
                    " ({} {})",
                    render::cell(&h["server_name"]),
                    render::cell(&h["server_version"])
                )
            });
            println!("connected to {addr}{v}; `help` lists commands, Ctrl-D leaves");
        }
        Err(e) => report(&e),
    }
}

/// rustyline glue: completion of op and command names, multi-line JSON.
struct ReplHelper {
    words: Vec<String>,
}

impl ReplHelper {
    fn new() -> ReplHelper {
        let mut words: Vec<String> = OPS.iter().map(|(op, _)| op.to_string()).collect();
        words.extend(
            ReplLine::command()
                .get_subcommands()
                .map(|c| c.get_name().to_string()),
        );
        words.extend(META.iter().map(|m| m.to_string()));
        ReplHelper { words }
    }

    /// Names that complete the word `prefix` at the start of a line: same-case matches, else
    /// op names in any case (`get_i` → `GET_INSTANCE`).
    fn candidates(&self, prefix: &str) -> Vec<String> {
        let exact: Vec<String> = self
            .words
            .iter()
            .filter(|w| w.starts_with(prefix))
            .cloned()
            .collect();
        if !exact.is_empty() {
            return exact;
        }
        let upper = prefix.to_ascii_uppercase();
        self.words
            .iter()
            .filter(|w| w.starts_with(&upper))
            .cloned()
            .collect()
    }
}

impl Completer for ReplHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let head = &line[..pos];
        if head.contains(char::is_whitespace) {
            return Ok((pos, Vec::new()));
        }
        Ok((0, self.candidates(head)))
    }
}

impl Validator for ReplHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if json_open(ctx.input()) {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Highlighter for ReplHelper {}

impl Helper for ReplHelper {}

#[cfg(test)]
mod ops_tests {
    use smdb_protocol::op::{Op, Route};

    /// `OPS` names every op a session can send, and nothing else.
    #[test]
    fn the_repl_knows_every_op_of_the_table() {
        // A slot move's stream is members' own (docs/cluster.md), like REPLICATE.
        let sendable = |op: &Op| {
            !matches!(op.facts().route, Route::Stream | Route::Label) && *op != Op::ClusterImport
        };
        let mut want: Vec<&str> = Op::ALL
            .iter()
            .filter(|op| sendable(op))
            .map(|op| op.as_str())
            .collect();
        let mut have: Vec<&str> = super::OPS.iter().map(|(name, _)| *name).collect();
        want.sort_unstable();
        have.sort_unstable();
        assert_eq!(have, want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_json_continues_on_the_next_line() {
        assert!(json_open(r#"APPLY_EVENT {"instance_id": "o1","#));
        assert!(json_open(r#"X {"a": ["#));
        assert!(
            !json_open(r#"X {"a": "}{["}"#),
            "brackets inside strings do not count"
        );
        assert!(!json_open(r#"X {"a": "\"{"}"#));
        assert!(!json_open("ping"));
    }

    #[test]
    fn lines_parse_into_ops_commands_and_meta() {
        assert_eq!(
            parse_line(r#"GET_INSTANCE {"id":"o1"}"#).unwrap(),
            Line::Raw {
                op: "GET_INSTANCE".into(),
                params: Some(r#"{"id":"o1"}"#.into())
            }
        );
        assert_eq!(
            parse_line("PING").unwrap(),
            Line::Raw {
                op: "PING".into(),
                params: None
            }
        );
        assert_eq!(
            parse_line(r#"apply o1 pay -p '{"a": 1}'"#).unwrap(),
            Line::Sub(vec![
                "apply".into(),
                "o1".into(),
                "pay".into(),
                "-p".into(),
                r#"{"a": 1}"#.into()
            ])
        );
        assert_eq!(parse_line("  # note").unwrap(), Line::Empty);
        assert_eq!(
            parse_line("help PING").unwrap(),
            Line::Help(Some("PING".into()))
        );
        assert_eq!(parse_line("quit").unwrap(), Line::Exit);
    }

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            split_words(r#"a "b c" 'd "e"' f\ g "h\"i""#).unwrap(),
            vec!["a", "b c", r#"d "e""#, "f g", r#"h"i"#]
        );
        assert!(split_words("a 'b").is_err());
    }

    #[test]
    fn completion_offers_ops_and_commands() {
        let h = ReplHelper::new();
        assert_eq!(h.candidates("GET_I"), vec!["GET_INSTANCE"]);
        assert_eq!(
            h.candidates("get_i"),
            vec!["GET_INSTANCE"],
            "case-insensitive for ops"
        );
        assert!(h.candidates("get").contains(&"get-machine".to_string()));
        assert_eq!(
            h.candidates("he"),
            vec!["help"],
            "lower case prefers commands"
        );
        assert_eq!(h.candidates("HE"), vec!["HELLO"]);
    }

    #[test]
    fn help_covers_every_op_and_command() {
        let h = help(None);
        for (op, _) in OPS {
            assert!(h.contains(op), "{op}");
        }
        assert!(h.contains("put-machine") && h.contains("watch"));
        assert!(help(Some("create")).contains("--context"));
    }
}
