//! The OpenAI Responses adapter: `POST /v1/responses`. `input` (a string or items:
//! messages, `function_call`, `function_call_output`, `custom_tool_call`,
//! `custom_tool_call_output`, `reasoning`), `instructions`, function and custom (freeform
//! text) `tools`, `tool_choice`, `text.format`, `max_output_tokens`; the reply as output
//! items (reasoning, message, function and custom tool calls), or the typed stream events
//! (`response.created`, `response.output_text.delta`, `response.reasoning_text.delta`,
//! `response.function_call_arguments.delta`, `response.custom_tool_call_input.delta`,
//! `response.completed` ...; the reasoning and the answer each stream as one item).
//! A custom tool reaches the template as a function of one string, `input`, which its
//! call's item carries back as its text. Responses are kept in memory ([`crate::response_store`])
//! unless `store` is false: `previous_response_id` continues one, and `GET` / `DELETE
//! /v1/responses/{id}` and `GET /v1/responses/{id}/input_items` read and remove them.
//! `background: true` answers at once and generates on a task of its own
//! ([`crate::background`]): `GET` polls it or replays its events, `POST
//! /v1/responses/{id}/cancel` stops it.
//! `POST /v1/responses/input_tokens` counts a request's input tokens.
//! `conversation` names a Conversations API conversation ([`crate::conversations`]) the
//! response continues and adds its items to. `POST /v1/responses/compact`, a
//! `compaction_trigger` item and `context_management` are [`crate::compaction`]'s.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::{Event, FinishReason};

use crate::background::{LoggedEvent, Run};
use crate::compaction::ContextManagement;
use crate::error::{from_json, parse_json, ApiError, ErrorKind};
use crate::generation::{
    self, chat_tokens, collect, loaded, prepare_chat, submit, Asked, ChatInput,
};
use crate::openai::top_logprobs;
use crate::openai::wire::{chat_logprob, new_id, now, tool_choice};
use crate::openai::OpenAiError;
use crate::output::{self, custom_input, Format, OutputAsk, ReasoningEffort};
use crate::response_store::{failed, StoreError};
use crate::state::AppState;

type Result<T> = std::result::Result<T, OpenAiError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/responses",
            post(responses).get(crate::response_socket::upgrade),
        )
        .route(
            "/responses",
            post(responses).get(crate::response_socket::upgrade),
        )
        .route("/v1/responses/input_tokens", post(input_tokens))
        .route("/responses/input_tokens", post(input_tokens))
        .route("/v1/responses/compact", post(crate::compaction::compact))
        .route("/responses/compact", post(crate::compaction::compact))
        .route("/v1/responses/{id}", get(retrieve).delete(delete_response))
        .route("/v1/responses/{id}/input_items", get(list_input_items))
        .route("/v1/responses/{id}/cancel", post(cancel))
        .route("/responses/{id}", get(retrieve).delete(delete_response))
        .route("/responses/{id}/input_items", get(list_input_items))
        .route("/responses/{id}/cancel", post(cancel))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Clone, Deserialize)]
struct TextOptions {
    format: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ResponsesRequest {
    pub(crate) input: Option<Input>,
    /// A stored prompt template (OpenAI's `prompt: {"id"}`): refused, naming it.
    prompt: Option<Value>,
    /// A Conversations API conversation ([`crate::conversations`]), by its id or as
    /// `{"id"}`: its items come before `input`, and the response's are added to it.
    pub(crate) conversation: Option<Value>,
    instructions: Option<String>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_output_tokens: Option<u32>,
    pub(crate) temperature: Option<f32>,
    pub(crate) top_p: Option<f32>,
    pub(crate) seed: Option<i64>,
    #[serde(default)]
    stream: bool,
    text: Option<TextOptions>,
    reasoning: Option<ReasoningOptions>,
    pub(crate) previous_response_id: Option<String>,
    /// Keep the response for `previous_response_id` and `GET` (OpenAI's default: true).
    store: Option<bool>,
    /// Answer at once, `queued`, and generate without the client ([`crate::background`]).
    #[serde(default)]
    background: bool,
    /// Extra output: `message.output_text.logprobs` is read (the others need nothing:
    /// `reasoning.encrypted_content` has no encrypted form here).
    include: Option<Vec<String>>,
    /// Alternatives per token with the log-probabilities (0 to 20).
    top_logprobs: Option<u32>,
    /// What a conversation too long for the context gets: a 400 (`disabled`, the default)
    /// or its oldest turns left out (`auto`).
    #[serde(default)]
    truncation: Truncation,
    /// Compaction past a threshold of prompt tokens ([`crate::compaction`]).
    context_management: Option<Vec<ContextManagement>>,
    /// llama-server's reasoning budget, as the chat endpoint takes it.
    #[serde(flatten)]
    budget: output::WireBudget,
    /// The conversation up to the response a WebSocket answered last, which a request on
    /// that socket may continue by `previous_response_id` whether it was stored or not
    /// ([`crate::response_socket`]); never read from a request's JSON.
    #[serde(skip)]
    pub(crate) remembered: Option<Remembered>,
}

/// A response a WebSocket answered, remembered on that socket: its id, and its conversation
/// (its input items after those before it, then its output items).
#[derive(Debug, Clone)]
pub(crate) struct Remembered {
    pub(crate) id: String,
    pub(crate) items: Vec<Value>,
}

impl ResponsesRequest {
    /// Whether `context_management` asks for compaction, and past which prompt tokens.
    fn compaction_threshold(&self) -> Option<Option<u32>> {
        crate::compaction::asked_threshold(self.context_management.as_deref())
    }

