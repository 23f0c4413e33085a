//! The HTTP endpoints. Every error is an OpenAI-style error object with a message that
//! says what to do: 400 for bad bodies and prompts beyond the context, 401 for a missing or
//! wrong key, 413 for bodies over the cap, 503 while loading and when overloaded.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::SamplingParams;

use crate::api::{
    self, ChatRequest, CompletionRequest, ErrorBody, ErrorDetail, Prompt, Sampling, Usage,
};
use crate::scheduler::{Event, Job};
use crate::{AppState, Loaded};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    fn unavailable(message: impl Into<String>, retry_after: u32) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_unavailable",
                message,
            )
        }
    }

    fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind,
                param: None,
                code: None,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

type Shared = State<Arc<AppState>>;

pub fn router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint: see /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics, /stats",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

fn check_key(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        if given.is_none() {
            "missing API key: send the server's --api-key as `Authorization: Bearer <key>`"
        } else {
            "wrong API key: send the server's --api-key as `Authorization: Bearer <key>`"
        },
    ))
}

fn loaded(state: &AppState) -> Result<&Loaded, ApiError> {
    state
        .loaded
        .get()
        .ok_or_else(|| ApiError::unavailable("the model is still loading; retry shortly", 5))
}

/// The request body as `T`: 413 over the size cap, 400 for malformed JSON or wrong types
/// (naming the field).
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "the request body is larger than the server accepts: send a shorter prompt, or start the server with a larger --max-body-mb",
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"))
        }
    })?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        use serde_json::error::Category;
        match inner.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::bad_request(format!("the request body is not valid JSON: {inner}"))
            }
            Category::Data if path == "." || path.is_empty() => ApiError::bad_request(format!(
                "the request body does not fit this endpoint: {inner}"
            )),
            Category::Data => ApiError::bad_request(format!("invalid `{path}`: {inner}")),
        }
    })
}

/// The sampling settings of a request, checked.
fn sampling(s: &Sampling) -> Result<SamplingParams, ApiError> {
    if s.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request(
            "`n` must be 1: this server returns one choice per request",
        ));
    }
    let temperature = s.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(format!(
            "`temperature` {temperature} is out of range: use 0 to 2"
        )));
    }
    let top_p = s.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(format!(
            "`top_p` {top_p} is out of range: use a value above 0 and at most 1"
        )));
    }
    let seed = match s.seed {
        Some(v) => (v as u64 ^ (v as u64 >> 32)) as u32,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    };
    Ok(SamplingParams {
        temperature,
        top_p,
        seed,
    })
}

/// What a request's generation needs once its prompt is tokens.
struct Prepared {
    prompt: Vec<i32>,
    max_tokens: u32,
    sampling: SamplingParams,
    stop: Vec<String>,
}

fn prepare(
    loaded: &Loaded,
    prompt: Vec<i32>,
    max_tokens: Option<u32>,
    default_max: Option<u32>,
    s: &Sampling,
) -> Result<Prepared, ApiError> {
    let sampling = sampling(s)?;
    let n_ctx = loaded.n_ctx_per_seq as usize;
    if prompt.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt has {} tokens, but a slot's context holds {n_ctx}: shorten the prompt, or start the server with a larger -c (or fewer --parallel slots)",
            prompt.len()
        )));
    }
    let room = (n_ctx - prompt.len()) as u32;
    let max_tokens = max_tokens.or(default_max).unwrap_or(room);
    if max_tokens == 0 {
        return Err(ApiError::bad_request("`max_tokens` must be at least 1"));
    }
    if prompt.len() + max_tokens as usize > n_ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt has {} tokens and max_tokens asks for {max_tokens} more, but a slot's context holds {n_ctx}: lower max_tokens to at most {room}, shorten the prompt, or start the server with a larger -c",
            prompt.len()
        )));
    }
    Ok(Prepared {
        prompt,
        max_tokens,
        sampling,
        stop: s.stop.clone().map(api::Stop::into_vec).unwrap_or_default(),
    })
}

