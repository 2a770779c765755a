//! `smdb-server`: starts the server with embedded defaults or `--config FILE`.

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
}

fn main() -> ExitCode {
    let args = Args::parse();
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
    match smdb::server::run(config, args.config) {
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
