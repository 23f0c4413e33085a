//! The Ollama adapter: `/api/chat` and `/api/generate` (NDJSON streams by default, as
//! Ollama sends them; `stream: false` for one object), `/api/tags`, `/api/show`, `/api/ps`
//! and `/api/version`. The loaded model answers to any name a client sends. Errors are
//! Ollama's `{"error": "..."}`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::{Event, FinishReason};

use crate::error::{parse_json, ApiError};
use crate::generation::{
    self, collect, loaded, prepare, prepare_chat, submit, Asked, ChatInput, SamplerExtras,
    WirePrompt,
};
use crate::openai::wire::chat_logprob;
use crate::output::{self, Format, OutputAsk, ReasoningEffort, ReasoningFormat};
use crate::state::AppState;

/// An error in Ollama's shape: `{"error": "..."}`.
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> OllamaError {
        OllamaError(e)
    }
}

impl OllamaError {
    pub fn body(&self) -> Value {
        json!({"error": self.0.message})
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        self.0.respond(self.body())
    }
}

type Result<T> = std::result::Result<T, OllamaError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/chat", post(chat))
        .route("/api/generate", post(generate))
        .route("/api/tags", get(tags))
        .route("/api/show", post(show))
        .route("/api/ps", get(ps))
        .route("/api/version", get(version))
}

/// `options`, as far as they apply.
#[derive(Debug, Clone, Default, Deserialize)]
struct Options {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    seed: Option<i64>,
    num_predict: Option<i32>,
    stop: Option<Vec<String>>,
    num_ctx: Option<u32>,
    /// `min_p`, `typical_p`, `repeat_penalty`, `repeat_last_n`, `presence_penalty`,
    /// `frequency_penalty`, `mirostat` ...: llama-server's names, which Ollama's share.
    #[serde(flatten)]
    extras: SamplerExtras,
}

#[derive(Debug, Clone, Deserialize)]
struct ChatRequest {
    /// Empty: only load the model (clients send this to warm it up).
    #[serde(default)]
    messages: Vec<Value>,
    tools: Option<Value>,
    format: Option<Value>,
    #[serde(default)]
    options: Options,
    stream: Option<bool>,
    think: Option<Value>,
    /// `0` asks to unload the model; as it stays loaded here, only the answer differs.
    keep_alive: Option<Value>,
    #[serde(flatten)]
    logprobs: Logprobs,
}

/// Log-probabilities of the reply's tokens (Ollama 0.12's `logprobs`, `top_logprobs`).
#[derive(Debug, Clone, Default, Deserialize)]
struct Logprobs {
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<u32>,
}

impl Logprobs {
    /// The alternatives per token, when asked for (checked as OpenAI's: 0 to 20, and only
    /// with `logprobs`).
    fn asked(&self) -> std::result::Result<Option<usize>, ApiError> {
        crate::openai::top_logprobs(self.logprobs, self.top_logprobs)
    }
}

/// `think`: on or off, or a level (`"low"`, `"medium"`, `"high"`: thinking on, and the level
/// to the template as `reasoning_effort`, which gpt-oss's reads).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum Think {
    On(bool),
    Level(ReasoningEffort),
}

#[derive(Debug, Clone, Deserialize)]
struct GenerateRequest {
    prompt: Option<String>,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    format: Option<Value>,
    #[serde(default)]
    options: Options,
    stream: Option<bool>,
    think: Option<Value>,
    images: Option<Vec<Value>>,
    /// Fill-in-the-middle: the text after the cursor.
    suffix: Option<String>,
    /// `0` asks to unload the model; as it stays loaded here, only the answer differs.
    keep_alive: Option<Value>,
    /// The token ids a previous `/api/generate` returned, to continue from: refused (no
    /// answer here returns them).
    context: Option<Vec<Value>>,
    #[serde(flatten)]
    logprobs: Logprobs,
}

