//! JSON Schema's `pattern`: an ECMA-262 regular expression, as a GBNF expression over the
//! characters of a JSON string *as written* (escapes included), so that the decoded string
//! has a match. `regex-syntax` parses the pattern; what it parses differently from ECMA-262
//! (flags, `\A`, `\z`, `\U`, `\u{..}`, `\p{..}`, POSIX and nested classes, set operations,
//! word boundaries, `\a`) is refused, as are anchors anywhere but at the ends of a top-level
//! alternative, rather than given another meaning.
//!
//! A character the pattern allows is written raw when JSON allows it raw, or as its short
//! escape (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`); `\uXXXX` escapes are not written, so the
//! model cannot spell a character the pattern refuses, and the other control characters
//! (which have no short escape) cannot be written at all.

use regex_syntax::ast::{
    self, AssertionKind, Ast, ClassPerlKind, ClassSet, ClassSetItem, GroupKind, LiteralKind,
    RepetitionKind, RepetitionRange, SpecialLiteralKind,
};

/// Why a pattern cannot be a grammar; the text says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError(pub String);

fn refuse<T>(what: &str) -> Result<T, PatternError> {
    Err(PatternError(what.to_string()))
}

/// The largest Unicode scalar value.
const MAX_CHAR: u32 = 0x10_FFFF;
const SURROGATES: (u32, u32) = (0xD800, 0xDFFF);

/// A set of Unicode scalar values.
///
/// Invariants (checked by `CharSet::check` in the tests):
/// 1. the ranges are inclusive, `lo <= hi <= MAX_CHAR`;
/// 2. they are sorted, and neither overlap nor touch (a gap of at least one between them);
/// 3. no range holds a surrogate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CharSet(Vec<(u32, u32)>);

