//! Habits a test keeps (in the spirit of TigerBeetle's `tidy.zig`): ratchets over the source
//! tree that may only move one way. Each figure below is what the tree held when the ratchet
//! was set; lower it when a change improves on it, never raise it.
//!
//! - functions longer than `FN_LINES_MAX` lines in server and library code: at most
//!   `LONG_FNS_MAX` (split a function by concept rather than raise it);
//! - signatures with `Result<_, String>` in server and library code: at most
//!   `RESULT_STRING_MAX` (new code returns typed errors with context);
//! - `fn free_port` only in `tests/common` (one copy of each test fixture);
//! - no citation of a document the repository does not have (the contract text code cites
//!   lives in `docs/`).
//!
//! Reads files as text: no build of anything, a fraction of a second.

use std::path::{Path, PathBuf};

/// A function longer than this many lines (its signature to its closing brace) is long.
const FN_LINES_MAX: usize = 70;
/// Long functions in server and library code today.
const LONG_FNS_MAX: usize = 7;
/// `Result<_, String>` signatures in server and library code today.
const RESULT_STRING_MAX: usize = 108;

/// Server and library code: what the two figures above count (not tests, benches or tools).
const CODE_DIRS: &[&str] = &[
    "src",
    "shards/src",
    "shards/format/src",
    "protocol/src",
    "clients/rust/src",
    "clients/cli/src",
    "clients/diagram/src",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` (relative to the root) whose name ends with one of `exts`.
fn files(dir: &str, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root().join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && name != "node_modules" {
                    stack.push(p);
                }
            } else if exts.iter().any(|x| name.ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A code file's text without its unit tests (`#[cfg(test)]` at column 0 and what follows;
/// files named `tests.rs` or under a `tests/` folder hold only tests).
fn code(p: &Path) -> Option<String> {
    let rel = p
        .strip_prefix(root())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned();
    if rel.contains("/tests/") || rel.ends_with("/tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(p).ok()?;
    Some(match text.find("\n#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    })
}

/// Whether `line` opens a function body (`fn name(` with an optional visibility and
/// qualifiers); returns its indentation.
fn fn_start(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    let mut rest = trimmed;
    for q in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    let is_fn = rest.starts_with("fn ") && !line.trim_end().ends_with(';');
    is_fn.then_some(indent)
}

/// The lengths of the functions in `text` (rustfmt's layout: a body closes with `}` at the
/// indentation of its `fn`).
fn fn_lengths(text: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(indent) = fn_start(line) else {
            continue;
        };
        let close = format!("{indent}}}");
        if let Some(end) = (i..lines.len()).find(|&j| lines[j] == close) {
            out.push((i + 1, end - i + 1));
        }
    }
    out
}

fn code_files() -> Vec<(PathBuf, String)> {
    CODE_DIRS
        .iter()
        .flat_map(|d| files(d, &[".rs"]))
        .filter_map(|p| code(&p).map(|t| (p, t)))
        .collect()
}

#[test]
fn long_functions_never_grow_in_number() {
    let mut long = Vec::new();
    for (p, text) in code_files() {
        for (line, n) in fn_lengths(&text) {
            if n > FN_LINES_MAX {
                long.push(format!("{}:{line} ({n} lines)", p.display()));
            }
        }
    }
    assert!(
        long.len() <= LONG_FNS_MAX,
        "{} functions over {FN_LINES_MAX} lines (at most {LONG_FNS_MAX}): split the new one by \
         concept\n{}",
        long.len(),
        long.join("\n")
    );
    println!(
        "{} functions over {FN_LINES_MAX} lines:\n{}",
        long.len(),
        long.join("\n")
    );
}

/// Occurrences of `Result<..., String>` in `text` (the error type written as `String`).
fn result_string(text: &str) -> usize {
    let mut n = 0;
    let mut rest = text;
    while let Some(at) = rest.find("Result<") {
        rest = &rest[at + "Result<".len()..];
        // The type's arguments up to its closing `>` (nested ones counted).
        let mut depth = 1;
        let end = rest.char_indices().find(|&(_, c)| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            depth == 0 || c == '{' || c == ';'
        });
        if let Some((end, '>')) = end {
            if rest[..end].trim_end().ends_with(", String") {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn result_string_never_grows() {
    let total: usize = code_files().iter().map(|(_, t)| result_string(t)).sum();
    assert!(
        total <= RESULT_STRING_MAX,
        "{total} `Result<_, String>` in server and library code (at most {RESULT_STRING_MAX}): \
         return a typed error with context"
    );
    println!("{total} `Result<_, String>` (ratchet {RESULT_STRING_MAX})");
}

#[test]
fn free_port_lives_only_in_tests_common() {
    let copies: Vec<String> = files("tests", &[".rs"])
        .into_iter()
        .filter(|p| !p.starts_with(root().join("tests/common")) && !p.ends_with("tidy.rs"))
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("fn free_port(")))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        copies.is_empty(),
        "use common::free_port instead of a copy: {copies:?}"
    );
}

#[test]
fn nothing_cites_a_document_the_repository_lacks() {
    // The design notes beside the repository are not part of a clone of it.
    let absent = ["CONTRACT", "../shared/"];
    let exts = [".rs", ".md", ".sh", ".py", ".toml", ".js", ".html"];
    let dirs = [
        "src", "shards", "protocol", "clients", "tests", "benches", "tuning", "docs", "fuzz", ".ci",
    ];
    let this = root().join("tests/tidy.rs");
    let mut found = Vec::new();
    let mut scan = |p: PathBuf| {
        if p == this {
            return;
        }
        let Ok(text) = std::fs::read_to_string(&p) else {
            return;
        };
        for (i, line) in text.lines().enumerate() {
            if absent.iter().any(|a| line.contains(a)) {
                found.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
            }
        }
    };
    dirs.iter()
        .flat_map(|d| files(d, &exts))
        .for_each(&mut scan);
    scan(root().join("README.md"));
    assert!(
        found.is_empty(),
        "cite docs/ (the repository's own) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_counters_count_what_they_say() {
    let text = "fn a() {\n    x;\n}\n\n    pub(crate) async fn b(\n        y: u8,\n    ) {\n    }\nfn c();\n";
    assert_eq!(fn_lengths(text), vec![(1, 3), (5, 4)]);
    let sigs = "fn f() -> Result<(), String> {}\nfn g() -> Result<Vec<(u8, u8)>, String>;\n\
                fn h() -> Result<u8, Error> {}\nfn i() -> std::io::Result<u8> {}";
    assert_eq!(result_string(sigs), 2);
}
