//! The Anthropic Messages adapter: `POST /v1/messages` and `/v1/messages/count_tokens`.
//! Messages with text, `tool_use`, `tool_result` and `thinking` blocks become the chat
//! template's messages; the core's events become a `message` or the named SSE events
//! (`message_start`, `content_block_*`, `message_delta`, `message_stop`); errors are
//! Anthropic error objects. Structured outputs: `output_config.format` (a JSON schema the
//! text answer is held to, as `response_format` holds a chat's) and strict tools;
//! `output_config.effort` reaches the template as `reasoning_effort`.
//!
//! Compaction ([`crate::compaction`]'s summary): `compaction: {"type": "summarize"}` answers
//! the conversation's summary as a `compaction` block alone (`stop_reason` `compaction`);
//! the `compact_20260112` edit of `context_management` compacts before the reply when the
//! prompt passes its trigger (or nears the context's end), the block first in the reply's
//! content (alone, with `pause_after_compaction`). A later request's messages are read from
//! their latest compaction block on, which reaches the template as a user message holding
//! the summary, as Anthropic's API drops what the block replaces.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::{Event, FinishReason};

use crate::compaction::Compacting;
use crate::error::{parse_json, ApiError, ErrorKind};
use crate::generation::{
    self, chat_tokens, collect, loaded, prepare_chat, submit, Asked, ChatInput,
};
use crate::output::{
    self, BudgetAsk, BudgetTokens, Format, OutputAsk, ReasoningEffort, ReasoningFormat, ToolChoice,
};
use crate::state::AppState;

/// An error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> AnthropicError {
        AnthropicError(e)
    }
}

impl AnthropicError {
    fn kind(&self) -> &'static str {
        match self.0.kind {
            ErrorKind::BadRequest => "invalid_request_error",
            ErrorKind::PayloadTooLarge => "request_too_large",
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Forbidden => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::Unavailable => "overloaded_error",
            ErrorKind::Internal => "api_error",
        }
    }

    pub fn body(&self) -> Value {
        // A prompt beyond the context in Anthropic's words, which Claude Code and litellm
        // read (the counts in them too) to compact the conversation.
        let message = match self.0.overflow {
            Some(o) => match o.reply_tokens() {
                Some(m) => format!(
                    "input length and `max_tokens` exceed context limit: {} + {m} > {}, decrease input length or `max_tokens` and try again ({})",
                    o.prompt_tokens,
                    o.n_ctx,
                    o.advice()
                ),
                None => format!(
                    "prompt is too long: {} tokens > {} maximum ({})",
                    o.prompt_tokens,
                    o.n_ctx,
                    o.advice()
                ),
            },
            None => self.0.message.clone(),
        };
        json!({"type": "error", "error": {"type": self.kind(), "message": message}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        self.0.respond(self.body())
    }
}

type Result<T> = std::result::Result<T, AnthropicError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
}

/// `system`: a string or text blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum System {
    Text(String),
    Blocks(Vec<Value>),
}

#[derive(Debug, Clone, Deserialize)]
struct Message {
    role: Role,
    content: Content,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum WireToolChoice {
    Auto {
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

/// `thinking`: `enabled` with its `budget_tokens` (each reasoning block closed once it has
/// spent them), `adaptive` (the model decides: thinking on, the server's budget), or
/// `disabled`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Thinking {
    Enabled { budget_tokens: Option<i64> },
    Adaptive {},
    Disabled,
}

#[derive(Debug, Clone, Deserialize)]
struct MessagesRequest {
    /// Required by the API; a missing one is a 400.
    max_tokens: Option<u32>,
    system: Option<System>,
    messages: Vec<Message>,
    tools: Option<Vec<Value>>,
    /// The MCP connector beta's servers, which Anthropic's API connects to: refused.
    mcp_servers: Option<Vec<Value>>,
    tool_choice: Option<WireToolChoice>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    /// An extension (as llama-server takes it): the sampling seed.
    seed: Option<i64>,
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: bool,
    thinking: Option<Thinking>,
    /// Structured outputs and effort (`{"format": {"type": "json_schema", "schema"},
    /// "effort"}`).
    output_config: Option<OutputConfig>,
    /// The structured-outputs beta's name for `output_config.format`.
    output_format: Option<OutputFormat>,
    /// Compact the conversation now: the answer is its compaction block alone.
    compaction: Option<CompactionAsk>,
    /// Edits to the context: compaction past a trigger is served.
    context_management: Option<ContextManagement>,
}

/// `compaction`: the conversation summarized now, by the server's prompt or `instructions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum CompactionAsk {
    Summarize { instructions: Option<String> },
}

/// `context_management`: its `edits`.
#[derive(Debug, Clone, Deserialize)]
struct ContextManagement {
    #[serde(default)]
    edits: Vec<Edit>,
}

/// A context edit. Compaction is served; clearing old tool results or thinking is taken
/// and not applied (the conversation is rendered whole, and a context overflow is the
/// usual 400 on which clients compact).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type")]
enum Edit {
    #[serde(rename = "compact_20260112")]
    Compact {
        trigger: Option<Trigger>,
        instructions: Option<String>,
        #[serde(default)]
        pause_after_compaction: bool,
    },
    #[serde(rename = "clear_tool_uses_20250919")]
    ClearToolUses {},
    #[serde(rename = "clear_thinking_20251015")]
    ClearThinking {},
}

/// When a compaction edit compacts: past this many input tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Trigger {
    InputTokens { value: u32 },
}

