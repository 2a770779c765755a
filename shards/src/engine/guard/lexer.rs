//! Guard lexer: source text to tokens with byte positions. Owns nothing but the scan.

use serde_json::Number;

use super::GuardError;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Num(Number),
    Str(String),
    Ident(String),
    Dot,
    Comma,
    LParen,
    RParen,
    LBracket,
    RBracket,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Bang,
}

impl Tok {
    /// How an error message names this token.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Num(n) => format!("number {n}"),
            Tok::Str(_) => "string".to_string(),
            Tok::Ident(name) => format!("`{name}`"),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Tok::Dot => ".",
            Tok::Comma => ",",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::AndAnd => "&&",
            Tok::OrOr => "||",
            Tok::Bang => "!",
            Tok::Num(_) | Tok::Str(_) | Tok::Ident(_) => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub(super) tok: Tok,
    /// Byte offset of the token's first character in the source.
    pub(super) pos: usize,
}

/// Splits `src` into tokens, or reports the first character that cannot start or continue one.
pub(super) fn tokenize(src: &str) -> Result<Vec<Token>, GuardError> {
    let mut lexer = Lexer { src, pos: 0 };
    let mut out = Vec::new();
    while let Some(b) = lexer.skip_space() {
        let pos = lexer.pos;
        let tok = match b {
            b'"' | b'\'' => lexer.string(char::from(b))?,
            b'0'..=b'9' | b'-' => lexer.number()?,
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => lexer.ident(),
            _ => lexer.punct()?,
        };
        out.push(Token { tok, pos });
    }
    Ok(out)
}

struct Lexer<'s> {
    src: &'s str,
    /// Always on a char boundary: only ASCII bytes or whole chars are consumed.
    pos: usize,
}

