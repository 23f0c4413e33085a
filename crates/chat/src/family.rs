//! Tool-call formats, one per model family, told apart by markers in the chat template.
//! Each family knows where a call opens in generated text (for parsing, and for the lazy
//! grammar's trigger) and how to write the grammar that makes the output a valid call.

use serde_json::Value;

use crate::schema::{literal, Compiler, Grammar, SchemaError, SchemaMode};

/// How a family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFamily {
    /// Qwen, Hermes and most fine-tunes: `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.
    Hermes,
    /// gpt-oss: harmony channels, `<|channel|>commentary to=functions.NAME ... <|message|>ARGS<|call|>`.
    Harmony,
    /// Llama 3.x: a bare `{"name": ..., "parameters": ...}`, or after `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name": ..., "arguments": ...}]`, or `[TOOL_CALLS]NAME[ARGS]{...}`.
    Mistral,
    /// DeepSeek V3/R1 (`function<｜tool▁sep｜>NAME` and a fenced JSON block) and V3.1
    /// (`NAME<｜tool▁sep｜>ARGS`), between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`.
    DeepSeek,
}

pub const HERMES_OPEN: &str = "<tool_call>";
pub const HERMES_CLOSE: &str = "</tool_call>";
pub const HARMONY_CHANNEL: &str = "<|channel|>";
pub const HARMONY_MESSAGE: &str = "<|message|>";
pub const HARMONY_START: &str = "<|start|>";
pub const HARMONY_END: &str = "<|end|>";
pub const HARMONY_ENDS: &[&str] = &[HARMONY_END, "<|call|>", "<|return|>"];
pub const LLAMA3_PYTHON_TAG: &str = "<|python_tag|>";
pub const MISTRAL_OPEN: &str = "[TOOL_CALLS]";
pub const MISTRAL_ARGS: &str = "[ARGS]";
pub const DEEPSEEK_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub const DEEPSEEK_CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub const DEEPSEEK_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub const DEEPSEEK_CALL_END: &str = "<｜tool▁call▁end｜>";
pub const DEEPSEEK_SEP: &str = "<｜tool▁sep｜>";

impl ToolFamily {
    /// The family whose markers the template uses; `None`: no tool-call parsing.
    pub fn detect(template: &str) -> Option<ToolFamily> {
        if template.contains(HARMONY_CHANNEL) && template.contains(HARMONY_MESSAGE) {
            Some(ToolFamily::Harmony)
        } else if template.contains("tool▁calls▁begin") {
            Some(ToolFamily::DeepSeek)
        } else if template.contains(MISTRAL_OPEN) {
            Some(ToolFamily::Mistral)
        } else if template.contains(HERMES_OPEN) {
            Some(ToolFamily::Hermes)
        } else if template.contains("<|start_header_id|>")
            && (template.contains(LLAMA3_PYTHON_TAG) || template.contains("ipython"))
        {
            Some(ToolFamily::Llama3)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ToolFamily::Hermes => "hermes",
            ToolFamily::Harmony => "harmony",
            ToolFamily::Llama3 => "llama3",
            ToolFamily::Mistral => "mistral",
            ToolFamily::DeepSeek => "deepseek",
        }
    }

    /// The text that opens a call, for a lazy grammar's trigger (a regex whose first group
    /// starts the grammar's input).
    pub fn trigger_pattern(self) -> String {
        let esc = |s: &str| regex_escape(s);
        match self {
            ToolFamily::Hermes => format!("[\\s\\S]*?({})[\\s\\S]*", esc(HERMES_OPEN)),
            ToolFamily::Harmony => format!(
                "[\\s\\S]*?({}commentary to=functions\\.)[\\s\\S]*",
                esc(HARMONY_CHANNEL)
            ),
            ToolFamily::Llama3 => "^\\s*(\\{\"name\")[\\s\\S]*".to_string(),
            ToolFamily::Mistral => format!("[\\s\\S]*?({})[\\s\\S]*", esc(MISTRAL_OPEN)),
            ToolFamily::DeepSeek => {
                format!("[\\s\\S]*?({})[\\s\\S]*", esc(DEEPSEEK_CALLS_BEGIN))
            }
        }
    }

