//! tuning/: check-host.sh runs on a plain machine without root tools, exits 0 and prints every
//! section, and the config it suggests is one the server accepts; the unit and sysctl files
//! carry the settings the guide promises.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::run::output;

fn tuning(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tuning")
        .join(file)
}

/// Runs check-host.sh with `args`; returns (exit code, stdout, stderr).
fn check_host(args: &[&str]) -> (i32, String, String) {
    output(Command::new("bash").arg(tuning("check-host.sh")).args(args))
}

/// The indented TOML between "suggested config" and "suggested systemd".
fn suggested_config(out: &str) -> String {
    out.lines()
        .skip_while(|l| !l.contains("suggested config"))
        .skip(1)
        .take_while(|l| !l.contains("suggested systemd"))
        .map(|l| format!("{}\n", l.trim()))
        .collect()
}

#[test]
fn check_host_reports_every_section_and_exits_zero() {
    let (code, out, err) = check_host(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
    for section in [
        "kernel",
        "io_uring",
        "memlock",
        "cpu",
        "numa",
        "storage",
        "memory",
        "network",
        "recommendation",
        "summary",
    ] {
        assert!(
            out.contains(&format!("\n== {section} ==\n")),
            "missing {section}:\n{out}"
        );
    }
    assert!(out.contains("CPU governor"), "{out}");
    if std::path::Path::new("/sys/devices/system/cpu/cpuidle/current_driver").exists() {
        assert!(out.contains("cpuidle"), "{out}");
    }
    assert!(out.contains("RLIMIT_MEMLOCK"), "{out}");
    assert!(out.contains("LimitMEMLOCK="), "{out}");
    assert!(!err.contains("command not found"), "{err}");
    assert!(!err.contains("unbound variable"), "{err}");
}

#[test]
fn suggested_config_is_accepted_by_the_server() {
    let (code, out, _) = check_host(&["--data-dir", "/nonexistent/smdb/data"]);
    assert_eq!(code, 0, "{out}");
    let toml = suggested_config(&out);
    assert!(
        toml.contains("[shards]") && toml.contains("cores = ["),
        "{toml}"
    );
    let cfg = smdb::config::Config::from_toml(&toml)
        .unwrap_or_else(|e| panic!("suggested config rejected: {e}\n{toml}"));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = cfg.shards.cores.clone().unwrap_or_default();
    assert!(!cores.is_empty());
    assert!(
        cores.iter().all(|c| *c < cpus),
        "cores {cores:?} on {cpus} CPUs"
    );
    assert_eq!(cfg.shards.count, Some(cores.len() as u32));
}

#[test]
fn planned_layout_drives_the_memlock_figure() {
    // 2 shards + 2 fronts + 1 control = 5 executors x 3 rings x 1 MiB + 1 MiB = 16 MiB.
    let args = [
        "--shards",
        "2",
        "--acceptor-cores",
        "2",
        "--io-memory",
        "1048576",
    ];
    let (code, out, _) = check_host(&args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("executors = shards + acceptor_cores + 1 control = 5"),
        "{out}"
    );
    assert!(out.contains("= 16384 KiB"), "{out}");
    assert!(out.contains("LimitMEMLOCK=16M"), "{out}");
    assert!(suggested_config(&out).contains("count = 2"), "{out}");
}

#[test]
fn bad_usage_exits_2_and_help_exits_0() {
    assert_eq!(check_host(&["--bogus"]).0, 2);
    assert_eq!(check_host(&["--shards", "x"]).0, 2);
    let (code, out, _) = check_host(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--data-dir"), "{out}");
}

#[test]
fn service_unit_has_memlock_restart_and_graceful_stop() {
    let unit = std::fs::read_to_string(tuning("smdb.service")).unwrap();
    for key in [
        "LimitMEMLOCK=",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=",
        "Restart=on-failure",
        "RestartPreventExitStatus=78",
        "ExecStart=",
    ] {
        assert!(
            unit.lines().any(|l| l.starts_with(key)),
            "smdb.service lacks {key}"
        );
    }
}

#[test]
fn sysctl_snippet_is_key_equals_value() {
    let text = std::fs::read_to_string(tuning("sysctl/90-smdb.conf")).unwrap();
    let settings: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(settings.len() >= 5);
    for l in settings {
        let (k, v) = l
            .split_once(" = ")
            .unwrap_or_else(|| panic!("not `key = value`: {l}"));
        assert!(k.split('.').count() >= 2 && !v.trim().is_empty(), "{l}");
    }
    assert!(text.contains("net.core.somaxconn"));
}
