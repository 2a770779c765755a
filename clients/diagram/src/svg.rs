//! SVG: laid out by `layout`, with no script, no `<style>` and no external reference, so it
//! renders the same inline in a page under a strict Content-Security-Policy, in a file, or in
//! a browser with no network. Colours are presentation attributes; a page restyles by class.
//!
//! Hooks for a page (the console): each state is `<g class="state" data-state="NAME">`
//! (plus `initial`, `final`), holding an empty `<text class="count" data-count-for="NAME">`
//! to put a live count in; each edge is `<g class="edge" data-from data-to data-event>`.

use std::fmt::Write;

use crate::layout::{n, short_label, Layout, CHAR_W};
use crate::model::Graph;

/// `s` escaped for XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not allowed in XML 1.0 at all: dropped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

const EDGE: &str = "#5b6470";
const INK: &str = "#1f2933";

pub fn write(name: &str, g: &Graph, l: &Layout) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail: every `write!` below is infallible.
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"smdb-diagram\" \
         data-machine=\"{}\" viewBox=\"{} {} {} {}\" width=\"{}\" height=\"{}\" \
         font-family=\"ui-monospace, Menlo, Consolas, monospace\" font-size=\"12\">",
        escape(name),
        n(l.min_x),
        n(l.min_y),
        n(l.width),
        n(l.height),
        n(l.width),
        n(l.height)
    );
    let _ = writeln!(s, "<title>{}</title>", escape(name));
    let _ = writeln!(
        s,
        "<defs><marker id=\"smdb-arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0 0L10 5L0 10z\" \
         fill=\"{EDGE}\"/></marker></defs>"
    );
    edges(&mut s, g, l);
    states(&mut s, g, l);
    s.push_str("</svg>\n");
    s
}

/// Every edge's line first, then every label over the lines (a white halo keeps each label
/// readable where a line crosses it).
fn edges(s: &mut String, g: &Graph, l: &Layout) {
    s.push_str("<g class=\"edges\">\n");
    for (e, r) in g.edges.iter().zip(&l.edges) {
        let timed = e.timer.is_some();
        let _ = writeln!(
            s,
            "<g class=\"edge{}\" data-from=\"{}\" data-to=\"{}\" data-event=\"{}\">\
             <title>{}</title><path d=\"{}\" fill=\"none\" stroke=\"{EDGE}\" stroke-width=\"1.3\"{} \
             marker-end=\"url(#smdb-arrow)\"/></g>",
            if timed { " timed" } else { "" },
            escape(&g.states[e.from]),
            escape(&g.states[e.to]),
            escape(&e.event),
            escape(&e.label()),
            r.path,
            if timed { " stroke-dasharray=\"5 3\"" } else { "" },
        );
    }
    s.push_str("</g>\n<g class=\"labels\">\n");
    for (e, r) in g.edges.iter().zip(&l.edges) {
        let label = e.label();
        let short = short_label(&label);
        let w = short.chars().count() as f64 * CHAR_W + 4.0;
        let x0 = match r.label.anchor {
            "start" => r.label.x - 2.0,
            _ => r.label.x - w / 2.0,
        };
        let _ = writeln!(
            s,
            "<g class=\"label\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" \
             fill=\"#fff\" fill-opacity=\"0.9\"/><text x=\"{}\" y=\"{}\" text-anchor=\"{}\" \
             fill=\"{INK}\">{}</text></g>",
            escape(&label),
            n(x0),
            n(r.label.y - 11.0),
            n(w),
            n(r.label.x),
            n(r.label.y),
            r.label.anchor,
            escape(&short)
        );
    }
    s.push_str("</g>\n");
}

fn states(s: &mut String, g: &Graph, l: &Layout) {
    s.push_str("<g class=\"states\">\n");
    let _ = writeln!(
        s,
        "<circle class=\"start\" cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{INK}\"/>\
         <path class=\"start-edge\" d=\"{}\" fill=\"none\" stroke=\"{EDGE}\" stroke-width=\"1.3\" \
         marker-end=\"url(#smdb-arrow)\"/>",
        n(l.start.0),
        n(l.start.1),
        l.start_path
    );
    for (i, (name, b)) in g.states.iter().zip(&l.nodes).enumerate() {
        let mut class = String::from("state");
        if i == g.initial {
            class.push_str(" initial");
        }
        if g.finals[i] {
            class.push_str(" final");
        }
        let name = escape(name);
        let _ = write!(
            s,
            "<g class=\"{class}\" data-state=\"{name}\"><title>{name}</title>\
             <rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"8\" fill=\"#fff\" \
             stroke=\"{INK}\" stroke-width=\"1.5\"/>",
            n(b.x),
            n(b.y),
            n(b.w),
            n(b.h)
        );
        if g.finals[i] {
            let _ = write!(
                s,
                "<rect class=\"final-ring\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" \
                 rx=\"6\" fill=\"none\" stroke=\"{INK}\" stroke-width=\"1\"/>",
                n(b.x + 3.0),
                n(b.y + 3.0),
                n(b.w - 6.0),
                n(b.h - 6.0)
            );
        }
        let cx = n(b.x + b.w / 2.0);
        let _ = writeln!(
            s,
            "<text class=\"name\" x=\"{cx}\" y=\"{}\" text-anchor=\"middle\" fill=\"{INK}\">\
             {name}</text><text class=\"count\" data-count-for=\"{name}\" x=\"{cx}\" y=\"{}\" \
             text-anchor=\"middle\" font-size=\"10\" fill=\"{EDGE}\"></text></g>",
            n(b.y + b.h / 2.0 - 1.0),
            n(b.y + b.h / 2.0 + 12.0)
        );
    }
    s.push_str("</g>\n");
}