    /// The grammar of a reply that is one call (or, with `parallel`, one or more) of
    /// `tools`, written as this family writes calls.
    pub fn call_grammar(
        self,
        tools: &[ToolSpec],
        parallel: bool,
        start: ReplyStart,
    ) -> Result<Grammar, SchemaError> {
        let holder = Value::Null;
        let mut c = Compiler::new(&holder);
        let mut alts = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let mode = if t.strict {
                SchemaMode::Exact
            } else {
                SchemaMode::Superset
            };
            let mut sub = Compiler::with_mode(&t.parameters, mode);
            let lark = t.input_lark.as_deref().map(crate::lark::lark_rules);
            let args = match lark {
                Some(Ok(l)) => {
                    sub.add_rules(l.rules);
                    format!(
                        "\"{{\" space {} space \":\" space \"\\\"\" {} \"\\\"\" space \"}}\" space",
                        literal(&format!("\"{CUSTOM_INPUT}\"")),
                        l.root
                    )
                }
                other => {
                    if let Some(Err(e)) = other {
                        sub.left_out
                            .push(format!("the Lark grammar of its input ({e})"));
                    }
                    // `$ref`s resolve inside each tool's own parameters.
                    sub.expr(&t.parameters, &format!("#/tools/{i}/function/parameters"))?
                }
            };
            c.left_out.extend(
                sub.left_out
                    .drain(..)
                    .map(|l| format!("{l} (tool `{}`)", t.name)),
            );
            let g = sub.finish_rules();
            for (name, body) in g {
                c.add_rule(&format!("t{i}-{name}"), prefix_refs(&body, i));
            }
            let args = prefix_refs(&args, i);
            let name = &t.name;
            alts.push(match self {
                ToolFamily::Hermes => format!(
                    "{} {args} \"}}\"",
                    literal(&format!("{{\"name\": \"{name}\", \"arguments\": "))
                ),
                ToolFamily::Harmony => format!(
                    "{} {args}",
                    literal(&format!("{name} <|constrain|>json{HARMONY_MESSAGE}"))
                ),
                ToolFamily::Llama3 => format!(
                    "{} {args} \"}}\"",
                    literal(&format!("{{\"name\": \"{name}\", \"parameters\": "))
                ),
                ToolFamily::Mistral => format!(
                    "{} {args} \"}}\"",
                    literal(&format!("{{\"name\": \"{name}\", \"arguments\": "))
                ),
                ToolFamily::DeepSeek => format!(
                    "{} {args} {}",
                    literal(&format!(
                        "{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}{name}\n```json\n"
                    )),
                    literal(&format!("\n```{DEEPSEEK_CALL_END}"))
                ),
            });
        }
        c.add_rule("call", alts.join(" | "));
        // Any number of `item`s more, when parallel calls are allowed.
        let more = |item: String| {
            if parallel {
                format!(" ({item})*")
            } else {
                String::new()
            }
        };
        let root = match self {
            ToolFamily::Hermes => {
                let one = format!(
                    "{} call {}",
                    literal(&format!("{HERMES_OPEN}\n")),
                    literal(&format!("\n{HERMES_CLOSE}"))
                );
                format!("{one}{}", more(format!("\"\\n\" {one}")))
            }
            ToolFamily::Harmony => {
                c.add_rules(harmony_lead_rules());
                format!(
                    "{} {} call",
                    start.harmony_lead(),
                    literal(&format!("{HARMONY_CHANNEL}commentary to=functions."))
                )
            }
            ToolFamily::Llama3 => format!("call{}", more("\"; \" call".into())),
            ToolFamily::Mistral => format!(
                "{} call{} \"]\"",
                literal(&format!("{MISTRAL_OPEN}[")),
                more("\", \" call".into())
            ),
            ToolFamily::DeepSeek => format!(
                "{} call{} {}",
                literal(DEEPSEEK_CALLS_BEGIN),
                if parallel { "+" } else { "" },
                literal(DEEPSEEK_CALLS_END)
            ),
        };
        c.add_rule("root", root);
        Ok(c.finish())
    }
}

impl ToolFamily {
    /// The grammar of a reply whose answer is `answer` (a grammar's `root`, such as a JSON
    /// schema's), as this family writes an answer: gpt-oss writes it in the final channel,
    /// after an analysis it may write first (it reasons before it answers, as llama.cpp's
    /// grammar for it lets it); the other families' answer is the whole reply.
    pub fn answer_grammar(self, answer: Grammar, start: ReplyStart) -> Grammar {
        match self {
            ToolFamily::Harmony => {
                let mut g = answer;
                let root = g.rules.remove("root").unwrap_or_default();
                g.rules.insert(HARMONY_ANSWER.into(), root);
                for (name, body) in harmony_lead_rules() {
                    g.rules.insert(name.into(), body);
                }
                g.rules.insert(
                    "root".into(),
                    format!(
                        "{} {} (\" \" {}? \"json\")? {} {HARMONY_ANSWER}",
                        start.harmony_lead(),
                        literal(&format!("{HARMONY_CHANNEL}final")),
                        literal("<|constrain|>"),
                        literal(HARMONY_MESSAGE),
                    ),
                );
                g
            }
            _ => answer,
        }
    }
}

