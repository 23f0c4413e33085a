//! The OpenAI adapter: `/v1/chat/completions`, `/v1/completions` and `/v1/models`. It
//! turns a request into the core's job (rendering chat messages with the model's template),
//! and the core's events into OpenAI responses, SSE chunks and error objects.

mod stream;
pub mod wire;
pub use stream::prompt_progress;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use crate::error::{parse_json, ApiError, ErrorKind};
use crate::generation::{self, collect, loaded, prepare, prepare_chat, submit, ChatInput};
use crate::output::{self, OutputAsk};
use crate::state::AppState;
use stream::{sse, ChunkShape};
use wire::{
    AssistantMessage, ChatChoice, ChatRequest, Completion, CompletionRequest, ErrorBody,
    ErrorDetail, ModelCard, ModelList, TextChoice, WireToolCall,
};

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> OpenAiError {
        OpenAiError(e)
    }
}

impl OpenAiError {
    fn kind(&self) -> &'static str {
        match self.0.kind {
            ErrorKind::BadRequest | ErrorKind::PayloadTooLarge => "invalid_request_error",
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Forbidden => "permission_error",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unavailable => "server_unavailable",
            ErrorKind::Internal => "server_error",
        }
    }

    pub fn body(&self) -> Value {
        // A prompt beyond the context in OpenAI's words and code, which agents (Codex,
        // litellm) read to compact the conversation; llama-server's counts beside them.
        let (message, code, param) = match self.0.overflow {
            Some(o) => (
                overflow_message(&o),
                Some("context_length_exceeded".to_string()),
                None,
            ),
            None => (
                self.0.message.clone(),
                self.0.code.map(str::to_string),
                self.0.param.clone(),
            ),
        };
        let mut body = serde_json::to_value(ErrorBody {
            error: ErrorDetail {
                message,
                kind: self.kind(),
                param,
                code,
            },
        })
        .unwrap_or_default();
        if let Some(o) = self.0.overflow {
            body["error"]["n_prompt_tokens"] = o.prompt_tokens.into();
            body["error"]["n_ctx"] = o.n_ctx.into();
        }
        body
    }
}

/// OpenAI's message for a prompt beyond the context, then what to change.
fn overflow_message(o: &crate::error::ContextOverflow) -> String {
    match o.reply_tokens() {
        Some(m) => format!(
            "This model's maximum context length is {} tokens (a slot's), however you requested {} tokens ({} in your prompt; {m} for the completion): {}",
            o.n_ctx,
            o.prompt_tokens + m as usize,
            o.prompt_tokens,
            o.advice()
        ),
        None => format!(
            "This model's maximum context length is {} tokens (a slot's), however your messages resulted in {} tokens: {}",
            o.n_ctx,
            o.prompt_tokens,
            o.advice()
        ),
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        self.0.respond(self.body())
    }
}

type Result<T> = std::result::Result<T, OpenAiError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/chat/completions/control", post(chat_control))
        .route("/chat/completions/control", post(chat_control))
        .route("/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        // llama-server's paths without `/v1`, for clients given the bare address.
        .route("/chat/completions", post(chat))
        .route("/models", get(models))
}

