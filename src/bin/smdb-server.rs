//! `smdb-server`: starts the server with embedded defaults or `--config FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use smdb::config::{Config, EXIT_CONFIG};

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
            eprintln!("smdb-server: config error: {e}");
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    smdb::logging::init(&config.logging);
    match smdb::server::run(config, args.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smdb-server: {e}");
            ExitCode::FAILURE
        }
    }
}
