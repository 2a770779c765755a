//! Runs one parsed subcommand: turns its arguments into a typed client call and prints the
//! result. Shared by one-shot use and the REPL's subcommand forms.

use std::io::{Read, Write};

use clap::CommandFactory;
use serde_json::{json, Value};
use smdb_client::{ApplyOptions, CreateOptions, ListFilter};

use super::args::{Cli, Command, ReplicationCommand, TimersCommand};
use super::error::CliError;
use super::session::Session;
use super::{backup, cluster, ha, lifecycle, query, render, watch};

/// Where results go and how they look.
pub struct Output<'a> {
    pub out: &'a mut dyn Write,
    /// One line of compact JSON per result instead of tables.
    pub json: bool,
}

impl Output<'_> {
    /// Prints `op`'s result: compact JSON, or its human rendering.
    pub fn result(&mut self, op: &str, v: &Value) -> Result<(), CliError> {
        let text = if self.json {
            v.to_string()
        } else {
            render::result(op, v)
        };
        self.line(&text)
    }

    /// Prints a raw result: compact JSON, or pretty JSON for people.
    pub fn raw(&mut self, v: &Value) -> Result<(), CliError> {
        let text = if self.json {
            v.to_string()
        } else {
            serde_json::to_string_pretty(v)?
        };
        self.line(&text)
    }

    pub fn line(&mut self, text: &str) -> Result<(), CliError> {
        match writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
            Ok(()) => Ok(()),
            // The reader went away (`smdb-cli list | head`): nothing left to do, like `cat`.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
            Err(e) => Err(CliError::usage(format!("cannot write output: {e}"))),
        }
    }
}

/// A JSON argument: literal JSON, `@FILE`, or `-` for standard input.
pub fn json_arg(arg: &str, what: &str) -> Result<Value, CliError> {
    let text = if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::usage(format!("{what}: cannot read standard input: {e}")))?;
        s
    } else if let Some(path) = arg.strip_prefix('@') {
        read_file(path, what)?
    } else {
        arg.to_string()
    };
    serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("{what} is not valid JSON: {e}")))
}

/// A JSON object argument (context, payload, params).
pub fn object_arg(arg: &str, what: &str) -> Result<Value, CliError> {
    let v = json_arg(arg, what)?;
    if !v.is_object() {
        return Err(CliError::usage(format!(
            "{what} must be a JSON object, got {v}"
        )));
    }
    Ok(v)
}

fn read_file(path: &str, what: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::usage(format!("{what}: {path}: {e}")))
}

/// Runs `cmd`, printing its result to `out`.
pub fn run(cmd: &Command, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    match cmd {
        Command::Ping
        | Command::Info
        | Command::GetMachine { .. }
        | Command::ListMachines
        | Command::Get { .. }
        | Command::Delete { .. }
        | Command::History { .. }
        | Command::Replication { .. }
        | Command::Promote => {
            let (op, r) = one_call(cmd, s)?;
            out.result(op, &r)
        }
        Command::PutMachine {
            file,
            machine,
            machine_version,
        } => {
            let (m, v, def) = machine_file(file, machine.as_deref(), *machine_version)?;
            let r = s.value(|c| c.put_machine(&m, v, &def))?;
            out.result("PUT_MACHINE", &r)
        }
        Command::Diagram {
            machine,
            machine_version,
            format,
        } => diagram(machine, *machine_version, format, s, out),
        Command::Create { .. } => create(cmd, s, out),
        Command::List { .. } => list(cmd, s, out),
        Command::Find(args) => query::run("FIND_INSTANCES", args, s, out),
        Command::Scan(args) => query::run("SCAN_INSTANCES", args, s, out),
        Command::Migrate(args) => lifecycle::migrate(args, s, out),
        Command::DeleteInstances(args) => lifecycle::delete(args, s, out),
        Command::Apply { .. } => apply(cmd, s, out),
        Command::Watch(args) => watch::run(args, s, out),
        Command::Batch { ops, best_effort } => batch(ops, *best_effort, s, out),
        Command::Raw { op, params } => raw(op, params.as_deref(), s, out),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "smdb-cli", out.out);
            Ok(())
        }
        Command::Man { dir } => man(dir.as_deref(), out),
        Command::HashToken => hash_token(out),
        Command::Backup {
            verify: Some(dir), ..
        } => verify_backup(dir, out),
        Command::Backup { out: Some(dir), .. } => take_backup(dir, s, out),
        Command::Backup { .. } => Err(CliError::usage("backup needs --out DIR or --verify DIR")),
        Command::Ha { command } => ha::run(command, s, out),
        Command::Switchover { to } => ha::switchover(to.as_deref(), s, out),
        Command::Cluster { command } => cluster::run(command, s, out),
        Command::Timers {
            command: TimersCommand::Resume,
        } => timers_resume(s, out),
    }
}

