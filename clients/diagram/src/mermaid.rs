//! Mermaid `stateDiagram-v2`: states declared as `state "NAME" as sN` (so any name is only a
//! label), `[*]` for the start and after final states, one line per edge.
//!
//! Mermaid reads `#name;` and `#NN;` entity codes in labels; every character that could end
//! a label, start a comment or an arrow (`"`, `:`, `;`, `#`, `%`, `<`, `>`, `&`, `{`, `}`) is
//! written as one, so `-->` in a guard stays text.

use std::fmt::Write;

use crate::model::Graph;

/// `s` with Mermaid's special characters as entity codes and line breaks as spaces.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '&' => out.push_str("#amp;"),
            '#' | ':' | ';' | '%' | '{' | '}' => {
                let _ = write!(out, "#{};", c as u32);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

pub fn write(g: &Graph) -> String {
    let mut s = String::from("stateDiagram-v2\n  direction LR\n");
    // Writing into a String cannot fail.
    for (i, state) in g.states.iter().enumerate() {
        let _ = writeln!(s, "  state \"{}\" as s{i}", escape(state));
    }
    let _ = writeln!(s, "  [*] --> s{}", g.initial);
    for e in &g.edges {
        let _ = writeln!(s, "  s{} --> s{} : {}", e.from, e.to, escape(&e.label()));
    }
    for (i, _) in g.finals.iter().enumerate().filter(|(_, f)| **f) {
        let _ = writeln!(s, "  s{i} --> [*]");
    }
    s
}