/// A response to a generation: SSE when streamed, else the collected generation as one
/// [`Completion`] whose choice `choice` builds.
/// Submit the request's `n` choices and answer with them: streamed as they come, or whole
/// once every choice has finished, `choice` writing each from its index and generation.
async fn respond<C: serde::Serialize>(
    state: &AppState,
    p: generation::Prepared,
    n: usize,
    shape: ChunkShape,
    stream: bool,
    choice: impl Fn(u32, generation::Collected) -> C,
) -> Result<Response> {
    // A choice refused (the server busy) drops those already submitted, which stops them.
    let rxs = p
        .choices(n)
        .into_iter()
        .map(|p| submit(state, p))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if stream {
        return Ok(Sse::new(sse(rxs, shape))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let collected = futures_util::future::try_join_all(rxs.into_iter().map(collect)).await?;
    let usage = generation::Usage::of_choices(collected.iter().map(|c| &c.usage)).into();
    Ok(Json(Completion {
        object: shape.whole_object(),
        id: shape.id,
        created: shape.created,
        model: shape.model,
        choices: collected
            .into_iter()
            .enumerate()
            .map(|(i, c)| choice(i as u32, c))
            .collect(),
        usage,
    })
    .into_response())
}

fn shape(state: &AppState, prefix: &str, chat: bool, sampling: &wire::Sampling) -> ChunkShape {
    ChunkShape {
        id: wire::new_id(prefix),
        created: wire::now(),
        model: state.model_name.clone(),
        chat,
        include_usage: sampling.include_usage(),
        return_progress: sampling.return_progress,
        custom_tools: Vec::new(),
    }
}

/// The roles a chat message may have. `developer` is OpenAI's newer name for `system`.
const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// Check the messages (roles, content types, text-only parts) and give them as the
/// template takes them.
fn chat_messages(messages: &[wire::Message]) -> std::result::Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` is empty: send at least one message",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "`messages[{i}].role` is `{}`, which the API does not define: use one of {}",
                    m.role,
                    ROLES.join(", ")
                )));
            }
            match &m.content {
                Value::String(_) | Value::Null => {}
                Value::Array(parts) => {
                    for (j, p) in parts.iter().enumerate() {
                        let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                        match kind {
                            "text" | "input_text" | "output_text" => {}
                            "image_url" | "image" | "input_image" | "input_audio" | "file" => {
                                return Err(ApiError::bad_request(format!(
                                    "`messages[{i}].content[{j}]` is an {kind} part, but this model is text-only: send text parts only"
                                )))
                            }
                            other => {
                                return Err(ApiError::bad_request(format!(
                                    "`messages[{i}].content[{j}].type` is `{other}`: use text parts"
                                )))
                            }
                        }
                    }
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid `messages[{i}].content`: use a string or an array of content parts"
                    )))
                }
            }
            let mut v = serde_json::to_value(m).unwrap_or_default();
            if m.role == "developer" {
                v["role"] = Value::String("system".into());
            }
            // A custom tool's call, as the template's function call of one string.
            if let Some(Value::Array(calls)) = v.get_mut("tool_calls") {
                for c in calls.iter_mut() {
                    if c.get("type").and_then(Value::as_str) == Some("custom") {
                        let custom = c.get("custom").cloned().unwrap_or(Value::Null);
                        let input = custom.get("input").and_then(Value::as_str).unwrap_or("");
                        *c = serde_json::json!({"id": c.get("id"), "type": "function", "function": {
                            "name": custom.get("name"), "arguments": output::custom_arguments(input)}});
                    }
                }
            }
            Ok(v)
        })
        .collect()
}

/// The number of alternatives per token asked for, checked (OpenAI allows 0 to 20).
pub(crate) fn top_logprobs(
    on: bool,
    top: Option<u32>,
) -> std::result::Result<Option<usize>, ApiError> {
    match (on, top) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(ApiError::bad_request(
            "`top_logprobs` needs `logprobs: true`",
        )),
        (true, Some(n)) if n > 20 => Err(ApiError::bad_request(format!(
            "`top_logprobs` is {n}: use 0 to 20"
        ))),
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
    }
}

/// `/v1/chat/completions/control`'s body (llama-server's).
#[derive(Debug, serde::Deserialize)]
struct ControlRequest {
    id: String,
    action: String,
}

/// `POST /v1/chat/completions/control`: `reasoning_end` ends the running completion `id`'s
/// reasoning block now; the model answers from its next token (a reply outside a block is
/// left as it is). Every chat whose template writes reasoning blocks can be controlled
/// (llama-server's `reasoning_control: true` is taken and not needed). A completion that has
/// finished matches nothing: `success` is false, with the reason.
async fn chat_control(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: ControlRequest = parse_json(body)?;
    if req.action != "reasoning_end" {
        return Err(ApiError::bad_request(format!(
            "`action` is {:?}: the one action is \"reasoning_end\"",
            req.action
        ))
        .into());
    }
    Ok(Json(if state.reasoning_controls.end_reasoning(&req.id) {
        serde_json::json!({"success": true})
    } else {
        serde_json::json!({"success": false,
            "message": format!("no running chat completion with reasoning has the id {:?}", req.id)})
    }))
}

/// What a chat request gives the template: its messages, tools and variables.
fn chat_input(req: &ChatRequest) -> Result<ChatInput> {
    Ok(ChatInput {
        messages: chat_messages(&req.messages)?,
        tools: req.tools.as_ref().map(output::template_tools).transpose()?,
        kwargs: output::ReasoningEffort::template_kwargs(
            req.reasoning_effort,
            req.chat_template_kwargs.as_ref(),
        ),
    })
}

/// `POST /v1/chat/completions/input_tokens` (llama-server's): the prompt tokens the same
/// request would evaluate, whatever their number.
async fn chat_input_tokens(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let loaded = loaded(&state)?;
    let req: ChatRequest = parse_json(body)?;
    let n = generation::chat_tokens(loaded, &chat_input(&req)?)?.len();
    Ok(Json(generation::input_tokens_answer(n)))
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let loaded = loaded(&state)?;
    let req: ChatRequest = parse_json(body)?;
    if req.functions.is_some() || req.function_call.is_some() {
        return Err(ApiError::bad_request(
            "`functions` and `function_call` are the legacy form: send `tools` (each `{\"type\": \"function\", \"function\": ...}`) and `tool_choice`",
        )
        .into());
    }
    if req.modalities.iter().flatten().any(|m| m != "text") {
        return Err(ApiError::bad_request(
            "`modalities` asks for more than text, but this model writes text only: send `[\"text\"]` or leave it out",
        )
        .into());
    }
    let chat = chat_input(&req)?;
    let tools = match &req.tools {
        Some(t) => output::openai_tools(t)?,
        None => Vec::new(),
    };
    let ask = OutputAsk {
        tool_choice: req
            .tool_choice
            .as_ref()
            .map(wire::tool_choice)
            .transpose()?
            .unwrap_or_default(),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(false),
        tools,
        format: req.constraints.format(),
        grammar: req.constraints.grammar.clone(),
        reasoning: req.reasoning_format.map(Into::into).unwrap_or_default(),
        budget: req.budget.ask()?,
    };
    let max = req.max_tokens.or(req.max_completion_tokens);
    let logprobs = top_logprobs(req.logprobs.unwrap_or(false), req.top_logprobs)?;
    let mut shape = shape(&state, "chatcmpl", true, &req.sampling);
    shape.custom_tools = output::custom_tool_names(req.tools.as_ref());
    let custom_tools = shape.custom_tools.clone();
    let prepared = prepare_chat(loaded, &chat, &ask, &req.sampling.asked(max, None))?
        .with_logprobs(logprobs)
        .with_control_id(shape.id.clone());
    let n = req.sampling.choices(state.slots + state.queue)?;
    respond(&state, prepared, n, shape, req.sampling.stream, |index, c| {
        let calls: Vec<WireToolCall> =
            c.tool_calls.iter().map(|t| WireToolCall::new(t, None, &custom_tools)).collect();
        let content = if calls.is_empty() || !c.text.trim().is_empty() {
            Some(c.text)
        } else {
            None
        };
        ChatChoice {
            index,
            message: AssistantMessage {
                role: "assistant",
                content,
                reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
                tool_calls: (!calls.is_empty()).then_some(calls),
            },
            logprobs: logprobs.map(|_| {
                serde_json::json!({"content": c.logprobs.iter().map(wire::chat_logprob).collect::<Vec<_>>()})
            }),
            finish_reason: (&c.finish_reason).into(),
        }
    })
    .await
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let loaded = loaded(&state)?;
    let req: CompletionRequest = parse_json(body)?;
    // A `suffix`: the prompt is the text before the cursor, filled in the middle.
    let tokens = match req.suffix.as_deref().filter(|s| !s.is_empty()) {
        Some(suffix) => req.prompt.clone().fill_in_the_middle(loaded, suffix)?,
        None => req.prompt.clone().tokens(loaded)?,
    };
    if req.echo == Some(true) {
        return Err(ApiError::bad_request(
            "`echo` is not served: the reply holds the completion only; prepend the prompt yourself",
        )
        .into());
    }
    if req.best_of.is_some_and(|n| n > 1) {
        return Err(ApiError::bad_request(
            "`best_of` must be 1: this server generates one completion per request",
        )
        .into());
    }
    if req.logprobs.is_some_and(|n| n > 5) {
        return Err(ApiError::bad_request("`logprobs` is at most 5 on completions").into());
    }
    let ask = OutputAsk {
        format: req.constraints.format(),
        grammar: req.constraints.grammar.clone(),
        reasoning: output::ReasoningFormat::None,
        budget: req.budget.ask()?,
        ..Default::default()
    };
    let plan = ask.plan(loaded, None)?;
    let logprobs = req.logprobs.map(|n| n as usize);
    // 16 is OpenAI's default for completions.
    let prepared = prepare(
        loaded,
        tokens,
        &req.sampling.asked(req.max_tokens, Some(16)),
    )?
    .with_output(plan)
    .with_logprobs(logprobs);
    let shape = shape(&state, "cmpl", false, &req.sampling);
    let n = req.sampling.choices(state.slots + state.queue)?;
    respond(
        &state,
        prepared,
        n,
        shape,
        req.sampling.stream,
        |index, c| TextChoice {
            index,
            logprobs: logprobs.map(|_| wire::text_logprobs(&c.logprobs, 0)),
            text: c.text,
            finish_reason: (&c.finish_reason).into(),
        },
    )
    .await
}

/// The loaded model's card; its creation time is the server's start, the same in every
/// answer.
fn card(state: &AppState) -> ModelCard {
    let started = std::time::SystemTime::now()
        .checked_sub(state.started.elapsed())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    ModelCard::new(state.model_name.clone(), started)
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList::new(vec![card(&state)]))
}

/// `models.retrieve`: the loaded model, whichever name is asked, as every endpoint answers
/// to any model name.
async fn model(State(state): State<Arc<AppState>>) -> Json<ModelCard> {
    Json(card(&state))
}
