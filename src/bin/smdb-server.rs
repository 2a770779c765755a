//! `smdb-server`: starts the server with embedded defaults or `--config FILE`;
//! `smdb-server restore ...` builds a data directory from a backup and the archive, offline.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use smdb::config::{Config, LogFormat, EXIT_CONFIG};

/// smdb: a thread-per-core state-machine database server.
#[derive(Parser)]
#[command(name = "smdb-server", version, about)]
struct Args {
    /// TOML configuration file; every key is optional (defaults: 127.0.0.1:7401, ./data).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Builds a data directory from a backup and the WAL archive, offline (docs/backup.md).
    Restore(RestoreArgs),
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// A backup directory (`smdb-cli backup --out`); it must pass `--verify`.
    #[arg(long, value_name = "DIR")]
    backup: PathBuf,
    /// The WAL archive (`storage.archive_dir`) to replay after the backup's cut.
    #[arg(long, value_name = "ARCHIVE_DIR")]
    archive: Option<PathBuf>,
    /// Keep, per shard, the entries at or before this time (RFC 3339 with Z or an offset).
    #[arg(long, value_name = "RFC3339", conflicts_with = "until_offset")]
    until: Option<String>,
    /// Stop each named shard at this offset: SHARD:OFFSET,...
    #[arg(long, value_name = "SHARD:OFFSET,...")]
    until_offset: Option<String>,
    /// The new data directory: absent or empty.
    #[arg(long, value_name = "NEW_DIR")]
    data_dir: PathBuf,
    /// A server started on the result arms no timers until `smdb-cli timers resume`.
    #[arg(long)]
    pause_timers: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Restore(r)) = args.command {
        return restore(r);
    }
    let config = match &args.config {
        Some(path) => Config::load(path),
        None => Config::from_toml(""),
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            // A config that failed validation may still say `logging.format = "json"`.
            match args.config.as_deref().is_some_and(wants_json) {
                true => json_error("config error", &e.to_string()),
                false => eprintln!("smdb-server: config error: {e}"),
            }
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    smdb::logging::init(&config.logging);
    let json = config.logging.format == LogFormat::Json;
    match smdb::boot::run(config, args.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match json {
                true => json_error("start-up failed", &e),
                false => eprintln!("smdb-server: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// True when the file parses as TOML with `logging.format = "json"` (even if it is otherwise
/// invalid as a config).
fn wants_json(path: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(v) = text.parse::<toml::Table>() else {
        return false;
    };
    v.get("logging")
        .and_then(|l| l.get("format"))
        .and_then(|f| f.as_str())
        == Some("json")
}

fn json_error(message: &str, error: &str) {
    smdb::logging::json_to_stderr(log::Level::Error, message, &[("error", error)]);
}

/// `smdb-server restore`: exit 0 with the positions reached, 1 with why it refused.
fn restore(r: RestoreArgs) -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let until = match smdb::restore::Until::parse(r.until.as_deref(), r.until_offset.as_deref()) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("smdb-server restore: {e}");
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    let options = smdb::restore::Options {
        backup: r.backup,
        archive: r.archive,
        until,
        data_dir: r.data_dir,
        pause_timers: r.pause_timers,
    };
    match smdb::restore::run(&options) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("smdb-server restore: {e}");
            ExitCode::FAILURE
        }
    }
}
