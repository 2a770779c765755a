//! External programs the integration tests run (promtool, HAProxy, and for coming tests etcd and
//! Chromium), found on the `PATH` or in the sbin directories.
//!
//! A test whose program is missing fails with the Debian package that provides it and the line
//! that installs it; it never returns early and passes. `.ci/test` (the README's test command)
//! installs every package listed here before it runs the tests.

use std::path::PathBuf;

/// Directories searched after the `PATH`: Debian puts daemons such as haproxy in `/usr/sbin`,
/// which a non-root `PATH` often lacks.
const SBIN_DIRS: [&str; 2] = ["/usr/sbin", "/sbin"];

/// The program `name`, which the Debian package `package` provides. Panics with the install
/// line when it is on neither the `PATH` nor in `/usr/sbin` or `/sbin` (at the test's line:
/// `track_caller`).
#[track_caller]
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    match found {
        Some(path) => path,
        None => panic!(
            "`{name}` not found on PATH or in /usr/sbin, /sbin: install the Debian package \
             `{package}` (apt-get install -y --no-install-recommends {package}), or run \
             .ci/test, which installs every package the tests use"
        ),
    }
}

/// promtool, to check the metrics exposition, the alert rules and the dashboard queries.
#[track_caller]
pub fn promtool() -> PathBuf {
    require_tool("promtool", "prometheus")
}

/// HAProxy, to check tuning/haproxy.cfg and run the rolling drain behind it.
#[track_caller]
pub fn haproxy() -> PathBuf {
    require_tool("haproxy", "haproxy")
}

/// etcd (`/usr/bin/etcd`), for failover tests against loopback etcd members (`common::etcd`,
/// tests/ha.rs).
#[track_caller]
pub fn etcd() -> PathBuf {
    require_tool("etcd", "etcd-server")
}

/// Chromium (`/usr/bin/chromium`), for headless browser tests of a web console. No test uses
/// it yet; the module's `#![allow(dead_code)]` in `common` covers it until one does.
#[track_caller]
pub fn chromium() -> PathBuf {
    require_tool("chromium", "chromium")
}
