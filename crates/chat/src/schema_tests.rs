use super::*;
use serde_json::json;

/// The digit sets of one `uint_range`/`int_range` alternative, position by position, and
/// whether it is negative.
fn digit_sets(alt: &str) -> (bool, Vec<Vec<u8>>) {
    let mut sets = Vec::new();
    let mut negative = false;
    let mut rest = alt.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("\"-\"") {
            negative = true;
            rest = r.trim_start();
        } else if let Some(r) = rest.strip_prefix('"') {
            let d = r.as_bytes()[0];
            sets.push(vec![d]);
            rest = r[2..].trim_start();
        } else if let Some(r) = rest.strip_prefix('[') {
            let (a, b) = (r.as_bytes()[0], r.as_bytes()[2]);
            let mut r = &r[4..];
            let mut n = 1;
            if let Some(t) = r.strip_prefix('{') {
                let end = t.find('}').unwrap();
                n = t[..end].parse().unwrap();
                r = &t[end + 1..];
            }
            for _ in 0..n {
                sets.push((a..=b).collect());
            }
            rest = r.trim_start();
        } else {
            panic!("unexpected pattern {alt:?}");
        }
    }
    (negative, sets)
}

fn matches(pattern: &str, x: i64) -> bool {
    pattern.split(" | ").any(|alt| {
        let (neg, sets) = digit_sets(alt);
        if neg != (x < 0) {
            return false;
        }
        let s = x.unsigned_abs().to_string();
        s.len() == sets.len() && s.bytes().zip(&sets).all(|(d, set)| set.contains(&d))
    })
}

#[test]
fn integer_ranges_are_exact() {
    let cases: &[(Option<i64>, Option<i64>)] = &[
        (Some(0), Some(0)),
        (Some(0), Some(9)),
        (Some(1), Some(100)),
        (Some(7), Some(1234)),
        (Some(-50), Some(-3)),
        (Some(-120), Some(45)),
        (Some(19), Some(91)),
        (Some(100), Some(999)),
        (Some(999), Some(1000)),
        (Some(0), Some(65535)),
        (Some(-9), Some(0)),
    ];
    for &(lo, hi) in cases {
        let p = int_range(lo, hi);
        let (l, h) = (lo.unwrap(), hi.unwrap());
        for x in (l - 30).min(-200)..=(h + 30).max(1200) {
            assert_eq!(
                matches(&p, x),
                (l..=h).contains(&x),
                "[{l}, {h}] at {x}: {p}"
            );
        }
    }
    // Open ranges stop at the digit limit but keep the bound.
    let p = int_range(Some(42), None);
    assert!(!matches(&p, 41) && matches(&p, 42) && matches(&p, 99_999));
    let p = int_range(None, Some(-5));
    assert!(matches(&p, -5) && matches(&p, -12_345) && !matches(&p, -4) && !matches(&p, 0));
}