fn format(f: &Option<Value>) -> std::result::Result<Format, ApiError> {
    match f {
        None => Ok(Format::Text),
        Some(Value::String(s)) if s == "json" => Ok(Format::JsonObject),
        Some(Value::String(s)) if s.is_empty() => Ok(Format::Text),
        Some(s @ Value::Object(_)) => Ok(Format::JsonSchema(s.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "`format` is {other}: use \"json\" or a JSON schema"
        ))),
    }
}

/// The sampling settings; Ollama's defaults are temperature 0.8 and no length limit
/// (`num_predict` -1: the room left).
fn asked(o: &Options, n_ctx: u32) -> std::result::Result<Asked, ApiError> {
    if let Some(c) = o.num_ctx {
        if c > n_ctx {
            tracing::debug!("num_ctx {c} is above a slot's {n_ctx}; the slot's is used");
        }
    }
    Ok(Asked {
        max_tokens: o.num_predict.filter(|&n| n > 0).map(|n| n as u32),
        temperature: Some(o.temperature.unwrap_or(0.8)),
        top_p: o.top_p,
        top_k: o.top_k,
        seed: o.seed,
        stop: o.stop.clone().unwrap_or_default(),
        extras: o.extras.clone(),
        ..Default::default()
    })
}

/// Ollama's messages as the template's: `tool_calls[].function.arguments` are objects
/// already; `thinking` is the reasoning.
fn template_messages(messages: &[Value]) -> std::result::Result<Vec<Value>, ApiError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if !["system", "user", "assistant", "tool"].contains(&role) {
                return Err(ApiError::bad_request(format!(
                    "`messages[{i}].role` is `{role}`: use system, user, assistant or tool"
                )));
            }
            if m.get("images")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                return Err(ApiError::bad_request(format!(
                    "`messages[{i}].images` is set, but this model is text-only: send text only"
                )));
            }
            let mut v = m.clone();
            if let Some(t) = m.get("thinking") {
                v["reasoning_content"] = t.clone();
            }
            Ok(v)
        })
        .collect()
}

fn now() -> String {
    crate::openai::wire::rfc3339(crate::openai::wire::now())
}

fn done_reason(r: &FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

fn tool_calls(calls: &[epm_chat::ToolCall]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| {
            let args: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
            json!({"function": {"name": c.name, "arguments": args}})
        })
        .collect()
}

/// The final object's counts (durations in nanoseconds; the model is loaded once, before
/// any request).
fn counts(u: &generation::Usage, started: std::time::Instant) -> Map<String, Value> {
    let (prompt, generation) = u.durations(started);
    let mut m = Map::new();
    m.insert(
        "total_duration".into(),
        json!(started.elapsed().as_nanos() as u64),
    );
    m.insert("load_duration".into(), json!(0));
    m.insert("prompt_eval_count".into(), json!(u.prompt - u.cached));
    m.insert(
        "prompt_eval_duration".into(),
        json!(prompt.as_nanos() as u64),
    );
    m.insert("eval_count".into(), json!(u.completion));
    m.insert("eval_duration".into(), json!(generation.as_nanos() as u64));
    m
}

/// What kind of reply: a chat message or a generate response.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Generate,
}

async fn answer(
    state: &AppState,
    p: generation::Prepared,
    kind: Kind,
    streamed: bool,
    logprobs: Option<usize>,
) -> Result<Response> {
    let started = std::time::Instant::now();
    let model = state.model_name.clone();
    let rx = submit(state, p.with_logprobs(logprobs))?;
    if streamed {
        let body = Body::from_stream(ndjson(rx, kind, model, started, logprobs.is_some()));
        return Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response());
    }
    let c = collect(rx).await?;
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    out.insert("created_at".into(), json!(now()));
    match kind {
        Kind::Chat => {
            let mut msg = json!({"role": "assistant", "content": c.text});
            if !c.reasoning.is_empty() {
                msg["thinking"] = json!(c.reasoning);
            }
            if !c.tool_calls.is_empty() {
                msg["tool_calls"] = json!(tool_calls(&c.tool_calls));
            }
            out.insert("message".into(), msg);
        }
        Kind::Generate => {
            out.insert("response".into(), json!(c.text));
            if !c.reasoning.is_empty() {
                out.insert("thinking".into(), json!(c.reasoning));
            }
        }
    }
    if logprobs.is_some() {
        out.insert(
            "logprobs".into(),
            json!(c.logprobs.iter().map(chat_logprob).collect::<Vec<_>>()),
        );
    }
    out.insert("done".into(), json!(true));
    out.insert("done_reason".into(), json!(done_reason(&c.finish_reason)));
    out.extend(counts(&c.usage, started));
    Ok(Json(Value::Object(out)).into_response())
}

