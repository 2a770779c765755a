//! A definition's declared indexes (`"indexes": ["ctx.customer", ..]`, docs/queries.md):
//! parsed and checked at PUT_MACHINE, read by the engine's field indexes on every write of an
//! instance of the version.

use serde_json::Value;

use super::timed::{lookup, parse_ctx_path};
use super::DefinitionError;
use crate::engine::context::Fields;
use crate::engine::limits::INDEXES_PER_VERSION_MAX;

/// One declared index: the path as declared and its segments after `ctx.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPath {
    pub declared: String,
    segments: Vec<String>,
}

impl IndexPath {
    /// The value at this path in `ctx`, if any (indexed only when scalar: `indexes::key`).
    pub fn value<'c>(&self, ctx: &'c impl Fields) -> Option<&'c Value> {
        lookup(ctx, &self.segments)
    }

    /// The top-level context member the path starts at (a payload that does not write it
    /// leaves the indexed value as it was).
    pub fn member(&self) -> &str {
        self.segments.first().map_or("", String::as_str)
    }

    /// `path` read as an index path, or why not.
    pub fn parse(path: &str) -> Result<IndexPath, DefinitionError> {
        let what = format!("index {path:?}");
        Ok(IndexPath {
            declared: path.to_owned(),
            segments: parse_ctx_path(&what, path)?,
        })
    }
}

/// The `indexes` of a definition: at most `INDEXES_PER_VERSION_MAX`, each a context path,
/// none twice.
pub(super) fn parse_indexes(paths: &[String]) -> Result<Vec<IndexPath>, DefinitionError> {
    if paths.len() > INDEXES_PER_VERSION_MAX {
        return Err(DefinitionError::new(format!(
            "more than {INDEXES_PER_VERSION_MAX} indexes"
        )));
    }
    let mut out: Vec<IndexPath> = Vec::with_capacity(paths.len());
    for path in paths {
        let parsed = IndexPath::parse(path)?;
        if out.iter().any(|p| p.segments == parsed.segments) {
            return Err(DefinitionError::new(format!(
                "index {path:?} declared twice"
            )));
        }
        out.push(parsed);
    }
    Ok(out)
}