#[test]
fn objects_strings_arrays_and_enums_compile() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
            "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]},
            "nick": {"type": ["string", "null"], "maxLength": 4}
        },
        "required": ["name", "age", "tags", "address"],
        "additionalProperties": false
    });
    let g = compile_schema(&schema).unwrap().text();
    assert!(g.starts_with("root ::= s"), "{g}");
    assert!(
        g.contains(r#""\"name\"" space ":" space "\"" char{0,12} "\"" space"#),
        "{g}"
    );
    assert!(g.contains(r#"("\"a\"" | "\"b\"") space"#), "{g}");
    // The optional key comes after the required ones, behind a comma.
    assert!(
        g.contains(r#"(","  space "\"nick\"""#.replace("  ", " ").as_str()),
        "{g}"
    );
    assert!(
        g.contains("{0,2}"),
        "maxItems 3 is one item then at most two more: {g}"
    );
}

#[test]
fn refs_and_recursion_compile() {
    let schema = json!({
        "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}}},
        "$ref": "#/$defs/node"
    });
    let g = compile_schema(&schema).unwrap().text();
    assert!(g.contains("ref--defs-node ::="), "{g}");
}

#[test]
fn unsupported_keywords_are_named() {
    let e = compile_schema(&json!({"type": "object", "properties": {"zip": {"type": "string", "not": {"const": "00000"}}}}))
        .unwrap_err();
    assert!(
        matches!(&e, SchemaError::Unsupported { keyword, path, .. } if keyword == "not" && path == "#/properties/zip"),
        "{e}"
    );
    assert!(e.to_string().contains("`not` at `#/properties/zip`"), "{e}");
    let e = compile_schema(&json!({"$ref": "https://example.com/s.json"})).unwrap_err();
    assert!(e.to_string().contains("$ref"), "{e}");
    let e = compile_schema(&json!({"type": "object", "required": ["x"]})).unwrap_err();
    assert!(e.to_string().contains("`required` names `x`"), "{e}");
    let e = compile_schema(&json!({"type": "strin"})).unwrap_err();
    assert!(e.to_string().contains("unknown type `strin`"), "{e}");
}

#[test]
fn literals_escape() {
    assert_eq!(literal("a\"b\\c\n"), r#""a\"b\\c\n""#);
}

#[test]
fn tool_call_grammars_name_each_tool_and_keep_their_rules_apart() {
    use crate::family::{ReplyStart, ToolFamily, ToolSpec};
    let obj = |p: &str| json!({"type": "object", "properties": {p: {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["v"]}}, "required": [p]});
    let tools = vec![
        ToolSpec {
            name: "alpha".into(),
            parameters: obj("a"),
            strict: true,
            input_lark: None,
        },
        ToolSpec {
            name: "beta".into(),
            parameters: obj("b"),
            strict: true,
            input_lark: None,
        },
    ];
    let g = ToolFamily::Hermes
        .call_grammar(&tools, false, ReplyStart::Fresh)
        .unwrap()
        .text();
    assert!(
        g.starts_with("root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\""),
        "{g}"
    );
    assert!(
        g.contains("\"{\\\"name\\\": \\\"alpha\\\", \\\"arguments\\\": \" t0-s"),
        "{g}"
    );
    assert!(g.contains("t1-s"), "{g}");
    // Every rule referenced is defined.
    let defined: Vec<&str> = g.lines().filter_map(|l| l.split(" ::= ").next()).collect();
    for l in g.lines() {
        for w in l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if w.starts_with("t0-") || w.starts_with("t1-") {
                assert!(defined.contains(&w), "{w} is not defined in\n{g}");
            }
        }
    }
    for f in [
        ToolFamily::Harmony,
        ToolFamily::Llama3,
        ToolFamily::Mistral,
        ToolFamily::DeepSeek,
    ] {
        let g = f
            .call_grammar(&tools, true, ReplyStart::Fresh)
            .unwrap()
            .text();
        assert!(g.contains("alpha") && g.contains("beta"), "{f:?}: {g}");
    }
}

#[test]
fn patterns_constrain_strings_and_are_refused_where_a_grammar_cannot_hold_them() {
    let g = compile_schema(&json!({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]}))
        .unwrap()
        .text();
    assert!(g.contains(r#""\"" ([\u0030-\u0039]){5} "\"" space"#), "{g}");
    // Bounds or a format next to a pattern: a grammar holds one of them, not both.
    for extra in [json!({"maxLength": 3}), json!({"format": "date"})] {
        let mut s = json!({"type": "string", "pattern": "a"});
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let e = compile_schema(&s).unwrap_err();
        assert!(
            matches!(&e, SchemaError::Pattern { path, .. } if path == "#"),
            "{e}"
        );
    }
    // Without a type the pattern would leave the other types' values unconstrained.
    let e = compile_schema(&json!({"pattern": "a"})).unwrap_err();
    assert!(
        matches!(&e, SchemaError::Unsupported { keyword, .. } if keyword == "pattern"),
        "{e}"
    );
    let e = compile_schema(&json!({"type": "string", "pattern": "(?i)a"})).unwrap_err();
    assert!(e.to_string().contains("`(?i)`"), "{e}");
    let e = compile_schema(&json!({"type": "string", "pattern": 5})).unwrap_err();
    assert!(e.to_string().contains("`pattern` must be a string"), "{e}");
}

/// The string lengths an expression of `char_run`'s shapes admits, up to `limit`: `char{n}`,
/// `char{0,n}`, `char*`, `""`, groups with `{n}` or `{0,n}`, alternations and sequences.
fn lengths(expr: &str, limit: usize) -> Vec<bool> {
    fn seq(tokens: &[&str], pos: &mut usize, limit: usize) -> Vec<bool> {
        let mut acc = vec![false; limit + 1];
        acc[0] = true;
        let mut alts: Vec<Vec<bool>> = Vec::new();
        while *pos < tokens.len() && tokens[*pos] != ")" {
            if tokens[*pos] == "|" {
                *pos += 1;
                alts.push(std::mem::replace(&mut acc, {
                    let mut a = vec![false; limit + 1];
                    a[0] = true;
                    a
                }));
                continue;
            }
            let (item, rep) = if tokens[*pos] == "(" {
                *pos += 1;
                let inner = seq(tokens, pos, limit);
                *pos += 1; // ")"
                let rep = tokens.get(*pos).filter(|t| t.starts_with('{')).copied();
                if rep.is_some() {
                    *pos += 1;
                }
                (inner, rep)
            } else {
                let t = tokens[*pos];
                *pos += 1;
                let mut one = vec![false; limit + 1];
                if t == "\"\"" {
                    one[0] = true;
                    (one, None)
                } else if let Some(r) = t.strip_prefix("char") {
                    one[1] = true;
                    (one, Some(r).filter(|r| !r.is_empty()))
                } else {
                    panic!("unexpected token {t}");
                }
            };
            let (lo, hi) = match rep {
                None => (1, Some(1)),
                Some("*") => (0, None),
                Some(r) => {
                    let r = r.trim_start_matches('{').trim_end_matches('}');
                    match r.split_once(',') {
                        Some((a, b)) => (a.parse().unwrap(), b.parse().ok()),
                        None => (r.parse().unwrap(), r.parse().ok()),
                    }
                }
            };
            // acc := acc · item^{lo..hi}
            let concat = |a: &[bool], b: &[bool]| {
                let mut out = vec![false; limit + 1];
                for i in (0..=limit).filter(|&i| a[i]) {
                    for j in (0..=limit - i).filter(|&j| b[j]) {
                        out[i + j] = true;
                    }
                }
                out
            };
            let mut power = vec![false; limit + 1];
            power[0] = true;
            let mut reps = vec![false; limit + 1];
            for n in 0..=hi.unwrap_or(limit) {
                if n >= lo {
                    for i in 0..=limit {
                        reps[i] |= power[i];
                    }
                }
                let next = concat(&power, &item);
                if next == power {
                    break;
                }
                power = next;
            }
            acc = concat(&acc, &reps);
        }
        alts.push(acc);
        let mut out = vec![false; limit + 1];
        for a in alts {
            for (i, x) in a.into_iter().enumerate() {
                out[i] |= x;
            }
        }
        out
    }
    let spaced = expr.replace('(', " ( ").replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut pos = 0;
    seq(&tokens, &mut pos, limit)
}

#[test]
fn string_lengths_above_llama_cpps_repetition_limit_are_written_in_blocks_exactly() {
    use crate::schema::MAX_REPETITION as B;
    let limit = 3 * B as usize + 50;
    for (min, max) in [
        (0, Some(5)),
        (3, Some(3)),
        (0, Some(B)),
        (0, Some(B + 1)),
        (0, Some(2 * B)),
        (0, Some(2 * B + 7)),
        (5, Some(2 * B + 3)),
        (B + 1, Some(B + 1)),
        (2 * B, Some(3 * B)),
        (B + 3, None),
    ] {
        let schema = match max {
            Some(m) => json!({"type": "string", "minLength": min, "maxLength": m}),
            None => json!({"type": "string", "minLength": min}),
        };
        let g = compile_schema(&schema).unwrap();
        let root = g.text().lines().next().unwrap().to_string();
        let run = root
            .trim_start_matches(r#"root ::= "\"" "#)
            .trim_end_matches(r#" "\"" space"#)
            .to_string();
        for (n, _) in run.match_indices(['{', ',']) {
            let count: String = run[n + 1..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            assert!(count.parse::<u64>().unwrap_or(0) <= B, "{run}");
        }
        let admitted = lengths(&run, limit);
        for (len, ok) in admitted.iter().enumerate() {
            let want = len as u64 >= min && max.is_none_or(|m| len as u64 <= m);
            assert_eq!(*ok, want, "length {len} for {min}..{max:?}: {run}");
        }
    }
    // Above B², and item counts above B, are refused rather than left unbounded.
    assert!(compile_schema(&json!({"type": "string", "maxLength": B * B + 1})).is_err());
    assert!(compile_schema(&json!({"type": "array", "maxItems": B + 2})).is_err());
    assert!(compile_schema(&json!({"type": "string", "pattern": "^a{2001}$"})).is_err());
}

#[test]
fn a_harmony_answer_comes_in_the_final_channel_after_an_optional_analysis() {
    use crate::family::{ReplyStart, ToolFamily};
    let json = || compile_schema(&json!({"type": "object"})).unwrap();
    let plain = json().text();
    // Other families' answer is the whole reply.
    assert_eq!(
        ToolFamily::Hermes
            .answer_grammar(json(), ReplyStart::Fresh)
            .text(),
        plain
    );
    let g = ToolFamily::Harmony
        .answer_grammar(json(), ReplyStart::Fresh)
        .text();
    let root = g.lines().next().unwrap();
    assert_eq!(
        root,
        r#"root ::= harmony-analysis? "<|channel|>final" (" " "<|constrain|>"? "json")? "<|message|>" harmony-answer"#
    );
    // The schema's own root is the answer's rule; its other rules are kept.
    let schema_root = plain
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("root ::= ");
    assert!(
        g.contains(&format!("harmony-answer ::= {schema_root}\n")),
        "{g}"
    );
    assert!(g.contains("harmony-analysis ::= \"<|channel|>analysis<|message|>\" harmony-text \"<|end|>\" \"<|start|>assistant\""), "{g}");
    // After a block the prompt opened, the next message's header may come first instead.
    let after = ToolFamily::Harmony
        .answer_grammar(json(), ReplyStart::AfterBlock)
        .text();
    assert!(
        after.starts_with("root ::= harmony-header? \"<|channel|>final\""),
        "{after}"
    );
    let call = ToolFamily::Harmony
        .call_grammar(&[], false, ReplyStart::Fresh)
        .unwrap()
        .text();
    assert!(
        call.starts_with("root ::= harmony-analysis? \"<|channel|>commentary to=functions.\" call"),
        "{call}"
    );
}

/// A tool that is not strict is compiled to a superset: a keyword that only narrows is
/// skipped (the rest of its schema holds), a schema that cannot be written admits any
/// value, and both are named; compiled exact, each is refused.
#[test]
fn a_superset_compile_leaves_out_what_a_grammar_cannot_hold_and_names_it() {
    use crate::schema::{Compiler, SchemaMode};
    let superset = |schema: &Value| {
        let mut c = Compiler::with_mode(schema, SchemaMode::Superset);
        let root = c.expr(schema, "#").unwrap();
        c.add_rule("root", root);
        c.finish()
    };
    let tags = json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true});
    let mut plain = tags.clone();
    plain.as_object_mut().unwrap().remove("uniqueItems");
    let g = superset(&tags);
    assert_eq!(g.text(), compile_schema(&plain).unwrap().text());
    assert_eq!(g.left_out, ["`uniqueItems` at `#`"]);
    assert!(compile_schema(&tags).is_err());

    let schema = json!({"type": "object", "properties": {
        "tags": tags,
        "meta": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        "zip": {"type": "string", "pattern": "^(?i)[0-9]{5}$"},
        "n": {"type": "integer", "not": {"const": 3}}},
        "required": ["tags", "meta", "zip", "n"], "additionalProperties": false});
    let g = superset(&schema);
    assert_eq!(
        g.left_out,
        [
            "`uniqueItems` at `#/properties/tags`",
            "`patternProperties` at `#/properties/meta`",
            "`pattern` at `#/properties/zip`",
            "`not` at `#/properties/n`"
        ]
    );
    let text = g.text();
    // The object's keys hold; what could not be written admits any value of its type.
    assert!(
        text.contains("\"\\\"meta\\\"\" space \":\" space object"),
        "{text}"
    );
    assert!(
        text.contains("\"\\\"zip\\\"\" space \":\" space string"),
        "{text}"
    );
    assert!(
        !text.contains("\"\\\"n\\\"\" space \":\" space value"),
        "{text}"
    );
    let e = compile_schema(&schema).unwrap_err();
    assert!(
        matches!(
            e,
            SchemaError::Unsupported { .. } | SchemaError::Pattern { .. }
        ),
        "{e}"
    );
}

#[test]
fn either_grammar_keeps_both_roots_and_their_rules() {
    use crate::family::{ReplyStart, ToolFamily, ToolSpec};
    let answer = compile_schema(
        &json!({"type": "object", "properties": {"u": {"enum": ["c", "f"]}}, "required": ["u"]}),
    )
    .unwrap();
    let tools = [ToolSpec {
        name: "f".into(),
        parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
        strict: true,
        input_lark: None,
    }];
    let call = ToolFamily::Hermes
        .call_grammar(&tools, false, ReplyStart::Fresh)
        .unwrap();
    let (a, c) = (answer.text(), call.text());
    let root = |g: &str| {
        g.lines()
            .next()
            .unwrap()
            .trim_start_matches("root ::= ")
            .to_string()
    };
    let both = answer.either(call).text();
    assert_eq!(
        both.lines().next().unwrap(),
        format!("root ::= ( {} ) | ( {} )", root(&a), root(&c))
    );
    // Every other rule of each is there, once.
    for l in a.lines().skip(1).chain(c.lines().skip(1)) {
        assert_eq!(both.lines().filter(|b| *b == l).count(), 1, "{l}\n{both}");
    }
}

/// A custom tool's Lark grammar is its input's grammar inside the call, in the tool's
/// namespace; one that cannot be compiled leaves the input a free string, named.
#[test]
fn a_custom_tools_lark_grammar_constrains_its_input_or_is_left_out_by_name() {
    use crate::family::{ReplyStart, ToolFamily, ToolSpec};
    let tool = |lark: &str| ToolSpec {
        name: "apply_patch".into(),
        parameters: json!({"type": "object", "properties": {"input": {"type": "string"}},
                           "required": ["input"], "additionalProperties": false}),
        strict: false,
        input_lark: Some(lark.into()),
    };
    let g = ToolFamily::Hermes
        .call_grammar(
            &[tool("start: \"*** Begin\" x\nx: \"a\"+")],
            false,
            ReplyStart::Fresh,
        )
        .unwrap();
    assert!(g.left_out.is_empty(), "{:?}", g.left_out);
    let text = g.text();
    assert!(
        text.contains("\"\\\"input\\\"\" space \":\" space \"\\\"\" t0-s-lark-start \"\\\"\""),
        "{text}"
    );
    assert!(text.contains("t0-s-lark-x ::= ( \"a\" )+"), "{text}");
    let g = ToolFamily::Hermes
        .call_grammar(
            &[tool("start: \"a\"\n%ignore \" \"")],
            false,
            ReplyStart::Fresh,
        )
        .unwrap();
    assert_eq!(g.left_out.len(), 1);
    assert!(
        g.left_out[0].contains("Lark grammar")
            && g.left_out[0].contains("`%ignore`")
            && g.left_out[0].contains("apply_patch"),
        "{:?}",
        g.left_out
    );
    assert!(!g.text().contains("s-lark"));
}
