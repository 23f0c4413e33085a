//! What a request asks of the output, protocol-neutral: tools and how to choose them, a
//! JSON format, a raw grammar, the reasoning split. [`OutputAsk::plan`] turns it into the
//! generation core's constraint and output parser, or a 400 that says what to change.

use serde::Deserialize;
use serde_json::{Map, Value};

use epm_chat::family::CUSTOM_INPUT;
use epm_chat::{compile_schema, OutputParser, ReasoningSplit, ReplyStart, ToolFamily, ToolSpec};
use epm_engine::generation::{Constraint, ReasoningBudget};
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
    /// The reply may call only these tools (all are shown to the model); with `required`,
    /// it is a call of one of them.
    Allowed { names: Vec<String>, required: bool },
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

/// How many tokens a reasoning block may take before its close is forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BudgetTokens {
    /// The server's `--reasoning-budget`.
    #[default]
    ServerDefault,
    Unlimited,
    Tokens(u32),
}

impl BudgetTokens {
    /// llama-server's number (`-1`: unlimited, `0` or more: a budget), from the request's
    /// `field`; absent, the server's default.
    pub fn from_wire(n: Option<i64>, field: &str) -> Result<BudgetTokens, ApiError> {
        match n {
            None => Ok(BudgetTokens::ServerDefault),
            Some(-1) => Ok(BudgetTokens::Unlimited),
            Some(n) => u32::try_from(n).map(BudgetTokens::Tokens).map_err(|_| {
                ApiError::bad_request(format!(
                    "`{field}` is {n}: give a number of tokens (0 closes the reasoning at once), or -1 for no budget"
                ))
            }),
        }
    }
}

/// What a request asks of the reasoning budget (llama-server's `thinking_budget_tokens`
/// and `reasoning_budget_*`, Anthropic's `thinking.budget_tokens`).
#[derive(Debug, Clone, Default)]
pub struct BudgetAsk {
    pub tokens: BudgetTokens,
    /// Written before the close when the budget is spent (default: the server's
    /// `--reasoning-budget-message`).
    pub message: Option<String>,
    /// The block's opening and closing tags, when the request gives them (`/completion`);
    /// otherwise the chat template's.
    pub tags: Option<(String, String)>,
    /// Count from the first generated token: the prompt opened the block.
    pub arm_immediately: bool,
}

/// llama-server's names for a request's reasoning budget, taken by the OpenAI-style and
/// native endpoints. Clients send `thinking_budget_tokens` or `reasoning_budget_tokens`
/// (llama-server's trees read one or the other), often both.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WireBudget {
    pub thinking_budget_tokens: Option<i64>,
    pub reasoning_budget_tokens: Option<i64>,
    pub reasoning_budget_message: Option<String>,
    pub reasoning_budget_start_tag: Option<String>,
    pub reasoning_budget_end_tag: Option<String>,
    #[serde(default)]
    pub reasoning_budget_arm_immediately: bool,
}

impl WireBudget {
    pub fn ask(&self) -> Result<BudgetAsk, ApiError> {
        let (field, n) = match (self.thinking_budget_tokens, self.reasoning_budget_tokens) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::bad_request(format!(
                    "`thinking_budget_tokens` ({a}) and `reasoning_budget_tokens` ({b}) differ: send one"
                )))
            }
            (Some(a), _) => ("thinking_budget_tokens", Some(a)),
            (None, b) => ("reasoning_budget_tokens", b),
        };
        let tags = match (&self.reasoning_budget_start_tag, &self.reasoning_budget_end_tag) {
            (None, None) => None,
            (Some(open), Some(close)) if !open.is_empty() && !close.is_empty() => {
                Some((open.clone(), close.clone()))
            }
            _ => {
                return Err(ApiError::bad_request(
                    "give both `reasoning_budget_start_tag` and `reasoning_budget_end_tag`, neither empty, or neither (the chat template's tags)",
                ))
            }
        };
        Ok(BudgetAsk {
            tokens: BudgetTokens::from_wire(n, field)?,
            message: self.reasoning_budget_message.clone(),
            tags,
            arm_immediately: self.reasoning_budget_arm_immediately,
        })
    }
}