/// One NDJSON line per event; the last has `done: true`.
fn ndjson(
    rx: UnboundedReceiver<Event>,
    kind: Kind,
    model: String,
    started: std::time::Instant,
    logprobs: bool,
) -> impl futures_util::Stream<Item = std::result::Result<Bytes, std::io::Error>> {
    struct S {
        rx: UnboundedReceiver<Event>,
        usage: generation::Usage,
        done: bool,
        /// The log-probabilities not yet sent (each line carries those before it), when
        /// asked for.
        logprobs: Option<Vec<Value>>,
    }
    let s = S {
        rx,
        usage: Default::default(),
        done: false,
        logprobs: logprobs.then(Vec::new),
    };
    stream::unfold(s, move |mut s| {
        let model = model.clone();
        async move {
            loop {
                if s.done {
                    return None;
                }
                let ev = s.rx.recv().await?;
                let mut line = Map::new();
                line.insert("model".into(), json!(model));
                line.insert("created_at".into(), json!(now()));
                let piece = |text: &str, thinking: Option<&str>, calls: Option<Vec<Value>>| {
                    let mut m = Map::new();
                    match kind {
                        Kind::Chat => {
                            let mut msg = json!({"role": "assistant", "content": text});
                            if let Some(t) = thinking {
                                msg["thinking"] = json!(t);
                            }
                            if let Some(c) = calls {
                                msg["tool_calls"] = json!(c);
                            }
                            m.insert("message".into(), msg);
                        }
                        Kind::Generate => {
                            m.insert("response".into(), json!(text));
                            if let Some(t) = thinking {
                                m.insert("thinking".into(), json!(t));
                            }
                        }
                    }
                    m.insert("done".into(), json!(false));
                    m
                };
                match ev {
                    Event::Started {
                        prompt_tokens,
                        cached_tokens,
                    } => {
                        s.usage.started(prompt_tokens, cached_tokens);
                        continue;
                    }
                    Event::Logprob(l) => {
                        if let Some(pending) = &mut s.logprobs {
                            pending.push(chat_logprob(&l));
                        }
                        continue;
                    }
                    Event::Progress(_) => continue,
                    Event::Text(t) => line.extend(piece(&t, None, None)),
                    Event::Reasoning(t) => line.extend(piece("", Some(&t), None)),
                    Event::ToolCall(c) => {
                        line.extend(piece("", None, Some(tool_calls(std::slice::from_ref(&c)))))
                    }
                    Event::Done {
                        finish_reason,
                        completion_tokens,
                        reasoning_tokens,
                    } => {
                        s.usage.finished(completion_tokens, reasoning_tokens);
                        line.extend(piece("", None, None));
                        line.insert("done".into(), json!(true));
                        line.insert("done_reason".into(), json!(done_reason(&finish_reason)));
                        line.extend(counts(&s.usage, started));
                        s.done = true;
                    }
                    Event::Failed(e) => {
                        line = Map::new();
                        line.insert("error".into(), json!(e.to_string()));
                        s.done = true;
                    }
                }
                if let Some(pending) = s.logprobs.as_mut().filter(|_| !line.contains_key("error")) {
                    line.insert("logprobs".into(), json!(std::mem::take(pending)));
                }
                let mut bytes = serde_json::to_vec(&Value::Object(line)).unwrap_or_default();
                bytes.push(b'\n');
                return Some((Ok(Bytes::from(bytes)), s));
            }
        }
    })
}