    /// The conversation `items` as the request sees it: since its latest compaction item
    /// when it manages its context ([`crate::compaction::since_latest_compaction`]).
    pub(crate) fn managed(&self, items: Vec<Value>) -> Vec<Value> {
        match self.compaction_threshold() {
            Some(_) => crate::compaction::since_latest_compaction(items),
            None => items,
        }
    }
}

/// How a response's generation starts, once it can: its events' receiver, and the
/// compaction item that leads its output when the conversation was compacted first.
type Start = Pin<
    Box<
        dyn Future<
                Output = std::result::Result<(Option<Value>, UnboundedReceiver<Event>), ApiError>,
            > + Send,
    >,
>;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Truncation {
    #[default]
    Disabled,
    Auto,
}

/// The conversation as the model sees it: whole, or under `truncation: "auto"` and too long
/// for a slot's context, without its oldest turns ([`crate::truncation::fit`]).
fn fit_to_context(
    loaded: &crate::state::Loaded,
    req: &ResponsesRequest,
    items: Vec<Value>,
) -> std::result::Result<Vec<Value>, ApiError> {
    if req.truncation == Truncation::Disabled {
        return Ok(items);
    }
    generation::fit_conversation(loaded, items, req.max_output_tokens, |items| {
        chat_input(req, items)
    })
}

/// `reasoning`: only its `effort` reaches the model (the template).
#[derive(Debug, Clone, Deserialize)]
struct ReasoningOptions {
    effort: Option<ReasoningEffort>,
}

pub(crate) fn item_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Items as they are kept and listed: each with an id (as OpenAI lists stored items with
/// theirs), and a message with its `type` and its content as parts (the text the template
/// is shown is the same).
pub(crate) fn normalized_items(mut items: Vec<Value>) -> Vec<Value> {
    for item in &mut items {
        let Some(o) = item.as_object_mut() else {
            continue;
        };
        let kind = o
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message")
            .to_string();
        let prefix = match kind.as_str() {
            "message" => "msg",
            "function_call" => "fc",
            "function_call_output" => "fco",
            "custom_tool_call" => "ctc",
            "custom_tool_call_output" => "ctco",
            "reasoning" => "rs",
            "compaction" => "cmp",
            _ => "item",
        };
        o.entry("id").or_insert_with(|| json!(new_id(prefix)));
        if kind != "message" {
            continue;
        }
        o.entry("type").or_insert_with(|| json!("message"));
        if let Some(Value::String(text)) = o.get("content") {
            let part = match o.get("role").and_then(Value::as_str) {
                Some("assistant") => "output_text",
                _ => "input_text",
            };
            let text = text.clone();
            o.insert("content".into(), json!([{"type": part, "text": text}]));
        }
    }
    items
}

/// The request's own input items, a string input as a user message, as they are kept
/// ([`normalized_items`]).
pub(crate) fn own_items(req: &ResponsesRequest) -> std::result::Result<Vec<Value>, ApiError> {
    let input = match (&req.input, &req.prompt) {
        (Some(i), _) => i,
        (None, Some(_)) => {
            return Err(ApiError::bad_request(
                "`prompt` (a prompt template stored by OpenAI) is not served: send the text in `instructions` and `input`",
            ))
        }
        (None, None) => return Err(ApiError::bad_request("`input` is missing: send a string or a list of items")),
    };
    let items = match input {
        Input::Text(t) => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": t}]})],
        Input::Items(v) => v.clone(),
    };
    if items.is_empty() {
        return Err(ApiError::bad_request(
            "`input` is empty: send text or at least one item",
        ));
    }
    Ok(normalized_items(items))
}

/// The Conversations API conversation a request names, by its id or as `{"id"}`.
fn conversation_id(req: &ResponsesRequest) -> std::result::Result<Option<String>, ApiError> {
    let Some(c) = &req.conversation else {
        return Ok(None);
    };
    let id = c.as_str().or_else(|| c.get("id").and_then(Value::as_str));
    match id {
        Some(id) if req.previous_response_id.is_none() => Ok(Some(id.to_string())),
        Some(_) => Err(ApiError::bad_request(
            "`conversation` and `previous_response_id` were both given: a response continues one or the other",
        )),
        None => Err(ApiError::bad_request(
            "`conversation` must be a conversation's id, or an object with its `id`",
        )),
    }
}

/// The conversation a request continues (the items of its `conversation`, or
/// `previous_response_id`'s, from the store), then its `own` items.
pub(crate) fn history(
    state: &AppState,
    req: &ResponsesRequest,
    own: Vec<Value>,
) -> std::result::Result<Vec<Value>, ApiError> {
    if let Some(id) = conversation_id(req)? {
        let mut store = state
            .responses
            .lock()
            .map_err(|_| ApiError::internal("the response store is unusable"))?;
        let (_, mut items) = store
            .conversation_items(&id)
            .map_err(|e| ApiError::new(ErrorKind::NotFound, format!("`conversation`: {e}")))?;
        items.extend(own);
        return Ok(items);
    }
    let Some(previous) = &req.previous_response_id else {
        return Ok(own);
    };
    if let Some(r) = req.remembered.as_ref().filter(|r| &r.id == previous) {
        let mut items = r.items.clone();
        items.extend(own);
        return Ok(items);
    }
    if state.background.get(previous).is_some_and(|r| !r.is_done()) {
        return Err(ApiError::bad_request(format!(
            "`previous_response_id`: response `{previous}` is still running in the background: continue it once GET /v1/responses/{previous} says it is completed"
        )));
    }
    let mut store = state
        .responses
        .lock()
        .map_err(|_| ApiError::internal("the response store is unusable"))?;
    if !store.enabled() {
        return Err(ApiError::bad_request(
            "`previous_response_id` needs stored responses, and this server keeps none (serve --responses-store-mb 0): send the whole conversation in `input`",
        ));
    }
    let mut items = store.conversation(previous).map_err(|e| {
        ApiError::bad_field(
            "previous_response_id",
            format!("`previous_response_id`: {e}; send the whole conversation in `input`"),
        )
        .with_code("previous_response_not_found")
    })?;
    items.extend(own);
    Ok(items)
}

/// The instructions and input items as the template's messages; errors name an item as
/// `field[i]`.
pub(crate) fn template_messages(
    instructions: Option<&str>,
    items: &[Value],
    field: &str,
) -> std::result::Result<Vec<Value>, ApiError> {
    let mut out: Vec<Value> = Vec::new();
    if let Some(i) = instructions {
        out.push(json!({"role": "system", "content": i}));
    }
    // A reasoning item's text, for the assistant message it came before: templates render an
    // assistant turn's `reasoning_content` (Qwen3's within the turn in progress, harmony's as
    // the analysis before a call), so the prompt is the text the model generated and its KV
    // is reused.
    let mut reasoning = String::new();
    fn assistant(out: &mut Vec<Value>, mut msg: Value, reasoning: &mut String) {
        if !reasoning.is_empty() {
            msg["reasoning_content"] = json!(std::mem::take(reasoning));
        }
        out.push(msg);
    }
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                let role = match role {
                    "developer" => "system",
                    r @ ("system" | "user" | "assistant") => r,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "`{field}[{i}].role` is `{other}`: use system, developer, user or assistant"
                        )))
                    }
                };
                if let Some(Value::Array(parts)) = item.get("content") {
                    if parts.iter().any(|p| {
                        p.get("type")
                            .and_then(Value::as_str)
                            .is_some_and(|t| t.contains("image") || t.contains("file") || t.contains("audio"))
                    }) {
                        return Err(ApiError::bad_request(format!(
                            "`{field}[{i}]` holds an image, file or audio part, but this model is text-only"
                        )));
                    }
                }
                let msg = json!({"role": role, "content": item_text(item.get("content").unwrap_or(&Value::Null))});
                if role == "assistant" {
                    assistant(&mut out, msg, &mut reasoning);
                } else {
                    reasoning.clear();
                    out.push(msg);
                }
            }
            "function_call" | "custom_tool_call" => {
                let arguments = match kind {
                    "function_call" => item.get("arguments").cloned().unwrap_or(Value::Null),
                    _ => json!(output::custom_arguments(item.get("input").and_then(Value::as_str).unwrap_or(""))),
                };
                let call = json!({"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": arguments}});
                // The calls of one turn, after its text if it had any: one assistant message.
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" && reasoning.is_empty() => {
                        match last.get_mut("tool_calls") {
                            Some(Value::Array(c)) => c.push(call),
                            _ => last["tool_calls"] = json!([call]),
                        }
                    }
                    _ => assistant(
                        &mut out,
                        json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                        &mut reasoning,
                    ),
                }
            }
            "function_call_output" | "custom_tool_call_output" => {
                reasoning.clear();
                out.push(json!({"role": "tool", "tool_call_id": item.get("call_id"),
                    "content": item_text(item.get("output").unwrap_or(&Value::Null))}));
            }
            "reasoning" => {
                // Its text (open-weight models), else its summary's; encrypted content is
                // another server's.
                let parts = item
                    .get("content")
                    .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
                    .or_else(|| item.get("summary"))
                    .unwrap_or(&Value::Null);
                reasoning.push_str(&item_text(parts));
            }
            // What `POST /v1/responses/compact` answered (Codex's history calls it a
            // compaction summary).
            "compaction" | "compaction_summary" => {
                reasoning.clear();
                out.push(crate::compaction::summary_message(item));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "`{field}[{i}].type` is `{other}`: use message, reasoning, function_call, function_call_output, custom_tool_call, custom_tool_call_output or compaction"
                )))
            }
        }
    }
    Ok(out)
}

