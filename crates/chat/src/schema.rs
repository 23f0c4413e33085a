//! JSON schemas compiled to GBNF, the grammar language of llama.cpp's grammar sampler.
//!
//! Why our own compiler rather than llama.cpp's `json_schema_to_grammar` or llguidance: the
//! llama.cpp one lives in `common/`, which our build of the vendored sources leaves out,
//! and it skips keywords it does not know with a warning, so a client's constraint could
//! be dropped silently; llguidance's build fetches its sources at build time. Here every
//! keyword is either honoured exactly or refused with [`SchemaError::Unsupported`] naming
//! it, which the server turns into a 400. A tool that is not `strict` (OpenAI makes no
//! promise for its arguments) is compiled [`SchemaMode::Superset`]: what a grammar cannot
//! hold is left to the model, so the grammar admits every valid value and some invalid
//! ones, and an agent's request with one such tool among many is still served.
//!
//! What is honoured: `type` (one or several), `properties`, `required`,
//! `additionalProperties` (absent or `false`: no other keys; `true` or a schema: others
//! allowed after the named ones), `items`, `prefixItems`, `minItems`, `maxItems`, `enum`,
//! `const`, `anyOf`, `oneOf`, `allOf` of one schema, `$ref` into `$defs`/`definitions`
//! (recursion allowed), `minLength`, `maxLength`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `nullable`, and the string formats `date`,
//! `time`, `date-time` and `uuid`. Annotations (`title`, `description`, `default`,
//! `examples`, other formats ...) are ignored. The output is compact JSON with at most one
//! space after separators, and numbers without exponents, so every string the grammar
//! admits is valid against the schema.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the JSON schema uses `{keyword}` at `{path}`, which constrained decoding does not support: {hint}")]
    Unsupported {
        path: String,
        keyword: String,
        hint: &'static str,
    },
    #[error("the JSON schema is invalid at `{path}`: {reason}")]
    Invalid { path: String, reason: String },
    #[error("the JSON schema's `pattern` at `{path}` cannot constrain decoding: {reason}")]
    Pattern { path: String, reason: String },
}

/// A GBNF grammar whose start rule is `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    pub(crate) rules: BTreeMap<String, String>,
    /// What a [`SchemaMode::Superset`] compile left to the model: `keyword at path`.
    pub left_out: Vec<String>,
}

impl Grammar {
    /// The GBNF text, `root` first.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(r) = self.rules.get("root") {
            out.push_str(&format!("root ::= {r}\n"));
        }
        for (name, body) in &self.rules {
            if name != "root" {
                out.push_str(&format!("{name} ::= {body}\n"));
            }
        }
        out
    }
}

impl Grammar {
    /// The grammar of a reply that is either this grammar's or `other`'s (a JSON answer,
    /// or a tool call). The two keep their rules; a rule both have must be the same rule
    /// (the primitives, harmony's lead), as the compilers name theirs apart (`s-`, `ref-`,
    /// a tool's `t<i>-`).
    pub fn either(mut self, other: Grammar) -> Grammar {
        let a = self.rules.remove("root").unwrap_or_default();
        let mut other = other;
        let b = other.rules.remove("root").unwrap_or_default();
        for (name, body) in other.rules {
            match self.rules.get(&name) {
                Some(mine) => debug_assert_eq!(mine, &body, "two rules named {name}"),
                None => {
                    self.rules.insert(name, body);
                }
            }
        }
        self.rules
            .insert("root".into(), format!("( {a} ) | ( {b} )"));
        self.left_out.extend(other.left_out);
        self
    }
}

/// A GBNF string literal for `s`.
pub fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The largest count llama.cpp's grammar parser takes in `{m,n}` (`MAX_REPETITION_THRESHOLD`):
/// it refuses a larger minimum and, worse, reads a larger maximum as no maximum at all. So
/// no count above it is ever written: string lengths are written in blocks of it, and
/// other counts above it are refused.
pub const MAX_REPETITION: u64 = 2000;