fn think(t: Option<&Value>) -> Result<(ReasoningFormat, Option<Map<String, Value>>)> {
    let on = |on: bool| Map::from_iter([("enable_thinking".into(), json!(on))]);
    let kwargs = match t.map(|v| (v, serde_json::from_value::<Think>(v.clone()))) {
        None | Some((Value::Null, _)) => None,
        Some((_, Ok(Think::On(b)))) => Some(on(b)),
        Some((
            _,
            Ok(Think::Level(
                effort @ (ReasoningEffort::Low | ReasoningEffort::Medium | ReasoningEffort::High),
            )),
        )) => ReasoningEffort::template_kwargs(Some(effort), Some(&on(true))),
        Some((v, _)) => {
            return Err(ApiError::bad_request(format!(
                "`think` is {v}: give true, false, \"low\", \"medium\" or \"high\""
            ))
            .into())
        }
    };
    Ok((ReasoningFormat::DeepSeek, kwargs))
}

/// What Ollama answers a request with nothing to generate (no messages, or no prompt): the
/// model loaded, or unloaded when `keep_alive` is 0. The model stays loaded here whatever
/// is asked, but clients send these to warm it up and read the answer.
fn load_only(state: &AppState, kind: Kind, keep_alive: Option<&Value>) -> Response {
    let unload = keep_alive.is_some_and(|k| k.as_f64() == Some(0.0) || k.as_str() == Some("0"));
    let mut out = Map::new();
    out.insert("model".into(), json!(state.model_name));
    out.insert("created_at".into(), json!(now()));
    match kind {
        Kind::Chat => out.insert(
            "message".into(),
            json!({"role": "assistant", "content": ""}),
        ),
        Kind::Generate => out.insert("response".into(), json!("")),
    };
    out.insert("done".into(), json!(true));
    out.insert(
        "done_reason".into(),
        json!(if unload { "unload" } else { "load" }),
    );
    Json(Value::Object(out)).into_response()
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: ChatRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    if req.messages.is_empty() {
        return Ok(load_only(&state, Kind::Chat, req.keep_alive.as_ref()));
    }
    let (reasoning, kwargs) = think(req.think.as_ref())?;
    let asked = asked(&req.options, loaded.n_ctx_per_seq)?;
    // As Ollama does, a conversation too long for the context loses its oldest messages.
    let messages = generation::fit_conversation(
        loaded,
        template_messages(&req.messages)?,
        asked.max_tokens,
        |messages| {
            Ok(ChatInput {
                messages: messages.to_vec(),
                tools: req.tools.clone(),
                kwargs: kwargs.clone(),
            })
        },
    )?;
    let ask = OutputAsk {
        tools: match &req.tools {
            Some(t) => output::openai_tools(t)?,
            None => Vec::new(),
        },
        format: format(&req.format)?,
        reasoning,
        ..Default::default()
    };
    let p = prepare_chat(
        loaded,
        &ChatInput {
            messages,
            tools: req.tools.clone(),
            kwargs,
        },
        &ask,
        &asked,
    )?;
    answer(
        &state,
        p,
        Kind::Chat,
        req.stream.unwrap_or(true),
        req.logprobs.asked()?,
    )
    .await
}

