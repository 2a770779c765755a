//! Guard evaluator: walks the tree over `ctx` and `payload`. Never fails, never allocates:
//! every value is a reference into the tree, the inputs, or a static.
//!
//! Typing rules: `==`/`!=` compare JSON values (numbers numerically, int and float alike);
//! ordering needs two numbers or two strings and is false otherwise; `&&`, `||`, `!` treat
//! only `true` as true; a missing path is `null`.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::ast::{CmpOp, Expr, Path, Root};
use crate::engine::context::Fields;

static NULL: Value = Value::Null;
static TRUE: Value = Value::Bool(true);
static FALSE: Value = Value::Bool(false);

/// The objects a guard reads.
pub(super) struct Scope<'a, C, P> {
    pub(super) ctx: &'a C,
    pub(super) payload: &'a P,
}

fn boolean(b: bool) -> &'static Value {
    if b {
        &TRUE
    } else {
        &FALSE
    }
}

pub(super) fn is_true(v: &Value) -> bool {
    matches!(v, Value::Bool(true))
}

/// Evaluates `expr`. Recursion depth follows the tree's nesting, which the parser bounds.
pub(super) fn eval<'a, C: Fields, P: Fields>(expr: &'a Expr, scope: &Scope<'a, C, P>) -> &'a Value {
    match expr {
        Expr::Lit(v) => v,
        Expr::Path(path) => lookup(path, scope).unwrap_or(&NULL),
        Expr::Has(path) => boolean(lookup(path, scope).is_some()),
        Expr::Not(inner) => boolean(!is_true(eval(inner, scope))),
        Expr::And(terms) => boolean(terms.iter().all(|t| is_true(eval(t, scope)))),
        Expr::Or(terms) => boolean(terms.iter().any(|t| is_true(eval(t, scope)))),
        Expr::Cmp(op, a, b) => boolean(compare(*op, eval(a, scope), eval(b, scope))),
        Expr::InList(x, items) => {
            let x = eval(x, scope);
            boolean(items.iter().any(|item| json_eq(x, eval(item, scope))))
        }
        Expr::InValue(x, list) => {
            let x = eval(x, scope);
            match eval(list, scope) {
                Value::Array(items) => boolean(items.iter().any(|item| json_eq(x, item))),
                _ => &FALSE,
            }
        }
    }
}

/// The value at `path`, or None when any step is missing or not an object.
fn lookup<'a, C: Fields, P: Fields>(path: &Path, scope: &Scope<'a, C, P>) -> Option<&'a Value> {
    let (first, rest) = path.fields.split_first()?;
    let mut value = match path.root {
        Root::Ctx => scope.ctx.field(first)?,
        Root::Payload => scope.payload.field(first)?,
    };
    for field in rest {
        value = value.as_object()?.get(field)?;
    }
    Some(value)
}

fn compare(op: CmpOp, a: &Value, b: &Value) -> bool {
    match op {
        CmpOp::Eq => json_eq(a, b),
        CmpOp::Ne => !json_eq(a, b),
        CmpOp::Lt => order(a, b).is_some_and(Ordering::is_lt),
        CmpOp::Le => order(a, b).is_some_and(Ordering::is_le),
        CmpOp::Gt => order(a, b).is_some_and(Ordering::is_gt),
        CmpOp::Ge => order(a, b).is_some_and(Ordering::is_ge),
    }
}

fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Integers compare exactly; anything involving a float compares as f64.
fn number_order(x: &Number, y: &Number) -> Option<Ordering> {
    if let (Some(a), Some(b)) = (integer(x), integer(y)) {
        return Some(a.cmp(&b));
    }
    x.as_f64()?.partial_cmp(&y.as_f64()?)
}

/// JSON equality with numbers compared by value (`1 == 1.0`), also inside arrays and objects.
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}