/// The trigger of a compaction edit that gives none (Anthropic's).
const DEFAULT_TRIGGER_TOKENS: u32 = 150_000;

/// What a request asks of compaction.
#[derive(Debug, Clone)]
enum Compaction {
    /// The conversation summarized now, the answer its compaction block alone.
    Now { instructions: Option<String> },
    /// Compacted before the reply when the prompt passes `threshold` tokens or nears the
    /// context's end; `pause`: the answer is the compaction block alone.
    Past {
        threshold: u32,
        instructions: Option<String>,
        pause: bool,
    },
}

impl MessagesRequest {
    fn compaction(&self) -> std::result::Result<Option<Compaction>, ApiError> {
        let edit = self
            .context_management
            .iter()
            .flat_map(|c| &c.edits)
            .find_map(|e| match e {
                Edit::Compact {
                    trigger,
                    instructions,
                    pause_after_compaction,
                } => Some(Compaction::Past {
                    threshold: trigger
                        .as_ref()
                        .map_or(DEFAULT_TRIGGER_TOKENS, |Trigger::InputTokens { value }| {
                            *value
                        }),
                    instructions: instructions.clone(),
                    pause: *pause_after_compaction,
                }),
                Edit::ClearToolUses {} | Edit::ClearThinking {} => None,
            });
        match (&self.compaction, edit) {
            (Some(_), Some(_)) => Err(ApiError::bad_request(
                "`compaction` and a `context_management` compaction edit were both given: send one",
            )),
            (Some(CompactionAsk::Summarize { instructions }), None) => Ok(Some(Compaction::Now {
                instructions: instructions.clone(),
            })),
            (None, edit) => Ok(edit),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct OutputConfig {
    format: Option<OutputFormat>,
    effort: Option<Effort>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputFormat {
    JsonSchema { schema: Value },
}

/// `output_config.effort`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Effort {
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl Effort {
    /// As the template's `reasoning_effort` (gpt-oss's harmony reads low, medium and high);
    /// `max` is the highest level OpenAI names.
    fn reasoning_effort(self) -> ReasoningEffort {
        match self {
            Effort::Low => ReasoningEffort::Low,
            Effort::Medium => ReasoningEffort::Medium,
            Effort::High => ReasoningEffort::High,
            Effort::Xhigh | Effort::Max => ReasoningEffort::Xhigh,
        }
    }
}

/// The text of a block's content: a string, blocks (each as [`readable_text`] reads it),
/// or a block.
fn block_text(b: &Value) -> String {
    match b {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().map(block_text).collect::<Vec<_>>().join(""),
        v => readable_text(v).unwrap_or_default(),
    }
}

/// The text a text model reads in a block: a `text` block's; a `document` block whose
/// source is text (`{"type": "text", "data"}`) or blocks (`{"type": "content"}`), after its
/// `title` and `context`; a `search_result` block's title, source and content. `None`
/// for a block that is not text (an image, a PDF).
fn readable_text(b: &Value) -> Option<String> {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let headed = |head: Vec<String>, body: String| {
        let mut parts: Vec<String> = head.into_iter().filter(|h| !h.is_empty()).collect();
        parts.push(body);
        format!("{}\n\n", parts.join("\n"))
    };
    match b.get("type").and_then(Value::as_str)? {
        "text" => Some(field(b, "text")),
        "document" => {
            let source = b.get("source")?;
            let body = match source.get("type").and_then(Value::as_str)? {
                "text" => field(source, "data"),
                "content" => block_text(source.get("content").unwrap_or(&Value::Null)),
                _ => return None,
            };
            Some(headed(vec![field(b, "title"), field(b, "context")], body))
        }
        "search_result" => Some(headed(
            vec![field(b, "title"), field(b, "source")],
            block_text(b.get("content").unwrap_or(&Value::Null)),
        )),
        _ => None,
    }
}

/// The text of a server tool's result block in a Claude conversation's history: a web
/// search's results as their titles and addresses, another's content as text.
fn server_tool_result_text(b: &Value) -> String {
    let content = b.get("content").unwrap_or(&Value::Null);
    let found: Vec<String> = content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r.get("type").and_then(Value::as_str) == Some("web_search_result"))
        .map(|r| {
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
            format!("{} ({})", field("title"), field("url"))
        })
        .collect();
    let text = if found.is_empty() {
        block_text(content)
    } else {
        found.join("\n")
    };
    if text.is_empty() {
        text
    } else {
        format!("{text}\n\n")
    }
}

/// The request's conversation as the chat template's (OpenAI-shaped) messages.
fn template_messages(req: &MessagesRequest) -> std::result::Result<Vec<Value>, ApiError> {
    if req.mcp_servers.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(ApiError::bad_request(
            "`mcp_servers`: this server connects to no MCP servers (Anthropic's API does); connect them in your client and send their tools in `tools`",
        ));
    }
    let mut out = Vec::new();
    match &req.system {
        Some(System::Text(s)) => out.push(json!({"role": "system", "content": s})),
        Some(System::Blocks(b)) => out.push(
            json!({"role": "system", "content": b.iter().map(block_text).collect::<String>()}),
        ),
        None => {}
    }
    if req.messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` is empty: send at least one message",
        ));
    }
    let blocks_of = |m: &Message| match &m.content {
        Content::Text(t) => vec![json!({"type": "text", "text": t})],
        Content::Blocks(b) => b.clone(),
    };
    // The latest compaction block holding a summary, and what it replaces, left out.
    let summary_at = |b: &Value| {
        b.get("type").and_then(Value::as_str) == Some("compaction")
            && b.get("content").and_then(Value::as_str).is_some()
    };
    let from = req
        .messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match &m.content {
            Content::Blocks(b) => Some((i, b.iter().rposition(summary_at)?)),
            Content::Text(_) => None,
        })
        .unwrap_or((0, 0));
    for (i, m) in req.messages.iter().enumerate().skip(from.0) {
        let mut blocks = blocks_of(m);
        if i == from.0 {
            blocks.drain(..from.1);
        }
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
            match (kind, m.role) {
                ("text", _) => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                // A summary (the first block read, as what it replaces is left out), or a
                // compaction that wrote none, which is nothing.
                ("compaction", _) => {
                    if let Some(summary) = b.get("content").and_then(Value::as_str) {
                        out.push(crate::compaction::summary_as_message(summary));
                    }
                }
                ("thinking", Role::Assistant) => {
                    reasoning.push_str(b.get("thinking").and_then(Value::as_str).unwrap_or(""))
                }
                ("redacted_thinking", _) => {}
                // A Claude conversation's history: the calls Anthropic's API ran for it
                // (web search, web fetch, MCP ...) are its own; what they found is text
                // the answer went on from.
                ("server_tool_use" | "mcp_tool_use", Role::Assistant) => {}
                (k, Role::Assistant) if k.ends_with("_tool_result") => {
                    text.push_str(&server_tool_result_text(b))
                }
                ("tool_use", Role::Assistant) => calls.push(json!({
                    "id": b.get("id").cloned().unwrap_or(Value::Null),
                    "type": "function",
                    "function": {"name": b.get("name").cloned().unwrap_or(Value::Null),
                                 "arguments": b.get("input").cloned().unwrap_or(json!({}))},
                })),
                ("tool_result", Role::User) => out.push(json!({
                    "role": "tool",
                    "tool_call_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                    "content": block_text(b.get("content").unwrap_or(&Value::Null)),
                })),
                ("document" | "search_result", Role::User) if readable_text(b).is_some() => {
                    text.push_str(&readable_text(b).unwrap_or_default())
                }
                ("image", _) => {
                    return Err(ApiError::bad_request(format!(
                        "`messages[{i}].content[{j}]` is an image block, but this model is text-only: send text blocks only"
                    )))
                }
                ("document", _) => {
                    return Err(ApiError::bad_request(format!(
                        "`messages[{i}].content[{j}]` is a document whose source is not text (a PDF or a file), but this model reads text only: send its text (`\"source\": {{\"type\": \"text\", \"media_type\": \"text/plain\", \"data\": ...}}`)"
                    )))
                }
                (k, _) => {
                    return Err(ApiError::bad_request(format!(
                        "`messages[{i}].content[{j}].type` is `{k}`, which {} message cannot hold",
                        if m.role == Role::User { "a user" } else { "an assistant" }
                    )))
                }
            }
        }
        let role = if m.role == Role::User {
            "user"
        } else {
            "assistant"
        };
        let mut msg = Map::new();
        msg.insert("role".into(), json!(role));
        msg.insert("content".into(), json!(text));
        if !reasoning.is_empty() {
            msg.insert("reasoning_content".into(), json!(reasoning));
        }
        if !calls.is_empty() {
            msg.insert("tool_calls".into(), Value::Array(calls));
        }
        // A message that held only a compaction block is its summary, pushed above.
        let only_summary = !blocks.is_empty()
            && blocks
                .iter()
                .all(|b| b.get("type").and_then(Value::as_str) == Some("compaction"));
        if only_summary {
            continue;
        }
        if m.role == Role::Assistant
            || !text.is_empty()
            || out.last().is_none_or(|l| l["role"] != "tool")
        {
            out.push(Value::Object(msg));
        }
    }
    Ok(out)
}