/// Responses tools are flat (`{"type": "function", "name", "parameters"}`, `{"type":
/// "custom", "name", "format": {"type": "grammar", "syntax", "definition"}}`): brought to
/// Chat Completions' shape, where [`output::CustomTool`] serves custom tools. Hosted tools
/// (`web_search`, `file_search`, ...), which OpenAI runs and this server cannot, are left
/// out of what the model sees: Codex, for one, sends `web_search` with every request. A
/// tool the client must run but whose shape this server does not know (`local_shell`,
/// `computer_use_preview`) is a 400.
fn chat_tools(tools: &[Value]) -> std::result::Result<Value, ApiError> {
    let mut hosted = Vec::new();
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let description = t.get("description").cloned().unwrap_or(json!(""));
        let kind = t.get("type").and_then(Value::as_str);
        if matches!(kind, Some("function" | "custom"))
            && !t.get("name").is_some_and(Value::is_string)
        {
            return Err(ApiError::bad_request(format!(
                "`tools[{i}].name` is missing"
            )));
        }
        match kind {
            Some("function") => {
                let mut f = json!({"name": t.get("name"), "description": description,
                    "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
                // As a chat client's function carries it.
                if let Some(strict) = t.get("strict") {
                    f["strict"] = strict.clone();
                }
                out.push(json!({"type": "function", "function": f}));
            }
            Some("custom") => {
                let format =
                    match output::custom_grammar(t.get("format"), &format!("tools[{i}].format"))? {
                        None => json!({"type": "text"}),
                        Some((syntax, definition)) => json!({"type": "grammar", "grammar": {
                            "syntax": syntax.name(), "definition": definition}}),
                    };
                out.push(json!({"type": "custom", "custom": {
                    "name": t.get("name"), "description": description, "format": format}}));
            }
            Some(
                other @ ("web_search" | "web_search_preview" | "web_search_2025_08_26"
                | "web_search_preview_2025_03_11" | "file_search" | "code_interpreter"
                | "image_generation" | "mcp"),
            ) => hosted.push(other),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].type` is `{other}`: give function or custom tools (hosted tools such as web_search are left out, as this server runs none)"
                )))
            }
            None => {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}]` has no `type`: give function or custom tools"
                )))
            }
        }
    }
    if !hosted.is_empty() {
        tracing::info!(
            "hosted tools left out (this server runs none): {}",
            hosted.join(", ")
        );
    }
    Ok(Value::Array(out))
}

fn text_format(f: Option<&Value>) -> std::result::Result<Format, ApiError> {
    let Some(f) = f else { return Ok(Format::Text) };
    match f.get("type").and_then(Value::as_str) {
        Some("text") | None => Ok(Format::Text),
        Some("json_object") => Ok(Format::JsonObject),
        Some("json_schema") => Ok(f
            .get("schema")
            .cloned()
            .map_or(Format::JsonObject, Format::JsonSchema)),
        Some(other) => Err(ApiError::bad_request(format!(
            "`text.format.type` is `{other}`: use text, json_object or json_schema"
        ))),
    }
}

pub(crate) fn usage(u: &generation::Usage) -> Value {
    json!({"input_tokens": u.prompt, "input_tokens_details": {"cached_tokens": u.cached},
           "output_tokens": u.completion, "output_tokens_details": {"reasoning_tokens": u.reasoning},
           "total_tokens": u.prompt + u.completion})
}

/// What a response object says of its request, and where it is kept once done.
struct ResponseMeta {
    id: String,
    created_at: u64,
    background: bool,
    model: String,
    previous_response_id: Option<String>,
    instructions: Option<String>,
    truncation: Truncation,
    state: Arc<AppState>,
    /// The request's own input items: kept with the response when `store`, and added with
    /// its output items to `conversation` once it is done.
    input: Vec<Value>,
    /// The conversation before the request when it continues a response its WebSocket
    /// remembers and the store does not hold, and its own response is to be stored
    /// ([`unstored_before`]).
    unstored_before: Option<Vec<Value>>,
    store: bool,
    conversation: Option<String>,
    /// A background response's request, kept with it while it runs: a server that stops
    /// first leaves it to the next one ([`resume_background`]).
    request: Option<Value>,
    /// The request's custom tools (their calls are `custom_tool_call` items).
    custom_tools: Vec<String>,
}

impl ResponseMeta {
    fn is_custom(&self, c: &epm_chat::ToolCall) -> bool {
        self.custom_tools.contains(&c.name)
    }

    /// The response object around `output`.
    fn envelope(
        &self,
        status: &str,
        output: Vec<Value>,
        finish: Option<&FinishReason>,
        u: &generation::Usage,
    ) -> Value {
        let incomplete = matches!(finish, Some(FinishReason::Length));
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at, "model": self.model,
            "background": self.background,
            "status": if incomplete { "incomplete" } else { status },
            "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "output": output, "usage": usage(u), "error": null, "parallel_tool_calls": false,
            "tool_choice": "auto", "tools": [], "metadata": {},
            "previous_response_id": self.previous_response_id, "instructions": self.instructions,
            "store": self.store, "truncation": self.truncation,
            "conversation": self.conversation.as_ref().map(|id| json!({"id": id})),
        })
    }

    /// The response is done (completed, or cut off by `max_output_tokens`): keep it, and add
    /// its items to its conversation.
    fn conclude(&self, response: &Value) {
        self.keep(response);
        if let Some(id) = &self.conversation {
            let output = response.get("output").and_then(Value::as_array);
            crate::conversations::add_response(
                &self.state,
                id,
                &self.input,
                output.map_or(&[][..], Vec::as_slice),
            );
        }
    }

    /// Keep the finished `response`, when asked to.
    fn keep(&self, response: &Value) {
        if !self.store {
            return;
        }
        if let Ok(mut store) = self.state.responses.lock() {
            // A response that continues an unstored one keeps the conversation before it in
            // its input: no stored response holds it to be pointed at.
            let (id, previous, input) = match &self.unstored_before {
                Some(before) => (
                    &self.id,
                    None,
                    [before.clone(), self.input.clone()].concat(),
                ),
                None => (
                    &self.id,
                    self.previous_response_id.clone(),
                    self.input.clone(),
                ),
            };
            let kept = match &self.request {
                Some(request) => {
                    store.insert_running(id, previous, input, response.clone(), request.clone())
                }
                None => store.insert(id, previous, input, response.clone()),
            };
            if !kept {
                tracing::warn!(
                    "response {} is larger than the whole response store (--responses-store-mb): not kept",
                    self.id
                );
            }
        }
    }
}

