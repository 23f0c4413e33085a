//! `--api-key`: a layer in front of every endpoint but `/health`. It takes the key as
//! `Authorization: Bearer <key>` or as Anthropic clients send it, `x-api-key: <key>`; a
//! refusal is in the protocol's own error shape.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::{ApiError, ErrorKind};
use crate::protocol::Protocol;
use crate::state::AppState;

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.api_key else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()));
    if given == Some(key.as_str()) {
        return next.run(req).await;
    }
    let message = if given.is_none() {
        "missing API key: send the server's --api-key as `Authorization: Bearer <key>` (or `x-api-key: <key>`)"
    } else {
        "wrong API key: send the server's --api-key as `Authorization: Bearer <key>` (or `x-api-key: <key>`)"
    };
    Protocol::of(req.uri().path()).error(ApiError::new(ErrorKind::Unauthorized, message))
}