/// Count the request in, or refuse it when every slot and queue place is taken.
fn admit(state: &AppState) -> Result<(), ApiError> {
    let cap = state.slots + state.queue;
    let mut cur = state.shared.in_flight.load(Ordering::Acquire);
    loop {
        if cur >= cap || state.shared.stopping.load(Ordering::Acquire) {
            state
                .shared
                .rejected_overload
                .fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::unavailable(
                format!(
                    "the server is busy: {} requests running and {} waiting fill its {} slots and queue of {}; retry in a few seconds",
                    state.shared.active_slots.load(Ordering::Relaxed),
                    state.shared.waiting.load(Ordering::Relaxed),
                    state.slots,
                    state.queue
                ),
                2,
            ));
        }
        match state.shared.in_flight.compare_exchange(
            cur,
            cur + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

/// Hand a request to the engine thread; its events come back on the receiver.
fn submit(state: &AppState, p: Prepared) -> Result<UnboundedReceiver<Event>, ApiError> {
    admit(state)?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        prompt: p.prompt,
        max_tokens: p.max_tokens,
        sampling: p.sampling,
        stop: p.stop,
        events: tx,
    };
    let sent = state
        .jobs
        .lock()
        .map(|j| j.send(job).is_ok())
        .unwrap_or(false);
    if !sent {
        state.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        return Err(ApiError::unavailable("the server is shutting down", 5));
    }
    Ok(rx)
}

/// A whole generation, for non-streaming answers.
struct Collected {
    text: String,
    finish_reason: api::FinishReason,
    usage: Usage,
}

async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let (mut prompt, mut cached) = (0, 0);
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => (prompt, cached) = (prompt_tokens, cached_tokens),
            Event::Text(t) => text.push_str(&t),
            Event::Done {
                finish_reason,
                completion_tokens,
            } => {
                return Ok(Collected {
                    text,
                    finish_reason,
                    usage: Usage::new(prompt as u64, cached as u64, completion_tokens as u64),
                })
            }
            Event::Failed(message) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    message,
                ))
            }
        }
    }
    Err(ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the engine stopped before the generation finished",
    ))
}

/// How SSE chunks of one endpoint look.
#[derive(Clone)]
struct ChunkShape {
    id: String,
    created: u64,
    model: String,
    chat: bool,
    include_usage: bool,
}

