//! A custom tool's Lark grammar (OpenAI's `format: {"type": "grammar", "syntax": "lark"}`,
//! as Codex's `apply_patch` sends it) compiled to GBNF rules over the characters of a JSON
//! string *as written*, so that a call's `input` string, once decoded, is a sentence of the
//! grammar.
//!
//! What is read: rules (`name: ...`, with `?`/`!` prefixes and `.N` priorities ignored) and
//! terminals (`NAME: ...`), alternatives (continued on lines that start with `|`), `( )`,
//! `[ ]` (optional), `?`, `*`, `+`, `~ n` and `~ n..m`, string literals (`"..."`, `"..."i`),
//! character ranges (`"a".."z"`), regular expressions (`/.../`, through [`crate::pattern`]),
//! aliases (`-> name`, ignored), `//` comments and `%import common.NAME` of the usual
//! terminals. The grammar is read as a context-free language of characters, so it admits
//! every text that Lark's lexer would, and maybe more where a longest-match lexer would
//! refuse a split. Refused, with the reason: `%ignore` and other directives, templates,
//! regex flags, left recursion (llama.cpp's grammar sampler refuses it), undefined names,
//! and whatever [`crate::pattern`] refuses in a regular expression (`.` matches no line
//! terminator, as in ECMA-262; Python's also matches `\r`).

use std::collections::{BTreeMap, BTreeSet};

use crate::pattern::{json_char, pattern_expr, CharSet};
use crate::schema::{literal, repetition};

/// Why a Lark grammar cannot be a GBNF grammar here; the text says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LarkError(pub String);

fn refuse<T>(why: impl Into<String>) -> Result<T, LarkError> {
    Err(LarkError(why.into()))
}

/// The compiled grammar: `root`, the expression of the start rule, and the rules it uses,
/// named `s-lark-...` (so that a tool's namespace prefix reaches them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LarkRules {
    pub root: String,
    pub rules: Vec<(String, String)>,
}

/// Nesting deeper than this is refused (the parser recurses once per level).
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    /// A string literal's text, and whether it is case-insensitive (`"..."i`).
    Str(String, bool),
    /// A regular expression's source (`\/` unescaped) and its flags.
    Regex(String, String),
    Num(u32),
    /// A `%` directive's line, without the `%`.
    Directive(String),
    Punct(&'static str),
    Newline,
}

fn lex(src: &str) -> Result<Vec<Tok>, LarkError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                out.push(Tok::Newline);
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '%' => {
                let start = i + 1;
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                out.push(Tok::Directive(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Name(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit() => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let s: String = chars[start..i].iter().collect();
                let n = s
                    .parse()
                    .map_err(|_| LarkError(format!("the count {s} is too large")))?;
                out.push(Tok::Num(n));
            }
            '"' => {
                let (text, end) = string_literal(&chars, i + 1)?;
                i = end;
                let insensitive = chars.get(i) == Some(&'i');
                if insensitive {
                    i += 1;
                }
                out.push(Tok::Str(text, insensitive));
            }
            '/' => {
                let mut source = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None | Some('\n') => {
                            return refuse("a regular expression `/...` is not closed on its line")
                        }
                        Some('/') => break,
                        Some('\\') if chars.get(i + 1) == Some(&'/') => {
                            source.push('/');
                            i += 2;
                        }
                        Some('\\') => {
                            source.push('\\');
                            if let Some(&e) = chars.get(i + 1) {
                                source.push(e);
                            }
                            i += 2;
                        }
                        Some(&ch) => {
                            source.push(ch);
                            i += 1;
                        }
                    }
                }
                i += 1;
                let start = i;
                while i < chars.len() && chars[i].is_ascii_lowercase() {
                    i += 1;
                }
                out.push(Tok::Regex(source, chars[start..i].iter().collect()));
            }
            _ => {
                let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                let punct = match (two.as_str(), c) {
                    ("->", _) => "->",
                    ("..", _) => "..",
                    (_, ':') => ":",
                    (_, '|') => "|",
                    (_, '(') => "(",
                    (_, ')') => ")",
                    (_, '[') => "[",
                    (_, ']') => "]",
                    (_, '?') => "?",
                    (_, '*') => "*",
                    (_, '+') => "+",
                    (_, '!') => "!",
                    (_, '~') => "~",
                    (_, '.') => ".",
                    (_, ',') => ",",
                    (_, '{') => "{",
                    (_, '}') => "}",
                    _ => return refuse(format!("`{c}` is not Lark grammar syntax")),
                };
                i += punct.len();
                out.push(Tok::Punct(punct));
            }
        }
    }
    Ok(out)
}