/// Anthropic tools as the template's OpenAI tools: a custom tool (`name`, `description`,
/// `input_schema`, `strict`) as it is; Anthropic's client tools that a client declares by
/// `type` alone (`bash_*`, `text_editor_*`: the client runs them, Claude knows their
/// schemas) with the input schema their documentation gives, since no other model knows
/// it; a server tool (`web_search_*`, `code_execution_*`, ...) is refused by name: nothing
/// here runs it.
fn openai_tools(tools: &[Value]) -> std::result::Result<Value, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = t.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "`tools[{i}].name` is missing: every tool needs a name"
                ))
            })?;
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("custom");
            let mut f = if kind == "custom" {
                json!({
                    "name": name,
                    "description": t.get("description").cloned().unwrap_or(json!("")),
                    "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                })
            } else if let Some((description, parameters)) = client_tool(kind) {
                json!({"name": name, "description": description, "parameters": parameters})
            } else {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].type` is `{kind}`: this server runs no server tools and knows no schema for it; declare a custom tool (`name`, `description`, `input_schema`)"
                )));
            };
            if let Some(strict) = t.get("strict") {
                f["strict"] = strict.clone();
            }
            Ok(json!({"type": "function", "function": f}))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The description and input schema of an Anthropic client tool declared by its `type`
/// (versioned: `bash_20250124`, `text_editor_20250728`), as Anthropic documents them.
fn client_tool(kind: &str) -> Option<(&'static str, Value)> {
    let (family, version) = kind.rsplit_once('_')?;
    match family {
        "bash" => Some((
            "Run a command in a persistent bash shell; `restart` starts a new shell.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to run"},
                "restart": {"type": "boolean", "description": "Restart the shell instead"}},
                "additionalProperties": false}),
        )),
        "text_editor" => {
            // The 2025-07-28 version dropped `undo_edit`.
            let mut commands = vec!["view", "create", "str_replace", "insert"];
            if version < "20250728" {
                commands.push("undo_edit");
            }
            Some((
                "View, create and edit text files: `view` a file (lines numbered; `view_range` [first, last], -1 for the end) or a directory, `create` a file with `file_text`, `str_replace` the one occurrence of `old_str` with `new_str`, `insert` `new_str` after line `insert_line` (0: at the top).",
                json!({"type": "object", "properties": {
                    "command": {"type": "string", "enum": commands},
                    "path": {"type": "string", "description": "Absolute path of a file or directory"},
                    "file_text": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "insert_line": {"type": "integer"},
                    "view_range": {"type": "array", "items": {"type": "integer"}}},
                    "required": ["command", "path"], "additionalProperties": false}),
            ))
        }
        _ => None,
    }
}

/// What `thinking` asks: the template's `enable_thinking`, and the reasoning budget.
fn thinking(
    thinking: Option<&Thinking>,
) -> std::result::Result<(Map<String, Value>, BudgetTokens), ApiError> {
    let mut kwargs = Map::new();
    let budget = match thinking {
        Some(Thinking::Enabled { budget_tokens }) => {
            kwargs.insert("enable_thinking".into(), json!(true));
            match *budget_tokens {
                None => BudgetTokens::ServerDefault,
                Some(n) => u32::try_from(n).map(BudgetTokens::Tokens).map_err(|_| {
                    ApiError::bad_request(format!(
                        "`thinking.budget_tokens` is {n}: give a number of tokens"
                    ))
                })?,
            }
        }
        Some(Thinking::Adaptive {}) => {
            kwargs.insert("enable_thinking".into(), json!(true));
            BudgetTokens::ServerDefault
        }
        Some(Thinking::Disabled) => {
            kwargs.insert("enable_thinking".into(), json!(false));
            BudgetTokens::ServerDefault
        }
        None => BudgetTokens::ServerDefault,
    };
    Ok((kwargs, budget))
}

/// The request as a prepared generation.
fn prepared(
    state: &AppState,
    req: &MessagesRequest,
) -> std::result::Result<generation::Prepared, ApiError> {
    let (chat, budget) = chat_input(req)?;
    prepared_chat(state, req, &chat, budget)
}

/// The request's reply to the conversation `chat` (its own, or compacted) with the reasoning
/// `budget`, as a prepared generation.
fn prepared_chat(
    state: &AppState,
    req: &MessagesRequest,
    chat: &ChatInput,
    budget: BudgetTokens,
) -> std::result::Result<generation::Prepared, ApiError> {
    let loaded = loaded(state)?;
    let max_tokens = max_tokens(req)?;
    let (choice, parallel) = match &req.tool_choice {
        None => (ToolChoice::Auto, false),
        Some(WireToolChoice::Auto {
            disable_parallel_tool_use: d,
        }) => (ToolChoice::Auto, d == &Some(false)),
        Some(WireToolChoice::Any {
            disable_parallel_tool_use: d,
        }) => (ToolChoice::Required, d == &Some(false)),
        Some(WireToolChoice::Tool {
            name,
            disable_parallel_tool_use: d,
        }) => (ToolChoice::Function(name.clone()), d == &Some(false)),
        Some(WireToolChoice::None) => (ToolChoice::None, false),
    };
    let ask = OutputAsk {
        tools: match &chat.tools {
            Some(t) => output::openai_tools(t)?,
            None => Vec::new(),
        },
        tool_choice: choice,
        parallel_tool_calls: parallel,
        format: match req
            .output_config
            .as_ref()
            .and_then(|c| c.format.as_ref())
            .or(req.output_format.as_ref())
        {
            Some(OutputFormat::JsonSchema { schema }) => Format::JsonSchema(schema.clone()),
            None => Format::Text,
        },
        reasoning: ReasoningFormat::DeepSeek,
        budget: BudgetAsk {
            tokens: budget,
            ..Default::default()
        },
        ..Default::default()
    };
    let asked = Asked {
        max_tokens: Some(max_tokens),
        stop: req.stop_sequences.clone().unwrap_or_default(),
        ..sampling(req)
    };
    prepare_chat(loaded, chat, &ask, &asked)
}

/// The reply's `max_tokens`, which the API requires.
fn max_tokens(req: &MessagesRequest) -> std::result::Result<u32, ApiError> {
    req.max_tokens.ok_or_else(|| {
        ApiError::bad_request("`max_tokens` is required: give the most tokens the reply may have")
    })
}

/// The sampling settings a request asks for.
fn sampling(req: &MessagesRequest) -> Asked {
    Asked {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        seed: req.seed,
        ..Default::default()
    }
}

/// What a request gives the template: its messages and tools, and `thinking` as
/// `enable_thinking`; with the reasoning budget `thinking` asks.
fn chat_input(req: &MessagesRequest) -> std::result::Result<(ChatInput, BudgetTokens), ApiError> {
    let (kwargs, budget) = thinking(req.thinking.as_ref())?;
    let effort = req.output_config.as_ref().and_then(|c| c.effort);
    let kwargs = ReasoningEffort::template_kwargs(
        effort.map(Effort::reasoning_effort),
        Some(&kwargs).filter(|k| !k.is_empty()),
    );
    let chat = ChatInput {
        messages: template_messages(req)?,
        tools: req.tools.as_deref().map(openai_tools).transpose()?,
        kwargs,
    };
    Ok((chat, budget))
}

async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let mut req: MessagesRequest = parse_json(body)?;
    // Counting needs no length.
    req.max_tokens = Some(req.max_tokens.unwrap_or(1));
    let loaded = loaded(&state)?;
    // As the request would render it, whatever its length: a client counts to learn
    // whether it fits.
    let n = chat_tokens(loaded, &chat_input(&req)?.0)?.len();
    Ok(Json(json!({"input_tokens": n})))
}

fn stop_reason(r: &FinishReason) -> (&'static str, Option<String>) {
    match r {
        FinishReason::EndOfGeneration => ("end_turn", None),
        FinishReason::StopSequence(s) => ("stop_sequence", Some(s.clone())),
        FinishReason::Length => ("max_tokens", None),
        FinishReason::ToolCalls => ("tool_use", None),
    }
}

fn usage(u: &generation::Usage) -> Value {
    json!({
        "input_tokens": u.prompt - u.cached,
        "output_tokens": u.completion,
        "cache_read_input_tokens": u.cached,
        "cache_creation_input_tokens": 0,
    })
}

fn tool_use(c: &epm_chat::ToolCall) -> Value {
    let input: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
    json!({"type": "tool_use", "id": crate::openai::wire::new_id("toolu"), "name": c.name, "input": input})
}

/// The content blocks of a collected reply.
fn reply_content(c: &generation::Collected) -> Vec<Value> {
    let mut content = Vec::new();
    if !c.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": c.reasoning, "signature": ""}));
    }
    // Whitespace beside tool calls is no text block.
    if !c.text.is_empty() && (!c.text.trim().is_empty() || c.tool_calls.is_empty()) {
        content.push(json!({"type": "text", "text": c.text}));
    }
    content.extend(c.tool_calls.iter().map(tool_use));
    content
}

/// A message answer.
fn message_answer(
    id: &str,
    model: &str,
    content: Vec<Value>,
    (reason, seq): (&str, Option<String>),
    u: &generation::Usage,
) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": reason, "stop_sequence": seq,
        "usage": usage(u),
    })
}

async fn messages(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: MessagesRequest = parse_json(body)?;
    let id = crate::openai::wire::new_id("msg");
    let model = state.model_name.clone();
    let planned = match req.compaction()? {
        Some(c) => compaction_plan(&state, &req, c)?,
        None => None,
    };
    if let Some(plan) = planned {
        return compacted(state, req, plan, id, model).await;
    }
    let p = prepared(&state, &req)?;
    let rx = submit(&state, p)?;
    if req.stream {
        return Ok(Sse::new(sse(rx, id, model))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = collect(rx).await?;
    let answer = message_answer(
        &id,
        &model,
        reply_content(&c),
        stop_reason(&c.finish_reason),
        &c.usage,
    );
    Ok(Json(answer).into_response())
}

/// A compaction to run before the reply, or in its place.
struct CompactionPlan {
    /// The whole conversation, as the template's input.
    chat: ChatInput,
    budget: BudgetTokens,
    /// What the summary is asked by, in place of the server's prompt.
    instructions: Option<String>,
    /// How the reply's conversation is compacted; none when the answer is the compaction
    /// block alone.
    reply: Option<Compacting>,
}

/// What compaction `asked` comes to for `req`: none when a trigger is not reached, or the
/// conversation has nothing before its last turn to compact.
fn compaction_plan(
    state: &AppState,
    req: &MessagesRequest,
    asked: Compaction,
) -> std::result::Result<Option<CompactionPlan>, ApiError> {
    let loaded = loaded(state)?;
    let (chat, budget) = chat_input(req)?;
    let (instructions, reply) = match asked {
        Compaction::Now { instructions } => (instructions, None),
        Compaction::Past {
            threshold,
            instructions,
            pause,
        } => {
            // A reply's request must hold before its summary is written.
            let max_tokens = max_tokens(req)?;
            let prompt = chat_tokens(loaded, &chat)?.len();
            let messages = &chat.messages;
            let needed = crate::compaction::needed(
                loaded,
                prompt,
                messages,
                Some(threshold),
                Some(max_tokens),
            );
            let Some(plan) = needed else {
                return Ok(None);
            };
            if !pause {
                // The reply must be one the model can be asked (its format's grammar, the
                // turn kept) before the summary is written: checked with an empty summary.
                let placeholder = crate::compaction::summary_as_message("");
                let view = ChatInput {
                    messages: plan.view(&chat.messages, placeholder),
                    ..chat.clone()
                };
                prepared_chat(state, req, &view, budget)?;
            }
            (instructions, (!pause).then_some(plan))
        }
    };
    Ok(Some(CompactionPlan {
        chat,
        budget,
        instructions,
        reply,
    }))
}

/// The summary, what writing it took, and the reply's events when there is a reply.
type Compacted = (String, generation::Usage, Option<UnboundedReceiver<Event>>);

/// Answer `req` by its compaction `plan`: the compaction block, then the reply to the
/// compacted conversation unless the block is the answer (`stop_reason` `compaction`).
/// Streamed, the message and its compaction block open at once.
async fn compacted(
    state: Arc<AppState>,
    req: MessagesRequest,
    plan: CompactionPlan,
    id: String,
    model: String,
) -> Result<Response> {
    let streamed = req.stream;
    let start = async move {
        let (tools, kwargs) = (plan.chat.tools.clone(), plan.chat.kwargs.clone());
        let chat = |messages: &[Value]| {
            Ok(ChatInput {
                messages: messages.to_vec(),
                tools: tools.clone(),
                kwargs: kwargs.clone(),
            })
        };
        let sampling = sampling(&req);
        let messages = plan.chat.messages.clone();
        let instructions = plan.instructions.as_deref();
        let (summary, u) =
            crate::compaction::summarize_with(&state, messages, chat, instructions, sampling)
                .await?;
        let Some(reply) = plan.reply else {
            return Ok::<Compacted, ApiError>((summary, u, None));
        };
        let summary_message = crate::compaction::summary_as_message(&summary);
        let view = ChatInput {
            messages: reply.view(&plan.chat.messages, summary_message),
            ..plan.chat
        };
        let p = prepared_chat(&state, &req, &view, plan.budget)?;
        Ok((summary, u, Some(submit(&state, p)?)))
    };
    if streamed {
        let mut s = StreamState::new(id, model);
        s.open_compaction();
        let head: Vec<_> = s.pending.drain(..).map(Ok).collect();
        let rest = async move {
            match start.await {
                Ok((summary, u, rx)) => {
                    s.close_compaction(&summary);
                    s.compaction_usage = Some(u);
                    let Some(rx) = rx else {
                        s.usage = u;
                        s.finish(("compaction", None));
                        return stream::iter(s.pending.drain(..).map(Ok).collect::<Vec<_>>())
                            .boxed();
                    };
                    let done: Vec<_> = s.pending.drain(..).map(Ok).collect();
                    stream::iter(done)
                        .chain(crate::sse::stream(crate::sse::events(rx), s))
                        .boxed()
                }
                Err(e) => {
                    s.pending
                        .push_back(named("error", AnthropicError(e).body()));
                    stream::iter(s.pending.drain(..).map(Ok).collect::<Vec<_>>()).boxed()
                }
            }
        };
        let events = stream::iter(head).chain(stream::once(rest).flatten());
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let (summary, u, rx) = start.await?;
    let block = compaction_block(Some(&summary));
    let answer = match rx {
        None => {
            let mut answer = message_answer(&id, &model, vec![block], ("compaction", None), &u);
            answer["usage"]["iterations"] = iterations(&u, None);
            answer
        }
        Some(rx) => {
            let c = collect(rx).await?;
            let mut content = vec![block];
            content.extend(reply_content(&c));
            let mut answer = message_answer(
                &id,
                &model,
                content,
                stop_reason(&c.finish_reason),
                &c.usage,
            );
            answer["usage"]["iterations"] = iterations(&u, Some(&c.usage));
            answer
        }
    };
    Ok(Json(answer).into_response())
}

/// A compacting request's `usage.iterations`, as Anthropic's API gives them: what writing the
/// summary took (`compaction`, not in the top-level usage when a reply follows), then the
/// reply's (`message`), when there is one.
fn iterations(compaction: &generation::Usage, reply: Option<&generation::Usage>) -> Value {
    let entry = |kind: &str, u: &generation::Usage| {
        let mut v = usage(u);
        v["type"] = json!(kind);
        v
    };
    let mut all = vec![entry("compaction", compaction)];
    all.extend(reply.map(|u| entry("message", u)));
    Value::Array(all)
}

/// A compaction block holding `summary` (none yet: a stream's opening block).
fn compaction_block(summary: Option<&str>) -> Value {
    json!({"type": "compaction", "content": summary})
}

/// Which content block is open in a stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
}

struct StreamState {
    id: String,
    model: String,
    usage: generation::Usage,
    pending: VecDeque<SseEvent>,
    open: Option<Block>,
    index: usize,
    /// `message_start` was sent (a compacting stream sends it before the reply starts).
    started: bool,
    /// What writing a compaction's summary took, reported apart from the reply's usage.
    compaction_usage: Option<generation::Usage>,
    finished: bool,
}

fn named(name: &str, v: Value) -> SseEvent {
    SseEvent::default().event(name).data(v.to_string())
}

impl StreamState {
    fn new(id: String, model: String) -> StreamState {
        StreamState {
            id,
            model,
            usage: Default::default(),
            pending: VecDeque::new(),
            open: None,
            index: 0,
            started: false,
            compaction_usage: None,
            finished: false,
        }
    }

    /// Send `message_start`, once.
    fn start_message(&mut self) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(&self.usage),
        });
        self.pending.push_back(named(
            "message_start",
            json!({"type": "message_start", "message": message}),
        ));
    }

    /// Open the message and its compaction block, before the summary is written.
    fn open_compaction(&mut self) {
        self.start_message();
        self.pending.push_back(named(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.index,
                   "content_block": compaction_block(None)}),
        ));
    }

    /// The compaction block opened by [`Self::open_compaction`], done with `summary`.
    fn close_compaction(&mut self, summary: &str) {
        self.pending.push_back(named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.index,
                   "delta": {"type": "compaction_delta", "content": summary}}),
        ));
        self.pending.push_back(named(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": self.index}),
        ));
        self.index += 1;
    }

    /// End the message with `stop_reason` and `stop_sequence`.
    fn finish(&mut self, (reason, seq): (&str, Option<String>)) {
        let mut usage = json!({"output_tokens": self.usage.completion});
        if let Some(c) = &self.compaction_usage {
            let replied = reason != "compaction";
            usage["iterations"] = iterations(c, replied.then_some(&self.usage));
        }
        self.pending.push_back(named(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
                   "usage": usage}),
        ));
        self.pending
            .push_back(named("message_stop", json!({"type": "message_stop"})));
        self.finished = true;
    }

    fn close(&mut self) {
        if self.open.take().is_some() {
            self.pending.push_back(named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.index}),
            ));
            self.index += 1;
        }
    }

    fn delta(&mut self, block: Block, text: String) {
        if self.open != Some(block) {
            self.close();
            let start = match block {
                Block::Text => json!({"type": "text", "text": ""}),
                Block::Thinking => json!({"type": "thinking", "thinking": ""}),
            };
            self.pending.push_back(named(
                "content_block_start",
                json!({"type": "content_block_start", "index": self.index, "content_block": start}),
            ));
            self.open = Some(block);
        }
        let delta = match block {
            Block::Text => json!({"type": "text_delta", "text": text}),
            Block::Thinking => json!({"type": "thinking_delta", "thinking": text}),
        };
        self.pending.push_back(named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.index, "delta": delta}),
        ));
    }

    fn encode_event(&mut self, ev: Event) {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                self.usage.started(prompt_tokens, cached_tokens);
                self.start_message();
            }
            Event::Text(t) => self.delta(Block::Text, t),
            Event::Reasoning(t) => self.delta(Block::Thinking, t),
            Event::ToolCall(c) => {
                self.close();
                let mut block = tool_use(&c);
                let input = std::mem::replace(&mut block["input"], json!({}));
                self.pending.push_back(named(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": self.index, "content_block": block}),
                ));
                self.pending.push_back(named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                ));
                self.open = Some(Block::Text);
                self.close();
            }
            Event::Logprob(_) | Event::Progress(_) => {}
            Event::Done {
                finish_reason,
                completion_tokens,
                reasoning_tokens,
            } => {
                self.close();
                self.usage.finished(completion_tokens, reasoning_tokens);
                self.finish(stop_reason(&finish_reason));
            }
            Event::Failed(e) => {
                let body = AnthropicError(ApiError::internal(e.to_string())).body();
                self.pending.push_back(named("error", body));
                self.finished = true;
            }
        }
    }
}

fn sse(
    rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
) -> impl Stream<Item = std::result::Result<SseEvent, Infallible>> {
    crate::sse::stream(crate::sse::events(rx), StreamState::new(id, model))
}

impl crate::sse::Encoder for StreamState {
    type Input = Event;
    type Output = SseEvent;

    fn encode(&mut self, ev: Event, out: &mut VecDeque<SseEvent>) -> bool {
        self.encode_event(ev);
        out.append(&mut self.pending);
        self.finished
    }
}

#[cfg(test)]
mod client_tool_tests {
    use super::client_tool;

    #[test]
    fn client_tools_are_known_by_family_and_their_commands_by_version() {
        let commands =
            |kind: &str| client_tool(kind).unwrap().1["properties"]["command"]["enum"].clone();
        assert!(commands("text_editor_20250124")
            .to_string()
            .contains("undo_edit"));
        assert!(!commands("text_editor_20250728")
            .to_string()
            .contains("undo_edit"));
        assert!(client_tool("bash_20250124").is_some());
        for server_side in [
            "web_search_20250305",
            "code_execution_20250825",
            "custom",
            "bash",
        ] {
            assert!(client_tool(server_side).is_none(), "{server_side}");
        }
    }
}