/// The two kinds of output item whose text streams: the answer and the reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextItem {
    Message,
    Reasoning,
}

impl TextItem {
    /// The item's id prefix.
    fn prefix(self) -> &'static str {
        match self {
            TextItem::Message => "msg",
            TextItem::Reasoning => "rs",
        }
    }

    /// Its content part holding `text` (a message's with the reply's token `logprobs`,
    /// when asked for).
    fn part(self, text: &str, logprobs: Option<&[Value]>) -> Value {
        match self {
            TextItem::Message => {
                let mut p = json!({"type": "output_text", "text": text, "annotations": []});
                if let Some(l) = logprobs {
                    p["logprobs"] = json!(l);
                }
                p
            }
            TextItem::Reasoning => json!({"type": "reasoning_text", "text": text}),
        }
    }

    /// The item, with `content` as its parts (none while it opens).
    fn item(self, id: &str, content: Vec<Value>, status: &str) -> Value {
        match self {
            TextItem::Message => json!({"type": "message", "id": id, "status": status,
                                        "role": "assistant", "content": content}),
            TextItem::Reasoning => {
                json!({"type": "reasoning", "id": id, "summary": [], "content": content})
            }
        }
    }

    /// The finished item holding `text`, with `status` (`incomplete` when the response
    /// ended before the item did).
    fn done(self, id: &str, text: &str, logprobs: Option<&[Value]>, status: &str) -> Value {
        self.item(id, vec![self.part(text, logprobs)], status)
    }

    /// The stream events of its text: a delta, and the whole text once done.
    fn text_events(self) -> (&'static str, &'static str) {
        match self {
            TextItem::Message => ("response.output_text.delta", "response.output_text.done"),
            TextItem::Reasoning => (
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
            ),
        }
    }
}

/// A call's output item: a function's with its `arguments`, a custom tool's with its
/// `input` (the text of the one argument; the arguments whole if they are not that).
fn call_item(c: &epm_chat::ToolCall, custom: bool, status: &str, arguments: &str) -> Value {
    let call_id = c.id.clone().unwrap_or_else(|| new_id("call"));
    if custom {
        json!({"type": "custom_tool_call", "id": new_id("ctc"), "call_id": call_id,
               "name": c.name, "input": custom_input(arguments), "status": status})
    } else {
        json!({"type": "function_call", "id": new_id("fc"), "call_id": call_id,
               "name": c.name, "arguments": arguments, "status": status})
    }
}

/// What a request gives the template: its instructions and the conversation's `items` as
/// messages, its tools and variables.
pub(crate) fn chat_input(
    req: &ResponsesRequest,
    items: &[Value],
) -> std::result::Result<ChatInput, ApiError> {
    Ok(ChatInput {
        messages: template_messages(req.instructions.as_deref(), items, "input")?,
        tools: req
            .tools
            .as_deref()
            .map(|t| chat_tools(t).and_then(|t| output::template_tools(&t)))
            .transpose()?,
        kwargs: ReasoningEffort::template_kwargs(
            req.reasoning.as_ref().and_then(|r| r.effort),
            None,
        ),
    })
}

/// `POST /v1/responses/input_tokens`: the input tokens the same request would evaluate,
/// whatever their number (a client counts to learn whether they fit).
async fn input_tokens(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: ResponsesRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    let items = req.managed(history(&state, &req, own_items(&req)?)?);
    let items = fit_to_context(loaded, &req, items)?;
    let n = chat_tokens(loaded, &chat_input(&req, &items)?)?.len();
    Ok(Json(generation::input_tokens_answer(n)))
}

async fn responses(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let raw: Value = parse_json(body)?;
    let req: ResponsesRequest = from_json(&raw)?;
    respond(state, req, raw, None).await
}

/// Run the background responses the previous server left unfinished (their requests kept
/// in the response store's folder), under their own ids, once the model is loaded. One that
/// cannot start again (a model that no longer takes its request) is kept failed, saying why.
pub fn resume_background(state: &Arc<AppState>) {
    let pending = match state.responses.lock() {
        Ok(mut store) => store.take_resumable(),
        Err(_) => return,
    };
    for (id, raw) in pending {
        let state = state.clone();
        tokio::spawn(async move {
            // Deleted while the model loaded: nothing to run.
            let gone = state
                .responses
                .lock()
                .map_or(true, |mut s| s.response(&id).is_err());
            if gone {
                return;
            }
            let started = match from_json::<ResponsesRequest>(&raw) {
                Ok(req) => respond(state.clone(), req, raw, Some(id.clone()))
                    .await
                    .map(drop)
                    .map_err(|e| e.0.message),
                Err(e) => Err(e.message),
            };
            match started {
                Ok(()) => tracing::info!("background response {id} runs again after the restart"),
                Err(why) => {
                    tracing::warn!("background response {id} cannot run again: {why}");
                    if let Ok(mut store) = state.responses.lock() {
                        let (Ok(response), Ok(input)) =
                            (store.response(&id), store.input_items(&id))
                        else {
                            return;
                        };
                        let previous = response
                            .get("previous_response_id")
                            .and_then(Value::as_str)
                            .map(str::to_string);
                        let message = format!(
                            "the server restarted, and could not run this response again: {why}"
                        );
                        store.insert(&id, previous, input, failed(response, &message));
                    }
                }
            }
        });
    }
}

/// A streamed response's events, each its name and data: an SSE event each over HTTP, a
/// message each over a WebSocket ([`crate::response_socket`]).
pub(crate) type Events = futures_util::stream::BoxStream<'static, LoggedEvent>;

/// How a request is answered, whatever carries it.
pub(crate) enum Answer {
    /// The whole response, once over.
    Whole(Value),
    /// The response's events as they come.
    Streamed(Events),
    /// A background response's first answer (over HTTP only).
    Background(Response),
}

/// Answer request `req` (whose JSON is `raw`) over HTTP as response `id`, a new one unless
/// given (a background response run again after a restart keeps its own).
async fn respond(
    state: Arc<AppState>,
    req: ResponsesRequest,
    raw: Value,
    id: Option<String>,
) -> Result<Response> {
    Ok(match answer(state, req, raw, id).await? {
        Answer::Whole(response) => Json(response).into_response(),
        Answer::Streamed(events) => sse_response(events),
        Answer::Background(response) => response,
    })
}