async fn generate(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: GenerateRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    if req.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(ApiError::bad_request(
            "`images` is set, but this model is text-only: send text only",
        )
        .into());
    }
    if req.context.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad_request(
            "`context` (Ollama's deprecated token history) is not served: send the conversation to /api/chat as `messages`",
        )
        .into());
    }
    let prompt = req.prompt.clone().unwrap_or_default();
    let suffix = req.suffix.as_deref().filter(|s| !s.is_empty());
    if prompt.is_empty() && suffix.is_none() {
        return Ok(load_only(&state, Kind::Generate, req.keep_alive.as_ref()));
    }
    let a = asked(&req.options, loaded.n_ctx_per_seq)?;
    let (reasoning, kwargs) = think(req.think.as_ref())?;
    // With a suffix, the prompt is the text before the cursor, filled in the middle (no
    // template, as Ollama's fill-in-the-middle templates have no chat turns); raw, it is the
    // whole prompt.
    let raw_tokens = match suffix {
        Some(suffix) => Some(WirePrompt::Text(prompt.clone()).fill_in_the_middle(loaded, suffix)?),
        None if req.raw => Some(loaded.engine.tokenize(&prompt, true, true)),
        None => None,
    };
    let ask = OutputAsk {
        format: format(&req.format)?,
        reasoning: if raw_tokens.is_some() {
            ReasoningFormat::None
        } else {
            reasoning
        },
        ..Default::default()
    };
    let p = if let Some(tokens) = raw_tokens {
        let plan = ask.plan(loaded, None)?;
        prepare(loaded, tokens, &a)?.with_output(plan)
    } else {
        // Not raw: the prompt (and system) go through the model's template, as Ollama does.
        let mut messages = Vec::new();
        if let Some(s) = &req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.push(json!({"role": "user", "content": prompt}));
        prepare_chat(
            loaded,
            &ChatInput {
                messages,
                tools: None,
                kwargs,
            },
            &ask,
            &a,
        )?
    };
    answer(
        &state,
        p,
        Kind::Generate,
        req.stream.unwrap_or(true),
        req.logprobs.asked()?,
    )
    .await
}

/// The model as `/api/tags` and `/api/ps` list it.
fn model_entry(state: &AppState) -> Value {
    let facts = state.loaded.get().map(|l| l.engine.facts());
    let details = details(facts.as_ref());
    json!({
        "name": state.model_name, "model": state.model_name,
        "modified_at": now(), "size": facts.as_ref().map_or(0, |f| f.size_bytes),
        "digest": "", "details": details,
    })
}

fn details(f: Option<&epm_engine::ModelFacts>) -> Value {
    let Some(f) = f else {
        return json!({"format": "gguf"});
    };
    json!({
        "format": "gguf", "family": f.arch, "families": [f.arch],
        "parameter_size": parameter_size(f.n_params), "quantization_level": f.file_type,
    })
}

/// Ollama's way of writing a parameter count: `30.5B`, `380M`.
fn parameter_size(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.1}B", n as f64 / 1e9)
    } else {
        format!("{}M", n / 1_000_000)
    }
}

async fn tags(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"models": [model_entry(&state)]}))
}

async fn ps(State(state): State<Arc<AppState>>) -> Json<Value> {
    let mut m = model_entry(&state);
    m["expires_at"] = json!("2999-01-01T00:00:00Z");
    m["size_vram"] = json!(0);
    if let Some(l) = state.loaded.get() {
        m["context_length"] = json!(l.n_ctx_per_seq);
    }
    Json(json!({"models": [m]}))
}

async fn version() -> Json<Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

async fn show(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let _: Value = parse_json(body)?;
    let loaded = loaded(&state)?;
    let f = loaded.engine.facts();
    let mut capabilities = vec!["completion"];
    if loaded.chat.tool_family().is_some() {
        capabilities.push("tools");
    }
    // A template that writes reasoning blocks: `<think>`, or harmony's analysis (gpt-oss,
    // whose `think` takes low, medium and high).
    if loaded.chat.reasoning_tags("").is_some() {
        capabilities.push("thinking");
    }
    // Ollama's name for fill-in-the-middle (`suffix`).
    if loaded.engine.fim_tokens().is_some() {
        capabilities.push("insert");
    }
    let mut info = Map::new();
    info.insert("general.architecture".into(), json!(f.arch));
    info.insert("general.parameter_count".into(), json!(f.n_params));
    info.insert(
        format!("{}.context_length", f.arch),
        json!(f.context_length),
    );
    Ok(Json(json!({
        "modelfile": "", "parameters": "", "template": loaded.chat.source().unwrap_or(""),
        "details": details(Some(&f)), "model_info": info, "capabilities": capabilities,
        "modified_at": now(),
    })))
}