/// `{min,max}` for an item repeated `min` to `max` times (`None`: no maximum), or the
/// refusal when a count is above [`MAX_REPETITION`].
pub(crate) fn repetition(min: u64, max: Option<u64>) -> Result<String, String> {
    if min > MAX_REPETITION || max.is_some_and(|m| m > MAX_REPETITION) {
        return Err(format!(
            "a count above {MAX_REPETITION} (llama.cpp's grammar parser reads a larger maximum as none)"
        ));
    }
    Ok(match max {
        Some(m) if m == min => format!("{{{min}}}"),
        Some(m) => format!("{{{min},{m}}}"),
        None => format!("{{{min},}}"),
    })
}

/// A run of `min` to `max` JSON string characters (`None`: no maximum). Lengths above
/// [`MAX_REPETITION`] are written as blocks of it, so that llama.cpp holds them exactly:
/// at most `k` is `(block){0,p-1} char{0,B-1} | (block){p} char{0,r}` (`k = pB + r`), whose
/// two branches cover `0..pB-1` and `pB..k`, each length in one way only.
fn char_run(min: u64, max: Option<u64>) -> Result<String, String> {
    const B: u64 = MAX_REPETITION;
    let too_long = || {
        format!(
            "a length above {} (llama.cpp's grammar parser cannot hold it)",
            B * B
        )
    };
    let exactly = |n: u64| -> Result<Option<String>, String> {
        match n {
            0 => Ok(None),
            n if n <= B => Ok(Some(format!("char{{{n}}}"))),
            n if n <= B * B => {
                let (p, r) = (n / B, n % B);
                let tail = if r > 0 {
                    format!(" char{{{r}}}")
                } else {
                    String::new()
                };
                Ok(Some(format!("(char{{{B}}}){{{p}}}{tail}")))
            }
            _ => Err(too_long()),
        }
    };
    let at_most = |k: u64| -> Result<Option<String>, String> {
        match k {
            0 => Ok(None),
            k if k <= B => Ok(Some(format!("char{{0,{k}}}"))),
            k if k <= B * B => {
                let (p, r) = (k / B, k % B);
                let full = if p > 1 {
                    format!("(char{{{B}}}){{0,{}}} ", p - 1)
                } else {
                    String::new()
                };
                let tail = if r > 0 {
                    format!(" char{{0,{r}}}")
                } else {
                    String::new()
                };
                Ok(Some(format!(
                    "({full}char{{0,{}}} | (char{{{B}}}){{{p}}}{tail})",
                    B - 1
                )))
            }
            _ => Err(too_long()),
        }
    };
    let mut parts: Vec<String> = exactly(min)?.into_iter().collect();
    match max {
        Some(m) => parts.extend(at_most(m - min)?),
        None => parts.push("char*".into()),
    }
    Ok(if parts.is_empty() {
        "\"\"".into()
    } else {
        parts.join(" ")
    })
}

/// The longest integer the grammar writes, in digits: keeps an unbounded integer finite.
const MAX_INT_DIGITS: u32 = 15;
/// Fraction digits of a non-integer number.
const MAX_FRACTION_DIGITS: u32 = 6;

