use super::*;
use std::collections::BTreeMap as Map;

/// Codex's `apply_patch` grammar, as Codex sends it in a custom tool's `format`.
const APPLY_PATCH: &str = r#"start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"#;

/// A matcher for the GBNF the compilers write (literals, classes, rule names, groups,
/// `|`, `? * + {n} {n,m} {n,}`), over the characters of `text`: the set of positions where
/// a match of each expression from `pos` can end. Enough to check a grammar's language in
/// a test without llama.cpp.
struct Gbnf {
    rules: Map<String, String>,
}

#[derive(Debug, Clone)]
enum G {
    Lit(Vec<char>),
    Class(bool, Vec<(char, char)>),
    Ref(String),
    Seq(Vec<G>),
    Alt(Vec<G>),
    Rep(Box<G>, usize, Option<usize>),
}

fn parse_gbnf(src: &[char], i: &mut usize) -> G {
    let mut alts = Vec::new();
    let mut seq = Vec::new();
    while *i < src.len() {
        let c = src[*i];
        let atom = match c {
            ' ' | '\n' => {
                *i += 1;
                continue;
            }
            ')' => break,
            '|' => {
                *i += 1;
                alts.push(G::Seq(std::mem::take(&mut seq)));
                continue;
            }
            '(' => {
                *i += 1;
                let g = parse_gbnf(src, i);
                assert_eq!(src[*i], ')');
                *i += 1;
                g
            }
            '"' => {
                *i += 1;
                let mut lit = Vec::new();
                while src[*i] != '"' {
                    lit.push(escaped(src, i));
                }
                *i += 1;
                G::Lit(lit)
            }
            '[' => {
                *i += 1;
                let neg = src[*i] == '^';
                if neg {
                    *i += 1;
                }
                let mut ranges = Vec::new();
                while src[*i] != ']' {
                    let lo = escaped(src, i);
                    let hi = if src[*i] == '-' && src[*i + 1] != ']' {
                        *i += 1;
                        escaped(src, i)
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
                *i += 1;
                G::Class(neg, ranges)
            }
            _ => {
                let start = *i;
                while *i < src.len() && (src[*i].is_ascii_alphanumeric() || src[*i] == '-') {
                    *i += 1;
                }
                assert!(*i > start, "unexpected {:?} at {}", src[*i], *i);
                G::Ref(src[start..*i].iter().collect())
            }
        };
        let mut atom = atom;
        while *i < src.len() && matches!(src[*i], '?' | '*' | '+' | '{') {
            let (min, max) = match src[*i] {
                '?' => (0, Some(1)),
                '*' => (0, None),
                '+' => (1, None),
                _ => {
                    let end = (*i..src.len()).find(|&j| src[j] == '}').unwrap();
                    let body: String = src[*i + 1..end].iter().collect();
                    *i = end;
                    match body.split_once(',') {
                        Some((a, "")) => (a.parse().unwrap(), None),
                        Some((a, b)) => (a.parse().unwrap(), Some(b.parse().unwrap())),
                        None => (body.parse().unwrap(), Some(body.parse().unwrap())),
                    }
                }
            };
            *i += 1;
            atom = G::Rep(Box::new(atom), min, max);
        }
        seq.push(atom);
    }
    alts.push(G::Seq(seq));
    G::Alt(alts)
}

fn escaped(src: &[char], i: &mut usize) -> char {
    let c = src[*i];
    *i += 1;
    if c != '\\' {
        return c;
    }
    let e = src[*i];
    *i += 1;
    match e {
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'u' | 'U' | 'x' => {
            let n = match e {
                'u' => 4,
                'U' => 8,
                _ => 2,
            };
            let h: String = src[*i..*i + n].iter().collect();
            *i += n;
            char::from_u32(u32::from_str_radix(&h, 16).unwrap()).unwrap()
        }
        other => other,
    }
}

impl Gbnf {
    fn ends(&self, g: &G, text: &[char], pos: usize) -> BTreeSet<usize> {
        match g {
            G::Lit(l) => {
                if text[pos..].starts_with(l) {
                    [pos + l.len()].into()
                } else {
                    BTreeSet::new()
                }
            }
            G::Class(neg, ranges) => match text.get(pos) {
                Some(c) if ranges.iter().any(|(lo, hi)| lo <= c && c <= hi) != *neg => {
                    [pos + 1].into()
                }
                _ => BTreeSet::new(),
            },
            G::Ref(r) => {
                let body = self.rules.get(r).unwrap_or_else(|| panic!("no rule {r}"));
                let chars: Vec<char> = body.chars().collect();
                let g = parse_gbnf(&chars, &mut 0);
                self.ends(&g, text, pos)
            }
            G::Seq(v) => v.iter().fold([pos].into(), |at: BTreeSet<usize>, g| {
                at.iter().flat_map(|&p| self.ends(g, text, p)).collect()
            }),
            G::Alt(v) => v.iter().flat_map(|g| self.ends(g, text, pos)).collect(),
            G::Rep(g, min, max) => {
                let mut out = BTreeSet::new();
                let mut at: BTreeSet<usize> = [pos].into();
                let mut n = 0;
                loop {
                    if n >= *min {
                        out.extend(at.iter().copied());
                    }
                    if max.is_some_and(|m| n >= m) || at.is_empty() {
                        break;
                    }
                    let next: BTreeSet<usize> = at
                        .iter()
                        .flat_map(|&p| self.ends(g, text, p))
                        .filter(|&e| n < *min || !out.contains(&e))
                        .collect();
                    at = next;
                    n += 1;
                }
                out
            }
        }
    }

    /// Whether `text` (the characters as a JSON string writes them) is a sentence.
    fn accepts(&self, root: &str, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let g = parse_gbnf(&root.chars().collect::<Vec<_>>(), &mut 0);
        self.ends(&g, &chars, 0).contains(&chars.len())
    }
}

/// Compile `lark`, and check which decoded texts its grammar takes, as JSON writes them.
fn language(lark: &str) -> impl Fn(&str) -> bool {
    let l = lark_rules(lark).unwrap_or_else(|e| panic!("{e}"));
    let mut rules: Map<String, String> = l.rules.into_iter().collect();
    rules.insert(
        "char".into(),
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"#.into(),
    );
    let g = Gbnf { rules };
    move |text: &str| {
        let json = serde_json::to_string(text).unwrap();
        g.accepts(&l.root, &json[1..json.len() - 1])
    }
}

#[test]
fn codexs_apply_patch_grammar_takes_patches_and_refuses_what_is_not_one() {
    let takes = language(APPLY_PATCH);
    for ok in [
        "*** Begin Patch\n*** Add File: a.py\n+print(\"hi\")\n+\n*** End Patch\n",
        "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch",
        "*** Begin Patch\n*** Update File: src/lib.rs\n*** Move to: src/main.rs\n@@ fn main() {\n-    a();\n+    b();\n     c();\n*** End of File\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: x\n@@\n+\tindented \\ \"quoted\"\n*** Delete File: y\n*** End Patch\n",
    ] {
        assert!(takes(ok), "refused {ok:?}");
    }
    for bad in [
        "",
        "*** Begin Patch\n*** End Patch\n", // no hunk
        "*** Begin Patch\n*** Add File: a.py\n*** End Patch\n", // an added file needs a line
        "*** Begin Patch\n*** Add File: a.py\nprint()\n*** End Patch\n", // no `+`
        "*** Begin Patch\n*** Add File: \n+x\n*** End Patch\n", // no file name
        "*** Begin Patch\n*** Delete File: a\n*** End Patch\n\n", // text after the end
        "--- a.py\n+++ b.py\n",
    ] {
        assert!(!takes(bad), "took {bad:?}");
    }
}

#[test]
fn literals_ranges_repetitions_and_imports_mean_what_lark_means() {
    let takes = language(
        r#"
// a comment
?start: greeting ("," NAME)~1..2 END? [SIGN]
greeting: "hi"i | "yo\n\"x\""
NAME.2: ("a".."c")+ DIGIT
END: "!" -> bang
SIGN: /[+-]/
%import common.DIGIT
"#,
    );
    for ok in ["HI,ab1", "hI,c9,a0!", "yo\n\"x\",a1+", "hi,a1!-"] {
        assert!(takes(ok), "refused {ok:?}");
    }
    for bad in [
        "hi",
        "hi,d1",
        "hi,a1,a1,a1",
        "hey,a1",
        "hi,a1!!",
        "yo\n\"x\"\n,a1",
    ] {
        assert!(!takes(bad), "took {bad:?}");
    }
    // Alternatives continue on lines that start with `|`; recursion that is not left is run.
    let takes = language("start: list\nlist: \"[\" (item (\",\" item)*)? \"]\"\nitem: INT\n    | list\n%import common (INT, WS)");
    for ok in ["[]", "[1,[2,[]],3]"] {
        assert!(takes(ok), "refused {ok:?}");
    }
    for bad in ["[", "[1,]", "[[1]"] {
        assert!(!takes(bad), "took {bad:?}");
    }
}

#[test]
fn what_cannot_be_a_grammar_is_refused_with_the_reason() {
    for (lark, says) in [
        ("start: a\n%ignore \" \"", "`%ignore`"),
        (
            "start: expr\nexpr: expr \"+\" INT | INT\n%import common.INT",
            "left-recursive",
        ),
        ("start: a b\na: b? \"x\"\nb: a", "left-recursive"),
        ("start: \"a\" missing", "`missing` is used but not defined"),
        ("rule: \"a\"", "no `start`"),
        ("start: /a/i", "flags"),
        ("start: sep{\"a\"}", "template"),
        ("start: \"abc", "not closed"),
        ("start: /(?<=a)b/", "regular expression"),
        ("start: \"a\"\nstart: \"b\"", "defined twice"),
        ("start: X\n%import common.NOPE", "NOPE"),
        ("start: \"z\"..\"a\"", "empty"),
        (
            &format!("start: {}\"a\"{}", "(".repeat(100), ")".repeat(100)),
            "nests deeper",
        ),
    ] {
        let e = lark_rules(lark).expect_err(lark);
        assert!(e.0.contains(says), "{lark:?}: {e}");
    }
}

#[test]
fn rule_names_stay_in_the_namespace_a_tool_prefix_reaches() {
    let l = lark_rules(APPLY_PATCH).unwrap();
    assert_eq!(l.root, "s-lark-start");
    assert!(l.rules.iter().all(|(n, _)| n.starts_with("s-lark-")));
    assert!(l.rules.iter().any(|(n, _)| n == "s-lark-add-hunk"));
    // Lark names differ by case and underscores; GBNF's keep them apart.
    let l = lark_rules("start: a A _a\na: \"1\"\nA: \"2\"\n_a: \"3\"").unwrap();
    let names: BTreeSet<&str> = l.rules.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["s-lark--a", "s-lark-A", "s-lark-a", "s-lark-start"].into()
    );
}
