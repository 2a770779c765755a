//! Running a command to its exit (smdb-server's checks, smdb-cli, promtool, scripts): its exit
//! code, stdout and stderr as text.

use std::io::Write;
use std::process::{Command, Stdio};

/// (exit code, or -1 for a signal; stdout; stderr).
pub type Ran = (i32, String, String);

fn ran(out: std::process::Output) -> Ran {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` (stdin closed) to its exit.
pub fn output(cmd: &mut Command) -> Ran {
    let out = cmd.stdin(Stdio::null()).output();
    ran(out.unwrap_or_else(|e| panic!("run {cmd:?}: {e}")))
}

/// Runs `cmd` to its exit with `input` on its stdin.
pub fn output_with_stdin(cmd: &mut Command, input: &str) -> Ran {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    ran(child.wait_with_output().unwrap())
}

/// Runs `cmd`, which must exit 0 (the failure shows what it printed); its stdout.
pub fn output_ok(cmd: &mut Command) -> String {
    let (code, stdout, stderr) = output(cmd);
    assert_eq!(code, 0, "{cmd:?} failed:\n{stdout}{stderr}");
    stdout
}

/// `smdb-cli --addr ADDR`, deaf to the environment's SMDB_ADDR and SMDB_TOKEN.
pub fn cli_at(addr: &str) -> Command {
    let mut cmd = Command::new(super::cli_bin());
    cmd.arg("--addr").arg(addr);
    cmd.env_remove("SMDB_ADDR").env_remove("SMDB_TOKEN");
    cmd
}