/// Request `req` (whose JSON is `raw`) answered as response `id`, a new one unless given.
pub(crate) async fn answer(
    state: Arc<AppState>,
    req: ResponsesRequest,
    raw: Value,
    id: Option<String>,
) -> Result<Answer> {
    let loaded = loaded(&state)?;
    let own = own_items(&req)?;
    let kind = |i: &Value| i.get("type").and_then(Value::as_str).map(str::to_string);
    if own.last().and_then(kind).as_deref() == Some("compaction_trigger") {
        return triggered_compaction(state, req, own).await;
    }
    let items = req.managed(history(&state, &req, own.clone())?);
    let compacting = match req.compaction_threshold() {
        Some(threshold) => {
            let prompt = chat_tokens(loaded, &chat_input(&req, &items)?)?.len();
            crate::compaction::needed(loaded, prompt, &items, threshold, req.max_output_tokens)
        }
        None => None,
    };
    let items = match compacting {
        Some(_) => items,
        None => fit_to_context(loaded, &req, items)?,
    };
    let ReplyAsk {
        chat_shaped,
        ask,
        asked,
        logprobs,
    } = reply_ask(&req)?;
    let keep = req.store.unwrap_or(true) && state.responses.lock().is_ok_and(|s| s.enabled());
    let conversation = conversation_id(&req)?;
    let meta = ResponseMeta {
        custom_tools: output::custom_tool_names(chat_shaped.as_ref()),
        id: id.unwrap_or_else(|| new_id("resp")),
        created_at: now(),
        background: req.background,
        model: state.model_name.clone(),
        previous_response_id: req.previous_response_id.clone(),
        instructions: req.instructions.clone(),
        truncation: req.truncation,
        state: state.clone(),
        unstored_before: keep.then(|| unstored_before(&state, &req)).flatten(),
        input: own,
        store: keep,
        conversation,
        request: req.background.then_some(raw),
    };
    if req.background && !keep {
        return Err(ApiError::bad_request(if req.store == Some(false) {
            "`background: true` needs `store: true`: a background response is read back with GET /v1/responses/{id}"
        } else {
            "`background: true` needs stored responses, and this server keeps none (serve --responses-store-mb 0): leave `background` out"
        })
        .into());
    }
    let (background, streamed) = (req.background, req.stream);
    let compaction_id = new_id("cmp");
    let compacts = compacting.is_some();
    let start: Start = match compacting {
        None => {
            let chat = chat_input(&req, &items)?;
            let p = prepare_chat(loaded, &chat, &ask, &asked)?.with_logprobs(logprobs);
            let rx = submit(&state, p)?;
            Box::pin(std::future::ready(Ok((None, rx))))
        }
        Some(plan) => {
            // The reply must be one the model can be asked (its format's grammar, the turn
            // kept) before the summary is written: checked on the view with an empty summary.
            let placeholder = crate::compaction::compaction_item(&compaction_id, "");
            let chat = chat_input(&req, &plan.view(&items, placeholder))?;
            prepare_chat(loaded, &chat, &ask, &asked)?;
            let (state, id, response) = (state.clone(), compaction_id.clone(), meta.id.clone());
            Box::pin(async move {
                let (summary, _) = crate::compaction::summarize(&state, &req, &items).await?;
                let item = crate::compaction::compaction_item(&id, &summary);
                let loaded = generation::loaded(&state)?;
                let view = fit_to_context(loaded, &req, plan.view(&items, item.clone()))?;
                let chat = chat_input(&req, &view)?;
                let p = prepare_chat(loaded, &chat, &ask, &asked)?.with_logprobs(logprobs);
                tracing::info!(
                    "response {response}: the conversation compacted ({} items to {}) before its reply",
                    items.len(),
                    view.len()
                );
                Ok((Some(item), submit(&state, p)?))
            })
        }
    };
    if background {
        return Ok(Answer::Background(start_background(
            &state, start, meta, logprobs, streamed,
        )));
    }
    if streamed {
        return Ok(Answer::Streamed(if compacts {
            compacted_events(start, meta, logprobs, &compaction_id).boxed()
        } else {
            let (_, rx) = start.await?;
            events(rx, meta, logprobs).boxed()
        }));
    }
    let (lead, rx) = start.await?;
    let c = collect(rx).await?;
    let mut output: Vec<Value> = lead.into_iter().collect();
    if !c.reasoning.is_empty() {
        output.push(TextItem::Reasoning.done(&new_id("rs"), &c.reasoning, None, "completed"));
    }
    if !c.text.trim().is_empty() || c.tool_calls.is_empty() {
        let logprobs: Option<Vec<Value>> =
            logprobs.map(|_| c.logprobs.iter().map(chat_logprob).collect());
        output.push(TextItem::Message.done(
            &new_id("msg"),
            &c.text,
            logprobs.as_deref(),
            "completed",
        ));
    }
    output.extend(
        c.tool_calls
            .iter()
            .map(|t| call_item(t, meta.is_custom(t), "completed", &t.arguments)),
    );
    let response = meta.envelope("completed", output, Some(&c.finish_reason), &c.usage);
    meta.conclude(&response);
    Ok(Answer::Whole(response))
}

/// What a request asks of its reply.
struct ReplyAsk {
    /// Its tools in Chat Completions' shape.
    chat_shaped: Option<Value>,
    /// Tools, tool choice, format and reasoning budget.
    ask: OutputAsk,
    /// Length and sampling.
    asked: Asked,
    /// Log-probabilities with this many alternatives per token, when asked for.
    logprobs: Option<usize>,
}

fn reply_ask(req: &ResponsesRequest) -> Result<ReplyAsk> {
    let chat_shaped = req.tools.as_deref().map(chat_tools).transpose()?;
    let choice = req
        .tool_choice
        .as_ref()
        .map(tool_choice)
        .transpose()?
        .unwrap_or_default();
    let ask = OutputAsk {
        tools: match &chat_shaped {
            Some(t) => output::openai_tools(t)?,
            None => Vec::new(),
        },
        tool_choice: choice,
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(false),
        format: text_format(req.text.as_ref().and_then(|t| t.format.as_ref()))?,
        budget: req.budget.ask()?,
        ..Default::default()
    };
    let asked = Asked {
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        seed: req.seed,
        ..Default::default()
    };
    let asks_logprobs = req
        .include
        .iter()
        .flatten()
        .any(|i| i == "message.output_text.logprobs");
    let logprobs = top_logprobs(
        asks_logprobs || req.top_logprobs.is_some(),
        req.top_logprobs,
    )?;
    Ok(ReplyAsk {
        chat_shaped,
        ask,
        asked,
        logprobs,
    })
}

/// A request whose input ends with `{"type": "compaction_trigger"}`, how newer clients ask
/// for compaction on this endpoint itself (`POST /v1/responses/compact` is the older way):
/// the conversation before it summarized ([`crate::compaction::summarize`]) and answered as
/// a response whose output is one compaction item. Streamed, the response and its item open
/// at once and the item is done with the summary.
async fn triggered_compaction(
    state: Arc<AppState>,
    req: ResponsesRequest,
    mut own: Vec<Value>,
) -> Result<Answer> {
    own.pop();
    if req.background {
        return Err(ApiError::bad_request(
            "a `compaction_trigger` is answered in the foreground: leave `background` out",
        )
        .into());
    }
    let items = history(&state, &req, own.clone())?;
    let meta = foreground_meta(&state, &req, own)?;
    let item_id = new_id("cmp");
    if !req.stream {
        let (summary, u) = crate::compaction::summarize(&state, &req, &items).await?;
        let item = crate::compaction::compaction_item(&item_id, &summary);
        let response = meta.envelope("completed", vec![item], None, &u);
        meta.conclude(&response);
        return Ok(Answer::Whole(response));
    }
    let mut s = StreamState::new(meta, None);
    s.open_compaction(&item_id);
    let head = s.drain();
    let tail = async move {
        match crate::compaction::summarize(&state, &req, &items).await {
            Ok((summary, u)) => {
                s.close_compaction(crate::compaction::compaction_item(&item_id, &summary));
                s.usage = u;
                s.complete(None);
            }
            Err(e) => {
                s.end("failed", Some(e.message));
                if let Some(failed) = s.last.clone() {
                    s.emit("response.failed", json!({"response": failed}));
                }
            }
        }
        s.drain()
    };
    let events = stream::iter(head).chain(stream::once(tail).flat_map(stream::iter));
    Ok(Answer::Streamed(events.boxed()))
}