/// A `"..."` literal's text from after its opening quote: the text and the index after the
/// closing quote. Escapes as Python's: `\n \r \t \\ \" \' \xHH \uHHHH`.
fn string_literal(chars: &[char], mut i: usize) -> Result<(String, usize), LarkError> {
    let mut text = String::new();
    loop {
        match chars.get(i) {
            None | Some('\n') => {
                return refuse("a string literal `\"...` is not closed on its line")
            }
            Some('"') => return Ok((text, i + 1)),
            Some('\\') => {
                let e = chars.get(i + 1).copied();
                let hex = |n: usize| -> Result<char, LarkError> {
                    let h: String = chars.iter().skip(i + 2).take(n).collect();
                    u32::from_str_radix(&h, 16)
                        .ok()
                        .filter(|_| h.len() == n)
                        .and_then(char::from_u32)
                        .ok_or_else(|| {
                            LarkError(format!(
                                "the escape `\\{}{h}` is not a character",
                                e.unwrap_or(' ')
                            ))
                        })
                };
                let (ch, len) = match e {
                    Some('n') => ('\n', 2),
                    Some('r') => ('\r', 2),
                    Some('t') => ('\t', 2),
                    Some(c @ ('\\' | '"' | '\'')) => (c, 2),
                    Some('x') => (hex(2)?, 4),
                    Some('u') => (hex(4)?, 6),
                    other => {
                        return refuse(format!(
                            "the escape `\\{}` in a string literal is not supported: write the character",
                            other.unwrap_or(' ')
                        ))
                    }
                };
                text.push(ch);
                i += len;
            }
            Some(&c) => {
                text.push(c);
                i += 1;
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Lit(String, bool),
    Range(char, char),
    Regex(String),
    Ref(String),
    Repeat(Box<Node>, u32, Option<u32>),
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn expect(&mut self, p: &str, what: &str) -> Result<(), LarkError> {
        if self.is(p) {
            self.at += 1;
            Ok(())
        } else {
            refuse(format!("expected `{p}` {what}"))
        }
    }

    fn skip_newlines(&mut self) {
        while self.peek() == Some(&Tok::Newline) {
            self.at += 1;
        }
    }

    /// Alternatives up to `)`, `]` or the end of the definition (a newline not followed by
    /// `|`). Inside brackets (`depth` > 0) newlines are spaces.
    fn alternatives(&mut self, depth: usize) -> Result<Node, LarkError> {
        if depth > MAX_DEPTH {
            return refuse(format!("it nests deeper than {MAX_DEPTH} levels"));
        }
        let mut alts = vec![self.sequence(depth)?];
        loop {
            let save = self.at;
            self.skip_newlines();
            if self.is("|") {
                self.at += 1;
                alts.push(self.sequence(depth)?);
            } else {
                if depth == 0 {
                    self.at = save;
                }
                break;
            }
        }
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            Node::Alt(alts)
        })
    }

    fn sequence(&mut self, depth: usize) -> Result<Node, LarkError> {
        let mut items = Vec::new();
        loop {
            if depth > 0 {
                self.skip_newlines();
            }
            match self.peek() {
                None | Some(Tok::Newline) => break,
                Some(Tok::Punct("|" | ")" | "]")) => break,
                Some(Tok::Punct("->")) => {
                    self.at += 1;
                    match self.peek() {
                        Some(Tok::Name(_)) => self.at += 1,
                        _ => return refuse("expected a name after `->`"),
                    }
                }
                _ => items.push(self.item(depth)?),
            }
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Node::Seq(items)
        })
    }

    fn item(&mut self, depth: usize) -> Result<Node, LarkError> {
        let mut node = self.atom(depth)?;
        loop {
            let (min, max) = if self.is("?") {
                (0, Some(1))
            } else if self.is("*") {
                (0, None)
            } else if self.is("+") {
                (1, None)
            } else if self.is("~") {
                self.at += 1;
                let n = self.number("after `~`")?;
                let m = if self.is("..") {
                    self.at += 1;
                    self.number("after `..`")?
                } else {
                    n
                };
                if m < n {
                    return refuse(format!("`~ {n}..{m}` counts down"));
                }
                node = Node::Repeat(Box::new(node), n, Some(m));
                continue;
            } else {
                return Ok(node);
            };
            self.at += 1;
            node = Node::Repeat(Box::new(node), min, max);
        }
    }

    fn number(&mut self, what: &str) -> Result<u32, LarkError> {
        match self.peek() {
            Some(Tok::Num(n)) => {
                let n = *n;
                self.at += 1;
                Ok(n)
            }
            _ => refuse(format!("expected a number {what}")),
        }
    }

    fn atom(&mut self, depth: usize) -> Result<Node, LarkError> {
        let tok = self.peek().cloned();
        self.at += 1;
        match tok {
            Some(Tok::Punct("(")) => {
                let inner = self.alternatives(depth + 1)?;
                self.expect(")", "to close `(`")?;
                Ok(inner)
            }
            Some(Tok::Punct("[")) => {
                let inner = self.alternatives(depth + 1)?;
                self.expect("]", "to close `[`")?;
                Ok(Node::Repeat(Box::new(inner), 0, Some(1)))
            }
            Some(Tok::Str(s, insensitive)) => {
                if self.is("..") {
                    self.at += 1;
                    let hi = match self.peek() {
                        Some(Tok::Str(h, _)) => h.clone(),
                        _ => return refuse("expected a string after `..` in a range"),
                    };
                    self.at += 1;
                    let one = |s: &str| {
                        let mut it = s.chars();
                        match (it.next(), it.next()) {
                            (Some(c), None) => Ok(c),
                            _ => refuse("a range `\"a\"..\"z\"` takes one character at each end"),
                        }
                    };
                    let (lo, hi) = (one(&s)?, one(&hi)?);
                    if hi < lo {
                        return refuse(format!("the range `{lo}`..`{hi}` is empty"));
                    }
                    return Ok(Node::Range(lo, hi));
                }
                Ok(Node::Lit(s, insensitive))
            }
            Some(Tok::Regex(source, flags)) => {
                if !flags.is_empty() {
                    return refuse(format!(
                        "the regular expression /{source}/ has flags `{flags}`, which are not supported: write the cases out"
                    ));
                }
                Ok(Node::Regex(source))
            }
            Some(Tok::Name(n)) => {
                if self.is("{") {
                    return refuse(format!(
                        "`{n}{{...}}` is a template, which is not supported"
                    ));
                }
                Ok(Node::Ref(n))
            }
            Some(Tok::Punct(p)) => refuse(format!("unexpected `{p}`")),
            Some(Tok::Newline) | None => refuse("a definition ends where an item was expected"),
            Some(Tok::Num(n)) => refuse(format!("unexpected number {n}")),
            Some(Tok::Directive(_)) => refuse("a `%` directive must start its own line"),
        }
    }
}