/// The server's reasoning budget for requests that do not set one.
#[derive(Debug, Clone, Default)]
pub struct BudgetDefaults {
    /// `--reasoning-budget` (`None`: unlimited).
    pub tokens: Option<u32>,
    /// `--reasoning-budget-message`.
    pub message: String,
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
    pub budget: BudgetAsk,
}

/// The core's side of an [`OutputAsk`].
pub struct OutputPlan {
    pub constraint: Option<Constraint>,
    pub parser: OutputParser,
    pub budget: Option<ReasoningBudget>,
}

/// The grammar languages of a custom tool's `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomSyntax {
    Regex,
    Lark,
}

impl CustomSyntax {
    /// As both OpenAI APIs name it.
    pub fn name(self) -> &'static str {
        match self {
            CustomSyntax::Regex => "regex",
            CustomSyntax::Lark => "lark",
        }
    }
}

/// A custom tool's `format` (at the request's path `at`, named in a 400): `None` for free
/// text (`{"type": "text"}` or no format), else its grammar's syntax and text. The grammar
/// is `format.grammar` in Chat Completions' shape and `format` itself in the Responses
/// API's flat one (`{"type": "grammar", "syntax", "definition"}`).
pub fn custom_grammar<'a>(
    format: Option<&'a Value>,
    at: &str,
) -> Result<Option<(CustomSyntax, &'a str)>, ApiError> {
    let Some(format) = format else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        Some("grammar") => {
            let (g, at) = match format.get("grammar") {
                Some(g) => (g, format!("{at}.grammar")),
                None => (format, at.to_string()),
            };
            let definition = g.get("definition").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "`{at}.definition` is missing: give the grammar's text"
                ))
            })?;
            let syntax = match g.get("syntax").and_then(Value::as_str) {
                Some("lark") => CustomSyntax::Lark,
                Some("regex") => CustomSyntax::Regex,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "`{at}.syntax` is {}: use `lark` or `regex`",
                        other.map_or("missing".to_string(), |s| format!("`{s}`"))
                    )))
                }
            };
            Ok(Some((syntax, definition)))
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "`{at}.type` is `{other}`: use `text` or `grammar`"
        ))),
    }
}

/// A custom (freeform) tool, in Chat Completions' shape: `{"type": "custom", "custom":
/// {"name", "description", "format"}}`, `format` being `{"type": "text"}` or `{"type":
/// "grammar", "grammar": {"syntax": "lark" | "regex", "definition"}}` (the Responses
/// adapter brings its flat tools to this shape). The template sees a function of one
/// string, [`CUSTOM_INPUT`]; a `regex` becomes that string's `pattern`, a `lark` grammar
/// constrains it through [`epm_chat::lark`], and either is shown to the model in the
/// description. A call comes back as that string.
pub struct CustomTool<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub grammar: Option<(CustomSyntax, &'a str)>,
}

impl<'a> CustomTool<'a> {
    /// The custom tool `tools[i]`, or `None` for another kind of tool.
    pub fn of(t: &'a Value, i: usize) -> Result<Option<CustomTool<'a>>, ApiError> {
        if t.get("type").and_then(Value::as_str) != Some("custom") {
            return Ok(None);
        }
        let c = t.get("custom").unwrap_or(t);
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_request(format!("`tools[{i}].custom.name` is missing")))?;
        let grammar = custom_grammar(c.get("format"), &format!("tools[{i}].custom.format"))?;
        Ok(Some(CustomTool {
            name,
            description: c.get("description").and_then(Value::as_str).unwrap_or(""),
            grammar,
        }))
    }

    /// The function of one string the template sees.
    pub fn function(&self) -> Value {
        let mut input = serde_json::json!({"type": "string"});
        let description = match self.grammar {
            None => self.description.to_string(),
            Some((CustomSyntax::Regex, definition)) => {
                input["pattern"] = serde_json::json!(format!("^(?:{definition})$"));
                format!(
                    "{}\n\nIts input matches this regular expression: {definition}",
                    self.description
                )
            }
            Some((CustomSyntax::Lark, definition)) => format!(
                "{}\n\nIts input is raw text (not JSON) in this Lark grammar:\n{definition}",
                self.description
            ),
        };
        serde_json::json!({"type": "function", "function": {
            "name": self.name, "description": description.trim_start(),
            "parameters": {"type": "object", "properties": {CUSTOM_INPUT: input},
                           "required": [CUSTOM_INPUT], "additionalProperties": false}}})
    }
}