/// The subcommands that are one typed call, printed as that op's result: the op and the reply.
fn one_call(cmd: &Command, s: &mut Session) -> Result<(&'static str, Value), CliError> {
    Ok(match cmd {
        Command::Ping => ("PING", s.value(|c| c.ping())?),
        Command::Info => ("INFO", s.value(|c| c.info())?),
        Command::GetMachine {
            machine,
            machine_version,
        } => (
            "GET_MACHINE",
            s.value(|c| c.get_machine(machine, *machine_version))?,
        ),
        Command::ListMachines => ("LIST_MACHINES", s.value(|c| c.list_machines())?),
        Command::Get { id } => ("GET_INSTANCE", s.value(|c| c.get_instance(id))?),
        Command::Delete { id } => ("DELETE_INSTANCE", s.value(|c| c.delete_instance(id))?),
        Command::History { id, from, limit } => {
            ("GET_HISTORY", s.value(|c| c.history(id, *from, *limit))?)
        }
        Command::Replication {
            command: ReplicationCommand::Status,
        } => ("REPLICATION_STATUS", s.value(|c| c.replication_status())?),
        Command::Promote => ("PROMOTE", s.value(|c| c.promote())?),
        _ => return Err(CliError::usage("not a one-call command")),
    })
}

/// `timers resume`: TIMERS_RESUME (docs/backup.md, "Timers after a restore").
fn timers_resume(s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let r = s.run(|c| c.timers_resume())?;
    match out.json {
        true => out.line(&r.to_string()),
        false if r["was_paused"] == true => out.line("timers resumed"),
        false => out.line("timers were not paused"),
    }
}

/// `diagram`: the machine drawn locally from GET_MACHINE's definition.
fn diagram(
    machine: &str,
    machine_version: Option<u64>,
    format: &str,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let m = s.run(|c| c.get_machine(machine, machine_version))?;
    let format = smdb_diagram::Format::parse(format)
        .ok_or_else(|| CliError::usage(format!("unknown format {format}")))?;
    let text = smdb_diagram::render(&m.machine, &m.definition, format)
        .map_err(|e| CliError::usage(format!("cannot draw {}: {e}", m.machine)))?;
    // The drawing ends with its own newline: printed as the server sends it.
    match out
        .out
        .write_all(text.as_bytes())
        .and_then(|()| out.out.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other.map_err(|e| CliError::usage(format!("cannot write: {e}"))),
    }
}

/// `batch OPS [--best-effort]`: one BATCH call.
fn batch(
    ops: &str,
    best_effort: bool,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let ops = json_arg(ops, "OPS")?;
    if !ops.is_array() {
        return Err(CliError::usage(format!(
            "OPS must be a JSON array, got {ops}"
        )));
    }
    let mode = if best_effort { "best_effort" } else { "atomic" };
    let r = s.run(|c| c.call("BATCH", json!({"mode": mode, "ops": ops})))?;
    out.result("BATCH", &r)
}

/// `raw OP [PARAMS]`: any op, its reply printed as JSON.
fn raw(
    op: &str,
    params: Option<&str>,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let p = match params {
        Some(p) => object_arg(p, "params")?,
        None => Value::Null,
    };
    let r = s.run(|c| c.call(op, p.clone()))?;
    out.raw(&r)
}

/// `backup --verify DIR`: 0 and a summary when every file holds, else exit 1 naming the first
/// file that is missing, changed or not listed.
fn verify_backup(dir: &std::path::Path, out: &mut Output<'_>) -> Result<(), CliError> {
    match backup::verify(dir) {
        Ok(files) => out.line(&format!("backup {}: {files} files verified", dir.display())),
        Err(problem) => Err(CliError::new(
            super::error::Kind::Server,
            super::error::BACKUP_INVALID,
            problem.to_string(),
        )),
    }
}

/// `backup --out DIR`: the backup, then its one-line summary.
fn take_backup(
    dir: &std::path::Path,
    s: &mut Session,
    out: &mut Output<'_>,
) -> Result<(), CliError> {
    let summary = super::backup_take::take(&s.addr, s.token(), s.tls(), dir)?;
    out.line(&format!("backup {}: {summary}", dir.display()))
}

/// `hash-token`: the SHA-256 hex of the token on standard input (one trailing newline dropped).
fn hash_token(out: &mut Output<'_>) -> Result<(), CliError> {
    let mut token = Vec::new();
    std::io::stdin()
        .read_to_end(&mut token)
        .map_err(|e| CliError::usage(format!("cannot read the token from standard input: {e}")))?;
    for end in [&b"\n"[..], b"\r"] {
        if token.ends_with(end) {
            token.pop();
        }
    }
    if token.is_empty() {
        return Err(CliError::usage("hash-token: standard input holds no token"));
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &token);
    token.fill(0);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    out.line(&hex)
}