const PRIMITIVES: &[(&str, &str)] = &[
    ("space", "| \" \""),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"#,
    ),
    ("string", r#""\"" char* "\"" space"#),
    ("boolean", r#"("true" | "false") space"#),
    ("null", r#""null" space"#),
    ("integer", r#""-"? ([0] | [1-9] [0-9]{0,14}) space"#),
    (
        "number",
        r#""-"? ([0] | [1-9] [0-9]{0,14}) ("." [0-9]{1,6})? space"#,
    ),
    ("value", "object | array | string | number | boolean | null"),
    (
        "object",
        r#""{" space (string ":" space value ("," space string ":" space value)*)? "}" space"#,
    ),
    (
        "array",
        r#""[" space (value ("," space value)*)? "]" space"#,
    ),
    ("digit", "[0-9]"),
];

/// How a schema's keywords that a grammar cannot hold are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaMode {
    /// Refused ([`SchemaError::Unsupported`]): every string the grammar admits is valid.
    Exact,
    /// Left out: a keyword that only narrows the values (`uniqueItems`, `not`, ...) is
    /// skipped, and a schema that cannot be written otherwise admits any JSON value of its
    /// `type` (any value without one). Every valid value is still admitted.
    Superset,
}

/// Builds rules; each schema node becomes an expression, objects and `$ref`s named rules.
pub struct Compiler<'s> {
    root: &'s Value,
    mode: SchemaMode,
    /// In [`SchemaMode::Superset`], what was left out: `keyword at path`.
    pub left_out: Vec<String>,
    /// The rules made so far (primitives are added by [`Compiler::finish`]).
    pub(crate) rules: BTreeMap<String, String>,
}

/// Compile `schema` to a grammar whose `root` is one JSON value valid against it.
pub fn compile_schema(schema: &Value) -> Result<Grammar, SchemaError> {
    let mut c = Compiler::new(schema);
    let root = c.expr(schema, "#")?;
    c.rules.insert("root".into(), root);
    Ok(c.finish())
}

impl<'s> Compiler<'s> {
    /// A compiler whose `$ref`s resolve against `root`.
    pub fn new(root: &'s Value) -> Compiler<'s> {
        Compiler::with_mode(root, SchemaMode::Exact)
    }

    pub fn with_mode(root: &'s Value, mode: SchemaMode) -> Compiler<'s> {
        Compiler {
            root,
            mode,
            left_out: Vec::new(),
            rules: BTreeMap::new(),
        }
    }

    /// Add a rule (the caller's wrapper around compiled schemas).
    pub fn add_rule(&mut self, name: &str, body: String) {
        self.rules.insert(name.to_string(), body);
    }

    /// Add several rules.
    pub fn add_rules<N: ToString>(&mut self, rules: impl IntoIterator<Item = (N, String)>) {
        for (name, body) in rules {
            self.add_rule(&name.to_string(), body);
        }
    }

    /// The grammar so far, with the primitive rules it may use.
    pub fn finish(mut self) -> Grammar {
        for (name, body) in PRIMITIVES {
            self.rules
                .entry(name.to_string())
                .or_insert_with(|| body.to_string());
        }
        Grammar {
            rules: self.rules,
            left_out: self.left_out,
        }
    }

    /// A rule name not yet taken, from `hint`.
    fn fresh(&self, hint: &str) -> String {
        let base: String = hint
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .trim_matches('-')
            .to_string();
        let base = if base.is_empty() { "node".into() } else { base };
        let base = format!("s-{base}");
        if !self.rules.contains_key(&base) {
            return base;
        }
        (2..)
            .map(|i| format!("{base}-{i}"))
            .find(|n| !self.rules.contains_key(n))
            .unwrap_or(base)
    }

    /// The GBNF expression for values valid against `schema`, at JSON-pointer `path` (in
    /// [`SchemaMode::Superset`], for every valid value and maybe more).
    pub fn expr(&mut self, schema: &Value, path: &str) -> Result<String, SchemaError> {
        let keyword = match self.exact_expr(schema, path) {
            Err(SchemaError::Unsupported { keyword, .. }) if self.mode == SchemaMode::Superset => {
                keyword
            }
            Err(SchemaError::Pattern { .. }) if self.mode == SchemaMode::Superset => {
                "pattern".into()
            }
            r => return r,
        };
        self.left_out.push(format!("`{keyword}` at `{path}`"));
        // Any value of the schema's one type (a tool's arguments stay an object), else any.
        let any = schema
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| {
                [
                    "object", "array", "string", "number", "integer", "boolean", "null",
                ]
                .contains(t)
            })
            .unwrap_or("value");
        Ok(any.into())
    }

    fn exact_expr(&mut self, schema: &Value, path: &str) -> Result<String, SchemaError> {
        let obj = match schema {
            Value::Bool(true) => return Ok("value".into()),
            Value::Bool(false) => {
                return Err(invalid(path, "the schema `false` admits no value"));
            }
            Value::Object(o) => o,
            _ => return Err(invalid(path, "a schema must be an object or a boolean")),
        };
        for keyword in UNSUPPORTED {
            if obj.contains_key(keyword.0) {
                if self.mode == SchemaMode::Superset && keyword.0 != "patternProperties" {
                    // It only narrows the values: skipped, the rest of the schema holds.
                    self.left_out.push(format!("`{}` at `{path}`", keyword.0));
                    continue;
                }
                return Err(SchemaError::Unsupported {
                    path: path.to_string(),
                    keyword: keyword.0.to_string(),
                    hint: keyword.1,
                });
            }
        }
        let inner = self.expr_inner(obj, path)?;
        if obj.get("nullable").and_then(Value::as_bool) == Some(true) {
            return Ok(format!("({inner} | null)"));
        }
        Ok(inner)
    }

    fn expr_inner(&mut self, obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
        if let Some(r) = obj.get("$ref") {
            return self.reference(r, path);
        }
        if let Some(v) = obj.get("const") {
            return Ok(format!("{} space", literal(&compact(v))));
        }
        if let Some(e) = obj.get("enum") {
            let values = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| invalid(path, "`enum` must be a non-empty array"))?;
            let alts: Vec<String> = values.iter().map(|v| literal(&compact(v))).collect();
            return Ok(format!("({}) space", alts.join(" | ")));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = obj.get(key) {
                let list = list
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| invalid(path, &format!("`{key}` must be a non-empty array")))?;
                let alts = list
                    .iter()
                    .enumerate()
                    .map(|(i, s)| self.expr(s, &format!("{path}/{key}/{i}")))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(format!("({})", alts.join(" | ")));
            }
        }
        if let Some(list) = obj.get("allOf") {
            return match list.as_array().map(Vec::as_slice) {
                Some([one]) => self.expr(one, &format!("{path}/allOf/0")),
                _ => Err(SchemaError::Unsupported {
                    path: path.to_string(),
                    keyword: "allOf".into(),
                    hint: "only an allOf of one schema is supported: merge the schemas into one",
                }),
            };
        }
        match obj.get("type") {
            Some(Value::String(t)) => self.typed(t, obj, path),
            Some(Value::Array(ts)) => {
                let alts = ts
                    .iter()
                    .map(|t| match t.as_str() {
                        Some(t) => self.typed(t, obj, path),
                        None => Err(invalid(path, "`type` entries must be strings")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if alts.is_empty() {
                    return Err(invalid(path, "`type` is an empty array"));
                }
                Ok(format!("({})", alts.join(" | ")))
            }
            Some(_) => Err(invalid(
                path,
                "`type` must be a string or an array of strings",
            )),
            None if obj.contains_key("properties") => self.typed("object", obj, path),
            None if obj.contains_key("items") || obj.contains_key("prefixItems") => {
                self.typed("array", obj, path)
            }
            None if obj.contains_key("pattern") => Err(SchemaError::Unsupported {
                path: path.to_string(),
                keyword: "pattern".into(),
                hint: "give it with `\"type\": \"string\"` (a pattern constrains strings only)",
            }),
            None => Ok("value".into()),
        }
    }

    fn reference(&mut self, r: &Value, path: &str) -> Result<String, SchemaError> {
        let r = r
            .as_str()
            .ok_or_else(|| invalid(path, "`$ref` must be a string"))?;
        let target = if r == "#" {
            Some(self.root)
        } else {
            r.strip_prefix("#/")
                .and_then(|p| self.root.pointer(&format!("/{p}")))
        };
        let Some(target) = target else {
            return Err(SchemaError::Unsupported {
                path: path.to_string(),
                keyword: "$ref".into(),
                hint: "only references into this schema (`#`, `#/$defs/...`, `#/definitions/...`) are supported",
            });
        };
        let name = format!("ref-{}", sanitize(r.trim_start_matches("#/")));
        if !self.rules.contains_key(&name) {
            // Reserved before compiling the target, so that recursion ends here.
            self.rules.insert(name.clone(), String::new());
            let body = self.expr(target, r)?;
            self.rules.insert(name.clone(), body);
        }
        Ok(name)
    }

    fn typed(
        &mut self,
        t: &str,
        obj: &Map<String, Value>,
        path: &str,
    ) -> Result<String, SchemaError> {
        match t {
            "string" => string_expr(obj, path),
            "integer" => integer_expr(obj, path),
            "number" => number_expr(obj, path),
            "boolean" => Ok("boolean".into()),
            "null" => Ok("null".into()),
            "object" => self.object_expr(obj, path),
            "array" => self.array_expr(obj, path),
            other => Err(invalid(path, &format!("unknown type `{other}`"))),
        }
    }

    fn object_expr(&mut self, obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
        let empty = Map::new();
        let props = match obj.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(invalid(path, "`properties` must be an object")),
        };
        let required: Vec<&str> = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err(invalid(path, "`required` must be an array of names")),
        };
        for r in &required {
            if !props.contains_key(*r) {
                return Err(invalid(
                    path,
                    &format!("`required` names `{r}`, which `properties` does not define"),
                ));
            }
        }
        let additional = match obj.get("additionalProperties") {
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some("value".to_string()),
            Some(s @ Value::Object(_)) => {
                Some(self.expr(s, &format!("{path}/additionalProperties"))?)
            }
            Some(_) => {
                return Err(invalid(
                    path,
                    "`additionalProperties` must be a boolean or a schema",
                ))
            }
        };
        if props.is_empty() && additional.is_none() && !obj.contains_key("additionalProperties") {
            // `{"type": "object"}`: any object.
            return Ok("object".into());
        }
        let name = self.fresh(path);
        self.rules.insert(name.clone(), String::new());
        // Required keys first, in their order of `properties`; then the optional ones.
        let mut kvs: Vec<(bool, String)> = Vec::new();
        for (key, sub) in props.iter().filter(|(k, _)| required.contains(&k.as_str())) {
            let v = self.expr(sub, &format!("{path}/properties/{key}"))?;
            kvs.push((
                true,
                format!(
                    "{} space \":\" space {v}",
                    literal(&compact(&Value::String(key.clone())))
                ),
            ));
        }
        for (key, sub) in props
            .iter()
            .filter(|(k, _)| !required.contains(&k.as_str()))
        {
            let v = self.expr(sub, &format!("{path}/properties/{key}"))?;
            kvs.push((
                false,
                format!(
                    "{} space \":\" space {v}",
                    literal(&compact(&Value::String(key.clone())))
                ),
            ));
        }
        if let Some(v) = additional {
            let key = if props.is_empty() {
                "string".to_string()
            } else {
                // Another key than the named ones would need a negative class; a key
                // named again is still valid JSON, but ambiguous: refuse it.
                return Err(SchemaError::Unsupported {
                    path: path.to_string(),
                    keyword: "additionalProperties".into(),
                    hint: "extra keys next to `properties` are not supported: list every key in `properties`, or set `additionalProperties` to false",
                });
            };
            let kv = format!("{key} \":\" space {v}");
            self.rules.insert(
                name.clone(),
                format!("\"{{\" space ({kv} (\",\" space {kv})*)? \"}}\" space"),
            );
            return Ok(name);
        }
        let body = object_body(&name, &kvs, &mut self.rules);
        self.rules
            .insert(name.clone(), format!("\"{{\" space {body} \"}}\" space"));
        Ok(name)
    }

    fn array_expr(&mut self, obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
        let min = count(obj, "minItems", path)?.unwrap_or(0);
        let max = count(obj, "maxItems", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(invalid(path, "`maxItems` is below `minItems`"));
        }
        if let Some(Value::Array(prefix)) = obj.get("prefixItems") {
            if obj.get("items").is_some_and(|i| i != &Value::Bool(false)) {
                return Err(SchemaError::Unsupported {
                    path: path.to_string(),
                    keyword: "items".into(),
                    hint: "`items` after `prefixItems` is not supported: list every item in `prefixItems`",
                });
            }
            let items = prefix
                .iter()
                .enumerate()
                .map(|(i, s)| self.expr(s, &format!("{path}/prefixItems/{i}")))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(format!(
                "\"[\" space {} \"]\" space",
                items.join(" \",\" space ")
            ));
        }
        let item = match obj.get("items") {
            None => "value".to_string(),
            Some(s) => self.expr(s, &format!("{path}/items"))?,
        };
        let rest = match max {
            Some(m) => repetition(min.saturating_sub(1), Some(m.saturating_sub(1))),
            None if min > 1 => repetition(min - 1, None),
            None => Ok("*".into()),
        }
        .map_err(|_| SchemaError::Unsupported {
            path: path.to_string(),
            keyword: if max.is_some_and(|m| m > MAX_REPETITION + 1) {
                "maxItems".into()
            } else {
                "minItems".into()
            },
            hint: "item counts above 2000 are not supported: llama.cpp's grammar parser reads a larger maximum as none",
        })?;
        let items = format!("{item} (\",\" space {item}){rest}");
        Ok(match (min, max) {
            (_, Some(0)) => "\"[\" space \"]\" space".into(),
            (0, _) => format!("\"[\" space ({items})? \"]\" space"),
            _ => format!("\"[\" space {items} \"]\" space"),
        })
    }
}

/// Keywords refused, with what to do instead. Each but `patternProperties` (which admits
/// keys that `additionalProperties: false` would not) only narrows the values a schema
/// admits.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("patternProperties", "list the keys in `properties`"),
    ("not", "express the schema without negation"),
    ("if", "conditional schemas are not supported: use `anyOf`"),
    (
        "dependentRequired",
        "make the keys required or optional outright",
    ),
    ("dependentSchemas", "use `anyOf`"),
    ("multipleOf", "remove it, or list the values in `enum`"),
    ("minProperties", "make the keys `required` instead"),
    (
        "maxProperties",
        "list the keys in `properties` with `additionalProperties: false`",
    ),
    (
        "uniqueItems",
        "remove it, or list the items with `prefixItems`",
    ),
    (
        "contains",
        "remove it, or list the items with `prefixItems`",
    ),
    ("propertyNames", "list the keys in `properties`"),
];

