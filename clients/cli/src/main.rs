//! `smdb-cli`: one-shot subcommands for every operation, and an interactive shell (REPL) when
//! no subcommand is given. Built on the blocking `smdb_client`; no async runtime.
//!
//! * `args`: clap definitions (also used for completions, the man page and REPL lines).
//! * `commands`: one subcommand → one typed client call → printed result.
//! * `render`: human-readable tables; `--json` prints results as they came.
//! * `session`: the connection, reconnected when it broke.
//! * `backup`: the backup manifest and `backup --verify` (offline).
//! * `cluster`: `cluster create|add-group|move-slots|cancel|rebalance|status|check`
//!   (`cluster_plan`: the rebalance planner; `cluster_check`: `check`'s verdict).
//! * `ha`: `ha status|history|pause|resume` and `switchover` (automatic failover).
//! * `backup_take`: `backup --out DIR`, the online backup through `BACKUP`.
//! * `query`: `find` and `scan`; `lifecycle`: `migrate` and `delete-instances`.
//! * `repl`, `watch`, `interrupt`, `error`.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
mod args;
mod backup;
mod backup_take;
mod cluster;
mod cluster_check;
mod cluster_plan;
mod commands;
mod error;
mod ha;
mod interrupt;
mod lifecycle;
mod query;
mod render;
mod repl;
mod session;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::Cli;
use commands::Output;
use error::EXIT_USAGE;
use session::Session;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version: print and succeed.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: USAGE: {}", sub_error_text(&e));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match &cli.command {
        None => repl::run(&cli.global),
        Some(cmd) => one_shot(cmd, &cli),
    }
}

fn one_shot(cmd: &args::Command, cli: &Cli) -> ExitCode {
    let run = || {
        let mut s = Session::new(&cli.global)?;
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        let mut out = Output {
            out: &mut lock,
            json: cli.global.json,
        };
        let r = commands::run(cmd, &mut s, &mut out);
        s.close();
        r
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::from(e.exit_code())
        }
    }
}

/// A clap error without its own `error: ` prefix (we print `error: USAGE: ` instead).
fn sub_error_text(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.trim_end();
    text.strip_prefix("error: ").unwrap_or(text).to_string()
}