/// Reads a PUT_MACHINE file: `{machine, version, definition}`, or a bare definition when
/// `--machine` and `--version` are given (which also override the file's).
fn machine_file(
    file: &str,
    machine: Option<&str>,
    version: Option<u64>,
) -> Result<(String, u64, Value), CliError> {
    let source = if file == "-" {
        "-".to_string()
    } else {
        format!("@{file}")
    };
    let v = json_arg(&source, "machine file")?;
    let (file_machine, file_version, def) = match v.get("definition") {
        Some(def) => (
            v["machine"].as_str().map(str::to_string),
            v["version"].as_u64(),
            def.clone(),
        ),
        None => (None, None, v),
    };
    let machine = machine.map(str::to_string).or(file_machine);
    let version = version.or(file_version);
    match (machine, version) {
        (Some(m), Some(ver)) => Ok((m, ver, def)),
        _ => Err(CliError::usage(format!(
            "{file}: give --machine and --version, or a file holding \
             {{\"machine\": M, \"version\": V, \"definition\": {{...}}}}"
        ))),
    }
}

fn create(cmd: &Command, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let Command::Create {
        machine,
        id,
        machine_version,
        context,
        idempotency_key,
    } = cmd
    else {
        return Err(CliError::usage("not a create command"));
    };
    let context = match context {
        Some(c) => object_arg(c, "--context")?,
        None => json!({}),
    };
    let version = match machine_version {
        Some(v) => *v,
        None => {
            let m = s.value(|c| c.get_machine(machine, None))?;
            m["version"].as_u64().ok_or_else(|| {
                CliError::usage(format!(
                    "GET_MACHINE {machine} gave no version; pass --version"
                ))
            })?
        }
    };
    let opts = CreateOptions {
        idempotency_key: idempotency_key.clone(),
    };
    let r = s.value(|c| c.create_instance_with(machine, version, id, &context, &opts))?;
    out.result("CREATE_INSTANCE", &r)
}

fn list(cmd: &Command, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let Command::List {
        machine,
        state,
        limit,
        cursor,
        all,
    } = cmd
    else {
        return Err(CliError::usage("not a list command"));
    };
    let mut filter = ListFilter {
        machine: machine.clone(),
        state: state.clone(),
        limit: *limit,
        cursor: cursor.clone(),
        ..ListFilter::default()
    };
    let mut page = s.value(|c| c.list_instances(&filter))?;
    if *all {
        let mut instances = take_array(&mut page["instances"]);
        while let Some(next) = page["next_cursor"].as_str() {
            filter.cursor = Some(next.to_string());
            page = s.value(|c| c.list_instances(&filter))?;
            instances.extend(take_array(&mut page["instances"]));
        }
        page = json!({"instances": instances, "next_cursor": null});
    }
    out.result("LIST_INSTANCES", &page)
}

fn take_array(v: &mut Value) -> Vec<Value> {
    match v.take() {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

fn apply(cmd: &Command, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let Command::Apply {
        id,
        event,
        payload,
        expected_state,
        expected_offset,
        idempotency_key,
    } = cmd
    else {
        return Err(CliError::usage("not an apply command"));
    };
    let payload = payload
        .as_deref()
        .map(|p| object_arg(p, "--payload"))
        .transpose()?;
    let opts = ApplyOptions {
        expected_state: expected_state.clone(),
        expected_wal_offset: *expected_offset,
        idempotency_key: idempotency_key.clone(),
    };
    let r = s.value(|c| c.apply_event_with(id, event, payload.as_ref(), &opts))?;
    out.result("APPLY_EVENT", &r)
}

fn man(dir: Option<&std::path::Path>, out: &mut Output<'_>) -> Result<(), CliError> {
    let cmd = Cli::command();
    let io = |e: std::io::Error| CliError::usage(format!("cannot write the man page: {e}"));
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io)?;
            clap_mangen::generate_to(cmd, d).map_err(io)?;
            out.line(&format!("man pages written to {}", d.display()))
        }
        None => clap_mangen::Man::new(cmd).render(out.out).map_err(io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_files_take_either_shape() {
        let dir = std::env::temp_dir().join(format!("smdb-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let full = dir.join("full.json");
        std::fs::write(
            &full,
            r#"{"machine":"m","version":2,"definition":{"states":[]}}"#,
        )
        .unwrap();
        let bare = dir.join("bare.json");
        std::fs::write(&bare, r#"{"states":[]}"#).unwrap();
        let full = full.to_str().unwrap();
        let bare = bare.to_str().unwrap();
        let (m, v, d) = machine_file(full, None, None).unwrap();
        assert_eq!((m.as_str(), v, d), ("m", 2, json!({"states": []})));
        let (m, v, _) = machine_file(full, Some("x"), Some(5)).unwrap();
        assert_eq!((m.as_str(), v), ("x", 5), "flags override the file");
        assert_eq!(
            machine_file(bare, Some("b"), Some(1)).unwrap().2,
            json!({"states": []})
        );
        assert!(machine_file(bare, Some("b"), None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn object_args_refuse_non_objects() {
        assert!(object_arg("[1]", "--context").is_err());
        assert!(object_arg("{bad", "--context").is_err());
        assert_eq!(object_arg(r#"{"a":1}"#, "--context").unwrap()["a"], 1);
    }
}