/// The meta of a response to `req` answered in the foreground, without tools of its own
/// (a compaction, a warm-up), whose own input items are `input`.
fn foreground_meta(
    state: &Arc<AppState>,
    req: &ResponsesRequest,
    input: Vec<Value>,
) -> Result<ResponseMeta> {
    let store = req.store.unwrap_or(true) && state.responses.lock().is_ok_and(|s| s.enabled());
    Ok(ResponseMeta {
        custom_tools: Vec::new(),
        id: new_id("resp"),
        created_at: now(),
        background: false,
        model: state.model_name.clone(),
        previous_response_id: req.previous_response_id.clone(),
        instructions: req.instructions.clone(),
        truncation: req.truncation,
        store,
        conversation: conversation_id(req)?,
        unstored_before: store.then(|| unstored_before(state, req)).flatten(),
        state: state.clone(),
        input,
        request: None,
    })
}

/// The conversation before `req` when it continues, by `previous_response_id`, a response
/// its WebSocket remembers that the store does not hold (one sent with `store: false`).
/// Stored in turn, `req`'s response keeps it in its own input, so that it can be continued
/// over HTTP too.
fn unstored_before(state: &AppState, req: &ResponsesRequest) -> Option<Vec<Value>> {
    let r = req
        .remembered
        .as_ref()
        .filter(|r| req.previous_response_id.as_ref() == Some(&r.id))?;
    let stored = state
        .responses
        .lock()
        .is_ok_and(|mut s| s.response(&r.id).is_ok());
    (!stored).then(|| r.items.clone())
}

/// The events of a response to `req` that generates nothing (a WebSocket's `generate:
/// false`): created and completed at once with no output, kept as any other, so that the
/// next request can continue from it by `previous_response_id`. Its prompt (the one a
/// reply would have) is evaluated meanwhile into a slot's cache, queued as any request: a
/// request that continues it evaluates only what it adds. The prompt is checked as a
/// reply's would be, so what would fail then fails now.
pub(crate) fn warmup_events(
    state: &Arc<AppState>,
    req: &ResponsesRequest,
) -> Result<Vec<LoggedEvent>> {
    let loaded = loaded(state)?;
    let own = own_items(req)?;
    let items = fit_to_context(loaded, req, req.managed(history(state, req, own.clone())?))?;
    let reply = reply_ask(req)?;
    let asked = Asked {
        prompt_only: true,
        ..reply.asked
    };
    let prepared = prepare_chat(loaded, &chat_input(req, &items)?, &reply.ask, &asked)?;
    let prompt_tokens = prepared.prompt.len();
    let mut rx = submit(state, prepared)?;
    // The job lives while its receiver does: drained to its end, whoever waits.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let mut s = StreamState::new(foreground_meta(state, req, own)?, None);
    // Its usage: the prompt it queued (how much of it a slot's cache holds is known only
    // once it runs), and no output.
    s.encode_event(Event::Started {
        prompt_tokens,
        cached_tokens: 0,
    });
    s.complete(None);
    Ok(s.drain())
}

/// A store's answer, its error a 404 naming what is missing.
pub(crate) fn stored<T>(r: std::result::Result<T, StoreError>) -> Result<T> {
    r.map_err(|e| ApiError::new(ErrorKind::NotFound, e.to_string()).into())
}

pub(crate) fn store(
    state: &AppState,
) -> Result<std::sync::MutexGuard<'_, crate::response_store::ResponseStore>> {
    state
        .responses
        .lock()
        .map_err(|_| ApiError::internal("the response store is unusable").into())
}

#[derive(Debug, Deserialize)]
struct RetrieveQuery {
    #[serde(default)]
    stream: bool,
    starting_after: Option<u64>,
}

/// `GET /v1/responses/{id}`: a background response as it stands, or a stored response;
/// `?stream=true` replays a background response's events after `starting_after` and
/// follows the rest.
async fn retrieve(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<RetrieveQuery>,
) -> Result<Response> {
    let run = state.background.get(&id);
    if q.stream {
        return match run {
            Some(run) => Ok(follow(run, q.starting_after)),
            None => {
                stored(store(&state)?.response(&id))?;
                Err(ApiError::bad_request(format!(
                    "response `{id}`'s events are not kept: only a background response's are, while it runs and for the last {} finished; GET it without `stream`",
                    crate::background::FINISHED_RUNS_KEPT
                ))
                .into())
            }
        };
    }
    if let Some(run) = run {
        return Ok(Json(run.response()).into_response());
    }
    let r = store(&state)?.response(&id);
    Ok(Json(stored(r)?).into_response())
}

/// `POST /v1/responses/{id}/cancel`: stop a background response; it ends `cancelled` with
/// the items it had finished. A response already over is answered as it is.
async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>> {
    if let Some(run) = state.background.get(&id) {
        run.cancel();
        run.finished().await;
        return Ok(Json(run.response()));
    }
    stored(store(&state)?.response(&id))?;
    Err(ApiError::bad_request(format!(
        "response `{id}` did not run in the background: only a response created with `background: true` can be cancelled"
    ))
    .into())
}

/// `DELETE /v1/responses/{id}`.
async fn delete_response(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let Some(had_run) = state.background.forget(&id) else {
        return Err(ApiError::bad_request(format!(
            "response `{id}` is still running in the background: cancel it first (POST /v1/responses/{id}/cancel)"
        ))
        .into());
    };
    if !store(&state)?.delete(&id) && !had_run {
        stored::<()>(Err(StoreError::NotFound(id.clone())))?;
    }
    Ok(Json(
        json!({"id": id, "object": "response.deleted", "deleted": true}),
    ))
}

