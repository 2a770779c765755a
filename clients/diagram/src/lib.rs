//! `smdb-diagram`: a machine definition (the `definition` object PUT_MACHINE takes) drawn as
//! SVG, DOT or Mermaid (docs/http.md, "Diagrams"). The server answers
//! `GET /machines/{m}/versions/{v}/diagram` with it and `smdb-cli diagram` prints it.
//!
//! * `model`: the definition read into states and edges (`*` and multi-`from` transitions
//!   become one edge per state they cover);
//! * `layout`: a layered left-to-right layout made for state machines (ranks by distance
//!   from the initial state, crossings reduced by barycenter sweeps, back edges and long
//!   edges on lanes around the diagram, self-loops above their state);
//! * `svg`, `dot`, `mermaid`: the writers, each escaping every name and guard for its format.
//!
//! No I/O, no clock, no randomness: the same definition always gives the same bytes.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
mod dot;
mod layout;
mod mermaid;
mod model;
mod route;
mod svg;

pub use model::{Edge, Graph, Timer};

use serde_json::Value;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    Dot,
    Mermaid,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Svg, Format::Dot, Format::Mermaid];

    /// `svg`, `dot` or `mermaid`.
    pub fn parse(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == name)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Dot => "dot",
            Format::Mermaid => "mermaid",
        }
    }

    /// The HTTP media type of the output.
    pub const fn content_type(self) -> &'static str {
        match self {
            Format::Svg => "image/svg+xml",
            Format::Dot => "text/vnd.graphviz; charset=utf-8",
            Format::Mermaid => "text/plain; charset=utf-8",
        }
    }
}

/// Draws machine `name`'s `definition` in `format`; the error says what the definition lacks.
pub fn render(name: &str, definition: &Value, format: Format) -> Result<String, String> {
    let graph = Graph::from_definition(definition)?;
    Ok(match format {
        Format::Svg => svg::write(name, &graph, &layout::layout(&graph)),
        Format::Dot => dot::write(name, &graph),
        Format::Mermaid => mermaid::write(&graph),
    })
}
