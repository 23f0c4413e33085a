//! The OpenAI Responses adapter: `POST /v1/responses`. `input` (a string or items:
//! messages, `function_call`, `function_call_output`), `instructions`, function `tools`,
//! `tool_choice`, `text.format`, `max_output_tokens`; the reply as output items (reasoning,
//! message, function calls), or the typed stream events (`response.created`,
//! `response.output_text.delta`, `response.function_call_arguments.delta`,
//! `response.completed` ...). Stateless: `previous_response_id` is refused with a 400.
//! `POST /v1/responses/input_tokens` counts a request's input tokens.

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
use futures_util::stream::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::{Event, FinishReason};

use crate::error::{parse_json, ApiError};
use crate::generation::{
    self, chat_tokens, collect, loaded, prepare_chat, submit, Asked, ChatInput,
};
use crate::openai::wire::{new_id, now, ToolChoice};
use crate::openai::OpenAiError;
use crate::output::{self, Format, OutputAsk, ReasoningEffort};
use crate::state::AppState;

type Result<T> = std::result::Result<T, OpenAiError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/responses/input_tokens", post(input_tokens))
        .route("/responses/input_tokens", post(input_tokens))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Clone, Deserialize)]
struct TextOptions {
    format: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
struct ResponsesRequest {
    input: Input,
    instructions: Option<String>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<i64>,
    #[serde(default)]
    stream: bool,
    text: Option<TextOptions>,
    reasoning: Option<ReasoningOptions>,
    previous_response_id: Option<String>,
    /// llama-server's reasoning budget, as the chat endpoint takes it.
    #[serde(flatten)]
    budget: output::WireBudget,
}

/// `reasoning`: only its `effort` reaches the model (the template).
#[derive(Debug, Clone, Deserialize)]
struct ReasoningOptions {
    effort: Option<ReasoningEffort>,
}

fn item_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The input items as the template's messages.
fn template_messages(req: &ResponsesRequest) -> std::result::Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    if let Some(i) = &req.instructions {
        out.push(json!({"role": "system", "content": i}));
    }
    let items = match &req.input {
        Input::Text(t) => vec![json!({"role": "user", "content": t})],
        Input::Items(v) => v.clone(),
    };
    if items.is_empty() {
        return Err(ApiError::bad_request(
            "`input` is empty: send text or at least one item",
        ));
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
                            "`input[{i}].role` is `{other}`: use system, developer, user or assistant"
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
                            "`input[{i}]` holds an image, file or audio part, but this model is text-only"
                        )));
                    }
                }
                out.push(json!({"role": role, "content": item_text(item.get("content").unwrap_or(&Value::Null))}));
            }
            "function_call" => {
                let call = json!({"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}});
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                        if let Some(Value::Array(c)) = last.get_mut("tool_calls") {
                            c.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
                }
            }
            "function_call_output" => out.push(json!({"role": "tool", "tool_call_id": item.get("call_id"),
                "content": item_text(item.get("output").unwrap_or(&Value::Null))})),
            "reasoning" => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "`input[{i}].type` is `{other}`: use message, function_call or function_call_output"
                )))
            }
        }
    }
    Ok(out)
}

/// Responses tools are flat (`{"type": "function", "name", "parameters"}`): as chat tools.
fn chat_tools(tools: &[Value]) -> std::result::Result<Value, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| match t.get("type").and_then(Value::as_str) {
            Some("function") => Ok(json!({"type": "function", "function": {
                "name": t.get("name"), "description": t.get("description").cloned().unwrap_or(json!("")),
                "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"}))}})),
            other => Err(ApiError::bad_request(format!(
                "`tools[{i}].type` is {other:?}: only function tools are served"
            ))),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Value::Array)
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

fn usage(u: &generation::Usage) -> Value {
    json!({"input_tokens": u.prompt, "input_tokens_details": {"cached_tokens": u.cached},
           "output_tokens": u.completion, "output_tokens_details": {"reasoning_tokens": u.reasoning},
           "total_tokens": u.prompt + u.completion})
}

/// The response object around `output`.
fn envelope(
    id: &str,
    model: &str,
    status: &str,
    output: Vec<Value>,
    finish: Option<&FinishReason>,
    u: &generation::Usage,
) -> Value {
    let incomplete = matches!(finish, Some(FinishReason::Length));
    json!({
        "id": id, "object": "response", "created_at": now(), "model": model,
        "status": if incomplete { "incomplete" } else { status },
        "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "output": output, "usage": usage(u), "error": null, "parallel_tool_calls": false,
        "tool_choice": "auto", "tools": [], "metadata": {},
    })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(c: &epm_chat::ToolCall, status: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": new_id("fc"), "call_id": c.id.clone().unwrap_or_else(|| new_id("call")),
           "name": c.name, "arguments": arguments, "status": status})
}

