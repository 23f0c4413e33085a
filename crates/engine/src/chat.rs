//! Chat templates: the GGUF's own `tokenizer.chat_template` (or a file that overrides it)
//! rendered with a real Jinja engine, configured as Hugging Face renders chat templates
//! (`trim_blocks`, `lstrip_blocks`, Python string methods, `raise_exception`); and
//! llama.cpp's built-in templates as the fallback when one fails to render.

use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, ErrorKind};
use serde_json::Value;

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

impl ChatTemplate {
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
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
}

impl ChatRenderer {
    /// Whether there is a template at all.
    pub fn has_template(&self) -> bool {
        self.source.is_some()
    }

    /// The template's text.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
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
            return Ok(ChatRenderer {
                jinja: Some(ChatTemplate::new(src)?),
                source: Some(src.to_string()),
            });
        }
        let Some(src) = self.chat_template() else {
            return Ok(ChatRenderer {
                jinja: None,
                source: None,
            });
        };
        let jinja = match ChatTemplate::new(&src) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("{e}; using llama.cpp's built-in template");
                None
            }
        };
        Ok(ChatRenderer {
            jinja,
            source: Some(src),
        })
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
        assert_eq!(out, "0|b|[{\"name\":\"f\"}]");
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
    fn content_parts_are_joined() {
        let c = json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(&c), "ab");
        assert_eq!(content_text(&json!(null)), "");
    }
}
