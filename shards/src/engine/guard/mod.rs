//! The guard language: a small, safe, CEL-like condition over `ctx` (the instance context before
//! the event's payload is merged) and `payload` (the event payload).
//!
//! A guard is compiled once, when its machine definition is stored, into a tree. Evaluation has
//! no I/O, no loops and bounded recursion (the parser refuses nesting deeper than
//! `GUARD_DEPTH_MAX`), and it cannot fail: type mismatches make comparisons false. A guard holds
//! only when its value is exactly `true`.
//!
//! This module owns the lexer, the parser and the evaluator; it knows nothing of machines.

mod ast;
mod eval;
mod lexer;
mod parser;

use std::fmt;

use serde_json::Value;

use super::context::Fields;

use crate::engine::limits::GUARD_SOURCE_BYTES_MAX;

/// A compiled guard expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Guard {
    source: String,
    expr: ast::Expr,
}

/// Why a guard did not compile: the byte offset in the source and a short reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardError {
    pub pos: usize,
    pub reason: String,
}

impl GuardError {
    pub(crate) fn new(pos: usize, reason: impl Into<String>) -> Self {
        GuardError {
            pos,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.pos, self.reason)
    }
}

impl std::error::Error for GuardError {}

impl Guard {
    /// Parses `source` into a guard, refusing sources over `GUARD_SOURCE_BYTES_MAX`.
    pub fn compile(source: &str) -> Result<Guard, GuardError> {
        if source.len() > GUARD_SOURCE_BYTES_MAX {
            let reason = format!("guard longer than {GUARD_SOURCE_BYTES_MAX} bytes");
            return Err(GuardError::new(GUARD_SOURCE_BYTES_MAX, reason));
        }
        let expr = parser::parse(source)?;
        Ok(Guard {
            source: source.to_string(),
            expr,
        })
    }

    /// The text the guard was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the guard evaluates to exactly `true`.
    pub fn holds(&self, ctx: &impl Fields, payload: &impl Fields) -> bool {
        self.eval(ctx, payload) == &Value::Bool(true)
    }

