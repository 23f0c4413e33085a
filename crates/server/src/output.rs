//! What a request asks of the output, protocol-neutral: tools and how to choose them, a
//! JSON format, a raw grammar, the reasoning split. [`OutputAsk::plan`] turns it into the
//! generation core's constraint and output parser, or a 400 that says what to change.

use serde::Deserialize;
use serde_json::{Map, Value};

use epm_chat::{compile_schema, OutputParser, ReasoningSplit, ToolFamily, ToolSpec};
use epm_engine::generation::Constraint;
use epm_engine::SamplingParams;

use crate::error::ApiError;
use crate::state::Loaded;

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// No calls: the tools are still shown to the model, and nothing is parsed.
    None,
    /// The model may call; calls are parsed, and a lazy grammar holds once one opens.
    #[default]
    Auto,
    /// The reply is one call (several with `parallel`) of any of the tools.
    Required,
    /// The reply is a call of this tool.
    Function(String),
}

/// The shape of a plain reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Format {
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// A value valid against this schema.
    JsonSchema(Value),
}

/// Whether reasoning is split out of the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Left in the content, tags and all.
    None,
    /// Split into `reasoning_content` (llama-server's `deepseek`, its default).
    #[default]
    DeepSeek,
}

/// How much the model should reason: OpenAI's `reasoning_effort` (the Responses API's
/// `reasoning.effort`). As llama-server does, it reaches the chat template as
/// `reasoning_effort` (gpt-oss's harmony template reads it), and `none` also turns thinking
/// off (`enable_thinking: false`, which Qwen3's template reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

impl ReasoningEffort {
    fn name(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
        }
    }

    /// The template variables of a request: its own `chat_template_kwargs`, and those of
    /// `effort` that they do not set.
    pub fn template_kwargs(
        effort: Option<ReasoningEffort>,
        kwargs: Option<&Map<String, Value>>,
    ) -> Option<Map<String, Value>> {
        let Some(effort) = effort else {
            return kwargs.cloned();
        };
        let mut out = kwargs.cloned().unwrap_or_default();
        out.entry("reasoning_effort")
            .or_insert_with(|| Value::String(effort.name().into()));
        if effort == ReasoningEffort::None {
            out.entry("enable_thinking").or_insert(Value::Bool(false));
        }
        Some(out)
    }
}

#[derive(Debug, Clone, Default)]
pub struct OutputAsk {
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    pub format: Format,
    /// A GBNF grammar given as is (llama-server's `grammar`).
    pub grammar: Option<String>,
    pub reasoning: ReasoningFormat,
}

/// The core's side of an [`OutputAsk`].
pub struct OutputPlan {
    pub constraint: Option<Constraint>,
    pub parser: OutputParser,
}

/// The function tools of an OpenAI-style `tools` array (`[{"type": "function", "function":
/// {"name", "parameters"}}]`; `function` fields at the top level are taken too).
pub fn openai_tools(tools: &Value) -> Result<Vec<ToolSpec>, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(ApiError::bad_request("`tools` must be an array of tools"));
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.get("function").unwrap_or(t);
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
            if kind != "function" {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].type` is `{kind}`: only function tools are served"
                )));
            }
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request(format!("`tools[{i}].function.name` is missing"))
            })?;
            let parameters = f
                .get("parameters")
                .or_else(|| f.get("input_schema"))
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"}));
            Ok(ToolSpec {
                name: name.to_string(),
                parameters,
            })
        })
        .collect()
}

impl OutputAsk {
    /// The constraint and parser for this request, whose rendered prompt is `prompt`
    /// (`None`: not a chat, so no tools and no reasoning split).
    pub fn plan(&self, loaded: &Loaded, prompt: Option<&str>) -> Result<OutputPlan, ApiError> {
        let family = loaded.chat.tool_family();
        let tools_on = !self.tools.is_empty() && self.tool_choice != ToolChoice::None;
        let format = match &self.format {
            Format::Text => None,
            Format::JsonObject => Some(serde_json::json!({"type": "object"})),
            Format::JsonSchema(s) => Some(s.clone()),
        };
        let constrained_call = tools_on
            && matches!(
                self.tool_choice,
                ToolChoice::Required | ToolChoice::Function(_)
            );
        if self.grammar.is_some() && (format.is_some() || constrained_call) {
            return Err(ApiError::bad_request(
                "`grammar` cannot be combined with a JSON format or a required tool call: send one constraint",
            ));
        }
        if format.is_some() && constrained_call {
            return Err(ApiError::bad_request(
                "a JSON `response_format` cannot be combined with a required tool call: the reply is either a call or the JSON",
            ));
        }
        let tools: Vec<ToolSpec> = match &self.tool_choice {
            ToolChoice::Function(name) => {
                let t = self.tools.iter().find(|t| &t.name == name).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "`tool_choice` names `{name}`, which is not in `tools`"
                    ))
                })?;
                vec![t.clone()]
            }
            _ => self.tools.clone(),
        };
        let call_grammar = |f: ToolFamily| {
            f.call_grammar(&tools, self.parallel_tool_calls)
                .map(|g| g.text())
                .map_err(|e| ApiError::bad_request(format!("cannot constrain the tool call: {e}")))
        };
        let constraint = if let Some(g) = &self.grammar {
            Some(Constraint::Grammar(g.clone()))
        } else if let Some(schema) = format {
            let g = compile_schema(&schema).map_err(|e| ApiError::bad_request(e.to_string()))?;
            Some(Constraint::Grammar(g.text()))
        } else if tools_on {
            match (family, constrained_call) {
                (Some(f), true) => Some(Constraint::Grammar(call_grammar(f)?)),
                (Some(f), false) => Some(Constraint::Lazy {
                    grammar: call_grammar(f)?,
                    triggers: vec![f.trigger_pattern()],
                }),
                (None, true) => {
                    return Err(ApiError::bad_request(
                        "this model's chat template writes tool calls in a format EPM does not parse (it knows hermes, harmony, llama3, mistral and deepseek), so a required tool call cannot be enforced: use tool_choice \"auto\" and read the text, or give a template with --chat-template-file",
                    ))
                }
                (None, false) => None,
            }
        } else {
            None
        };
        if let Some(c) = &constraint {
            loaded
                .engine
                .sampler(&SamplingParams::default(), Some(c), &[])
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        let reasoning = match (self.reasoning, prompt, loaded.chat.source()) {
            // Harmony's reasoning is its analysis channel; the parser knows it.
            (ReasoningFormat::DeepSeek, Some(_), Some(_))
                if family == Some(ToolFamily::Harmony) =>
            {
                Some(ReasoningSplit {
                    open: "<|channel|>analysis".into(),
                    close: "<|end|>".into(),
                    starts_open: false,
                })
            }
            (ReasoningFormat::DeepSeek, Some(p), Some(src)) => ReasoningSplit::for_template(src, p),
            _ => None,
        };
        // Harmony replies are channels whether or not tools are given.
        let parse_family = match family {
            Some(ToolFamily::Harmony) if prompt.is_some() => family,
            f if tools_on => f,
            _ => None,
        };
        Ok(OutputPlan {
            constraint,
            parser: OutputParser::new(parse_family, reasoning),
        })
    }
}