/// The key-value sequence of an object: required `kvs` joined by commas, each optional one
/// after them optional; when none is required, the first present one starts the list.
fn object_body(name: &str, kvs: &[(bool, String)], rules: &mut BTreeMap<String, String>) -> String {
    let n_required = kvs.iter().filter(|(r, _)| *r).count();
    // tail(i): the optional kvs from i on, each preceded by a comma.
    let optional: Vec<&String> = kvs.iter().filter(|(r, _)| !r).map(|(_, kv)| kv).collect();
    let tail: String = optional
        .iter()
        .map(|kv| format!("(\",\" space {kv})?"))
        .collect::<Vec<_>>()
        .join(" ");
    if n_required > 0 {
        let req: Vec<&String> = kvs.iter().filter(|(r, _)| *r).map(|(_, kv)| kv).collect();
        let head = req
            .iter()
            .map(|kv| kv.to_string())
            .collect::<Vec<_>>()
            .join(" \",\" space ");
        return format!("{head} {tail}");
    }
    if optional.is_empty() {
        return String::new();
    }
    // first-i ::= kv_i tail(i+1) | first-(i+1)
    let mut next: Option<String> = None;
    for i in (0..optional.len()).rev() {
        let tail_after: String = optional[i + 1..]
            .iter()
            .map(|kv| format!("(\",\" space {kv})?"))
            .collect::<Vec<_>>()
            .join(" ");
        let rule = format!("{name}-from-{i}");
        let body = match &next {
            Some(n) => format!("{} {tail_after} | {n}", optional[i]),
            None => format!("{} {tail_after}", optional[i]),
        };
        rules.insert(rule.clone(), body);
        next = Some(rule);
    }
    format!("{}?", next.unwrap_or_default())
}