    /// The guard's value (a boolean for every operator, any JSON value for a bare path or
    /// literal).
    pub fn eval<'a>(&'a self, ctx: &'a impl Fields, payload: &'a impl Fields) -> &'a Value {
        eval::eval(&self.expr, &eval::Scope { ctx, payload })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Map};

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("test input must be an object"),
        }
    }

    /// Evaluates `src` over the given ctx and payload.
    fn run(src: &str, ctx: Value, payload: Value) -> Value {
        let guard = Guard::compile(src).unwrap();
        let (ctx, payload) = (obj(ctx), obj(payload));
        guard.eval(&ctx, &payload).clone()
    }

    fn holds(src: &str, ctx: Value) -> bool {
        let guard = Guard::compile(src).unwrap();
        guard.holds(&obj(ctx), &Map::new())
    }

    #[test]
    fn paths_read_ctx_and_payload() {
        let ctx = json!({"a": {"b": 3}});
        assert_eq!(run("ctx.a.b", ctx.clone(), json!({})), json!(3));
        assert_eq!(run("payload.x", json!({}), json!({"x": "y"})), json!("y"));
        assert!(holds("ctx.a.b == 3", ctx));
    }

    #[test]
    fn missing_path_is_null() {
        assert!(holds("ctx.nope == null", json!({})));
        assert!(holds("ctx.a.b.c == null", json!({"a": 1})));
        assert!(holds("ctx.a.b == null", json!({"a": {"c": 1}})));
        assert!(!holds("ctx.nope", json!({})));
    }

    #[test]
    fn has_is_true_for_present_null_and_false_for_missing() {
        let ctx = json!({"n": null, "a": {"b": false}});
        assert!(holds("has(ctx.n)", ctx.clone()));
        assert!(holds("has(ctx.a.b)", ctx.clone()));
        assert!(!holds("has(ctx.missing)", ctx.clone()));
        assert!(!holds("has(ctx.a.b.c)", ctx));
        assert_eq!(
            run("has(payload.p)", json!({}), json!({"p": 0})),
            json!(true)
        );
    }

    #[test]
    fn numbers_compare_numerically_across_int_and_float() {
        assert!(holds("ctx.n == 1", json!({"n": 1.0})));
        assert!(holds("ctx.n == 1.0", json!({"n": 1})));
        assert!(holds("ctx.n != 1.5", json!({"n": 1})));
        assert!(holds("ctx.n < 1.5", json!({"n": 1})));
        assert!(holds("ctx.n >= -2", json!({"n": -2.0})));
        assert!(holds(
            "ctx.big > 9007199254740992",
            json!({"big": 9007199254740993u64})
        ));
        assert!(holds("ctx.u > -1", json!({"u": u64::MAX})));
    }

    #[test]
    fn equality_is_deep_and_type_strict() {
        assert!(holds(
            "ctx.a == ctx.b",
            json!({"a": [1, {"x": 2}], "b": [1.0, {"x": 2.0}]})
        ));
        assert!(!holds("ctx.a == ctx.b", json!({"a": [1], "b": [1, 2]})));
        assert!(!holds("ctx.a == '1'", json!({"a": 1})));
        assert!(!holds("ctx.a == true", json!({"a": 1})));
        assert!(holds("null == null", json!({})));
        assert!(holds("'a' != 'b'", json!({})));
    }

    #[test]
    fn ordering_needs_two_numbers_or_two_strings() {
        assert!(holds("'abc' < 'abd'", json!({})));
        assert!(holds("'b' >= 'a'", json!({})));
        assert!(!holds("ctx.a < 5", json!({"a": "1"})));
        assert!(!holds("ctx.a >= 5", json!({"a": "1"})));
        assert!(!holds("null < 1", json!({})));
        assert!(!holds("true > false", json!({})));
        assert!(!holds("ctx.missing <= 0", json!({})));
    }

    #[test]
    fn logic_treats_only_true_as_true() {
        assert!(!holds("ctx.one && true", json!({"one": 1})));
        assert!(holds("ctx.one || true", json!({"one": 1})));
        assert!(holds("!ctx.one", json!({"one": 1})));
        assert!(holds("!null", json!({})));
        assert!(!holds("!true", json!({})));
        assert!(holds("!!true", json!({})));
    }

    #[test]
    fn precedence_puts_or_below_and_below_comparison() {
        assert!(holds("true || false && false", json!({})));
        assert!(!holds("(true || false) && false", json!({})));
        assert!(holds(
            "ctx.a == 1 && ctx.b == 2 || ctx.c == 3",
            json!({"c": 3})
        ));
        // `!` binds tighter than `==`: (!false) == true.
        assert!(holds("!false == true", json!({})));
        assert!(holds("!(1 == 2)", json!({})));
    }

    #[test]
    fn and_or_short_circuit() {
        let guard = Guard::compile("false && ctx.a == 1").unwrap();
        assert!(matches!(guard.expr, ast::Expr::And(_)));
        // Short circuit is observable as "the rest is not needed": the values agree with it.
        assert!(!holds("false && true", json!({})));
        assert!(holds("true || false", json!({})));
        assert!(holds("ctx.x == 1 || ctx.x.y.z == 2", json!({"x": 1})));
    }

    #[test]
    fn in_checks_membership_in_a_list_or_an_array_value() {
        assert!(holds("ctx.s in ['a', 'b']", json!({"s": "b"})));
        assert!(!holds("ctx.s in ['a', 'b']", json!({"s": "c"})));
        assert!(holds("ctx.n in [1, 2.0, 3]", json!({"n": 2})));
        assert!(holds("ctx.n in [payload.x, ctx.n]", json!({"n": 7})));
        assert!(!holds("ctx.n in []", json!({"n": 7})));
        assert!(holds(
            "ctx.s in ctx.allowed",
            json!({"s": "x", "allowed": ["y", "x"]})
        ));
        assert!(!holds(
            "ctx.s in ctx.allowed",
            json!({"s": "x", "allowed": "x"})
        ));
        assert!(holds("ctx.missing in [null]", json!({})));
        assert!(holds("!(ctx.s in ['a'])", json!({"s": "b"})));
    }

    #[test]
    fn only_exact_true_holds() {
        assert!(!holds("ctx.v", json!({"v": 1})));
        assert!(!holds("ctx.v", json!({"v": "true"})));
        assert!(holds("ctx.v", json!({"v": true})));
        assert!(!holds("null", json!({})));
    }

    #[test]
    fn strings_with_escapes_compare_by_content() {
        assert!(holds(r#"ctx.s == "a\"b""#, json!({"s": "a\"b"})));
        assert!(holds(r"ctx.s == 'it\'s'", json!({"s": "it's"})));
        assert!(holds(r"ctx.s == 'a\nb\t'", json!({"s": "a\nb\t"})));
    }

    #[test]
    fn overlong_guard_source_is_refused() {
        let long = format!("ctx.a == '{}'", "x".repeat(GUARD_SOURCE_BYTES_MAX));
        let err = Guard::compile(&long).unwrap_err();
        assert!(err.reason.contains("longer"));
    }

    #[test]
    fn long_flat_chains_compile_and_evaluate() {
        let src = vec!["ctx.a == 1"; 250].join(" || ");
        assert!(holds(&src, json!({"a": 1})));
    }

    #[test]
    fn error_display_names_position_and_reason() {
        let err = Guard::compile("ctx.a ==").unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 8: expected an expression, found the end"
        );
    }

    fn token_soup() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "ctx", "payload", ".", "a", "b", "has", "(", ")", "[", "]", ",", "in", "==", "!=", "<",
            "<=", ">", ">=", "&&", "||", "!", "true", "false", "null", "1", "-2.5", "'s'", "\"t\"",
            "1e3", " ", "'", "\\", "é", "=", "&",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_text(src in ".{0,200}") {
            let _ = Guard::compile(&src);
        }

        #[test]
        fn parser_never_panics_on_token_soup(src in token_soup()) {
            if let Ok(guard) = Guard::compile(&src) {
                let ctx = obj(json!({"a": {"b": [1, "x"]}, "b": 2}));
                let _ = guard.holds(&ctx, &ctx);
            }
        }

        #[test]
        fn error_positions_lie_within_the_source(src in token_soup()) {
            if let Err(err) = Guard::compile(&src) {
                prop_assert!(err.pos <= src.len());
            }
        }
    }
}
