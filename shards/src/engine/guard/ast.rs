//! The compiled form of a guard: a tree built once by the parser, read by the evaluator.

use serde_json::Value;

/// Which object a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Root {
    /// The instance context before the event payload is merged.
    Ctx,
    /// The event payload (an empty object when the event has none).
    Payload,
}

/// `ctx.a.b`: a root and at least one field name.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Path {
    pub(super) root: Root,
    pub(super) fields: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// An expression. `&&` and `||` chains are flat lists so that a long chain does not deepen
/// evaluation recursion; only nesting (parentheses, `!`, lists) does, and the parser bounds it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Lit(Value),
    Path(Path),
    Has(Path),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// `x in [a, b, ...]`
    InList(Box<Expr>, Vec<Expr>),
    /// `x in y` where `y` should evaluate to an array (otherwise the test is false).
    InValue(Box<Expr>, Box<Expr>),
}