impl Lexer<'_> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    /// Skips whitespace; returns the next byte, if any.
    fn skip_space(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.byte(self.pos) {
            self.pos += 1;
        }
        self.byte(self.pos)
    }

    fn punct(&mut self) -> Result<Tok, GuardError> {
        let start = self.pos;
        let next = self.byte(start + 1);
        let (tok, len) = match (self.byte(start), next) {
            (Some(b'.'), _) => (Tok::Dot, 1),
            (Some(b','), _) => (Tok::Comma, 1),
            (Some(b'('), _) => (Tok::LParen, 1),
            (Some(b')'), _) => (Tok::RParen, 1),
            (Some(b'['), _) => (Tok::LBracket, 1),
            (Some(b']'), _) => (Tok::RBracket, 1),
            (Some(b'='), Some(b'=')) => (Tok::EqEq, 2),
            (Some(b'!'), Some(b'=')) => (Tok::NotEq, 2),
            (Some(b'!'), _) => (Tok::Bang, 1),
            (Some(b'<'), Some(b'=')) => (Tok::Le, 2),
            (Some(b'<'), _) => (Tok::Lt, 1),
            (Some(b'>'), Some(b'=')) => (Tok::Ge, 2),
            (Some(b'>'), _) => (Tok::Gt, 1),
            (Some(b'&'), Some(b'&')) => (Tok::AndAnd, 2),
            (Some(b'|'), Some(b'|')) => (Tok::OrOr, 2),
            (Some(b'='), _) => return Err(GuardError::new(start, "expected `==`")),
            (Some(b'&'), _) => return Err(GuardError::new(start, "expected `&&`")),
            (Some(b'|'), _) => return Err(GuardError::new(start, "expected `||`")),
            _ => {
                let c = self.src[start..].chars().next().unwrap_or('?');
                return Err(GuardError::new(
                    start,
                    format!("unexpected character `{c}`"),
                ));
            }
        };
        self.pos += len;
        Ok(tok)
    }

    fn ident(&mut self) -> Tok {
        let start = self.pos;
        while let Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_') = self.byte(self.pos) {
            self.pos += 1;
        }
        Tok::Ident(self.src[start..self.pos].to_string())
    }

    fn string(&mut self, quote: char) -> Result<Tok, GuardError> {
        let start = self.pos;
        let mut out = String::new();
        let mut chars = self.src[start + 1..].char_indices();
        while let Some((i, c)) = chars.next() {
            let at = start + 1 + i;
            if c == quote {
                self.pos = at + 1;
                return Ok(Tok::Str(out));
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let escaped = match chars.next() {
                Some((_, '\\')) => '\\',
                Some((_, '"')) => '"',
                Some((_, '\'')) => '\'',
                Some((_, 'n')) => '\n',
                Some((_, 't')) => '\t',
                Some(_) => return Err(GuardError::new(at, "unknown escape in string")),
                None => break,
            };
            out.push(escaped);
        }
        Err(GuardError::new(start, "unterminated string"))
    }

    fn digits(&self, mut at: usize) -> usize {
        while let Some(b'0'..=b'9') = self.byte(at) {
            at += 1;
        }
        at
    }

    /// `-?digits(.digits)?([eE][+-]?digits)?`; an integer that fits i64 stays an integer.
    fn number(&mut self) -> Result<Tok, GuardError> {
        let start = self.pos;
        let int_start = if self.byte(start) == Some(b'-') {
            start + 1
        } else {
            start
        };
        let mut end = self.digits(int_start);
        if end == int_start {
            return Err(GuardError::new(start, "expected digits after `-`"));
        }
        let mut integral = true;
        if self.byte(end) == Some(b'.') && self.byte(end + 1).is_some_and(|b| b.is_ascii_digit()) {
            integral = false;
            end = self.digits(end + 1);
        }
        if let Some(b'e' | b'E') = self.byte(end) {
            let sign = usize::from(matches!(self.byte(end + 1), Some(b'+' | b'-')));
            let exp_end = self.digits(end + 1 + sign);
            if exp_end == end + 1 + sign {
                return Err(GuardError::new(end, "expected digits in exponent"));
            }
            integral = false;
            end = exp_end;
        }
        if let Some(b'a'..=b'z' | b'A'..=b'Z' | b'_') = self.byte(end) {
            return Err(GuardError::new(end, "unexpected letter after number"));
        }
        let text = &self.src[start..end];
        self.pos = end;
        let int = integral.then(|| text.parse::<i64>().ok()).flatten();
        match int {
            Some(i) => Ok(Tok::Num(Number::from(i))),
            None => text
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Tok::Num)
                .ok_or_else(|| GuardError::new(start, "number out of range")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn operators_and_punctuation_are_tokens() {
        assert_eq!(
            toks("== != < <= > >= && || ! . , ( ) [ ]"),
            vec![
                Tok::EqEq,
                Tok::NotEq,
                Tok::Lt,
                Tok::Le,
                Tok::Gt,
                Tok::Ge,
                Tok::AndAnd,
                Tok::OrOr,
                Tok::Bang,
                Tok::Dot,
                Tok::Comma,
                Tok::LParen,
                Tok::RParen,
                Tok::LBracket,
                Tok::RBracket
            ]
        );
    }

    #[test]
    fn numbers_keep_integers_and_parse_floats() {
        assert_eq!(toks("42"), vec![Tok::Num(Number::from(42))]);
        assert_eq!(toks("-7"), vec![Tok::Num(Number::from(-7))]);
        assert_eq!(toks("1.5"), vec![Tok::Num(Number::from_f64(1.5).unwrap())]);
        assert_eq!(
            toks("2e3"),
            vec![Tok::Num(Number::from_f64(2000.0).unwrap())]
        );
        assert_eq!(toks("1E-1"), vec![Tok::Num(Number::from_f64(0.1).unwrap())]);
    }

    #[test]
    fn bad_numbers_are_errors_with_position() {
        assert_eq!(tokenize("1 + 1").unwrap_err().pos, 2);
        assert_eq!(tokenize("x == -").unwrap_err().pos, 5);
        assert_eq!(tokenize("1e").unwrap_err().pos, 1);
        assert!(tokenize("1e999").unwrap_err().reason.contains("range"));
        assert!(tokenize("12ab").is_err());
    }

    #[test]
    fn strings_take_both_quotes_and_escapes() {
        assert_eq!(toks(r#""a\"b""#), vec![Tok::Str("a\"b".into())]);
        assert_eq!(toks(r#"'it\'s'"#), vec![Tok::Str("it's".into())]);
        assert_eq!(toks(r#"'x\\y\n\t'"#), vec![Tok::Str("x\\y\n\t".into())]);
        assert_eq!(toks("'é\"'"), vec![Tok::Str("é\"".into())]);
    }

    #[test]
    fn bad_strings_are_errors() {
        assert_eq!(tokenize("'abc").unwrap_err().reason, "unterminated string");
        assert_eq!(tokenize(r#""a\q""#).unwrap_err().pos, 2);
        assert!(tokenize("'abc\\").is_err());
    }

    #[test]
    fn single_ampersand_or_equals_is_an_error() {
        assert!(tokenize("a & b").is_err());
        assert!(tokenize("a | b").is_err());
        assert!(tokenize("a = b").is_err());
        assert_eq!(tokenize("a # b").unwrap_err().pos, 2);
        assert_eq!(tokenize("é").unwrap_err().pos, 0);
    }
}