fn string_expr(obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
    if let Some(p) = obj.get("pattern") {
        let p = p
            .as_str()
            .ok_or_else(|| invalid(path, "`pattern` must be a string"))?;
        let bounded = ["minLength", "maxLength"]
            .iter()
            .any(|k| obj.contains_key(*k));
        let formatted = obj
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| matches!(f, "date" | "time" | "date-time" | "uuid"));
        if bounded || formatted {
            return Err(SchemaError::Pattern {
                path: path.to_string(),
                reason: "it comes with a length or a `format` that constrains too, and a grammar cannot hold both: put the bounds in the pattern (`^.{1,10}$`), or drop one".into(),
            });
        }
        let body = crate::pattern::pattern_expr(p, "char").map_err(|e| SchemaError::Pattern {
            path: path.to_string(),
            reason: e.0,
        })?;
        return Ok(format!("\"\\\"\" {body} \"\\\"\" space"));
    }
    if let Some(f) = obj.get("format").and_then(Value::as_str) {
        let inner = match f {
            "date" => Some(DATE.to_string()),
            "time" => Some(TIME.to_string()),
            "date-time" => Some(format!("{DATE} \"T\" {TIME}")),
            "uuid" => Some(
                "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}"
                    .to_string(),
            ),
            _ => None, // an annotation
        };
        if let Some(inner) = inner {
            return Ok(format!("\"\\\"\" {inner} \"\\\"\" space"));
        }
    }
    let min = count(obj, "minLength", path)?.unwrap_or(0);
    let max = count(obj, "maxLength", path)?;
    match max {
        Some(m) if m < min => Err(invalid(path, "`maxLength` is below `minLength`")),
        None if min == 0 => Ok("string".into()),
        _ => {
            let run = char_run(min, max).map_err(|e| invalid(path, &e))?;
            Ok(format!("\"\\\"\" {run} \"\\\"\" space"))
        }
    }
}

