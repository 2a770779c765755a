//! A byte scanner over JSON that was already validated (the envelope parse checked the whole
//! request): it finds keys and steps over values without checking them again. Every method
//! returns None on anything it does not expect, and its callers then fall back to serde, which
//! gives the same result or the proper error. Used where the front reads a little out of a
//! request that the shard parses in full (`route`, `batch`). The value readers `clean_str`,
//! `uint` and `compact_object` accept only text that is valid JSON by itself, so the shard's
//! read of the usual APPLY_EVENT params (`events`) takes what they return without a parse.

#[derive(Clone, Copy)]
pub(crate) struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    pub fn new(b: &'a [u8]) -> Scanner<'a> {
        Scanner { b, i: 0 }
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.i
    }

    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    pub fn eat(&mut self, c: u8) -> Option<()> {
        (self.bump()? == c).then_some(())
    }

    pub fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Steps through an object; `member(key, self)` must step over each member's value. Keys
    /// must be free of escapes.
    pub fn object(
        &mut self,
        mut member: impl FnMut(&'a [u8], &mut Self) -> Option<()>,
    ) -> Option<()> {
        self.ws();
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.plain_string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(key, self)?;
            self.ws();
            match self.bump()? {
                b',' => self.ws(),
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// Steps through an array; `item(self)` must step over each element.
    pub fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.ws();
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            match self.bump()? {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// The scanned bytes in `range` (positions from `pos`).
    pub fn text(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        &self.b[range]
    }

    /// Whether only whitespace is left.
    pub fn at_end(&mut self) -> bool {
        self.ws();
        self.i == self.b.len()
    }

    /// A string without escapes; its bytes between the quotes.
    pub fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let end = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
        if rest[end] != b'"' {
            return None;
        }
        self.i += end + 1;
        Some(&rest[..end])
    }

    /// A string without escapes or control characters, as text: valid JSON by itself, so
    /// callers may take it whether or not the text was parsed before. None for anything else.
    pub fn clean_str(&mut self) -> Option<&'a str> {
        let b = self.plain_string()?;
        if b.iter().any(|&c| c < 0x20) {
            return None;
        }
        shards::engine::utf8(b).ok()
    }

    /// A non-negative integer written plainly (no sign, fraction, exponent or leading zero)
    /// that fits a u64. None for anything else.
    pub fn uint(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        let leading_zero = digits > 1 && self.b[start] == b'0';
        let more = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !more).then_some(n)
    }

    /// An object in the compact form `JsonText::compact_object_len` accepts (valid JSON by
    /// itself), as text. None for anything else.
    pub fn compact_object(&mut self) -> Option<&'a str> {
        let rest = &self.b[self.i..];
        let len = shards::engine::JsonText::compact_object_len(rest)?;
        let text = shards::engine::utf8(&rest[..len]).ok()?;
        self.i += len;
        Some(text)
    }

    /// Steps over `null` when it is next; whether it did.
    pub fn null(&mut self) -> bool {
        let at_null = self.b[self.i..].starts_with(b"null");
        if at_null {
            self.i += 4;
        }
        at_null
    }

    /// Steps over any string (escapes included).
    pub fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let rest = &self.b[self.i..];
            let at = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
            self.i += at + 1;
            if rest[at] == b'"' {
                return Some(());
            }
            self.i += 1; // the escaped byte (a `\u` escape's hex digits need no care)
        }
    }

    /// Steps over one value: a string, an object or array (strings inside skipped whole, so
    /// their brackets do not count), or a number or literal.
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => self.skip_string()?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.i += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => self.i += 1,
                    }
                }
            }
            _ => {
                let start = self.i;
                while matches!(
                    self.peek(),
                    Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E')
                ) {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

/// Random JSON texts shaped like params (and like BATCH params) for the property tests of the
/// scans: keys from the few the scans look for plus others, strings with quotes, brackets and
/// escapes, ids that are not strings, duplicates, and spacing or none.
#[cfg(test)]
pub(crate) mod arb {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    fn string() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("{t}:1".to_string()),
            Just("q\"uo}te]".to_string()),
            Just("back\\slash".to_string()),
            Just("caf\u{e9}".to_string()),
            Just(String::new()),
            "[a-z{}\\[\\]:,\" ]{0,6}",
        ]
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            string().prop_map(Value::String),
            Just(Value::Null),
            Just(json!(true)),
            Just(json!(-1.5e3)),
            Just(json!(7)),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("id".to_string()),
            Just("instance_id".to_string()),
            Just("mode".to_string()),
            Just("ops".to_string()),
            Just("op".to_string()),
            Just("params".to_string()),
            Just("payload".to_string()),
            Just("i\"d".to_string()),
        ]
    }

    /// Any value, nested a few levels.
    pub fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// An object's text made of these members in this order (duplicates kept), compact or
    /// spaced.
    pub fn object_text(members: &[(String, Value)], spaced: bool) -> String {
        let sep = if spaced { " , " } else { "," };
        let colon = if spaced { " : " } else { ":" };
        let body: Vec<String> = (members.iter())
            .map(|(k, v)| format!("{}{colon}{}", Value::String(k.clone()), v))
            .collect();
        if spaced {
            format!(" {{ {} }} ", body.join(sep))
        } else {
            format!("{{{}}}", body.join(sep))
        }
    }

    /// Params-like object texts: usually members around one string `id` or `instance_id`,
    /// else members with the scans' keys (duplicates possible, ids of any type).
    pub fn params_text() -> impl Strategy<Value = String> {
        let usual = (
            prop::collection::vec((key(), value()), 0..3),
            prop_oneof![
                Just(&["id"][..]),
                Just(&["instance_id"][..]),
                Just(&["id", "instance_id"][..]),
                Just(&["instance_id", "id"][..]),
            ],
            (string(), string()),
            any::<prop::sample::Index>(),
            any::<bool>(),
        )
            .prop_map(|(mut members, keys, ids, at, spaced)| {
                let i = at.index(members.len() + 1);
                for (k, id) in keys.iter().zip([ids.0, ids.1]).rev() {
                    members.insert(i, (k.to_string(), Value::String(id)));
                }
                object_text(&members, spaced)
            });
        let any_members = (prop::collection::vec((key(), value()), 0..5), any::<bool>())
            .prop_map(|(members, spaced)| object_text(&members, spaced));
        prop_oneof![usual, any_members]
    }

    /// Random APPLY_EVENT-like params: the members (and an unknown one) in any order, maybe
    /// repeated, with values of every kind the readings treat differently.
    pub fn apply_text() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            3 => Just("instance_id"),
            3 => Just("event"),
            2 => Just("payload"),
            1 => Just("expected_state"),
            1 => Just("expected_wal_offset"),
            1 => Just("idempotency_key"),
            1 => Just("extra"),
        ];
        let value = prop_oneof![
            4 => Just(r#""a""#),
            2 => Just(r#""{t}:1""#),
            1 => Just(r#""x\"y""#),
            1 => Just(r#""\u0001""#),
            1 => Just("\"c\u{1}\""),
            1 => Just(r#""é""#),
            1 => Just(r#""""#),
            2 => Just("null"),
            2 => Just("7"),
            1 => Just("0"),
            1 => Just("-1"),
            1 => Just("1.5"),
            1 => Just("07"),
            1 => Just("1e2"),
            1 => Just("18446744073709551616"),
            3 => Just(r#"{"p":"x","q":-3}"#),
            1 => Just(r#"{"b":1,"a":2}"#),
            1 => Just(r#"{ "p" : 1 }"#),
            1 => Just(r#"{"p":{"z":1}}"#),
            1 => Just("{}"),
            1 => Just("[1]"),
        ];
        (
            prop::collection::vec((key, value), 0..5),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(mut members, usual, spaced)| {
                if usual {
                    members.insert(0, ("event", r#""go""#));
                    members.insert(0, ("instance_id", r#""a""#));
                }
                let (colon, sep) = if spaced { (" : ", " ,\n") } else { (":", ",") };
                let body: Vec<String> = (members.iter())
                    .map(|(k, v)| format!("\"{k}\"{colon}{v}"))
                    .collect();
                format!("{{{}}}", body.join(sep))
            })
    }

    /// BATCH-params-like texts: usually the right shape (a mode, a list of ops with `op` and
    /// `params`), sometimes bent (a missing, repeated or extra member, an op that is not an
    /// object).
    pub fn batch_text() -> impl Strategy<Value = String> {
        let op = (
            prop_oneof![
                Just("APPLY_EVENT"),
                Just("GET_INSTANCE"),
                Just("PING"),
                Just("b\\\"ad")
            ],
            prop::option::of(prop_oneof![
                params_text()
                    .prop_map(|t| serde_json::from_str::<Value>(&t).unwrap_or(Value::Null)),
                Just(Value::Null),
                value(),
            ]),
            any::<bool>(),
        )
            .prop_map(|(name, params, spaced)| {
                let mut members = vec![("op".to_string(), Value::String(name.to_string()))];
                if let Some(p) = params {
                    members.push(("params".to_string(), p));
                }
                object_text(&members, spaced)
            });
        // APPLY_EVENT params as written (not re-serialized), so the scan's spans are reached.
        let apply = (apply_text(), any::<bool>()).prop_map(|(params, op_first)| match op_first {
            true => format!(r#"{{"op":"APPLY_EVENT","params":{params}}}"#),
            false => format!(r#"{{"params":{params},"op":"APPLY_EVENT"}}"#),
        });
        let ops = prop::collection::vec(
            prop_oneof![4 => op, 2 => apply, 1 => value().prop_map(|v| v.to_string())],
            0..4,
        )
        .prop_map(|ops| format!("[{}]", ops.join(",")));
        (
            prop_oneof![Just("atomic"), Just("best_effort"), Just("all")],
            ops,
            prop::collection::vec((key(), value()), 0..2),
            any::<bool>(),
        )
            .prop_map(|(mode, ops, extra, spaced)| {
                let mut body = vec![format!("\"mode\":\"{mode}\""), format!("\"ops\":{ops}")];
                body.extend(
                    extra
                        .iter()
                        .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), v)),
                );
                let sep = if spaced { " ,\n " } else { "," };
                format!("{{{}}}", body.join(sep))
            })
    }

    /// Asserts that of 1,000 texts from `strategy`, more than a tenth but not all are
    /// `scanned`: a property over them then checks both readings.
    pub fn assert_both_readings<S: Strategy<Value = String>>(
        strategy: S,
        scanned: impl Fn(&[u8]) -> bool,
    ) {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let total = 1000;
        let hits = (0..total)
            .filter(|_| {
                let text = strategy.new_tree(&mut runner).unwrap().current();
                scanned(text.as_bytes())
            })
            .count();
        assert!(
            hits > total / 10 && hits < total,
            "{hits} of {total} scanned"
        );
    }
}