/// The regular expressions of Lark's `common` terminals that grammars import.
fn common(name: &str) -> Option<&'static str> {
    Some(match name {
        "LF" => r"\n",
        "CR" => r"\r",
        "NEWLINE" => r"(\r?\n)+",
        "WS" => r"[ \t\f\r\n]+",
        "WS_INLINE" => r"[ \t]+",
        "DIGIT" => r"[0-9]",
        "HEXDIGIT" => r"[a-fA-F0-9]",
        "INT" => r"[0-9]+",
        "SIGNED_INT" => r"[+-]?[0-9]+",
        "DECIMAL" => r"[0-9]+\.[0-9]*|\.[0-9]+",
        "NUMBER" => r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?",
        "SIGNED_NUMBER" => r"[+-]?([0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?)",
        "LETTER" => r"[a-zA-Z]",
        "LCASE_LETTER" => r"[a-z]",
        "UCASE_LETTER" => r"[A-Z]",
        "WORD" => r"[a-zA-Z]+",
        "CNAME" => r"[a-zA-Z_][a-zA-Z0-9_]*",
        "ESCAPED_STRING" => r#""([^"\\\n]|\\[^\n])*""#,
        _ => return None,
    })
}

/// `%import common.NAME`, `%import common.NAME -> ALIAS`, `%import common (A, B)`.
fn import(line: &str, defs: &mut BTreeMap<String, Node>) -> Result<(), LarkError> {
    let rest = line.trim_start_matches("import").trim();
    let unknown = |n: &str| {
        LarkError(format!(
            "`%import common.{n}` is not a terminal known here: define it"
        ))
    };
    let (names, aliases): (Vec<&str>, Vec<&str>) = if let Some(list) = rest.strip_prefix("common") {
        let list = list.trim();
        if let Some(one) = list.strip_prefix('.') {
            let (name, alias) = match one.split_once("->") {
                Some((n, a)) => (n.trim(), a.trim()),
                None => (one.trim(), one.trim()),
            };
            (vec![name], vec![alias])
        } else if let Some(inner) = list.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
            let names: Vec<&str> = inner.split(',').map(str::trim).collect();
            (names.clone(), names)
        } else {
            return refuse(format!("`%{line}` is not an import this server reads"));
        }
    } else {
        return refuse(format!(
            "`%{line}`: only Lark's `common` terminals can be imported here"
        ));
    };
    for (name, alias) in names.iter().zip(aliases) {
        let re = common(name).ok_or_else(|| unknown(name))?;
        defs.insert(alias.to_string(), Node::Regex(re.to_string()));
    }
    Ok(())
}

