//! DOT (Graphviz): states as rounded boxes (final ones doubled), a point for the start,
//! edges labelled with event, guard and timer (timed ones dashed). Nodes are named `s0`,
//! `s1`, ...: a state's name is only ever a label, so no name can collide with the start
//! node or break out of its quotes.

use std::fmt::Write;

use crate::model::Graph;

/// `s` as the inside of a DOT double-quoted string (`\` and `"` escaped, line breaks as
/// `\n`). DOT reads `<` and `&` literally there.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

pub fn write(name: &str, g: &Graph) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(s, "digraph \"{}\" {{", escape(name));
    s.push_str("  rankdir=LR;\n");
    s.push_str("  node [shape=box, style=rounded, fontname=\"monospace\"];\n");
    s.push_str("  edge [fontname=\"monospace\", fontsize=10];\n");
    s.push_str("  start [shape=point, width=0.12, label=\"\"];\n");
    for (i, state) in g.states.iter().enumerate() {
        let extra = if g.finals[i] { ", peripheries=2" } else { "" };
        let _ = writeln!(s, "  s{i} [label=\"{}\"{extra}];", escape(state));
    }
    let _ = writeln!(s, "  start -> s{};", g.initial);
    for e in &g.edges {
        let dashed = if e.timer.is_some() {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  s{} -> s{} [label=\"{}\"{dashed}];",
            e.from,
            e.to,
            escape(&e.label())
        );
    }
    s.push_str("}\n");
    s
}