/// The rule of a harmony answer's own grammar, in [`ToolFamily::answer_grammar`].
const HARMONY_ANSWER: &str = "harmony-answer";

/// Where a constrained reply's grammar starts: what it may write before its answer or call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStart {
    /// At the reply's first token: the model may reason first (gpt-oss: one analysis
    /// message, then the answer's message).
    Fresh,
    /// After the close of a reasoning block the prompt opened, which the constraint waited
    /// for (gpt-oss: the next message's header, `<|start|>assistant`, may come first).
    AfterBlock,
}

impl ReplyStart {
    /// The GBNF of what a harmony reply writes before its answer (rules of
    /// [`harmony_lead_rules`]). Only after a block may it begin with a header: a fresh
    /// reply's header is the prompt's.
    fn harmony_lead(self) -> &'static str {
        match self {
            ReplyStart::Fresh => "harmony-analysis?",
            ReplyStart::AfterBlock => "harmony-header?",
        }
    }
}

/// The rules of [`ReplyStart::harmony_lead`]: an analysis is any text without `<|end|>`,
/// then `<|end|>` and the next message's header.
fn harmony_lead_rules() -> [(&'static str, String); 3] {
    let header = literal(&format!("{HARMONY_START}assistant"));
    [
        ("harmony-header", header.clone()),
        (
            "harmony-analysis",
            format!(
                "{} harmony-text {} {header}",
                literal(&format!("{HARMONY_CHANNEL}analysis{HARMONY_MESSAGE}")),
                literal(HARMONY_END),
            ),
        ),
        // Any text that does not hold `<|end|>`, character by character.
        (
            "harmony-text",
            r#"( [^<] | "<" [^|] | "<|" [^e] | "<|e" [^n] | "<|en" [^d] | "<|end" [^|] | "<|end|" [^>] )*"#
                .to_string(),
        ),
    ]
}

/// Rename the rules a tool's compiler made (`s-...`, `ref-...`) to that tool's namespace;
/// primitives (`string`, `value` ...) are shared.
fn prefix_refs(body: &str, tool: usize) -> String {
    let mut out = String::with_capacity(body.len());
    let mut in_literal = false;
    let mut in_class = false;
    let mut escaped = false;
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.starts_with("s-") || word.starts_with("ref-") {
            out.push_str(&format!("t{tool}-"));
        }
        out.push_str(word);
        word.clear();
    };
    for ch in body.chars() {
        if in_literal || in_class {
            out.push(ch);
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if (in_literal && ch == '"') || (in_class && ch == ']') {
                in_literal = false;
                in_class = false;
            }
            continue;
        }
        if ch.is_ascii_alphanumeric() || ch == '-' {
            word.push(ch);
            continue;
        }
        flush(&mut word, &mut out);
        match ch {
            '"' => in_literal = true,
            '[' => in_class = true,
            _ => {}
        }
        out.push(ch);
    }
    flush(&mut word, &mut out);
    out
}

impl Compiler<'_> {
    /// The rules compiled so far, without the primitives.
    pub fn finish_rules(self) -> Vec<(String, String)> {
        self.rules.into_iter().collect()
    }
}

/// One function tool, as the grammar and the parser need it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// The JSON schema of the arguments (`{"type": "object"}` when the tool gave none).
    pub parameters: Value,
    /// The arguments must be valid against `parameters` (OpenAI's `strict`): the schema is
    /// compiled [`SchemaMode::Exact`], else [`SchemaMode::Superset`].
    pub strict: bool,
    /// A custom tool's Lark grammar (OpenAI's `format: {"type": "grammar", "syntax":
    /// "lark"}`): its arguments are then `{"input": TEXT}` with TEXT a sentence of it. One
    /// [`crate::lark`] cannot compile leaves the input free, as a superset compile does.
    pub input_lark: Option<String>,
}

/// The one argument of a custom (freeform) tool's call, seen as a function: its text.
pub const CUSTOM_INPUT: &str = "input";

/// Escape `s` for a regular expression (ECMAScript syntax, as `std::regex` reads it).
pub fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\^$.|?*+()[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