/// A chat-shaped `tools` array as the template takes it: custom tools as functions of one
/// string (other tools as they are).
pub fn template_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(ApiError::bad_request("`tools` must be an array of tools"));
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| Ok(CustomTool::of(t, i)?.map_or_else(|| t.clone(), |c| c.function())))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The names of the custom tools in a chat-shaped `tools` array (their calls come back as
/// custom calls).
pub fn custom_tool_names(tools: Option<&Value>) -> Vec<String> {
    tools
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, t)| {
            CustomTool::of(t, i)
                .ok()
                .flatten()
                .map(|c| c.name.to_string())
        })
        .collect()
}

/// A custom tool call's input: the [`CUSTOM_INPUT`] string of its arguments (the text as
/// is, should the arguments not be that object).
pub fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| {
            v.get(CUSTOM_INPUT)
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| arguments.to_string())
}

/// A custom tool call's arguments as the template's function call carries them.
pub fn custom_arguments(input: &str) -> String {
    serde_json::json!({ CUSTOM_INPUT: input }).to_string()
}

/// The tools of an OpenAI-style `tools` array: function tools (`[{"type": "function",
/// "function": {"name", "parameters"}}]`; `function` fields at the top level are taken
/// too) and custom tools ([`CustomTool`]).
pub fn openai_tools(tools: &Value) -> Result<Vec<ToolSpec>, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(ApiError::bad_request("`tools` must be an array of tools"));
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            if let Some(c) = CustomTool::of(t, i)? {
                let f = c.function();
                return Ok(ToolSpec {
                    name: c.name.to_string(),
                    parameters: f["function"]["parameters"].clone(),
                    strict: false,
                    input_lark: match c.grammar {
                        Some((CustomSyntax::Lark, definition)) => Some(definition.to_string()),
                        _ => None,
                    },
                });
            }
            let f = t.get("function").unwrap_or(t);
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
            if kind != "function" {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].type` is `{kind}`: give function or custom tools"
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
                // OpenAI's `strict`: without it, no promise is made for the arguments.
                strict: f.get("strict").and_then(Value::as_bool).unwrap_or(false),
                input_lark: None,
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
                ToolChoice::Required
                    | ToolChoice::Function(_)
                    | ToolChoice::Allowed { required: true, .. }
            );
        if self.grammar.is_some() && (format.is_some() || constrained_call) {
            return Err(ApiError::bad_request(
                "`grammar` cannot be combined with a JSON format or a required tool call: send one constraint",
            ));
        }
        // A required call is this reply; a JSON format is for the answer after the calls (as
        // OpenAI takes both, and agents send both).
        let format = format.filter(|_| !constrained_call);
        let tools: Vec<ToolSpec> = match &self.tool_choice {
            ToolChoice::Function(name) => {
                let t = self.tools.iter().find(|t| &t.name == name).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "`tool_choice` names `{name}`, which is not in `tools`"
                    ))
                })?;
                vec![t.clone()]
            }
            ToolChoice::Allowed { names, .. } => names
                .iter()
                .map(|name| {
                    self.tools
                        .iter()
                        .find(|t| &t.name == name)
                        .cloned()
                        .ok_or_else(|| {
                            ApiError::bad_request(format!(
                                "`tool_choice` allows `{name}`, which is not in `tools`"
                            ))
                        })
                })
                .collect::<Result<_, _>>()?,
            _ => self.tools.clone(),
        };
        let tags = loaded.chat.reasoning_tags(prompt.unwrap_or(""));
        // Where a constraint starts: after the block the prompt opened, or at once.
        let start = if tags.as_ref().is_some_and(|t| t.starts_open) || self.budget.arm_immediately {
            ReplyStart::AfterBlock
        } else {
            ReplyStart::Fresh
        };
        let call_grammar = |f: ToolFamily| {
            f.call_grammar(&tools, self.parallel_tool_calls, start)
                .inspect(|g| {
                    if !g.left_out.is_empty() {
                        tracing::info!(
                            "tool arguments are constrained without what a grammar cannot hold (the tools are not strict): {}",
                            g.left_out.join(", ")
                        );
                    }
                })
                .map_err(|e| ApiError::bad_request(format!("cannot constrain the tool call: {e}")))
        };
        let constraint = if let Some(g) = &self.grammar {
            Some(Constraint::Grammar(g.clone()))
        } else if let Some(schema) = format {
            let g = compile_schema(&schema).map_err(|e| ApiError::bad_request(e.to_string()))?;
            // A chat's answer as its family writes one (gpt-oss: after its analysis, in the
            // final channel); a raw prompt's is the whole output.
            let g = match family {
                Some(f) if prompt.is_some() => f.answer_grammar(g, start),
                _ => g,
            };
            // With tools the model may call one instead of answering (an agent with a
            // structured result still uses its tools).
            let g = match family {
                Some(f) if tools_on => g.either(call_grammar(f)?),
                _ => g,
            };
            Some(Constraint::Grammar(g.text()))
        } else if tools_on {
            match (family, constrained_call) {
                (Some(f), true) => Some(Constraint::Grammar(call_grammar(f)?.text())),
                (Some(f), false) => Some(Constraint::Lazy {
                    grammar: call_grammar(f)?.text(),
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
        let reasoning = match (self.reasoning, prompt) {
            (ReasoningFormat::DeepSeek, Some(_)) => tags.clone(),
            _ => None,
        };
        let budget = self.reasoning_budget(loaded, tags.as_ref(), prompt.is_some())?;
        // Harmony replies are channels whether or not tools are given.
        let parse_family = match family {
            Some(ToolFamily::Harmony) if prompt.is_some() => family,
            f if tools_on => f,
            _ => None,
        };
        Ok(OutputPlan {
            constraint,
            parser: OutputParser::new(parse_family, reasoning),
            budget,
        })
    }

    /// The reasoning budget for a reply whose template's reasoning tags are `tags`: a
    /// chat's counts its reasoning tokens even without a limit. A chat whose template
    /// writes no reasoning blocks gets none (agents send a budget to every model); a raw
    /// prompt's budget needs tags, from the request or the template. Under a strict
    /// grammar the core forces a close only in a block the reply starts in, or opens at
    /// its first token (the grammar then holds from the block's close on); otherwise it
    /// only counts.
    fn reasoning_budget(
        &self,
        loaded: &Loaded,
        tags: Option<&ReasoningSplit>,
        chat: bool,
    ) -> Result<Option<ReasoningBudget>, ApiError> {
        let ask = &self.budget;
        let tokens = match ask.tokens {
            // The server's budget is for chats: a raw prompt's reasoning is its writer's.
            BudgetTokens::ServerDefault if chat => loaded.budget.tokens,
            BudgetTokens::ServerDefault | BudgetTokens::Unlimited => None,
            BudgetTokens::Tokens(n) => Some(n),
        };
        if tokens.is_none() && !chat {
            return Ok(None);
        }
        let (open, close, starts_open) = match (&ask.tags, tags) {
            (Some((open, close)), _) => (open.as_str(), close.as_str(), false),
            (None, Some(t)) => (t.open.as_str(), t.close.as_str(), t.starts_open),
            (None, None) if chat => return Ok(None),
            (None, None) => {
                return Err(ApiError::bad_request(
                    "a reasoning budget needs the reasoning block's tags, and this model's chat template writes none: give `reasoning_budget_start_tag` and `reasoning_budget_end_tag`",
                ))
            }
        };
        let starts_open = starts_open || ask.arm_immediately;
        let message = ask.message.as_deref().unwrap_or(&loaded.budget.message);
        loaded
            .engine
            .reasoning_budget(tokens, open, close, message, starts_open)
            .map(Some)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }
}
