//! `smdb-cli`: command-line client and interactive shell for smdb. The code lives in
//! `src/cli/` (a module tree of this binary only, so the server library does not carry it).

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
