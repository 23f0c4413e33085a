//! Chat templates: the GGUF's own `tokenizer.chat_template` (or a file that overrides it)
//! rendered with a real Jinja engine, configured as Hugging Face renders chat templates
//! (`trim_blocks`, `lstrip_blocks`, Python string methods, `raise_exception`); and
//! llama.cpp's built-in templates as the fallback when one fails to render.

use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, ErrorKind};
use serde_json::Value;

use epm_chat::{ReasoningSplit, ToolFamily};

use crate::{Engine, EngineError};

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the chat template does not compile: {0}")]
    Compile(String),
    #[error("the chat template failed to render these messages: {0}")]
    Render(String),
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template's text, for llama.cpp's built-in fallback (which recognizes families by
    /// their markers).
    source: String,
}

fn raise_exception(message: String) -> Result<JinjaValue, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `json.dumps` separators (`", "` and `": "`), as Hugging Face's `tojson` writes.
struct PythonSeparators;

impl serde_json::ser::Formatter for PythonSeparators {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// `tojson` as Hugging Face renders it: Python's separators, no HTML escaping (minijinja's
/// own escapes `<` and `>`, which would change tool descriptions), `indent` honoured.
fn tojson(
    value: &JinjaValue,
    kwargs: minijinja::value::Kwargs,
) -> Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Python's own keyword arguments are accepted and, where they change nothing, ignored.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let v: Value = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let f = serde_json::ser::PrettyFormatter::with_indent(&pad);
            serde::Serialize::serialize(
                &v,
                &mut serde_json::Serializer::with_formatter(&mut out, f),
            )
        }
        None => serde::Serialize::serialize(
            &v,
            &mut serde_json::Serializer::with_formatter(&mut out, PythonSeparators),
        ),
    };
    written.map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(JinjaValue::from_safe_string(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TemplateError::Compile(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Render `messages` (OpenAI's message objects: `role`, `content`, `tool_calls` ...),
    /// with `tools` and extra template variables (`enable_thinking` ...) when given.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&Value>,
        extra: Option<&serde_json::Map<String, Value>>,
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, TemplateError> {
        let mut ctx = serde_json::Map::new();
        if let Some(extra) = extra {
            ctx.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        ctx.insert("messages".into(), Value::Array(messages.to_vec()));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::Bool(add_generation_prompt),
        );
        ctx.insert("bos_token".into(), Value::String(bos_token.into()));
        ctx.insert("eos_token".into(), Value::String(eos_token.into()));
        if let Some(t) = tools.filter(|t| !t.is_null()) {
            ctx.insert("tools".into(), t.clone());
        }
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        tmpl.render(JinjaValue::from_serialize(&ctx))
            .map_err(|e| TemplateError::Render(format!("{e:#}")))
    }
}

/// The text of a message's `content`: a string, or the text parts of an array of parts.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A model's chat format, compiled once: its Jinja template (the model's own, or one that
/// overrides it), with llama.cpp's built-in template of the same family as the fallback
/// when the Jinja engine cannot compile or render it (the built-in sees roles and text only).
pub struct ChatRenderer {
    jinja: Option<ChatTemplate>,
    /// The template's text, for the built-in fallback; `None`: the model has no template.
    source: Option<String>,
    /// The template reads typed content parts (`[{"type": "text", ...}]`) and not strings;
    /// otherwise text parts are joined into a string before it sees them.
    typed_content: bool,
    /// How the template's model writes tool calls (`None`: a format EPM does not parse).
    tool_family: Option<ToolFamily>,
}

/// Whether `t` renders typed content parts but not a string content (as llama.cpp's
/// template-capability probe decides).
fn reads_typed_content(t: &ChatTemplate) -> bool {
    const PROBE: &str = "<epm-probe-7f3a>";
    let render = |content: Value| {
        let msgs = [serde_json::json!({"role": "user", "content": content})];
        t.render(&msgs, None, None, true, "", "")
            .unwrap_or_default()
    };
    let plain = render(Value::String(PROBE.into()));
    let typed = render(serde_json::json!([{"type": "text", "text": PROBE}]));
    !plain.contains(PROBE) && typed.contains(PROBE)
}

/// Messages as the template wants them: content parts joined into a string (unless the
/// template reads typed parts), and tool-call arguments given as JSON strings parsed into
/// objects (templates write them with `tojson`).
fn normalize(messages: &[Value], typed_content: bool) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(obj) = m.as_object_mut() {
                if !typed_content {
                    if let Some(c @ Value::Array(_)) = obj.get("content") {
                        let text = content_text(c);
                        obj.insert("content".into(), Value::String(text));
                    }
                }
                if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
                    for call in calls {
                        let args = call.pointer_mut("/function/arguments");
                        if let Some(a) = args {
                            if let Some(parsed) = a
                                .as_str()
                                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                            {
                                *a = parsed;
                            }
                        }
                    }
                }
            }
            m
        })
        .collect()
}

impl ChatRenderer {
    /// The tool-call format of the template's family, if EPM parses it.
    pub fn tool_family(&self) -> Option<ToolFamily> {
        self.tool_family
    }

    fn new(jinja: Option<ChatTemplate>, source: Option<String>) -> ChatRenderer {
        let typed_content = jinja.as_ref().is_some_and(reads_typed_content);
        let tool_family = source.as_deref().and_then(ToolFamily::detect);
        match (&source, tool_family) {
            (Some(_), Some(f)) => tracing::info!("tool calls: the chat template writes the {} format", f.name()),
            (Some(_), None) => tracing::info!(
                "tool calls: the chat template's format is not one EPM parses (hermes, harmony, llama3, mistral, deepseek); tool calls come back as text"
            ),
            (None, _) => {}
        }
        ChatRenderer {
            jinja,
            source,
            typed_content,
            tool_family,
        }
    }

