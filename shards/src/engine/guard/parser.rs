//! Guard parser: tokens to an expression tree, refusing nesting deeper than `GUARD_DEPTH_MAX`.
//!
//! Grammar, loosest binding first:
//! ```text
//! or      := and ("||" and)*
//! and     := cmp ("&&" cmp)*
//! cmp     := unary (("=="|"!="|"<"|"<="|">"|">=") unary | "in" in_rhs)?
//! unary   := "!" unary | primary
//! primary := number | string | true | false | null | path | "has" "(" path ")" | "(" or ")"
//! in_rhs  := "[" (or ("," or)* ","?)? "]" | unary
//! path    := ("ctx" | "payload") ("." identifier)+
//! ```
//! Comparisons do not chain (`a == b == c` is an error): parenthesise instead.

use serde_json::Value;

use super::ast::{CmpOp, Expr, Path, Root};
use super::lexer::{tokenize, Tok, Token};
use super::GuardError;
use crate::engine::limits::GUARD_DEPTH_MAX;

/// Parses a whole guard expression.
pub(super) fn parse(src: &str) -> Result<Expr, GuardError> {
    let tokens = tokenize(src)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        depth: 0,
        end: src.len(),
    };
    let expr = parser.or()?;
    match parser.peek() {
        None => Ok(expr),
        Some(t) => Err(GuardError::new(
            t.pos,
            format!("unexpected {} after the expression", t.tok.describe()),
        )),
    }
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    /// Current nesting; each `or` level and each `!` counts one.
    depth: usize,
    /// Source length, the position reported for "unexpected end".
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn peek_tok(&self) -> Option<&Tok> {
        self.peek().map(|t| &t.tok)
    }

    fn pos(&self) -> usize {
        self.peek().map_or(self.end, |t| t.pos)
    }

    fn bump(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).cloned();
        self.next += usize::from(token.is_some());
        token
    }

    fn expect(&mut self, want: &Tok, what: &str) -> Result<(), GuardError> {
        match self.peek() {
            Some(t) if &t.tok == want => {
                self.next += 1;
                Ok(())
            }
            Some(t) => Err(GuardError::new(
                t.pos,
                format!("expected {what}, found {}", t.tok.describe()),
            )),
            None => Err(GuardError::new(
                self.end,
                format!("expected {what}, found the end"),
            )),
        }
    }

    fn enter(&mut self) -> Result<(), GuardError> {
        self.depth += 1;
        if self.depth > GUARD_DEPTH_MAX {
            let reason = format!("expression nested deeper than {GUARD_DEPTH_MAX} levels");
            return Err(GuardError::new(self.pos(), reason));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, GuardError> {
        self.enter()?;
        let mut terms = vec![self.and()?];
        while self.peek_tok() == Some(&Tok::OrOr) {
            self.next += 1;
            terms.push(self.and()?);
        }
        self.depth -= 1;
        Ok(flatten(terms, Expr::Or))
    }

    fn and(&mut self) -> Result<Expr, GuardError> {
        let mut terms = vec![self.cmp()?];
        while self.peek_tok() == Some(&Tok::AndAnd) {
            self.next += 1;
            terms.push(self.cmp()?);
        }
        Ok(flatten(terms, Expr::And))
    }

    fn cmp(&mut self) -> Result<Expr, GuardError> {
        let lhs = self.unary()?;
        let expr = if let Some(op) = self.peek_tok().and_then(cmp_op) {
            self.next += 1;
            Expr::Cmp(op, Box::new(lhs), Box::new(self.unary()?))
        } else if self.at_ident("in") {
            self.next += 1;
            self.in_rhs(lhs)?
        } else {
            return Ok(lhs);
        };
        if self.peek_tok().and_then(cmp_op).is_some() || self.at_ident("in") {
            let reason = "comparisons do not chain; use parentheses";
            return Err(GuardError::new(self.pos(), reason));
        }
        Ok(expr)
    }

    fn at_ident(&self, name: &str) -> bool {
        matches!(self.peek_tok(), Some(Tok::Ident(n)) if n == name)
    }

    fn in_rhs(&mut self, lhs: Expr) -> Result<Expr, GuardError> {
        if self.peek_tok() != Some(&Tok::LBracket) {
            return Ok(Expr::InValue(Box::new(lhs), Box::new(self.unary()?)));
        }
        self.next += 1;
        let mut items = Vec::new();
        while self.peek_tok() != Some(&Tok::RBracket) {
            items.push(self.or()?);
            if self.peek_tok() == Some(&Tok::Comma) {
                self.next += 1;
            } else {
                break;
            }
        }
        self.expect(&Tok::RBracket, "`,` or `]`")?;
        Ok(Expr::InList(Box::new(lhs), items))
    }

    fn unary(&mut self) -> Result<Expr, GuardError> {
        if self.peek_tok() != Some(&Tok::Bang) {
            return self.primary();
        }
        self.next += 1;
        self.enter()?;
        let inner = self.unary()?;
        self.depth -= 1;
        Ok(Expr::Not(Box::new(inner)))
    }

    fn primary(&mut self) -> Result<Expr, GuardError> {
        let end = self.end;
        let Some(Token { tok, pos }) = self.bump() else {
            return Err(GuardError::new(
                end,
                "expected an expression, found the end",
            ));
        };
        match tok {
            Tok::Num(n) => Ok(Expr::Lit(Value::Number(n))),
            Tok::Str(s) => Ok(Expr::Lit(Value::String(s))),
            Tok::LParen => {
                let inner = self.or()?;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(inner)
            }
            Tok::Ident(name) => self.named(&name, pos),
            Tok::LBracket => Err(GuardError::new(pos, "a list is only allowed after `in`")),
            other => Err(GuardError::new(
                pos,
                format!("expected an expression, found {}", other.describe()),
            )),
        }
    }

    /// An expression that starts with an identifier: a keyword literal, a path or `has(..)`.
    fn named(&mut self, name: &str, pos: usize) -> Result<Expr, GuardError> {
        match name {
            "true" => Ok(Expr::Lit(Value::Bool(true))),
            "false" => Ok(Expr::Lit(Value::Bool(false))),
            "null" => Ok(Expr::Lit(Value::Null)),
            "ctx" => Ok(Expr::Path(self.path(Root::Ctx, pos)?)),
            "payload" => Ok(Expr::Path(self.path(Root::Payload, pos)?)),
            "has" => {
                self.expect(&Tok::LParen, "`(` after `has`")?;
                let path = self.has_arg()?;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(Expr::Has(path))
            }
            other => Err(GuardError::new(
                pos,
                format!("unknown name `{other}`; paths start with `ctx.` or `payload.`"),
            )),
        }
    }

    fn has_arg(&mut self) -> Result<Path, GuardError> {
        match self.bump() {
            Some(Token {
                tok: Tok::Ident(name),
                pos,
            }) if name == "ctx" => self.path(Root::Ctx, pos),
            Some(Token {
                tok: Tok::Ident(name),
                pos,
            }) if name == "payload" => self.path(Root::Payload, pos),
            Some(t) => Err(GuardError::new(t.pos, "`has` takes a path such as `ctx.x`")),
            None => Err(GuardError::new(
                self.end,
                "`has` takes a path such as `ctx.x`",
            )),
        }
    }

    fn path(&mut self, root: Root, pos: usize) -> Result<Path, GuardError> {
        let mut fields = Vec::new();
        while self.peek_tok() == Some(&Tok::Dot) {
            self.next += 1;
            match self.bump() {
                Some(Token {
                    tok: Tok::Ident(field),
                    ..
                }) => fields.push(field),
                Some(t) => return Err(GuardError::new(t.pos, "expected a field name after `.`")),
                None => return Err(GuardError::new(self.end, "expected a field name after `.`")),
            }
        }
        if fields.is_empty() {
            return Err(GuardError::new(
                pos,
                "a path needs a field, such as `ctx.x`",
            ));
        }
        Ok(Path { root, fields })
    }
}

fn cmp_op(tok: &Tok) -> Option<CmpOp> {
    match tok {
        Tok::EqEq => Some(CmpOp::Eq),
        Tok::NotEq => Some(CmpOp::Ne),
        Tok::Lt => Some(CmpOp::Lt),
        Tok::Le => Some(CmpOp::Le),
        Tok::Gt => Some(CmpOp::Gt),
        Tok::Ge => Some(CmpOp::Ge),
        _ => None,
    }
}

/// One term stands alone; several make a flat `And`/`Or`.
fn flatten(mut terms: Vec<Expr>, make: fn(Vec<Expr>) -> Expr) -> Expr {
    if terms.len() == 1 {
        if let Some(only) = terms.pop() {
            return only;
        }
    }
    make(terms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(root: Root, fields: &[&str]) -> Expr {
        Expr::Path(Path {
            root,
            fields: fields.iter().map(|f| f.to_string()).collect(),
        })
    }

    fn lit(v: Value) -> Expr {
        Expr::Lit(v)
    }

    #[test]
    fn or_binds_looser_than_and() {
        let e = parse("true || false && null").unwrap();
        let and = Expr::And(vec![lit(Value::Bool(false)), lit(Value::Null)]);
        assert_eq!(e, Expr::Or(vec![lit(Value::Bool(true)), and]));
    }

    #[test]
    fn not_binds_tighter_than_comparison() {
        let e = parse("!ctx.a == true").unwrap();
        let not = Expr::Not(Box::new(path(Root::Ctx, &["a"])));
        assert_eq!(
            e,
            Expr::Cmp(CmpOp::Eq, Box::new(not), Box::new(lit(Value::Bool(true))))
        );
    }

    #[test]
    fn chains_of_and_are_flat() {
        let e = parse("ctx.a && ctx.b && payload.c").unwrap();
        assert!(matches!(e, Expr::And(ref v) if v.len() == 3));
    }

    #[test]
    fn in_takes_a_list_or_an_operand() {
        let e = parse("ctx.a in [1, 'x', payload.b,]").unwrap();
        assert!(matches!(e, Expr::InList(_, ref items) if items.len() == 3));
        assert!(matches!(parse("ctx.a in []").unwrap(), Expr::InList(_, ref i) if i.is_empty()));
        assert!(matches!(
            parse("ctx.a in ctx.list").unwrap(),
            Expr::InValue(..)
        ));
    }

    #[test]
    fn comparisons_do_not_chain() {
        let err = parse("ctx.a == 1 == true").unwrap_err();
        assert_eq!(err.pos, 11);
        assert!(parse("ctx.a in [1] in [true]").is_err());
        assert!(parse("(ctx.a == 1) == true").is_ok());
    }

    #[test]
    fn paths_need_a_known_root_and_a_field() {
        assert!(parse("ctx").is_err());
        assert!(parse("payload.").is_err());
        assert_eq!(parse("foo.bar").unwrap_err().pos, 0);
        assert_eq!(
            parse("ctx.in.null").unwrap(),
            path(Root::Ctx, &["in", "null"])
        );
    }

    #[test]
    fn has_takes_only_a_path() {
        assert!(parse("has(ctx.x)").is_ok());
        assert!(parse("has(payload.x.y)").is_ok());
        assert!(parse("has(1)").is_err());
        assert!(parse("has(ctx)").is_err());
        assert!(parse("has ctx.x").is_err());
        assert!(parse("has(ctx.x").is_err());
    }

    #[test]
    fn malformed_expressions_report_positions() {
        assert_eq!(parse("").unwrap_err().pos, 0);
        assert_eq!(parse("ctx.a ==").unwrap_err().pos, 8);
        assert_eq!(parse("(ctx.a").unwrap_err().pos, 6);
        assert_eq!(parse("ctx.a ctx.b").unwrap_err().pos, 6);
        assert_eq!(parse("[1]").unwrap_err().pos, 0);
        assert_eq!(parse("ctx.a in [1 2]").unwrap_err().pos, 12);
        assert_eq!(parse("&& true").unwrap_err().pos, 0);
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused() {
        let ok = format!(
            "{}true{}",
            "(".repeat(GUARD_DEPTH_MAX - 1),
            ")".repeat(GUARD_DEPTH_MAX - 1)
        );
        assert!(parse(&ok).is_ok());
        let deep = format!(
            "{}true{}",
            "(".repeat(GUARD_DEPTH_MAX),
            ")".repeat(GUARD_DEPTH_MAX)
        );
        assert!(parse(&deep).unwrap_err().reason.contains("nested"));
        assert!(parse(&format!("{}true", "!".repeat(GUARD_DEPTH_MAX * 2))).is_err());
        assert!(parse(&format!("{}true", "!".repeat(GUARD_DEPTH_MAX - 1))).is_ok());
    }
}