const DATE: &str =
    r#"[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])"#;
const TIME: &str = r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,3})? ("Z" | ("+" | "-") ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])"#;

/// A non-negative count keyword.
fn count(obj: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>, SchemaError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(path, &format!("`{key}` must be a non-negative integer"))),
    }
}

/// The bounds of a number, as the integers they admit: `[lo, hi]`, each `None` when open.
fn integer_bounds(
    obj: &Map<String, Value>,
    path: &str,
) -> Result<(Option<i64>, Option<i64>), SchemaError> {
    let num = |key: &str| -> Result<Option<f64>, SchemaError> {
        match obj.get(key) {
            None => Ok(None),
            Some(Value::Bool(_)) => Err(SchemaError::Unsupported {
                path: path.to_string(),
                keyword: key.to_string(),
                hint: "the boolean form (draft 4) is not supported: give the bound as a number",
            }),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| invalid(path, &format!("`{key}` must be a number"))),
        }
    };
    let limit = 10f64.powi(MAX_INT_DIGITS as i32);
    let clamp = |x: f64| x.clamp(-limit, limit) as i64;
    let mut lo = num("minimum")?.map(|x| clamp(x.ceil()));
    if let Some(x) = num("exclusiveMinimum")? {
        let v = clamp(x.floor()) + 1;
        lo = Some(lo.map_or(v, |l| l.max(v)));
    }
    let mut hi = num("maximum")?.map(|x| clamp(x.floor()));
    if let Some(x) = num("exclusiveMaximum")? {
        let v = clamp(x.ceil()) - 1;
        hi = Some(hi.map_or(v, |h| h.min(v)));
    }
    if let (Some(l), Some(h)) = (lo, hi) {
        if l > h {
            return Err(invalid(path, "the bounds admit no integer"));
        }
    }
    Ok((lo, hi))
}