/// `GET /v1/responses/{id}/input_items`: the items the response was sent, a page at a time
/// ([`list_page`]).
async fn list_input_items(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Result<Json<Value>> {
    let items = stored(store(&state)?.input_items(&id))?;
    Ok(Json(list_page(items, &q)?))
}

/// Items listed as OpenAI lists them, from the query: `order` (`desc`, newest first, by
/// default, or `asc`), `after` (the id of the item the page starts after) and `limit` (1 to
/// 100, 20 by default); `has_more` says whether a next page follows.
pub(crate) fn list_page(
    mut items: Vec<Value>,
    query: &HashMap<String, String>,
) -> std::result::Result<Value, ApiError> {
    match query.get("order").map(String::as_str) {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`order` is `{other}`: use asc or desc"
            )))
        }
    }
    let limit = match query.get("limit") {
        None => 20,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=100).contains(l))
            .ok_or_else(|| {
                ApiError::bad_request(format!("`limit` is `{l}`: give a number from 1 to 100"))
            })?,
    };
    let start = match query.get("after") {
        None => 0,
        Some(after) => {
            let at = items
                .iter()
                .position(|i| i.get("id").and_then(Value::as_str) == Some(after.as_str()));
            1 + at.ok_or_else(|| {
                ApiError::bad_request(format!("`after`: no item `{after}` is listed here"))
            })?
        }
    };
    let end = (start + limit).min(items.len());
    let page = &items[start.min(end)..end];
    let first = page.first().and_then(|i| i.get("id")).cloned();
    let last = page.last().and_then(|i| i.get("id")).cloned();
    Ok(
        json!({"object": "list", "data": page, "first_id": first, "last_id": last,
              "has_more": end < items.len()}),
    )
}

struct StreamState {
    meta: ResponseMeta,
    usage: generation::Usage,
    /// Events encoded and not yet sent (or logged, for a background run).
    pending: VecDeque<LoggedEvent>,
    seq: u64,
    /// `response.created` was sent (a background run sends it while queued).
    announced: bool,
    /// The response once over: completed, or (in the background) failed or cancelled.
    last: Option<Value>,
    /// The open text item (a message or the reasoning): its kind, id, index and text so
    /// far. Each streams as one item, however many chunks its text comes in.
    open: Option<(TextItem, String, usize, String)>,
    output: Vec<Value>,
    finished: bool,
    /// The reply's token log-probabilities, when asked for: all so far, and the index of
    /// the first not yet sent with a text delta.
    logprobs: Option<(Vec<Value>, usize)>,
}

impl StreamState {
    fn new(meta: ResponseMeta, logprobs: Option<usize>) -> StreamState {
        StreamState {
            meta,
            usage: Default::default(),
            pending: VecDeque::new(),
            seq: 0,
            announced: false,
            last: None,
            open: None,
            output: Vec::new(),
            finished: false,
            logprobs: logprobs.map(|_| (Vec::new(), 0)),
        }
    }

    fn emit(&mut self, kind: &str, mut v: Value) {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.pending.push_back((kind.to_string(), v.to_string()));
    }

    /// The response as it stands: queued, in progress with the items finished so far, or
    /// its last state.
    fn standing(&self) -> Value {
        if let Some(last) = &self.last {
            return last.clone();
        }
        let status = if self.usage.prompt_done.is_some() {
            "in_progress"
        } else {
            "queued"
        };
        self.meta
            .envelope(status, self.output.clone(), None, &self.usage)
    }

    /// Send `response.created` and `response.queued` before the generation starts (a
    /// background run, answered at once).
    fn announce_queued(&mut self) {
        let r = self.standing();
        self.emit("response.created", json!({"response": r}));
        self.emit("response.queued", json!({"response": r}));
        self.announced = true;
    }

    /// Open the compaction item `id` that leads the output, before the summary is written:
    /// the response is announced in progress at once.
    fn open_compaction(&mut self, id: &str) {
        let r = self.meta.envelope("in_progress", vec![], None, &self.usage);
        if !self.announced {
            self.emit("response.created", json!({"response": r}));
            self.announced = true;
        }
        self.emit("response.in_progress", json!({"response": r}));
        self.emit(
            "response.output_item.added",
            json!({"output_index": self.output.len(), "item": {"type": "compaction", "id": id}}),
        );
    }

    /// The compaction item opened by [`Self::open_compaction`], done.
    fn close_compaction(&mut self, item: Value) {
        self.emit(
            "response.output_item.done",
            json!({"output_index": self.output.len(), "item": item}),
        );
        self.output.push(item);
    }

    /// End with `status` (`failed` or `cancelled`) and the items so far, kept in the
    /// background; a failure streams as an `error` event as well. Its `usage` is null: the
    /// engine counts a reply's tokens only when it ends it. A background response failed by
    /// the server stopping is not kept so: its file stays as it was written when it
    /// started, with its request, for the next server to run it again.
    fn end(&mut self, status: &str, error: Option<String>) {
        self.close_open_as("incomplete");
        let mut r = self
            .meta
            .envelope(status, std::mem::take(&mut self.output), None, &self.usage);
        r["usage"] = Value::Null;
        if let Some(message) = &error {
            r["error"] = json!({"code": "server_error", "message": message});
            self.emit(
                "error",
                json!({"code": "server_error", "message": message, "param": null}),
            );
            if self.meta.background {
                self.emit("response.failed", json!({"response": r}));
            }
        }
        let stopping = self
            .meta
            .state
            .server
            .stopping
            .load(std::sync::atomic::Ordering::Acquire);
        if self.meta.background && !(stopping && status == "failed") {
            self.meta.keep(&r);
        }
        self.last = Some(r);
        self.finished = true;
    }

    /// End completed with the items so far, kept and added to its conversation.
    fn complete(&mut self, finish: Option<&FinishReason>) {
        let output = std::mem::take(&mut self.output);
        let r = self.meta.envelope("completed", output, finish, &self.usage);
        self.meta.conclude(&r);
        // Always `response.completed` (its status says `incomplete` when cut off), as
        // llama-server sends it and as the SDK's stream helper waits for it.
        self.emit("response.completed", json!({"response": r}));
        self.last = Some(r);
        self.finished = true;
    }

    /// The events encoded and not yet sent.
    fn drain(&mut self) -> Vec<LoggedEvent> {
        self.pending.drain(..).collect()
    }

    /// Finish the open text item, if any.
    fn close_open(&mut self) {
        self.close_open_as("completed");
    }

    /// Finish the open text item, if any, with `status` (a message's: `incomplete` when the
    /// response ends before it does).
    fn close_open_as(&mut self, status: &str) {
        if let Some((kind, id, index, text)) = self.open.take() {
            self.emit(
                kind.text_events().1,
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
            );
            let logprobs = self.message_logprobs(kind);
            self.emit(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": kind.part(&text, logprobs.as_deref())}),
            );
            let item = kind.done(&id, &text, logprobs.as_deref(), status);
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
            self.output.push(item);
        }
    }