fn parse(src: &str) -> Result<BTreeMap<String, Node>, LarkError> {
    let mut p = Parser {
        toks: lex(src)?,
        at: 0,
    };
    let mut defs = BTreeMap::new();
    loop {
        p.skip_newlines();
        let Some(tok) = p.peek().cloned() else { break };
        p.at += 1;
        let name = match tok {
            Tok::Directive(line) if line.trim_start().starts_with("import") => {
                import(line.trim(), &mut defs)?;
                continue;
            }
            Tok::Directive(line) => {
                let word = line.split_whitespace().next().unwrap_or("");
                return refuse(format!(
                    "`%{word}` is not supported here (`%ignore` would let text between every token): write the grammar without it"
                ));
            }
            Tok::Punct("?" | "!") => match p.peek().cloned() {
                Some(Tok::Name(n)) => {
                    p.at += 1;
                    n
                }
                _ => return refuse("expected a rule name after `?` or `!`"),
            },
            Tok::Name(n) => n,
            Tok::Punct(x) => return refuse(format!("a definition cannot start with `{x}`")),
            _ => return refuse("expected a definition (`name: ...`)"),
        };
        if p.is(".") {
            p.at += 1;
            p.number("as a priority after `.`")?;
        }
        if p.is("{") {
            return refuse(format!(
                "`{name}{{...}}` is a template, which is not supported"
            ));
        }
        p.expect(":", &format!("after `{name}`"))?;
        let body = p.alternatives(0)?;
        if defs.insert(name.clone(), body).is_some() {
            return refuse(format!("`{name}` is defined twice"));
        }
    }
    Ok(defs)
}

fn refs<'a>(node: &'a Node, out: &mut Vec<&'a str>) {
    match node {
        Node::Seq(v) | Node::Alt(v) => v.iter().for_each(|n| refs(n, out)),
        Node::Repeat(n, ..) => refs(n, out),
        Node::Ref(r) => out.push(r),
        Node::Lit(..) | Node::Range(..) | Node::Regex(_) => {}
    }
}

/// Whether `node` can match the empty text, given which definitions can.
fn nullable(node: &Node, null: &BTreeSet<String>) -> bool {
    match node {
        Node::Seq(v) => v.iter().all(|n| nullable(n, null)),
        Node::Alt(v) => v.iter().any(|n| nullable(n, null)),
        Node::Lit(s, _) => s.is_empty(),
        Node::Range(..) => false,
        Node::Regex(source) => regex_nullable(source),
        Node::Repeat(n, min, _) => *min == 0 || nullable(n, null),
        Node::Ref(r) => null.contains(r),
    }
}

/// Whether a regular expression matches the empty text (one that does not parse is taken
/// as if it did: the left-recursion check is then stricter, and the compile refuses it).
fn regex_nullable(source: &str) -> bool {
    regex_syntax::Parser::new()
        .parse(source)
        .map_or(true, |h| h.properties().minimum_len() == Some(0))
}

/// The definitions that can start a match of `node` (before any character of its own).
fn leftmost<'a>(node: &'a Node, null: &BTreeSet<String>, out: &mut BTreeSet<&'a str>) {
    match node {
        Node::Seq(v) => {
            for n in v {
                leftmost(n, null, out);
                if !nullable(n, null) {
                    break;
                }
            }
        }
        Node::Alt(v) => v.iter().for_each(|n| leftmost(n, null, out)),
        Node::Repeat(n, ..) => leftmost(n, null, out),
        Node::Ref(r) => {
            out.insert(r);
        }
        Node::Lit(..) | Node::Range(..) | Node::Regex(_) => {}
    }
}