fn integer_expr(obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
    match integer_bounds(obj, path)? {
        (None, None) => Ok("integer".into()),
        (lo, hi) => Ok(format!("({}) space", int_range(lo, hi))),
    }
}

/// Numbers: unbounded ones any JSON number without exponent; bounded ones are written as
/// the integers in range, plus fractions where the range allows them exactly (whole,
/// non-negative bounds), so that every value written is within the bounds.
fn number_expr(obj: &Map<String, Value>, path: &str) -> Result<String, SchemaError> {
    let bounded = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
        .iter()
        .any(|k| obj.contains_key(*k));
    if !bounded {
        return Ok("number".into());
    }
    let (lo, hi) = integer_bounds(obj, path)?;
    let whole = |k: &str| {
        obj.get(k)
            .and_then(Value::as_f64)
            .is_none_or(|x| x.fract() == 0.0)
    };
    let exclusive = obj.contains_key("exclusiveMinimum") || obj.contains_key("exclusiveMaximum");
    let fractions =
        lo.is_some_and(|l| l >= 0) && whole("minimum") && whole("maximum") && !exclusive;
    if !fractions {
        return Ok(format!("({}) space", int_range(lo, hi)));
    }
    let frac = format!("(\".\" [0-9]{{1,{MAX_FRACTION_DIGITS}}})?");
    match hi {
        // [lo, hi): any fraction; hi itself only whole.
        Some(h) if h > lo.unwrap_or(0) => Ok(format!(
            "(({}) {frac} | {}) space",
            int_range(lo, Some(h - 1)),
            literal(&h.to_string())
        )),
        Some(_) => Ok(format!("({}) space", int_range(lo, hi))),
        None => Ok(format!("({}) {frac} space", int_range(lo, None))),
    }
}