    /// Whether there is a template at all.
    pub fn has_template(&self) -> bool {
        self.source.is_some()
    }

    /// The template's text.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The tags of the model's reasoning blocks, from its template, and whether the rendered
    /// `prompt` leaves one open: harmony's analysis channel, or `<think>` blocks.
    pub fn reasoning_tags(&self, prompt: &str) -> Option<ReasoningSplit> {
        let source = self.source.as_deref()?;
        if self.tool_family == Some(ToolFamily::Harmony) {
            return Some(ReasoningSplit {
                open: "<|channel|>analysis<|message|>".into(),
                close: "<|end|>".into(),
                starts_open: false,
            });
        }
        ReasoningSplit::for_template(source, prompt)
    }

    /// Render a conversation (OpenAI's message objects) with the generation prompt.
    pub fn render(
        &self,
        engine: &Engine,
        messages: &[Value],
        tools: Option<&Value>,
        extra: Option<&serde_json::Map<String, Value>>,
    ) -> Result<String, EngineError> {
        let source = self.source.as_deref().ok_or(EngineError::NoChatTemplate)?;
        let messages = &normalize(messages, self.typed_content);
        if let Some(t) = &self.jinja {
            let (bos, eos) = engine.bos_eos_text();
            match t.render(messages, tools, extra, true, &bos, &eos) {
                Ok(text) => return Ok(text),
                Err(e) => tracing::warn!("{e}; using llama.cpp's built-in template"),
            }
        }
        engine.builtin_chat(source, messages)
    }
}

impl Engine {
    /// The chat format to render with: `override_source` (which must compile), else the
    /// model's own `tokenizer.chat_template`.
    pub fn chat_renderer(
        &self,
        override_source: Option<&str>,
    ) -> Result<ChatRenderer, EngineError> {
        if let Some(src) = override_source {
            return Ok(ChatRenderer::new(
                Some(ChatTemplate::new(src)?),
                Some(src.to_string()),
            ));
        }
        let Some(src) = self.chat_template() else {
            return Ok(ChatRenderer::new(None, None));
        };
        let jinja = match ChatTemplate::new(&src) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("{e}; using llama.cpp's built-in template");
                None
            }
        };
        Ok(ChatRenderer::new(jinja, Some(src)))
    }

    fn builtin_chat(&self, source: &str, messages: &[Value]) -> Result<String, EngineError> {
        let pairs: Vec<(String, String)> = messages
            .iter()
            .map(|m| {
                (
                    m.get("role")
                        .and_then(Value::as_str)
                        .unwrap_or("user")
                        .to_string(),
                    m.get("content").map(content_text).unwrap_or_default(),
                )
            })
            .collect();
        self.apply_builtin_template(source, &pairs, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_a_generation_prompt() {
        let t = ChatTemplate::new(CHATML).unwrap();
        let msgs = [
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
        ];
        let out = t.render(&msgs, None, None, true, "", "<|im_end|>").unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_string_methods_slices_and_namespaces_work() {
        let src = "{%- set ns = namespace(last=0) %}{%- for m in messages[::-1] %}{%- if m.content.startswith('a') %}{% set ns.last = loop.index0 %}{% endif %}{%- endfor %}{{ ns.last }}|{{ messages[0].content.split('-')[1].strip() }}|{{ tools | tojson }}";
        let t = ChatTemplate::new(src).unwrap();
        let msgs = [
            json!({"role": "user", "content": "x- b "}),
            json!({"role": "user", "content": "ab"}),
        ];
        let out = t
            .render(&msgs, Some(&json!([{"name": "f"}])), None, false, "", "")
            .unwrap();
        assert_eq!(out, "0|b|[{\"name\": \"f\"}]");
    }

    #[test]
    fn raise_exception_and_bad_templates_are_errors() {
        assert!(matches!(
            ChatTemplate::new("{% for %}"),
            Err(TemplateError::Compile(_))
        ));
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}").unwrap();
        let err = t.render(&[], None, None, true, "", "").unwrap_err();
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }

    #[test]
    fn tojson_writes_as_python_does() {
        let t = ChatTemplate::new("{{ tools | tojson }}|{{ tools | tojson(indent=2) }}").unwrap();
        let tools = json!([{"name": "f", "d": "<b> & c", "p": [1, 2]}]);
        let out = t.render(&[], Some(&tools), None, false, "", "").unwrap();
        let (flat, pretty) = out.split_once('|').unwrap();
        assert_eq!(flat, r#"[{"name": "f", "d": "<b> & c", "p": [1, 2]}]"#);
        assert!(
            pretty.starts_with("[\n  {\n    \"name\": \"f\","),
            "{pretty}"
        );
    }

    #[test]
    fn typed_content_is_detected_and_parts_are_joined_otherwise() {
        let plain = ChatTemplate::new(CHATML).unwrap();
        assert!(!reads_typed_content(&plain));
        let typed = ChatTemplate::new(
            "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
        )
        .unwrap();
        assert!(reads_typed_content(&typed));
        let msgs = [
            json!({"role": "user", "content": [{"type": "text", "text": "Name "}, {"type": "text", "text": "three rivers."}]}),
        ];
        let joined = normalize(&msgs, false);
        assert_eq!(joined[0]["content"], "Name three rivers.");
        assert_eq!(normalize(&msgs, true)[0]["content"], msgs[0]["content"]);
        let call = [
            json!({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}),
        ];
        assert_eq!(
            normalize(&call, false)[0]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
    }

    #[test]
    fn content_parts_are_joined() {
        let c = json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(&c), "ab");
        assert_eq!(content_text(&json!(null)), "");
    }
}
