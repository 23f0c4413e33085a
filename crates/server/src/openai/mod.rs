//! The OpenAI adapter: `/v1/chat/completions`, `/v1/completions` and `/v1/models`. It
//! turns a request into the core's job (rendering chat messages with the model's template),
//! and the core's events into OpenAI responses, SSE chunks and error objects.

mod stream;
pub mod wire;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use crate::error::{parse_json, ApiError, ErrorKind};
use crate::generation::{self, collect, loaded, prepare, submit};
use crate::state::AppState;
use stream::{sse, ChunkShape};
use wire::{
    AssistantMessage, ChatChoice, ChatRequest, Completion, CompletionRequest, ErrorBody,
    ErrorDetail, ModelCard, ModelList, Prompt, TextChoice,
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
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unavailable => "server_unavailable",
            ErrorKind::Internal => "server_error",
        }
    }

    pub fn body(&self) -> Value {
        serde_json::to_value(ErrorBody {
            error: ErrorDetail {
                message: self.0.message.clone(),
                kind: self.kind(),
                param: None,
                code: None,
            },
        })
        .unwrap_or_default()
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut resp = (self.0.status(), Json(self.body())).into_response();
        if let Some(s) = self.0.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

type Result<T> = std::result::Result<T, OpenAiError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
}

/// A response to a generation: SSE when streamed, else the collected generation as one
/// [`Completion`] whose choice `choice` builds.
async fn respond<C: serde::Serialize>(
    state: &AppState,
    p: generation::Prepared,
    shape: ChunkShape,
    stream: bool,
    choice: impl FnOnce(generation::Collected) -> C,
) -> Result<Response> {
    let rx = submit(state, p)?;
    if stream {
        return Ok(Sse::new(sse(rx, shape))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = collect(rx).await?;
    let usage = c.usage.into();
    Ok(Json(Completion {
        object: shape.whole_object(),
        id: shape.id,
        created: shape.created,
        model: shape.model,
        choices: vec![choice(c)],
        usage,
    })
    .into_response())
}

fn shape(state: &AppState, prefix: &str, chat: bool, include_usage: bool) -> ChunkShape {
    ChunkShape {
        id: wire::new_id(prefix),
        created: wire::now(),
        model: state.model_name.clone(),
        chat,
        include_usage,
    }
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let loaded = loaded(&state)?;
    let req: ChatRequest = parse_json(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty: send at least one message").into());
    }
    for (i, m) in req.messages.iter().enumerate() {
        if !matches!(m.content, Value::String(_) | Value::Array(_) | Value::Null) {
            return Err(ApiError::bad_request(format!(
                "invalid `messages[{i}].content`: use a string or an array of content parts"
            ))
            .into());
        }
    }
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap_or_default())
        .collect();
    let prompt = loaded
        .chat
        .render(
            &loaded.engine,
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
    let prepared = prepare(loaded, tokens, &req.sampling.asked(max, None))?;
    let shape = shape(&state, "chatcmpl", true, req.sampling.include_usage());
    respond(&state, prepared, shape, req.sampling.stream, |c| {
        ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: c.text,
            },
            logprobs: None,
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
    let text = match req.prompt {
        Prompt::One(s) => s,
        Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Many(_) => {
            return Err(
                ApiError::bad_request("`prompt` must be one string (or an array of one)").into(),
            )
        }
    };
    let tokens = loaded.engine.tokenize(&text, true, true);
    // 16 is OpenAI's default for completions.
    let prepared = prepare(
        loaded,
        tokens,
        &req.sampling.asked(req.max_tokens, Some(16)),
    )?;
    let shape = shape(&state, "cmpl", false, req.sampling.include_usage());
    respond(&state, prepared, shape, req.sampling.stream, |c| {
        TextChoice {
            index: 0,
            text: c.text,
            logprobs: None,
            finish_reason: (&c.finish_reason).into(),
        }
    })
    .await
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: state.model_name.clone(),
            object: "model",
            created: wire::now(),
            owned_by: "epm",
        }],
    })
}
