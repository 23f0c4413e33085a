//! llama-server's own endpoints, for the clients and tools written against it:
//! `/completion` (a prompt as text or token ids; `n_predict`, `stream`, `n_probs`, `cache_prompt`
//! (always on: a slot keeps its prefix in whole ubatches; the field is accepted and needs no handling),
//! `grammar`, `json_schema`, `stop`, `response_fields`, and code completion's `n_indent` and
//! `t_max_predict_ms`), `/infill` (fill-in-the-middle, with the same settings), `/tokenize`,
//! `/detokenize`, `/apply-template`, `/props` and `/slots` (read-only). Errors are
//! llama-server's `{"error": {"code", "message", "type"}}`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Value};

use epm_engine::generation::{Event, FinishReason, LineLimits, SlotState, TokenLogprob};
use epm_engine::infill::{ContextFile, InfillFit, InfillParts};
use epm_engine::Penalties;

use crate::error::{parse_json, ApiError, ErrorKind};
use crate::generation::{
    collect, loaded, prepare, submit, Asked, SamplerExtras, Usage, WirePrompt,
};
use crate::output::{self, Format, OutputAsk, ReasoningEffort, ReasoningFormat};
use crate::state::{AppState, Loaded};

pub struct LlamaCppError(pub ApiError);

impl From<ApiError> for LlamaCppError {
    fn from(e: ApiError) -> LlamaCppError {
        LlamaCppError(e)
    }
}

impl LlamaCppError {
    pub fn body(&self) -> Value {
        let kind = match self.0.kind {
            ErrorKind::BadRequest | ErrorKind::PayloadTooLarge => "invalid_request_error",
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Forbidden => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::Unavailable => "unavailable_error",
            ErrorKind::Internal => "server_error",
        };
        match self.0.overflow {
            // llama-server's type and counts for a prompt beyond the context.
            Some(o) => json!({"error": {"code": self.0.status().as_u16(),
                "message": format!("the request exceeds the available context size, try increasing it: {}", self.0.message),
                "type": "exceed_context_size_error", "n_prompt_tokens": o.prompt_tokens, "n_ctx": o.n_ctx}}),
            None => {
                json!({"error": {"code": self.0.status().as_u16(), "message": self.0.message, "type": kind}})
            }
        }
    }
}

impl IntoResponse for LlamaCppError {
    fn into_response(self) -> Response {
        self.0.respond(self.body())
    }
}

type Result<T> = std::result::Result<T, LlamaCppError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/completion", post(completion))
        .route("/completions", post(completion))
        .route("/infill", post(infill))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route("/props", get(props))
        .route("/slots", get(slots))
}

#[derive(Debug, Clone, Deserialize)]
struct CompletionRequest {
    prompt: WirePrompt,
    #[serde(flatten)]
    settings: Settings,
}

/// `/infill`: the text around the cursor (text or token ids, read as plain text), other
/// files as context, and what is typed at the cursor.
#[derive(Debug, Clone, Deserialize)]
struct InfillRequest {
    input_prefix: WirePrompt,
    input_suffix: WirePrompt,
    #[serde(default)]
    input_extra: Vec<InfillFile>,
    /// Text the completion starts with (after the prefix, special tokens read as such).
    #[serde(default)]
    prompt: String,
    #[serde(flatten)]
    settings: Settings,
}

#[derive(Debug, Clone, Deserialize)]
struct InfillFile {
    text: String,
    filename: Option<String>,
}

/// What `/completion` and `/infill` take besides their prompt.
#[derive(Debug, Clone, Deserialize)]
struct Settings {
    n_predict: Option<i32>,
    #[serde(default)]
    stream: bool,
    n_probs: Option<u32>,
    grammar: Option<String>,
    json_schema: Option<Value>,
    stop: Option<Vec<String>>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    seed: Option<i64>,
    /// Streamed: a `prompt_progress` event per prefill ubatch.
    #[serde(default)]
    return_progress: bool,
    /// The generated token ids in `tokens` (each chunk's, when streamed); otherwise
    /// `tokens` stays empty, as llama-server's.
    #[serde(default)]
    return_tokens: bool,
    /// Code completion: a line after the first that starts with fewer spaces and tabs ends
    /// the text.
    n_indent: Option<u32>,
    /// Code completion: once the text has a line break, the first token after this many
    /// milliseconds ends it.
    t_max_predict_ms: Option<u64>,
    /// Answer only these fields (paths such as `timings/prompt_n`), as the keys of a flat
    /// object; not streamed answers.
    response_fields: Option<Vec<String>>,
    /// LoRA adapters by id and scale (llama-server's `--lora`): none is loaded here, so one
    /// asked for with a scale is refused rather than left out.
    lora: Option<Vec<Value>>,
    #[serde(flatten)]
    budget: output::WireBudget,
    #[serde(flatten)]
    extras: SamplerExtras,
}

