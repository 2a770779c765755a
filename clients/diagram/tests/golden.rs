//! Golden files: the order machine and a machine whose names and guards hold every character
//! each format must escape (`<`, `&`, `"`, `-->`, ...). `SMDB_WRITE_GOLDEN=1 cargo test -p
//! smdb-diagram` rewrites the files; look at them (the SVGs open in any browser) before
//! committing.

use serde_json::{json, Value};
use smdb_diagram::{render, Format};

fn tricky() -> Value {
    json!({
        "states": ["<new>", "a & b", "say \"hi\"", "x --> y", "done; #1 {ok}"],
        "initial": "<new>",
        "final": ["done; #1 {ok}"],
        "transitions": [
            {"from": "<new>", "event": "go<", "to": "a & b", "guard": "ctx.n < 3 && payload.s == \"-->\""},
            {"from": "a & b", "event": "quote\"", "to": "say \"hi\""},
            {"from": "say \"hi\"", "event": "arrow-->", "to": "x --> y", "guard": "ctx.a > 1 || ctx.b >= 2"},
            {"from": "*", "event": "finish", "to": "done; #1 {ok}", "after_ms": 30000},
            {"from": "x --> y", "event": "back", "to": "<new>", "at": "ctx.retry_at"},
            {"from": "a & b", "event": "stay", "to": "a & b"},
            {"from": "a & b", "event": "stay too", "to": "a & b", "guard": "has(ctx.x)"}
        ]
    })
}

fn order() -> Value {
    json!({
        "states": ["new", "paid", "shipped", "cancelled"],
        "initial": "new",
        "final": ["shipped", "cancelled"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "paid", "event": "ship", "to": "shipped"},
            {"from": ["new", "paid"], "event": "cancel", "to": "cancelled"},
            {"from": "paid", "event": "touch", "to": "paid"},
            {"from": "paid", "event": "expire", "to": "cancelled", "after_ms": 86400000},
            {"from": "cancelled", "event": "reopen", "to": "new"}
        ]
    })
}

fn check_golden(name: &str, def: &Value, format: Format, ext: &str) -> String {
    let got = render(name, def, format).unwrap();
    let path = format!("{}/tests/golden/{name}.{ext}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("SMDB_WRITE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        got, want,
        "{path} differs: SMDB_WRITE_GOLDEN=1 cargo test -p smdb-diagram"
    );
    got
}

/// A small well-formedness check: tags balance, `<` only opens a tag, `&` only starts one of
/// the five entities, and attribute values hold no raw `<` or `"`.
fn assert_well_formed_xml(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find(['<', '&']) {
        let text = &rest[..i];
        assert!(!text.contains('>'), "raw > in text: {text:?}");
        rest = &rest[i..];
        if rest.starts_with('&') {
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                .iter()
                .any(|e| rest.starts_with(e));
            assert!(ok, "bare & at {:?}", &rest[..rest.len().min(20)]);
            rest = &rest[1..];
            continue;
        }
        let end = rest.find('>').expect("unclosed tag");
        let tag = &rest[1..end];
        assert!(!tag.contains('<'), "< inside a tag: {tag:?}");
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes: {tag:?}"
        );
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect();
        assert!(!name.is_empty(), "bad tag {tag:?}");
        if tag.starts_with('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.as_str()),
                "mismatched </{name}>"
            );
        } else if !tag.ends_with('/') {
            stack.push(name);
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

#[test]
fn svg_escapes_every_name_and_guard() {
    let svg = check_golden("tricky", &tricky(), Format::Svg, "svg");
    assert_well_formed_xml(&svg);
    assert!(svg.contains("data-state=\"&lt;new&gt;\""));
    assert!(svg.contains("x --&gt; y"));
    assert!(!svg.contains("<style") && !svg.contains("<script") && !svg.contains("href"));
    // One state group per state, one edge group per edge (`*` covers the 4 non-final states).
    assert_eq!(svg.matches(" data-state=").count(), 5);
    assert_eq!(svg.matches(" data-event=").count(), 10);
    assert_eq!(svg.matches("class=\"edge timed\"").count(), 5);
}

#[test]
fn dot_escapes_quotes_and_backslashes() {
    let dot = check_golden("tricky", &tricky(), Format::Dot, "dot");
    assert!(dot.contains("label=\"say \\\"hi\\\"\""));
    for line in dot.lines() {
        let unescaped = line.replace("\\\\", "").replace("\\\"", "");
        assert_eq!(unescaped.matches('"').count() % 2, 0, "{line}");
    }
}

#[test]
fn mermaid_keeps_arrows_in_labels_as_text() {
    let mmd = check_golden("tricky", &tricky(), Format::Mermaid, "mmd");
    for line in mmd.lines().skip(2) {
        assert!(line.matches("-->").count() <= 1, "{line}");
        assert!(
            !line.contains('"') || line.trim_start().starts_with("state \""),
            "{line}"
        );
        assert!(line.matches('"').count() <= 2, "{line}");
    }
    assert!(mmd.contains("state \"x --#gt; y\" as s3"));
    assert!(mmd.contains("s4 --> [*]"));
}

#[test]
fn the_order_machine_in_every_format() {
    let svg = check_golden("order", &order(), Format::Svg, "svg");
    assert_well_formed_xml(&svg);
    check_golden("order", &order(), Format::Dot, "dot");
    check_golden("order", &order(), Format::Mermaid, "mmd");
}

#[test]
fn formats_parse_by_name() {
    for f in Format::ALL {
        assert_eq!(Format::parse(f.as_str()), Some(f));
    }
    assert_eq!(Format::parse("png"), None);
}