impl ChunkShape {
    fn chunk(&self, delta: Option<&str>, first: bool, finish: Option<api::FinishReason>) -> Value {
        let choice = if self.chat {
            let mut d = serde_json::Map::new();
            if first {
                d.insert("role".into(), json!("assistant"));
            }
            if let Some(t) = delta {
                d.insert("content".into(), json!(t));
            }
            json!({"index": 0, "delta": d, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": delta.unwrap_or(""), "logprobs": null, "finish_reason": finish})
        };
        json!({
            "id": self.id,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        })
    }

    fn usage(&self, usage: &Usage) -> Value {
        json!({
            "id": self.id,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        })
    }
}

/// The SSE stream of a generation: a chunk per piece of text, a final chunk with the
/// finish reason, the usage when asked for, then `[DONE]`. A failure (or a shutdown)
/// ends it with an error event and `[DONE]`.
fn sse(
    rx: UnboundedReceiver<Event>,
    shape: ChunkShape,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    struct S {
        rx: UnboundedReceiver<Event>,
        shape: ChunkShape,
        first: bool,
        prompt: (usize, usize),
        pending: std::collections::VecDeque<SseEvent>,
        done: bool,
    }
    let data = |v: &Value| SseEvent::default().data(v.to_string());
    stream::unfold(
        S {
            rx,
            shape,
            first: true,
            prompt: (0, 0),
            pending: Default::default(),
            done: false,
        },
        move |mut s| async move {
            loop {
                if let Some(e) = s.pending.pop_front() {
                    return Some((Ok(e), s));
                }
                if s.done {
                    return None;
                }
                match s.rx.recv().await {
                    Some(Event::Started {
                        prompt_tokens,
                        cached_tokens,
                    }) => {
                        s.prompt = (prompt_tokens, cached_tokens);
                        if s.shape.chat {
                            s.first = false;
                            s.pending.push_back(data(&s.shape.chunk(None, true, None)));
                        }
                    }
                    Some(Event::Text(t)) => {
                        let c = s.shape.chunk(Some(&t), false, None);
                        s.pending.push_back(data(&c));
                    }
                    Some(Event::Done {
                        finish_reason,
                        completion_tokens,
                    }) => {
                        s.pending
                            .push_back(data(&s.shape.chunk(None, false, Some(finish_reason))));
                        if s.shape.include_usage {
                            let u = Usage::new(
                                s.prompt.0 as u64,
                                s.prompt.1 as u64,
                                completion_tokens as u64,
                            );
                            s.pending.push_back(data(&s.shape.usage(&u)));
                        }
                        s.pending.push_back(SseEvent::default().data("[DONE]"));
                        s.done = true;
                    }
                    Some(Event::Failed(message)) => {
                        let e = ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "server_error",
                            message,
                        );
                        s.pending
                            .push_back(data(&serde_json::to_value(e.body()).unwrap_or_default()));
                        s.pending.push_back(SseEvent::default().data("[DONE]"));
                        s.done = true;
                    }
                    None => return None,
                }
            }
        },
    )
}

async fn chat(
    State(state): Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_key(&state, &headers)?;
    let loaded = loaded(&state)?;
    let req: ChatRequest = parse(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` is empty: send at least one message",
        ));
    }
    for (i, m) in req.messages.iter().enumerate() {
        if !matches!(m.content, Value::String(_) | Value::Array(_) | Value::Null) {
            return Err(ApiError::bad_request(format!(
                "invalid `messages[{i}].content`: use a string or an array of content parts"
            )));
        }
    }
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap_or_default())
        .collect();
    let prompt = loaded
        .engine
        .render_chat(
            loaded.template.as_ref(),
            &messages,
            req.tools.as_ref(),
            req.chat_template_kwargs.as_ref(),
        )
        .map_err(|e| {
            ApiError::bad_request(format!(
                "cannot render the messages with the chat template: {e}"
            ))
        })?;
    let tokens = loaded.engine.tokenize(&prompt, true, true);
    let max = req.max_tokens.or(req.max_completion_tokens);
    let prepared = prepare(loaded, tokens, max, None, &req.sampling)?;
    let rx = submit(&state, prepared)?;
    let shape = ChunkShape {
        id: api::new_id("chatcmpl"),
        created: api::now(),
        model: state.model_name.clone(),
        chat: true,
        include_usage: req.sampling.stream_options.is_some_and(|o| o.include_usage),
    };
    if req.sampling.stream {
        return Ok(Sse::new(sse(rx, shape))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = collect(rx).await?;
    Ok(Json(json!({
        "id": shape.id,
        "object": "chat.completion",
        "created": shape.created,
        "model": shape.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": null,
            "finish_reason": c.finish_reason,
        }],
        "usage": c.usage,
    }))
    .into_response())
}

async fn completions(
    State(state): Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_key(&state, &headers)?;
    let loaded = loaded(&state)?;
    let req: CompletionRequest = parse(body)?;
    let text = match req.prompt {
        Prompt::One(s) => s,
        Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Many(_) => {
            return Err(ApiError::bad_request(
                "`prompt` must be one string (or an array of one)",
            ))
        }
    };
    let tokens = loaded.engine.tokenize(&text, true, true);
    // OpenAI's default for completions.
    let prepared = prepare(loaded, tokens, req.max_tokens, Some(16), &req.sampling)?;
    let rx = submit(&state, prepared)?;
    let shape = ChunkShape {
        id: api::new_id("cmpl"),
        created: api::now(),
        model: state.model_name.clone(),
        chat: false,
        include_usage: req.sampling.stream_options.is_some_and(|o| o.include_usage),
    };
    if req.sampling.stream {
        return Ok(Sse::new(sse(rx, shape))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = collect(rx).await?;
    Ok(Json(json!({
        "id": shape.id,
        "object": "text_completion",
        "created": shape.created,
        "model": shape.model,
        "choices": [{"index": 0, "text": c.text, "logprobs": null, "finish_reason": c.finish_reason}],
        "usage": c.usage,
    }))
    .into_response())
}

async fn models(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    check_key(&state, &headers)?;
    Ok(Json(json!({
        "object": "list",
        "data": [{"id": state.model_name, "object": "model", "created": api::now(), "owned_by": "epm"}],
    }))
    .into_response())
}

async fn health(State(state): Shared) -> Response {
    let stopping = state.shared.stopping.load(Ordering::Acquire);
    let (status, message) = match (state.loaded.get().is_some(), stopping) {
        (_, true) => ("stopping", "the server is shutting down"),
        (true, false) => return (StatusCode::OK, Json(json!({"status": "ok"}))).into_response(),
        (false, false) => ("loading", "the model is still loading; retry shortly"),
    };
    let e = ApiError::unavailable(message, 5);
    let mut body = serde_json::to_value(e.body()).unwrap_or_default();
    body["status"] = json!(status);
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(5));
    r
}

async fn metrics(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    check_key(&state, &headers)?;
    let snap = epm_engine::telemetry::snapshot(&state.stats);
    let text = crate::metrics::render(
        &snap,
        &state.shared,
        state.slots,
        state.started.elapsed().as_secs_f64(),
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn stats(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    check_key(&state, &headers)?;
    Ok(Json(epm_engine::telemetry::snapshot(&state.stats)).into_response())
}