/// GBNF for the integers in `[lo, hi]` (`None`: unbounded, within the digit limit), exact.
pub fn int_range(lo: Option<i64>, hi: Option<i64>) -> String {
    let max_abs = 10u64.pow(MAX_INT_DIGITS) - 1;
    let mut alts = Vec::new();
    let lo_v = lo.map_or(-(max_abs as i64), |l| l.max(-(max_abs as i64)));
    let hi_v = hi.map_or(max_abs as i64, |h| h.min(max_abs as i64));
    if lo_v < 0 {
        // Negative part: "-" then |v| in [max(1, -hi), -lo].
        let a = if hi_v < 0 { (-hi_v) as u64 } else { 1 };
        let b = (-lo_v) as u64;
        for p in uint_range(a, b) {
            alts.push(format!("\"-\" {p}"));
        }
    }
    if hi_v >= 0 {
        alts.extend(uint_range(lo_v.max(0) as u64, hi_v as u64));
    }
    if alts.is_empty() {
        return "\"0\"".into(); // unreachable with checked bounds
    }
    alts.join(" | ")
}

/// Patterns (each a GBNF sequence) for the integers in `[lo, hi]`, no leading zeros.
fn uint_range(lo: u64, hi: u64) -> Vec<String> {
    let mut out = Vec::new();
    if lo > hi {
        return out;
    }
    let digits = |x: u64| x.to_string().len() as u32;
    let mut start = lo;
    for len in digits(lo)..=digits(hi) {
        let top = 10u64.pow(len) - 1;
        let end = hi.min(top);
        let (a, b) = (start.to_string(), end.to_string());
        same_length(a.as_bytes(), b.as_bytes(), &mut String::new(), &mut out);
        start = end + 1;
    }
    out
}

/// Patterns for the digit strings of one length between `lo` and `hi`, after `prefix`.
fn same_length(lo: &[u8], hi: &[u8], prefix: &mut String, out: &mut Vec<String>) {
    let with = |prefix: &str, rest: String| {
        if prefix.is_empty() {
            rest
        } else if rest.is_empty() {
            prefix.trim_end().to_string()
        } else {
            format!("{prefix}{rest}")
        }
    };
    if lo.is_empty() {
        out.push(prefix.trim_end().to_string());
        return;
    }
    let (a, b) = (lo[0], hi[0]);
    let n = lo.len() - 1;
    let any = |n: usize| match n {
        0 => String::new(),
        1 => "[0-9]".into(),
        n => format!("[0-9]{{{n}}}"),
    };
    let class = |x: u8, y: u8| {
        if x == y {
            format!("\"{}\"", x as char)
        } else {
            format!("[{}-{}]", x as char, y as char)
        }
    };
    if a == b {
        let len = prefix.len();
        prefix.push_str(&format!("\"{}\" ", a as char));
        same_length(&lo[1..], &hi[1..], prefix, out);
        prefix.truncate(len);
        return;
    }
    let lo_rest_zero = lo[1..].iter().all(|&d| d == b'0');
    let hi_rest_nine = hi[1..].iter().all(|&d| d == b'9');
    let first_full = if lo_rest_zero { a } else { a + 1 };
    let last_full = if hi_rest_nine { b } else { b - 1 };
    if !lo_rest_zero {
        let len = prefix.len();
        prefix.push_str(&format!("\"{}\" ", a as char));
        let nines = vec![b'9'; n];
        same_length(&lo[1..], &nines, prefix, out);
        prefix.truncate(len);
    }
    if first_full <= last_full {
        let rest = any(n);
        let body = if rest.is_empty() {
            class(first_full, last_full)
        } else {
            format!("{} {rest}", class(first_full, last_full))
        };
        out.push(with(prefix, body));
    }
    if !hi_rest_nine {
        let len = prefix.len();
        prefix.push_str(&format!("\"{}\" ", b as char));
        let zeros = vec![b'0'; n];
        same_length(&zeros, &hi[1..], prefix, out);
        prefix.truncate(len);
    }
}

/// Compact JSON text of a value, as a literal writes it.
fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn invalid(path: &str, reason: &str) -> SchemaError {
    SchemaError::Invalid {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