/// Refuse a left-recursive grammar (`expr: expr "+" term | term`), which llama.cpp's grammar
/// sampler cannot run.
fn check_left_recursion(defs: &BTreeMap<String, Node>) -> Result<(), LarkError> {
    let mut null = BTreeSet::new();
    loop {
        let more: Vec<String> = defs
            .iter()
            .filter(|(n, body)| !null.contains(*n) && nullable(body, &null))
            .map(|(n, _)| n.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        null.extend(more);
    }
    let edges: BTreeMap<&str, BTreeSet<&str>> = defs
        .iter()
        .map(|(n, body)| {
            let mut out = BTreeSet::new();
            leftmost(body, &null, &mut out);
            (n.as_str(), out)
        })
        .collect();
    for start in defs.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = edges[start.as_str()].iter().copied().collect();
        while let Some(n) = stack.pop() {
            if n == start {
                return refuse(format!(
                    "`{start}` is left-recursive (it can begin with itself), which the grammar sampler cannot run: write the repetition with `*` or `+`"
                ));
            }
            if seen.insert(n) {
                stack.extend(edges.get(n).into_iter().flatten().copied());
            }
        }
    }
    Ok(())
}

fn rule_name(name: &str) -> String {
    format!("s-lark-{}", name.replace('_', "-"))
}

fn expr(node: &Node) -> Result<String, LarkError> {
    Ok(match node {
        Node::Seq(v) if v.is_empty() => "\"\"".into(),
        Node::Seq(v) => v.iter().map(expr).collect::<Result<Vec<_>, _>>()?.join(" "),
        Node::Alt(v) => format!(
            "( {} )",
            v.iter()
                .map(expr)
                .collect::<Result<Vec<_>, _>>()?
                .join(" | ")
        ),
        Node::Lit(s, false) => written(s),
        Node::Lit(s, true) => {
            let parts: Vec<String> = s
                .chars()
                .map(|c| {
                    let (l, u) = (c.to_ascii_lowercase(), c.to_ascii_uppercase());
                    if l != u {
                        format!("[{l}{u}]")
                    } else {
                        written(&c.to_string())
                    }
                })
                .collect();
            if parts.is_empty() {
                "\"\"".into()
            } else {
                parts.join(" ")
            }
        }
        Node::Range(lo, hi) => json_char(&CharSet::of(&[(*lo as u32, *hi as u32)]))
            .map_err(|e| LarkError(format!("the range `{lo}`..`{hi}`: {}", e.0)))?,
        Node::Regex(source) => {
            let e = pattern_expr(&format!("^(?:{source})$"), "char")
                .map_err(|e| LarkError(format!("the regular expression /{source}/: {}", e.0)))?;
            format!("( {e} )")
        }
        Node::Ref(r) => rule_name(r),
        Node::Repeat(n, min, max) => {
            let op = match (min, max) {
                (0, Some(1)) => "?".to_string(),
                (0, None) => "*".to_string(),
                (1, None) => "+".to_string(),
                _ => repetition((*min).into(), max.map(u64::from))
                    .map_err(|e| LarkError(format!("it repeats by {e}")))?,
            };
            format!("( {} ){op}", expr(n)?)
        }
    })
}

/// `s` as a JSON string writes it (escapes included), as a GBNF literal.
fn written(s: &str) -> String {
    let json = serde_json::to_string(s).unwrap_or_default();
    literal(&json[1..json.len() - 1])
}

/// Compile the Lark grammar `definition`; its start rule is `start`.
pub fn lark_rules(definition: &str) -> Result<LarkRules, LarkError> {
    let defs = parse(definition)?;
    if !defs.contains_key("start") {
        return refuse("the grammar has no `start` rule");
    }
    for body in defs.values() {
        let mut used = Vec::new();
        refs(body, &mut used);
        if let Some(u) = used.iter().find(|u| !defs.contains_key(**u)) {
            return refuse(format!("`{u}` is used but not defined"));
        }
    }
    check_left_recursion(&defs)?;
    let rules = defs
        .iter()
        .map(|(n, body)| Ok((rule_name(n), expr(body)?)))
        .collect::<Result<Vec<_>, LarkError>>()?;
    Ok(LarkRules {
        root: rule_name("start"),
        rules,
    })
}

#[cfg(test)]
#[path = "lark_tests.rs"]
mod tests;
