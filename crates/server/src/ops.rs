//! The operator's endpoints: `/health` (200 once loaded, 503 while loading or stopping),
//! `/metrics` (Prometheus text) and `/stats` (the stats JSON), and the answer to an
//! unknown path.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::error::{ApiError, ErrorKind};
use crate::openai::OpenAiError;
use crate::state::AppState;

/// `/health` (and llama-server's `/v1/health`): outside the API key, for supervisors and
/// load balancers.
pub fn health_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
}

/// The paths where the protocols serve embeddings (OpenAI's, llama-server's and Ollama's old
/// and new ones), which this server does not compute.
const EMBEDDING_PATHS: &[&str] = &[
    "/v1/embeddings",
    "/embeddings",
    "/embedding",
    "/api/embed",
    "/api/embeddings",
];

/// Ollama's model management, which a server of one model file does not do.
const MODEL_MANAGEMENT_PATHS: &[&str] = &[
    "/api/pull",
    "/api/push",
    "/api/create",
    "/api/copy",
    "/api/delete",
];

pub async fn not_found(uri: axum::http::Uri) -> Response {
    let path = uri.path();
    let message = if EMBEDDING_PATHS.contains(&path) {
        format!("{path} is not served: this server runs a generation model and computes no embeddings; point your client's embedding setting at an embedding model's server (llama-server --embeddings, or Ollama)")
    } else if MODEL_MANAGEMENT_PATHS.contains(&path) || path.starts_with("/api/blobs/") {
        format!("{path} is not served: this server runs the one model file it was started with (epm-run serve -m FILE) and pulls, creates, copies, pushes and deletes no models; every model name a request gives reaches that model, so there is nothing to pull")
    } else {
        format!("no such endpoint: {path}. The README lists the endpoints by protocol: /v1/chat/completions, /v1/completions, /v1/responses, /v1/models, /v1/messages, /api/chat, /api/generate, /api/tags, /api/show, /completion, /infill, /tokenize, /props, /slots, /health, /metrics, /stats, and the page at /")
    };
    crate::protocol::Protocol::of(path).error(ApiError::new(ErrorKind::NotFound, message))
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    let stopping = state.server.stopping.load(Ordering::Acquire);
    let changed = crate::generation::check_model(&state, false).err();
    let (status, message) = match (state.loaded.get().is_some(), stopping, changed) {
        (_, true, _) => ("stopping", "the server is shutting down".to_string()),
        (_, false, Some(e)) => ("model_changed", e.message),
        (true, false, None) => {
            return (StatusCode::OK, Json(json!({"status": "ok"}))).into_response()
        }
        (false, false, None) => (
            "loading",
            "the model is still loading; retry shortly".to_string(),
        ),
    };
    let e = OpenAiError(ApiError::unavailable(message, 5));
    let mut body = e.body();
    body["status"] = json!(status);
    let mut r = e.into_response();
    *r.body_mut() = axum::body::Body::from(body.to_string());
    r
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = crate::metrics::render(state);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

async fn stats(State(state): State<Arc<AppState>>) -> Response {
    Json(epm_engine::telemetry::snapshot(&state.stats)).into_response()
}
