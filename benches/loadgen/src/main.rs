//! `smdb-bench`: closed-loop load generator for smdb (library code in `smdb_bench`).

use std::process::ExitCode;

use clap::Parser;
use smdb_bench::Options;

fn main() -> ExitCode {
    let opts = Options::parse();
    match smdb_bench::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smdb-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
