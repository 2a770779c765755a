//! A byte scanner over compact JSON for the async reader's one-pass read (`fast`). Each read
//! gives what `serde_json` gives for the same text or `None`, and `None` for anything it does
//! not take on itself (whitespace, a `$` key, a value nested deeper than `DEPTH_MAX`), so its
//! caller falls back to serde for the whole message. Escaped strings and numbers other than
//! plain integers are handed to serde on their own bytes, which reads them exactly as it
//! would inside a larger document.

use serde_json::{Map, Number, Value};

/// Nesting a scanned value may have; deeper ones are left to serde (whose own limit, counted
/// from the start of the document, is larger).
const DEPTH_MAX: usize = 64;

pub(crate) struct Scan<'a> {
    b: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Scan<'a> {
    pub(crate) fn new(b: &'a [u8], at: usize) -> Scan<'a> {
        Scan { b, at }
    }

    /// The next byte, consumed.
    pub(crate) fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.at)?;
        self.at += 1;
        Some(c)
    }

    /// The byte `ahead` bytes on, not consumed.
    pub(crate) fn peek(&self, ahead: usize) -> Option<u8> {
        self.b.get(self.at + ahead).copied()
    }

    /// Consumes `literal` when the next bytes are exactly it.
    pub(crate) fn eat_literal(&mut self, literal: &[u8]) -> bool {
        let hit = self.b[self.at..].starts_with(literal);
        if hit {
            self.at += literal.len();
        }
        hit
    }

    /// Consumes `c` when it is the next byte.
    pub(crate) fn eat(&mut self, c: u8) -> bool {
        let hit = self.b.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    /// Requires `c` as the next byte.
    pub(crate) fn require(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    pub(crate) fn at_end(&self) -> bool {
        self.at == self.b.len()
    }

    /// The bytes of a string without escapes (`None` for an escaped one as for anything that
    /// is not a string), not checked as UTF-8: for comparing with a known name.
    pub(crate) fn plain_bytes(&mut self) -> Option<&'a [u8]> {
        self.require(b'"')?;
        let start = self.at;
        let len = plain_len(&self.b[start..]);
        if self.b.get(start + len) != Some(&b'"') {
            return None;
        }
        self.at = start + len + 1;
        Some(&self.b[start..start + len])
    }

    /// A string without escapes, borrowed (`None` for an escaped one as for anything that is
    /// not a string).
    pub(crate) fn plain_str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.plain_bytes()?).ok()
    }

    /// A string, escaped or not.
    pub(crate) fn string(&mut self) -> Option<String> {
        let start = self.at;
        if let Some(s) = self.plain_str() {
            return Some(s.to_owned());
        }
        self.at = start;
        self.require(b'"')?;
        // To the closing quote, past every escaped character; serde then reads the escapes.
        loop {
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
        serde_json::from_slice(self.b.get(start..self.at)?).ok()
    }

    /// A non-negative integer that fits a `u64`, as `u64` deserialization reads it (no
    /// sign, fraction or exponent, no leading zero).
    pub(crate) fn uint(&mut self) -> Option<u64> {
        let digits = self.b[self.at..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let text = &self.b[self.at..self.at + digits];
        if digits == 0 || (digits > 1 && text[0] == b'0') {
            return None;
        }
        if matches!(self.b.get(self.at + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let n = text.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?;
        self.at += digits;
        Some(n)
    }

    /// `true` or `false`.
    pub(crate) fn boolean(&mut self) -> Option<bool> {
        let rest = &self.b[self.at..];
        let (v, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += len;
        Some(v)
    }

    /// Any JSON value, as `serde_json::Value` deserializes it.
    pub(crate) fn value(&mut self) -> Option<Value> {
        self.value_in(0)
    }

    fn value_in(&mut self, depth: usize) -> Option<Value> {
        match *self.b.get(self.at)? {
            b'"' => self.string().map(Value::String),
            b'{' if depth < DEPTH_MAX => self.object(depth + 1),
            b'[' if depth < DEPTH_MAX => self.array(depth + 1),
            b't' | b'f' => self.boolean().map(Value::Bool),
            b'n' => {
                self.b[self.at..].starts_with(b"null").then_some(())?;
                self.at += 4;
                Some(Value::Null)
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        self.require(b'{')?;
        let mut m = Map::new();
        if self.eat(b'}') {
            return Some(Value::Object(m));
        }
        loop {
            let k = self.string()?;
            if k.starts_with('$') {
                // serde gives one such key (its raw-value token) a meaning of its own.
                return None;
            }
            self.require(b':')?;
            let v = self.value_in(depth)?;
            m.insert(k, v);
            match self.next()? {
                b',' => {}
                b'}' => return Some(Value::Object(m)),
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        self.require(b'[')?;
        let mut v = Vec::new();
        if self.eat(b']') {
            return Some(Value::Array(v));
        }
        loop {
            v.push(self.value_in(depth)?);
            match self.next()? {
                b',' => {}
                b']' => return Some(Value::Array(v)),
                _ => return None,
            }
        }
    }

    /// A number: a plain integer read here as serde reads it (`u64`, or `i64` when negative),
    /// anything else (fraction, exponent, out of range, `-0`) read by serde from its bytes.
    fn number(&mut self) -> Option<Value> {
        let start = self.at;
        let negative = self.eat(b'-');
        if let Some(n) = self.uint() {
            if !negative {
                return Some(Value::Number(Number::from(n)));
            }
            // As serde: `-n` is an i64 when that is negative, a float otherwise.
            let neg = (n as i64).wrapping_neg();
            if neg < 0 {
                return Some(Value::Number(Number::from(neg)));
            }
        }
        self.at = start;
        let len = self.b[start..]
            .iter()
            .take_while(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .count();
        self.at = start + len;
        serde_json::from_slice(&self.b[start..start + len]).ok()
    }
}

/// How many bytes from the start of `b` a JSON string holds as they are: up to the first
/// quote, backslash or control character (below 0x20), or all of them. These are the bytes
/// serde_json escapes when it writes a string, and the ones that end or escape a string when
/// it reads one. Eight bytes at a time (a string under eight bytes one by one).
pub(crate) fn plain_len(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `v` that is zero; above the lowest such byte, a byte may be
    // flagged falsely (a borrow), so only the lowest flag is used.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let hits = |w: [u8; 8]| {
        let w = u64::from_le_bytes(w);
        zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
    };
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        w
    };
    let n = b.len();
    let mut at = 0;
    while at + 8 <= n {
        let h = hits(word(at));
        if h != 0 {
            return at + (h.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    if at == n {
        return n;
    }
    if n < 8 {
        return b
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .unwrap_or(n);
    }
    // The last eight bytes, overlapping the ones checked already (whose flags are masked):
    // one more word rather than a byte loop or a copy of the tail.
    let checked = 8 - (n - at);
    let h = hits(word(n - 8)) & (u64::MAX << (checked * 8));
    match h {
        0 => n,
        h => n - 8 + (h.trailing_zeros() / 8) as usize,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The eight-at-a-time scan stops where the byte-by-byte one does.
        #[test]
        fn plain_len_is_the_first_byte_to_escape(
            b in prop::collection::vec(
                prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..=0xff, Just(b'x')],
                0..40,
            ),
            plain in 0usize..40,
        ) {
            // Mostly plain bytes before the first candidate, so that long runs are covered.
            let mut b = b;
            for c in b.iter_mut().take(plain) {
                *c = b'a' + (*c % 26);
            }
            let want = b
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .unwrap_or(b.len());
            prop_assert_eq!(plain_len(&b), want);
        }
    }

    fn scan_value(text: &str) -> Option<Value> {
        let mut s = Scan::new(text.as_bytes(), 0);
        let v = s.value()?;
        s.at_end().then_some(v)
    }

    #[test]
    fn values_read_as_serde_reads_them() {
        for text in [
            r#"{"a":1,"p":"xx","n":null,"t":[true,false,{}],"e":[],"s":"a\"b\u00e9\n"}"#,
            "0",
            "-1",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "-0",
            "1.5",
            "-2.5e-3",
            "1E300",
            r#""é€😀""#,
            r#"{"k":1,"k":2}"#,
            r#"[[[[1]]]]"#,
            r#""\ud83d\ude00""#,
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(scan_value(text), Some(want), "{text}");
        }
    }

    #[test]
    fn what_serde_refuses_or_the_scanner_leaves_is_none() {
        for text in [
            "01",
            "-",
            "1.",
            "1e",
            "--1",
            "+1",
            "tru",
            "nul",
            "\"a",
            "\"a\u{1}\"",
            "[1,]",
            "{\"a\"1}",
            "{\"a\":1,}",
            "{1:2}",
            "[1 ]",
            " 1",
            "{\"$x\":1}",
            "\"\\x\"",
            "1E400",
        ] {
            let mut s = Scan::new(text.as_bytes(), 0);
            let got = s.value().filter(|_| s.at_end());
            assert_eq!(got, None, "{text}");
        }
        let deep = "[".repeat(DEPTH_MAX + 1) + &"]".repeat(DEPTH_MAX + 1);
        assert_eq!(scan_value(&deep), None);
        let ok = "[".repeat(DEPTH_MAX) + &"]".repeat(DEPTH_MAX);
        assert!(scan_value(&ok).is_some());
    }

    #[test]
    fn uints_are_what_u64_deserialization_takes() {
        for text in ["0", "7", "10", "18446744073709551615"] {
            let mut s = Scan::new(text.as_bytes(), 0);
            assert_eq!(s.uint(), serde_json::from_str::<u64>(text).ok(), "{text}");
        }
        for text in ["", "01", "-1", "1.0", "1e2", "18446744073709551616", "x"] {
            assert_eq!(Scan::new(text.as_bytes(), 0).uint(), None, "{text}");
        }
    }

    /// Random JSON values: every kind, any text, and short strings and keys dense in the
    /// characters that need escapes (shared with `write`'s tests).
    pub(in crate::asyncio) fn arbitrary_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
            "[a-z\"\\\\\n\u{7f}é]{0,20}".prop_map(Value::from),
        ];
        let key = prop_oneof![any::<String>(), "[a-z\"\\\\é]{0,6}", "[a-z_$]{0,6}"];
        leaf.prop_recursive(4, 32, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                prop::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Every compact JSON text serde writes, the scanner reads back to serde's value (or
        /// leaves to serde).
        #[test]
        fn scanned_values_are_serdes(v in arbitrary_value()) {
            let text = serde_json::to_string(&v).unwrap();
            let want: Value = serde_json::from_str(&text).unwrap();
            if let Some(got) = scan_value(&text) {
                prop_assert_eq!(got, want);
            } else {
                prop_assert!(text.contains('$'), "left to serde: {}", text);
            }
        }

        /// On arbitrary text the scanner never gives a value serde would not give.
        #[test]
        fn scanned_text_is_never_misread(text in "[-0-9.eE+\\[\\]{}\":,a-z\\\\ $]{0,24}") {
            if let Some(got) = scan_value(&text) {
                prop_assert_eq!(Some(got), serde_json::from_str::<Value>(&text).ok());
            }
        }
    }
}