fn reasoning_item(text: &str) -> Value {
    json!({"type": "reasoning", "id": new_id("rs"), "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

/// What a request gives the template: its messages, tools and variables.
fn chat_input(req: &ResponsesRequest) -> std::result::Result<ChatInput, ApiError> {
    Ok(ChatInput {
        messages: template_messages(req)?,
        tools: req.tools.as_deref().map(chat_tools).transpose()?,
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
    let n = chat_tokens(loaded, &chat_input(&req)?)?.len();
    Ok(Json(generation::input_tokens_answer(n)))
}

async fn responses(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: ResponsesRequest = parse_json(body)?;
    if req.previous_response_id.is_some() {
        return Err(ApiError::bad_request(
            "`previous_response_id` is not supported: this server keeps no responses; send the whole conversation in `input`",
        )
        .into());
    }
    let loaded = loaded(&state)?;
    let chat = chat_input(&req)?;
    let choice: output::ToolChoice = match &req.tool_choice {
        None => output::ToolChoice::Auto,
        Some(Value::Object(o)) if o.get("name").is_some() => {
            output::ToolChoice::Function(o["name"].as_str().unwrap_or("").to_string())
        }
        Some(v) => serde_json::from_value::<ToolChoice>(v.clone())
            .map(|c| (&c).into())
            .map_err(|_| ApiError::bad_request("`tool_choice` must be auto, none, required or {\"type\": \"function\", \"name\": ...}"))?,
    };
    let ask = OutputAsk {
        tools: match &chat.tools {
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
    let p = prepare_chat(loaded, &chat, &ask, &asked)?;
    let id = new_id("resp");
    let model = state.model_name.clone();
    let rx = submit(&state, p)?;
    if req.stream {
        return Ok(Sse::new(sse(rx, id, model))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = collect(rx).await?;
    let mut output = Vec::new();
    if !c.reasoning.is_empty() {
        output.push(reasoning_item(&c.reasoning));
    }
    if !c.text.trim().is_empty() || c.tool_calls.is_empty() {
        output.push(message_item(&new_id("msg"), &c.text, "completed"));
    }
    output.extend(
        c.tool_calls
            .iter()
            .map(|t| call_item(t, "completed", &t.arguments)),
    );
    Ok(Json(envelope(
        &id,
        &model,
        "completed",
        output,
        Some(&c.finish_reason),
        &c.usage,
    ))
    .into_response())
}

struct StreamState {
    id: String,
    model: String,
    usage: generation::Usage,
    pending: VecDeque<SseEvent>,
    seq: u64,
    /// The open message item: its id, index and text so far.
    message: Option<(String, usize, String)>,
    output: Vec<Value>,
    finished: bool,
}

impl StreamState {
    fn emit(&mut self, kind: &str, mut v: Value) {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.pending
            .push_back(SseEvent::default().event(kind).data(v.to_string()));
    }

    fn close_message(&mut self) {
        if let Some((id, index, text)) = self.message.take() {
            self.emit(
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
            );
            self.emit(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                "part": {"type": "output_text", "text": text, "annotations": []}}),
            );
            let item = message_item(&id, &text, "completed");
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
            self.output.push(item);
        }
    }

    fn encode_event(&mut self, ev: Event) {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                self.usage.started(prompt_tokens, cached_tokens);
                let r = envelope(
                    &self.id,
                    &self.model,
                    "in_progress",
                    vec![],
                    None,
                    &self.usage,
                );
                self.emit("response.created", json!({"response": r}));
                self.emit("response.in_progress", json!({"response": r}));
            }
            Event::Text(t) => {
                if self.message.is_none() {
                    let id = new_id("msg");
                    let index = self.output.len();
                    self.emit("response.output_item.added", json!({"output_index": index,
                        "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}}));
                    self.emit(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                    self.message = Some((id, index, String::new()));
                }
                let (id, index) = match &mut self.message {
                    Some((id, index, text)) => {
                        text.push_str(&t);
                        (id.clone(), *index)
                    }
                    None => return,
                };
                self.emit(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t}),
                );
            }
            Event::Reasoning(t) => {
                self.close_message();
                let item = reasoning_item(&t);
                let index = self.output.len();
                self.emit(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                self.output.push(item);
            }
            Event::ToolCall(c) => {
                self.close_message();
                let index = self.output.len();
                let added = call_item(&c, "in_progress", "");
                let item_id = added["id"].clone();
                self.emit(
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                self.emit(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": index, "delta": c.arguments}),
                );
                self.emit(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": index, "arguments": c.arguments}),
                );
                let mut done = added.clone();
                done["status"] = json!("completed");
                done["arguments"] = json!(c.arguments);
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": done}),
                );
                self.output.push(done);
            }
            Event::Logprob(_) | Event::Progress(_) => {}
            Event::Done {
                finish_reason,
                completion_tokens,
                reasoning_tokens,
            } => {
                self.close_message();
                self.usage.finished(completion_tokens, reasoning_tokens);
                let r = envelope(
                    &self.id,
                    &self.model,
                    "completed",
                    std::mem::take(&mut self.output),
                    Some(&finish_reason),
                    &self.usage,
                );
                // Always `response.completed` (its status says `incomplete` when cut off), as
                // llama-server sends it and as the SDK's stream helper waits for it.
                self.emit("response.completed", json!({"response": r}));
                self.finished = true;
            }
            Event::Failed(e) => {
                self.emit(
                    "error",
                    json!({"code": "server_error", "message": e.to_string(), "param": null}),
                );
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
    let state = StreamState {
        id,
        model,
        usage: Default::default(),
        pending: VecDeque::new(),
        seq: 0,
        message: None,
        output: Vec::new(),
        finished: false,
    };
    crate::sse::stream(rx, state)
}

impl crate::sse::Encoder for StreamState {
    fn encode(&mut self, ev: Event, out: &mut VecDeque<SseEvent>) -> bool {
        self.encode_event(ev);
        out.append(&mut self.pending);
        self.finished
    }
}