    /// Stream `t` as more of a `kind` item's text: the open one, or a new one.
    fn append(&mut self, kind: TextItem, t: &str) {
        if self.open.as_ref().is_some_and(|o| o.0 != kind) {
            self.close_open();
        }
        if self.open.is_none() {
            let id = new_id(kind.prefix());
            let index = self.output.len();
            self.emit(
                "response.output_item.added",
                json!({"output_index": index, "item": kind.item(&id, vec![], "in_progress")}),
            );
            self.emit(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": kind.part("", self.logprobs.as_ref().map(|_| &[][..]))}),
            );
            self.open = Some((kind, id, index, String::new()));
        }
        let Some((_, id, index, text)) = &mut self.open else {
            return;
        };
        text.push_str(t);
        let mut delta =
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t});
        // A message's delta carries the log-probabilities of the tokens since the last one.
        if let (TextItem::Message, Some((all, sent))) = (kind, &mut self.logprobs) {
            delta["logprobs"] = json!(all[*sent..]);
            *sent = all.len();
        }
        self.emit(kind.text_events().0, delta);
    }

    /// The log-probabilities a finished `kind` item's text part carries: a message's, all
    /// of the reply's so far, when asked for.
    fn message_logprobs(&self, kind: TextItem) -> Option<Vec<Value>> {
        match (kind, &self.logprobs) {
            (TextItem::Message, Some((all, _))) => Some(all.clone()),
            _ => None,
        }
    }

    fn encode_event(&mut self, ev: Event) {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                self.usage.started(prompt_tokens, cached_tokens);
                let r = self.meta.envelope("in_progress", vec![], None, &self.usage);
                if !self.announced {
                    self.emit("response.created", json!({"response": r}));
                    self.announced = true;
                }
                self.emit("response.in_progress", json!({"response": r}));
            }
            Event::Text(t) => self.append(TextItem::Message, &t),
            Event::Reasoning(t) => self.append(TextItem::Reasoning, &t),
            Event::ToolCall(c) => {
                self.close_open();
                let index = self.output.len();
                let custom = self.meta.is_custom(&c);
                let added = call_item(&c, custom, "in_progress", "");
                let item_id = added["id"].clone();
                self.emit(
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                let mut done = added.clone();
                done["status"] = json!("completed");
                if custom {
                    let input = custom_input(&c.arguments);
                    self.emit(
                        "response.custom_tool_call_input.delta",
                        json!({"item_id": item_id, "output_index": index, "delta": input}),
                    );
                    self.emit(
                        "response.custom_tool_call_input.done",
                        json!({"item_id": item_id, "output_index": index, "input": input}),
                    );
                    done["input"] = json!(input);
                } else {
                    self.emit(
                        "response.function_call_arguments.delta",
                        json!({"item_id": item_id, "output_index": index, "delta": c.arguments}),
                    );
                    self.emit(
                        "response.function_call_arguments.done",
                        json!({"item_id": item_id, "output_index": index, "arguments": c.arguments}),
                    );
                    done["arguments"] = json!(c.arguments);
                }
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": done}),
                );
                self.output.push(done);
            }
            Event::Logprob(l) => {
                if let Some((all, _)) = &mut self.logprobs {
                    all.push(chat_logprob(&l));
                }
            }
            Event::Progress(_) => {}
            Event::Done {
                finish_reason,
                completion_tokens,
                reasoning_tokens,
            } => {
                self.close_open();
                self.usage.finished(completion_tokens, reasoning_tokens);
                self.complete(Some(&finish_reason));
            }
            Event::Failed(e) => self.end("failed", Some(e.to_string())),
        }
    }
}

fn events(
    rx: UnboundedReceiver<Event>,
    meta: ResponseMeta,
    logprobs: Option<usize>,
) -> impl Stream<Item = LoggedEvent> {
    encoded(rx, StreamState::new(meta, logprobs))
}

/// The events of generation `rx`, as `s` encodes them.
fn encoded(rx: UnboundedReceiver<Event>, s: StreamState) -> impl Stream<Item = LoggedEvent> {
    crate::sse::stream(crate::sse::events(rx), s).map(|e| e.unwrap_or_else(|never| match never {}))
}

/// A streamed response over HTTP: its events as SSE.
fn sse_response(events: Events) -> Response {
    Sse::new(events.map(|e| Ok::<_, Infallible>(sse_event(e))))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The events of a response whose conversation is compacted first: the response and its
/// compaction item open at once, the item is done with the summary, and the reply streams
/// after it as [`events`]' does (or the response fails, when the summary or the reply's
/// start does).
fn compacted_events(
    start: Start,
    meta: ResponseMeta,
    logprobs: Option<usize>,
    compaction_id: &str,
) -> impl Stream<Item = LoggedEvent> {
    let mut s = StreamState::new(meta, logprobs);
    s.open_compaction(compaction_id);
    let head = s.drain();
    let rest = async move {
        match start.await {
            Ok((lead, rx)) => {
                if let Some(item) = lead {
                    s.close_compaction(item);
                }
                stream::iter(s.drain()).chain(encoded(rx, s)).boxed()
            }
            Err(e) => {
                s.end("failed", Some(e.message));
                stream::iter(s.drain()).boxed()
            }
        }
    };
    stream::iter(head).chain(stream::once(rest).flatten())
}

fn sse_event((kind, data): LoggedEvent) -> SseEvent {
    SseEvent::default().event(kind).data(data)
}

/// A background run's events after `after` and on, as SSE.
fn follow(run: Arc<Run>, after: Option<u64>) -> Response {
    let events = run.follow(after).map(|e| Ok::<_, Infallible>(sse_event(e)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Answer a `background: true` request at once, queued, and run its generation on a task
/// of its own: its events and standing response go to its [`Run`], its final response to
/// the store. Streamed, the answer follows the run (a client gone leaves it running).
fn start_background(
    state: &Arc<AppState>,
    start: Start,
    meta: ResponseMeta,
    logprobs: Option<usize>,
    stream: bool,
) -> Response {
    let id = meta.id.clone();
    let mut s = StreamState::new(meta, logprobs);
    s.announce_queued();
    let queued = s.standing();
    // Stored from the start, so that its input items are listed while it runs.
    s.meta.keep(&queued);
    let run = state.background.start(&id, queued.clone());
    run.record(s.pending.drain(..), queued.clone(), false);
    tokio::spawn(run_in_background(state.clone(), run.clone(), start, s));
    if stream {
        follow(run, None)
    } else {
        Json(queued).into_response()
    }
}

async fn run_in_background(state: Arc<AppState>, run: Arc<Run>, start: Start, mut s: StreamState) {
    let mut cancelled = run.cancelled();
    // The generation starts (at once, or once the conversation is compacted), or the
    // response ends first.
    let started = tokio::select! {
        started = start => match started {
            Ok((lead, rx)) => {
                if let Some(item) = lead {
                    let id = item["id"].as_str().unwrap_or_default().to_string();
                    s.open_compaction(&id);
                    s.close_compaction(item);
                }
                Some(rx)
            }
            Err(e) => {
                s.end("failed", Some(e.message));
                None
            }
        },
        Ok(()) = cancelled.changed() => {
            s.end("cancelled", None);
            None
        }
    };
    let standing = s.standing();
    run.record(s.pending.drain(..), standing, s.finished);
    let Some(mut rx) = started else {
        state.background.retire(&s.meta.id);
        return;
    };
    while !s.finished {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => s.encode_event(ev),
                None => s.end("failed", Some("the generation ended without an answer".into())),
            },
            // Dropping the receiver (below) ends the job at its next token.
            Ok(()) = cancelled.changed() => s.end("cancelled", None),
        }
        let standing = s.standing();
        run.record(s.pending.drain(..), standing, s.finished);
    }
    drop(rx);
    state.background.retire(&s.meta.id);
}

impl crate::sse::Encoder for StreamState {
    type Input = Event;
    type Output = LoggedEvent;

    fn encode(&mut self, ev: Event, out: &mut VecDeque<LoggedEvent>) -> bool {
        self.encode_event(ev);
        out.extend(self.pending.drain(..));
        self.finished
    }
}