impl Settings {
    fn line_limits(&self) -> LineLimits {
        LineLimits {
            min_indent: self.n_indent.unwrap_or(0),
            max_time: self
                .t_max_predict_ms
                .filter(|&ms| ms > 0)
                .map(std::time::Duration::from_millis),
        }
    }
}

/// The fields of `answer` at `paths` (keys joined by `/`), each under its path; paths that
/// lead nowhere are left out, as llama-server leaves them.
fn pick_fields(answer: &Value, paths: &[String]) -> Value {
    let mut out = serde_json::Map::new();
    for path in paths {
        let found = path
            .split('/')
            .try_fold(answer, |v, key| v.as_object()?.get(key));
        if let Some(v) = found {
            out.insert(path.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// llama-server's `timings` for a request that began at `start`: the prompt's (tokens
/// evaluated, not those kept from the cache) and the generation's.
fn timings(u: &Usage, start: std::time::Instant) -> Value {
    let (prompt, generation) = u.durations(start);
    let prompt_n = u.prompt - u.cached;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let per_token = |d, n: u64| if n > 0 { ms(d) / n as f64 } else { 0.0 };
    let per_second = |d: std::time::Duration, n: u64| {
        if d.is_zero() {
            0.0
        } else {
            n as f64 / d.as_secs_f64()
        }
    };
    json!({
        "cache_n": u.cached,
        "prompt_n": prompt_n, "prompt_ms": ms(prompt),
        "prompt_per_token_ms": per_token(prompt, prompt_n),
        "prompt_per_second": per_second(prompt, prompt_n),
        "predicted_n": u.completion, "predicted_ms": ms(generation),
        "predicted_per_token_ms": per_token(generation, u.completion),
        "predicted_per_second": per_second(generation, u.completion),
    })
}

fn stop_type(r: &FinishReason) -> (&'static str, String) {
    match r {
        FinishReason::StopSequence(s) => ("word", s.clone()),
        FinishReason::Length => ("limit", String::new()),
        _ => ("eos", String::new()),
    }
}

fn probabilities(lps: &[TokenLogprob]) -> Vec<Value> {
    lps.iter()
        .map(|l| {
            let top: Vec<Value> = l
                .top
                .iter()
                .map(|(t, lp)| {
                    json!({"id": t.id, "token": String::from_utf8_lossy(&t.bytes), "bytes": t.bytes, "logprob": lp})
                })
                .collect();
            json!({"id": l.token.id, "token": String::from_utf8_lossy(&l.token.bytes),
                   "bytes": l.token.bytes, "logprob": l.logprob, "top_logprobs": top})
        })
        .collect()
}

async fn completion(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: CompletionRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    let tokens = req.prompt.tokens(loaded)?;
    complete(&state, loaded, tokens, req.settings).await
}

/// llama-server's default `n_predict` (none), which its `/infill` layout counts.
const SERVER_N_PREDICT: i32 = -1;

async fn infill(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let loaded = loaded(&state)?;
    let fim = loaded
        .engine
        .fim_tokens()
        .ok_or_else(ApiError::no_fill_in_the_middle)?;
    let req: InfillRequest = parse_json(body)?;
    let prefix = req.input_prefix.plain_tokens(loaded)?;
    let suffix = req.input_suffix.plain_tokens(loaded)?;
    let prompt = loaded.engine.tokenize(&req.prompt, false, true);
    let files: Vec<ContextFile> = req
        .input_extra
        .into_iter()
        .map(|f| ContextFile {
            filename: f
                .filename
                .unwrap_or_else(|| ContextFile::UNNAMED.to_string()),
            text: f.text,
        })
        .collect();
    let tokens = fim.repo_prompt(
        InfillParts {
            prefix: &prefix,
            suffix: &suffix,
            prompt: &prompt,
            files: &files,
        },
        InfillFit {
            n_batch: loaded.n_batch,
            n_predict: SERVER_N_PREDICT,
            n_ctx: loaded.n_ctx_per_seq,
        },
        loaded.engine.bos_to_add(),
        |text| loaded.engine.tokenize_plain(text),
    );
    complete(&state, loaded, tokens, req.settings).await
}

/// Generate from `tokens` and answer as llama-server's `/completion` does.
async fn complete(
    state: &Arc<AppState>,
    loaded: &Loaded,
    tokens: Vec<i32>,
    req: Settings,
) -> Result<Response> {
    let scaled = |a: &Value| a.get("scale").and_then(Value::as_f64) != Some(0.0);
    if req.lora.iter().flatten().any(scaled) {
        return Err(ApiError::bad_request(
            "`lora`: this server loads no LoRA adapters (llama-server's `--lora`); leave it out, or give each adapter `\"scale\": 0`",
        )
        .into());
    }
    let ask = OutputAsk {
        format: match &req.json_schema {
            Some(s) => Format::JsonSchema(s.clone()),
            None => Format::Text,
        },
        grammar: req.grammar.clone(),
        reasoning: ReasoningFormat::None,
        budget: req.budget.ask()?,
        ..Default::default()
    };
    let plan = ask.plan(loaded, None)?;
    let asked = Asked {
        max_tokens: req.n_predict.filter(|&n| n > 0).map(|n| n as u32),
        // `n_predict: 0` evaluates the prompt and generates nothing, as llama-server does:
        // editors (llama.vim, llama.vscode) send such requests to keep their context in a
        // slot's cache ahead of the next completion.
        prompt_only: req.n_predict == Some(0),
        temperature: Some(req.temperature.unwrap_or(0.8)),
        top_p: req.top_p,
        top_k: req.top_k,
        seed: req.seed,
        stop: req.stop.clone().unwrap_or_default(),
        extras: req.extras.clone(),
        ..Default::default()
    };
    let n_probs = req.n_probs.filter(|&n| n > 0).map(|n| n.min(20) as usize);
    let return_tokens = req.return_tokens;
    // The ids come with each token's log-probability event; with no alternatives asked
    // for, that event costs one pass over the logits.
    let prepared = prepare(loaded, tokens, &asked)?
        .with_output(plan)
        .with_logprobs(n_probs.or(return_tokens.then_some(0)))
        .with_line_limits(req.line_limits());
    let model = state.model_name.clone();
    let started = std::time::Instant::now();
    let rx = submit(state, prepared)?;
    if req.stream {
        let progress = req.return_progress;
        let since = std::time::Instant::now();
        let s = stream::unfold(
            (rx, false, Usage::default()),
            move |(mut rx, done, mut usage)| async move {
                if done {
                    return None;
                }
                loop {
                    let ev = rx.recv().await?;
                    let (v, end) = match ev {
                        Event::Started {
                            prompt_tokens,
                            cached_tokens,
                        } => {
                            usage.started(prompt_tokens, cached_tokens);
                            continue;
                        }
                        Event::Progress(p) if progress => (
                            json!({"content": "", "stop": false,
                               "prompt_progress": crate::openai::prompt_progress(&p, since)}),
                            false,
                        ),
                        Event::Text(t) => (json!({"content": t, "stop": false}), false),
                        Event::Logprob(l) => {
                            let mut v = json!({"content": "", "stop": false});
                            if return_tokens {
                                v["tokens"] = json!([l.token.id]);
                            }
                            if n_probs.is_some() {
                                v["completion_probabilities"] = json!(probabilities(&[l]));
                            }
                            (v, false)
                        }
                        Event::Done {
                            finish_reason,
                            completion_tokens,
                            reasoning_tokens,
                        } => {
                            let (kind, word) = stop_type(&finish_reason);
                            usage.finished(completion_tokens, reasoning_tokens);
                            (
                                json!({"content": "", "stop": true, "stop_type": kind, "stopping_word": word,
                                   "tokens_predicted": completion_tokens,
                                   "tokens_evaluated": usage.prompt, "tokens_cached": usage.cached,
                                   "timings": timings(&usage, started)}),
                                true,
                            )
                        }
                        Event::Failed(e) => (
                            LlamaCppError(ApiError::internal(e.to_string())).body(),
                            true,
                        ),
                        _ => continue,
                    };
                    let e: std::result::Result<SseEvent, std::convert::Infallible> =
                        Ok(SseEvent::default().data(v.to_string()));
                    return Some((e, (rx, end, usage)));
                }
            },
        );
        return Ok(Sse::new(s).keep_alive(KeepAlive::default()).into_response());
    }
    let c = collect(rx).await?;
    let (kind, word) = stop_type(&c.finish_reason);
    // llama-server answers an empty `tokens` unless asked.
    let ids: Vec<i32> = if return_tokens {
        c.logprobs.iter().map(|l| l.token.id).collect()
    } else {
        Vec::new()
    };
    let mut out = json!({
        "content": c.text, "tokens": ids, "stop": true, "stop_type": kind, "stopping_word": word,
        "model": model, "tokens_predicted": c.usage.completion, "tokens_evaluated": c.usage.prompt,
        "tokens_cached": c.usage.cached, "truncated": false,
        "timings": timings(&c.usage, started),
    });
    if n_probs.is_some() {
        out["completion_probabilities"] = json!(probabilities(&c.logprobs));
    }
    if let Some(paths) = &req.response_fields {
        out = pick_fields(&out, paths);
    }
    Ok(Json(out).into_response())
}

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: TokenizeRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    let ids = loaded.engine.tokenize(&req.content, req.add_special, true);
    if !req.with_pieces {
        return Ok(Json(json!({"tokens": ids})));
    }
    let mut piece = Vec::new();
    let tokens: Vec<Value> = ids
        .iter()
        .map(|&id| {
            loaded.engine.output_piece(id, true, &mut piece);
            match std::str::from_utf8(&piece) {
                Ok(s) => json!({"id": id, "piece": s}),
                // Part of a character: the bytes, as llama-server gives them.
                Err(_) => json!({"id": id, "piece": piece}),
            }
        })
        .collect();
    Ok(Json(json!({"tokens": tokens})))
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<i32>,
}

async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: DetokenizeRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    Ok(Json(
        json!({"content": loaded.engine.detokenize(&req.tokens, true)}),
    ))
}

#[derive(Debug, Deserialize)]
struct TemplateRequest {
    messages: Vec<Value>,
    tools: Option<Value>,
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    reasoning_effort: Option<ReasoningEffort>,
}

async fn apply_template(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: TemplateRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    let kwargs =
        ReasoningEffort::template_kwargs(req.reasoning_effort, req.chat_template_kwargs.as_ref());
    let prompt = loaded
        .chat
        .render(
            &loaded.engine,
            &req.messages,
            req.tools.as_ref(),
            kwargs.as_ref(),
        )
        .map_err(|e| {
            ApiError::bad_request(format!(
                "cannot render the messages with the chat template: {e}"
            ))
        })?;
    Ok(Json(json!({"prompt": prompt})))
}

async fn props(State(state): State<Arc<AppState>>) -> Result<Json<Value>> {
    let loaded = loaded(&state)?;
    Ok(Json(json!({
        "default_generation_settings": {
            "n_ctx": loaded.n_ctx_per_seq,
            "params": {"temperature": 0.8, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                       "repeat_penalty": 1.0, "repeat_last_n": Penalties::DEFAULT_LAST_N,
                       "presence_penalty": 0.0, "frequency_penalty": 0.0, "n_predict": -1},
        },
        "total_slots": state.slots,
        "model_path": state.model_name,
        "chat_template": loaded.chat.source().unwrap_or(""),
        "modalities": {"vision": false, "audio": false},
        "build_info": format!("epm {}", env!("CARGO_PKG_VERSION")),
    })))
}

async fn slots(State(state): State<Arc<AppState>>) -> Result<Json<Value>> {
    let loaded = loaded(&state)?;
    let list: Vec<Value> = state
        .generation
        .slots
        .iter()
        .enumerate()
        .map(|(id, v)| {
            let st = v.state();
            json!({
                "id": id, "n_ctx": loaded.n_ctx_per_seq,
                "is_processing": st != SlotState::Idle,
                "state": match st { SlotState::Idle => "idle", SlotState::Prefill => "prefill", SlotState::Decode => "decode" },
                "n_prompt_tokens": v.prompt_tokens.load(Ordering::Relaxed),
                "n_prompt_tokens_cache": v.reused_tokens.load(Ordering::Relaxed),
                "n_prompt_tokens_processed": v.prefilled.load(Ordering::Relaxed),
                "n_decoded": v.generated.load(Ordering::Relaxed),
            })
        })
        .collect();
    Ok(Json(Value::Array(list)))
}