impl CharSet {
    /// The set of the given ranges (in any order; surrogates are dropped).
    pub fn of(ranges: &[(u32, u32)]) -> CharSet {
        let mut v: Vec<(u32, u32)> = Vec::new();
        for &(lo, hi) in ranges {
            let hi = hi.min(MAX_CHAR);
            if lo > hi {
                continue;
            }
            // Split around the surrogates.
            if lo < SURROGATES.0 {
                v.push((lo, hi.min(SURROGATES.0 - 1)));
            }
            if hi > SURROGATES.1 {
                v.push((lo.max(SURROGATES.1 + 1), hi));
            }
        }
        v.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
        for (lo, hi) in v {
            match out.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        CharSet(out)
    }

    pub fn char(c: char) -> CharSet {
        CharSet::of(&[(c as u32, c as u32)])
    }

    pub fn union(&self, other: &CharSet) -> CharSet {
        let all: Vec<(u32, u32)> = self.0.iter().chain(&other.0).copied().collect();
        CharSet::of(&all)
    }

    /// Every scalar value not in the set.
    pub fn complement(&self) -> CharSet {
        let mut out = Vec::new();
        let mut next = 0u32;
        for &(lo, hi) in &self.0 {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= MAX_CHAR {
            out.push((next, MAX_CHAR));
        }
        CharSet::of(&out)
    }

    pub fn intersection(&self, other: &CharSet) -> CharSet {
        self.complement().union(&other.complement()).complement()
    }

    pub fn contains(&self, c: char) -> bool {
        let c = c as u32;
        self.0.iter().any(|&(lo, hi)| lo <= c && c <= hi)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Invariants 1-3; `Err` names the first that fails.
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        for (i, &(lo, hi)) in self.0.iter().enumerate() {
            if lo > hi || hi > MAX_CHAR {
                return Err(format!("1: range {i} is ({lo:#x}, {hi:#x})"));
            }
            if i > 0 && lo <= self.0[i - 1].1 + 1 {
                return Err(format!("2: range {i} overlaps or touches the one before"));
            }
            if lo <= SURROGATES.1 && hi >= SURROGATES.0 {
                return Err(format!("3: range {i} holds surrogates"));
            }
        }
        Ok(())
    }
}

/// ECMA-262's `\d`.
fn digit() -> CharSet {
    CharSet::of(&[(0x30, 0x39)])
}

/// ECMA-262's `\w` (ASCII only, without the `u` and `i` flags).
fn word() -> CharSet {
    CharSet::of(&[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
}

/// ECMA-262's `\s`: white space and line terminators.
fn space() -> CharSet {
    CharSet::of(&[
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ])
}

/// ECMA-262's `.`: anything but a line terminator.
fn dot() -> CharSet {
    CharSet::of(&[(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]).complement()
}

/// The characters a JSON string may hold unescaped (GBNF's `char` rule writes the same).
fn raw_json() -> CharSet {
    CharSet::of(&[(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)]).complement()
}

/// The short escapes, with the character each one stands for.
const SHORT_ESCAPES: [(&str, char); 7] = [
    ("\\\"", '"'),
    ("\\\\", '\\'),
    ("\\n", '\n'),
    ("\\r", '\r'),
    ("\\t", '\t'),
    ("\\b", '\u{8}'),
    ("\\f", '\u{c}'),
];

fn class_char(c: u32) -> String {
    if c <= 0xFFFF {
        format!("\\u{c:04X}")
    } else {
        format!("\\U{c:08X}")
    }
}

/// The GBNF expression for one character of `set` as a JSON string writes it.
pub fn json_char(set: &CharSet) -> Result<String, PatternError> {
    let raw = set.intersection(&raw_json());
    let mut alts = Vec::new();
    if !raw.is_empty() {
        let mut class = String::from("[");
        for &(lo, hi) in &raw.0 {
            class.push_str(&class_char(lo));
            if hi > lo {
                class.push('-');
                class.push_str(&class_char(hi));
            }
        }
        class.push(']');
        alts.push(class);
    }
    for (escape, c) in SHORT_ESCAPES {
        if set.contains(c) {
            alts.push(crate::schema::literal(escape));
        }
    }
    match alts.len() {
        0 => refuse("a character class in it matches no character a JSON string can hold"),
        1 => Ok(alts.remove(0)),
        _ => Ok(format!("({})", alts.join(" | "))),
    }
}

/// The GBNF expression (over a JSON string's written characters, quotes excluded) of the
/// strings that `pattern` matches, as JSON Schema's `pattern` does: anywhere in the
/// string unless anchored with `^` and `$`. `any` is the expression of any one written
/// character.
pub fn pattern_expr(pattern: &str, any: &str) -> Result<String, PatternError> {
    let ast = ast::parse::ParserBuilder::new()
        .nest_limit(64)
        .build()
        .parse(pattern)
        .map_err(|e| PatternError(format!("it does not parse: {}", e.kind())))?;
    let alternatives: Vec<&Ast> = match &ast {
        Ast::Alternation(a) => a.asts.iter().collect(),
        one => vec![one],
    };
    let mut out = Vec::new();
    for alt in alternatives {
        let mut items: Vec<&Ast> = match alt {
            Ast::Concat(c) => c.asts.iter().collect(),
            one => vec![one],
        };
        let start = items
            .first()
            .is_some_and(|a| is_assertion(a, AssertionKind::StartLine));
        if start {
            items.remove(0);
        }
        let end = items
            .last()
            .is_some_and(|a| is_assertion(a, AssertionKind::EndLine));
        if end {
            items.pop();
        }
        let mut seq = Vec::new();
        if !start {
            seq.push(format!("{any}*"));
        }
        for item in items {
            let e = expr(item)?;
            if !e.is_empty() {
                seq.push(e);
            }
        }
        if !end {
            seq.push(format!("{any}*"));
        }
        out.push(if seq.is_empty() {
            "\"\"".to_string()
        } else {
            seq.join(" ")
        });
    }
    Ok(if out.len() == 1 {
        out.remove(0)
    } else {
        format!("({})", out.join(" | "))
    })
}

fn is_assertion(a: &Ast, kind: AssertionKind) -> bool {
    matches!(a, Ast::Assertion(x) if x.kind == kind)
}

/// One node below the top level's alternatives and anchors ("" for the empty regex).
fn expr(a: &Ast) -> Result<String, PatternError> {
    Ok(match a {
        Ast::Empty(_) => String::new(),
        Ast::Flags(_) => return refuse("flags such as `(?i)` are not ECMA-262"),
        Ast::Literal(l) => json_char(&literal(l)?)?,
        Ast::Dot(_) => json_char(&dot())?,
        Ast::Assertion(_) => {
            return refuse(
                "`^` and `$` are supported only at the start and end of the pattern (or of a top-level alternative), and word boundaries not at all",
            )
        }
        Ast::ClassUnicode(_) => return refuse("Unicode property classes (`\\p{..}`) are not supported"),
        Ast::ClassPerl(p) => json_char(&perl(p))?,
        Ast::ClassBracketed(b) => json_char(&bracketed(b)?)?,
        Ast::Repetition(r) => {
            let inner = expr(&r.ast)?;
            if inner.is_empty() {
                return Ok(String::new());
            }
            let counted = |min: u32, max: Option<u32>| {
                crate::schema::repetition(min.into(), max.map(u64::from)).map_err(|e| {
                    PatternError(format!("it repeats by {e}: write a smaller count"))
                })
            };
            let op = match &r.op.kind {
                RepetitionKind::ZeroOrOne => "?".to_string(),
                RepetitionKind::ZeroOrMore => "*".to_string(),
                RepetitionKind::OneOrMore => "+".to_string(),
                RepetitionKind::Range(RepetitionRange::Exactly(n)) => counted(*n, Some(*n))?,
                RepetitionKind::Range(RepetitionRange::AtLeast(n)) => counted(*n, None)?,
                RepetitionKind::Range(RepetitionRange::Bounded(m, n)) => counted(*m, Some(*n))?,
            };
            format!("({inner}){op}")
        }
        Ast::Group(g) => {
            if let GroupKind::NonCapturing(flags) = &g.kind {
                if !flags.items.is_empty() {
                    return refuse("flags such as `(?i:..)` are not ECMA-262");
                }
            }
            let inner = expr(&g.ast)?;
            if inner.is_empty() {
                String::new()
            } else {
                format!("({inner})")
            }
        }
        Ast::Alternation(alt) => {
            let parts = alt
                .asts
                .iter()
                .map(|a| {
                    let e = expr(a)?;
                    Ok(if e.is_empty() { "\"\"".to_string() } else { e })
                })
                .collect::<Result<Vec<_>, PatternError>>()?;
            format!("({})", parts.join(" | "))
        }
        Ast::Concat(c) => {
            let parts = c
                .asts
                .iter()
                .map(expr)
                .collect::<Result<Vec<_>, PatternError>>()?;
            parts
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        }
    })
}

/// A literal's character, where ECMA-262 reads the escape the same way.
fn literal(l: &ast::Literal) -> Result<CharSet, PatternError> {
    match &l.kind {
        LiteralKind::Verbatim | LiteralKind::Meta | LiteralKind::Superfluous => {}
        LiteralKind::HexFixed(ast::HexLiteralKind::X)
        | LiteralKind::HexFixed(ast::HexLiteralKind::UnicodeShort) => {}
        LiteralKind::Special(SpecialLiteralKind::Bell) => {
            return refuse("`\\a` is not ECMA-262 (it would match `a`)")
        }
        LiteralKind::Special(_) => {}
        LiteralKind::HexFixed(ast::HexLiteralKind::UnicodeLong)
        | LiteralKind::HexBrace(_)
        | LiteralKind::Octal => {
            return refuse(
                "`\\U`, `\\u{..}`, `\\x{..}` and octal escapes are not ECMA-262: write `\\uXXXX`",
            )
        }
    }
    Ok(CharSet::char(l.c))
}

fn perl(p: &ast::ClassPerl) -> CharSet {
    let set = match p.kind {
        ClassPerlKind::Digit => digit(),
        ClassPerlKind::Space => space(),
        ClassPerlKind::Word => word(),
    };
    if p.negated {
        set.complement()
    } else {
        set
    }
}

fn bracketed(b: &ast::ClassBracketed) -> Result<CharSet, PatternError> {
    let ClassSet::Item(item) = &b.kind else {
        return refuse("class set operations (`&&`, `--`, `~~`) are not ECMA-262");
    };
    let set = class_item(item)?;
    Ok(if b.negated { set.complement() } else { set })
}

fn class_item(item: &ClassSetItem) -> Result<CharSet, PatternError> {
    Ok(match item {
        ClassSetItem::Empty(_) => CharSet::default(),
        ClassSetItem::Literal(l) => literal(l)?,
        ClassSetItem::Range(r) => {
            literal(&r.start)?;
            literal(&r.end)?;
            CharSet::of(&[(r.start.c as u32, r.end.c as u32)])
        }
        ClassSetItem::Ascii(_) => {
            return refuse("POSIX classes such as `[[:alpha:]]` are not ECMA-262")
        }
        ClassSetItem::Unicode(_) => {
            return refuse("Unicode property classes (`\\p{..}`) are not supported")
        }
        ClassSetItem::Perl(p) => perl(p),
        ClassSetItem::Bracketed(_) => return refuse("a `[` inside a class: escape it as `\\[`"),
        ClassSetItem::Union(u) => {
            let mut set = CharSet::default();
            for i in &u.items {
                set = set.union(&class_item(i)?);
            }
            set
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_sets_keep_their_invariants_through_every_operation() {
        let samples = [
            CharSet::of(&[]),
            CharSet::of(&[(0x61, 0x7A), (0x41, 0x5A), (0x5B, 0x60)]),
            CharSet::of(&[(0xD000, 0xE000)]),
            CharSet::of(&[(5, 3), (0x10_FFFF, 0x11_0000)]),
            digit(),
            word(),
            space(),
            dot(),
            raw_json(),
        ];
        for a in &samples {
            a.check().unwrap();
            a.complement().check().unwrap();
            assert_eq!(&a.complement().complement(), a);
            for b in &samples {
                a.union(b).check().unwrap();
                let both = a.intersection(b);
                both.check().unwrap();
                for c in ['\0', '"', 'a', 'Z', '\u{2028}', '\u{10FFFF}'] {
                    assert_eq!(a.union(b).contains(c), a.contains(c) || b.contains(c));
                    assert_eq!(both.contains(c), a.contains(c) && b.contains(c));
                }
            }
        }
        // Ranges that touch merge; surrogates are never in a set.
        assert_eq!(CharSet::of(&[(1, 2), (3, 4)]), CharSet::of(&[(1, 4)]));
        assert!(CharSet::of(&[(0, MAX_CHAR)]).contains('\u{E000}'));
        assert_eq!(
            CharSet::of(&[(0xD000, 0xE000)]).0,
            vec![(0xD000, 0xD7FF), (0xE000, 0xE000)]
        );
    }

    #[test]
    fn a_character_is_written_raw_where_json_allows_it_else_as_its_short_escape() {
        assert_eq!(json_char(&CharSet::char('a')).unwrap(), "[\\u0061]");
        assert_eq!(
            json_char(&CharSet::char('"').union(&CharSet::char('a'))).unwrap(),
            "([\\u0061] | \"\\\\\\\"\")"
        );
        assert_eq!(json_char(&CharSet::char('\n')).unwrap(), "\"\\\\n\"");
        assert_eq!(
            json_char(&CharSet::char('\u{1F600}')).unwrap(),
            "[\\U0001F600]"
        );
        // A control character without a short escape cannot be written.
        assert!(json_char(&CharSet::char('\u{1}')).is_err());
    }

    #[test]
    fn patterns_match_anywhere_unless_anchored() {
        let e = |p: &str| pattern_expr(p, "char").unwrap();
        assert_eq!(e("^a$"), "[\\u0061]");
        assert_eq!(e("a"), "char* [\\u0061] char*");
        assert_eq!(e("^a"), "[\\u0061] char*");
        assert_eq!(e(""), "char* char*");
        assert_eq!(e("^$"), "\"\"");
        assert_eq!(e("^a|b$"), "([\\u0061] char* | char* [\\u0062])");
        assert_eq!(e(r"^\d{2,3}x?$"), "([\\u0030-\\u0039]){2,3} ([\\u0078])?");
        assert_eq!(e("^(?:ab|c)+$"), "((([\\u0061] [\\u0062] | [\\u0063])))+");
        assert_eq!(
            e("^[^a]$"),
            json_char(&CharSet::char('a').complement()).unwrap()
        );
    }

    #[test]
    fn what_ecma_reads_otherwise_is_refused() {
        for p in [
            "(?i)a",
            "(?i:a)",
            r"\Aa",
            r"a\z",
            r"\ba",
            r"\pL",
            "[[:alpha:]]",
            "[a&&b]",
            r"\U00000041",
            r"\u{41}",
            r"\x{41}",
            r"\a",
            "a(^b)",
            "a^b",
            "(a)$b",
            "a(?=b)",
            r"(a)\1",
            "[",
        ] {
            assert!(pattern_expr(p, "char").is_err(), "{p} was not refused");
        }
        // A class that admits nothing JSON can write.
        assert!(pattern_expr(r"^[\x01]$", "char").is_err());
    }
}
