//! Which protocol a path belongs to, so that what happens before a handler runs (a missing
//! API key, an unknown path) is answered in that protocol's error shape, and `/metrics`
//! counts requests per protocol. Also CORS for browser-side clients.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use crate::anthropic::AnthropicError;
use crate::error::ApiError;
use crate::llamacpp::LlamaCppError;
use crate::ollama::OllamaError;
use crate::openai::OpenAiError;
use crate::state::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
    Ollama,
    LlamaCpp,
    /// The page, `/health`, `/metrics`, `/stats` (errors in OpenAI's shape).
    Operator,
}

impl Protocol {
    pub const ALL: [Protocol; 5] = [
        Protocol::OpenAi,
        Protocol::Anthropic,
        Protocol::Ollama,
        Protocol::LlamaCpp,
        Protocol::Operator,
    ];

    pub fn of(path: &str) -> Protocol {
        if path.starts_with("/v1/messages") {
            Protocol::Anthropic
        } else if path.starts_with("/v1/")
            || [
                "/chat/completions",
                "/chat/completions/input_tokens",
                "/chat/completions/control",
                "/models",
                "/responses",
                "/responses/input_tokens",
            ]
            .contains(&path)
        {
            Protocol::OpenAi
        } else if path.starts_with("/api/") {
            Protocol::Ollama
        } else if [
            "/completion",
            "/completions",
            "/tokenize",
            "/detokenize",
            "/apply-template",
            "/props",
            "/slots",
        ]
        .contains(&path)
        {
            Protocol::LlamaCpp
        } else {
            Protocol::Operator
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
            Protocol::Ollama => "ollama",
            Protocol::LlamaCpp => "llamacpp",
            Protocol::Operator => "operator",
        }
    }

    /// `e` in this protocol's error shape.
    pub fn error(self, e: ApiError) -> Response {
        match self {
            Protocol::Anthropic => AnthropicError(e).into_response(),
            Protocol::Ollama => OllamaError(e).into_response(),
            Protocol::LlamaCpp => LlamaCppError(e).into_response(),
            Protocol::OpenAi | Protocol::Operator => OpenAiError(e).into_response(),
        }
    }
}

/// Requests per protocol.
#[derive(Debug, Default)]
pub struct RequestCounts([AtomicU64; 5]);

impl RequestCounts {
    pub fn get(&self, p: Protocol) -> u64 {
        self.0[p as usize].load(Ordering::Relaxed)
    }
}

/// Count each request under its protocol.
pub async fn count(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let p = Protocol::of(req.uri().path());
    state.requests.0[p as usize].fetch_add(1, Ordering::Relaxed);
    next.run(req).await
}

/// The most of an oversized body [`refuse_oversized`] reads before it answers, and for how
/// long it reads.
const DRAIN_MAX_BYTES: u64 = 256 << 20;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A body whose declared length is over the cap is refused with 413 in the path's
/// protocol's shape before any handler runs, but only after what the client sends of it
/// has been read and dropped (up to [`DRAIN_MAX_BYTES`], for up to [`DRAIN_TIMEOUT`]). A
/// server that answers while the client is still sending, and closes, leaves unread bytes
/// in the socket; the kernel then resets the connection, and the client sees a broken pipe
/// instead of the 413 that says what to change.
pub async fn refuse_oversized(State(max_body): State<usize>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_none_or(|n| n <= max_body as u64) {
        return next.run(req).await;
    }
    let protocol = Protocol::of(req.uri().path());
    let mut body = req.into_body().into_data_stream();
    let drain = async {
        let mut read = 0u64;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len() as u64;
            if read > DRAIN_MAX_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
    protocol.error(ApiError::payload_too_large())
}

/// Which browser origins may call the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorsOrigins {
    /// `http(s)://localhost`, `127.0.0.1` and `[::1]`, any port: pages served from this
    /// machine, not a web page you happen to visit.
    Loopback,
    /// Any origin (`--cors-origin '*'`).
    Any,
    /// These origins exactly (and loopback).
    List(Vec<String>),
}

impl CorsOrigins {
    pub fn from_flags(flags: &[String]) -> CorsOrigins {
        if flags.iter().any(|f| f == "*") {
            CorsOrigins::Any
        } else if flags.is_empty() {
            CorsOrigins::Loopback
        } else {
            CorsOrigins::List(
                flags
                    .iter()
                    .map(|f| f.trim_end_matches('/').to_string())
                    .collect(),
            )
        }
    }

    pub fn allows(&self, origin: &str) -> bool {
        let loopback = ["http://", "https://"].iter().any(|scheme| {
            origin.strip_prefix(scheme).is_some_and(|rest| {
                let host = rest.rsplit_once(':').map_or(rest, |(h, port)| {
                    if port.chars().all(|c| c.is_ascii_digit()) {
                        h
                    } else {
                        rest
                    }
                });
                ["localhost", "127.0.0.1", "[::1]"].contains(&host)
            })
        });
        match self {
            CorsOrigins::Any => true,
            CorsOrigins::Loopback => loopback,
            CorsOrigins::List(l) => loopback || l.iter().any(|o| o == origin),
        }
    }
}

/// Answer preflights and mark responses for the origins allowed; a preflight from another
/// origin gets a 403 that says which flag admits it. Outside the API key, as browsers send
/// preflights without credentials.
pub async fn cors(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_string);
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let allowed = state.cors.allows(&origin);
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        if !allowed {
            let p = Protocol::of(req.uri().path());
            let mut r = p.error(ApiError::new(
                crate::error::ErrorKind::Forbidden,
                format!("the origin {origin} may not call this server: start it with --cors-origin {origin} (or '*')"),
            ));
            *r.status_mut() = StatusCode::FORBIDDEN;
            return r;
        }
        let asked = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type, x-api-key"));
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, header_value(&origin));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return r;
    }
    let mut r = next.run(req).await;
    if allowed {
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, header_value(&origin));
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    r
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("null"))
}

#[cfg(test)]
mod tests {
    use super::Protocol;

    #[test]
    fn paths_name_their_protocol_with_or_without_v1() {
        for path in [
            "/v1/chat/completions",
            "/chat/completions",
            "/chat/completions/input_tokens",
            "/v1/chat/completions/input_tokens",
            "/chat/completions/control",
            "/responses",
            "/responses/input_tokens",
            "/v1/responses/input_tokens",
            "/models",
        ] {
            assert_eq!(Protocol::of(path), Protocol::OpenAi, "{path}");
        }
        assert_eq!(
            Protocol::of("/v1/messages/count_tokens"),
            Protocol::Anthropic
        );
        assert_eq!(Protocol::of("/api/chat"), Protocol::Ollama);
        assert_eq!(Protocol::of("/completion"), Protocol::LlamaCpp);
    }
}
