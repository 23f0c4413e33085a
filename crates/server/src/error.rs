//! A request's failure, protocol-neutral: what went wrong (an [`ErrorKind`], which fixes
//! the HTTP status) and a message that says what to do. Each protocol adapter renders it
//! in its own error shape.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed JSON, wrong types, values out of range, prompts beyond the context: 400.
    BadRequest,
    /// A missing or wrong API key: 401.
    Unauthorized,
    /// A browser origin that `--cors-origin` does not admit: 403.
    Forbidden,
    /// No such endpoint: 404.
    NotFound,
    /// A body over `--max-body-mb`: 413.
    PayloadTooLarge,
    /// Loading, stopping, or every slot and queue place taken: 503 with `Retry-After`.
    Unavailable,
    /// The generation failed inside the engine: 500.
    Internal,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// Seconds, for `Retry-After` (503 only).
    pub retry_after: Option<u32>,
    /// The prompt did not fit a slot's context: each protocol words this as its clients
    /// recognize it (an agent compacts its conversation on that error).
    pub overflow: Option<ContextOverflow>,
    /// The request field at fault, where one is (OpenAI's errors give it as `param`).
    pub param: Option<String>,
    /// A code a client acts on, where the protocol has one (OpenAI's `code`:
    /// `previous_response_not_found` makes a client send the whole conversation again).
    pub code: Option<&'static str>,
}

/// A prompt, with the reply's `max_tokens` after it, beyond a slot's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    pub prompt_tokens: usize,
    /// The reply's tokens asked for, when the request gave a number.
    pub max_tokens: Option<u32>,
    /// A slot's context.
    pub n_ctx: usize,
}

impl ContextOverflow {
    /// The reply's `max_tokens` when they are what overflows (the prompt alone fits); `None`
    /// when the prompt alone is too long. Each protocol words the two cases apart.
    pub fn reply_tokens(&self) -> Option<u32> {
        self.max_tokens.filter(|_| self.prompt_tokens < self.n_ctx)
    }

    /// What to change, for a message that has said what does not fit.
    pub fn advice(&self) -> String {
        match self.reply_tokens() {
            Some(_) => format!(
                "lower max_tokens to at most {}, shorten the prompt, or start the server with a larger -c",
                self.n_ctx - self.prompt_tokens
            ),
            None => "shorten the prompt, or start the server with a larger -c (or fewer --parallel slots)"
                .to_string(),
        }
    }

    /// The protocol-neutral message.
    pub fn message(&self) -> String {
        match self.reply_tokens() {
            Some(m) => format!(
                "the prompt has {} tokens and max_tokens asks for {m} more, but a slot's context holds {}: {}",
                self.prompt_tokens,
                self.n_ctx,
                self.advice()
            ),
            None => format!(
                "the prompt has {} tokens, but a slot's context holds {}: {}",
                self.prompt_tokens,
                self.n_ctx,
                self.advice()
            ),
        }
    }
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
            retry_after: None,
            overflow: None,
            param: None,
            code: None,
        }
    }

    /// This error with `code` for clients to act on.
    pub fn with_code(self, code: &'static str) -> ApiError {
        ApiError {
            code: Some(code),
            ..self
        }
    }

    /// A 400 for the request field `param`.
    pub fn bad_field(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::bad_request(message)
        }
    }

    /// A 400 for a prompt beyond the context.
    pub fn context_overflow(o: ContextOverflow) -> ApiError {
        ApiError {
            overflow: Some(o),
            ..ApiError::bad_request(o.message())
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, message)
    }

    /// Fill-in-the-middle (`/infill`, or a `suffix` on OpenAI's completions and Ollama's
    /// generate) asked of a model whose vocabulary has no FIM tokens.
    pub fn no_fill_in_the_middle() -> ApiError {
        ApiError::bad_request(
            "this model's vocabulary has no fill-in-the-middle tokens (prefix, suffix and middle), so `suffix` and /infill cannot be served: use a code model that has them, or send the text before the cursor as `prompt` without `suffix`",
        )
    }

    /// A body over `--max-body-mb`.
    pub fn payload_too_large() -> ApiError {
        ApiError::new(
            ErrorKind::PayloadTooLarge,
            "the request body is larger than the server accepts: send a shorter prompt, or start the server with a larger --max-body-mb",
        )
    }

    pub fn unavailable(message: impl Into<String>, retry_after: u32) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(ErrorKind::Unavailable, message)
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message)
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The response carrying `body` (a protocol's error object): this error's status, and
    /// `Retry-After` when it has one.
    pub fn respond(&self, body: serde_json::Value) -> axum::response::Response {
        use axum::response::IntoResponse;
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(s),
            );
        }
        resp
    }
}

/// A JSON request body as `T`: 413 over the size cap, 400 for malformed JSON or wrong
/// types (naming the field).
pub fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large()
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"))
        }
    })?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        body_error::<T>(e, || {
            (bytes.len() <= MOST_BODY_SEARCHED)
                .then(|| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
                .flatten()
        })
    })
}

/// A request body already read as JSON, as the type its endpoint takes; errors as
/// [`parse_json`] words them.
pub fn from_json<T: DeserializeOwned>(body: &serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| body_error::<T>(e, || Some(body.clone())))
}

/// The top-level fields tried one by one in [`failing_field`] at the most.
const MOST_FIELDS_TRIED: usize = 64;

/// The largest body [`parse_json`] searches for the failing field (each field tried reads
/// the body again; a larger one, a long conversation, is answered without the field named).
const MOST_BODY_SEARCHED: usize = 1 << 20;

/// The 400 for a body that is not a `T`. `body` gives it as JSON, asked for only where the
/// error's path is lost (a field of a `#[serde(flatten)]`ed struct, as each protocol's
/// sampling options are), to find the field by [`failing_field`].
fn body_error<T: DeserializeOwned>(
    e: serde_path_to_error::Error<serde_json::Error>,
    body: impl FnOnce() -> Option<serde_json::Value>,
) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    use serde_json::error::Category;
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad_request(format!("the request body is not valid JSON: {inner}"))
        }
        Category::Data if path == "." || path.is_empty() => {
            match body().and_then(failing_field::<T>) {
                Some(field) => {
                    let message = format!("invalid `{field}`: {inner}");
                    ApiError::bad_field(field, message)
                }
                None => ApiError::bad_request(format!(
                    "the request body does not fit this endpoint: {inner}"
                )),
            }
        }
        Category::Data => {
            let message = format!("invalid `{path}`: {inner}");
            ApiError::bad_field(path, message)
        }
    }
}

/// The one top-level field of `body` without which it reads as a `T`, if there is one
/// (serde's `flatten` reports a wrong type in a flattened struct's field without a path).
fn failing_field<T: DeserializeOwned>(mut body: serde_json::Value) -> Option<String> {
    let names: Vec<String> = body
        .as_object()?
        .keys()
        .take(MOST_FIELDS_TRIED)
        .cloned()
        .collect();
    // Each field is taken out, the rest read in place, and the field put back.
    names.into_iter().find(|name| {
        let Some(value) = body.as_object_mut().and_then(|f| f.remove(name)) else {
            return false;
        };
        let reads = T::deserialize(&body).is_ok();
        if let Some(fields) = body.as_object_mut() {
            fields.insert(name.clone(), value);
        }
        reads
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Sampling {
        #[allow(dead_code)]
        temperature: Option<f32>,
        #[allow(dead_code)]
        seed: Option<u32>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Request {
        #[allow(dead_code)]
        messages: Vec<String>,
        #[serde(flatten)]
        #[allow(dead_code)]
        sampling: Sampling,
    }

    fn parsed(body: &'static str) -> Result<Request, ApiError> {
        parse_json(Ok(Bytes::from_static(body.as_bytes())))
    }

    #[test]
    fn a_wrong_type_in_a_flattened_field_is_named() {
        let e = parsed(r#"{"messages": ["hi"], "temperature": "hot"}"#).unwrap_err();
        assert!(
            e.message
                .starts_with(r#"invalid `temperature`: invalid type: string "hot", expected f32"#),
            "{}",
            e.message
        );
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let body = serde_json::json!({"messages": ["hi"], "seed": -1});
        let e = from_json::<Request>(&body).unwrap_err();
        assert!(e.message.starts_with("invalid `seed`: "), "{}", e.message);
        // A field outside the flattened struct keeps its path.
        let e = parsed(r#"{"messages": [1], "temperature": 0.5}"#).unwrap_err();
        assert!(
            e.message.starts_with("invalid `messages[0]`: "),
            "{}",
            e.message
        );
        assert_eq!(e.param.as_deref(), Some("messages[0]"));
        // Two wrong fields: neither alone is to blame, so none is named.
        let e = parsed(r#"{"messages": ["hi"], "temperature": "hot", "seed": -1}"#).unwrap_err();
        assert!(
            e.message
                .starts_with("the request body does not fit this endpoint: "),
            "{}",
            e.message
        );
        assert_eq!(e.param, None);
        assert!(parsed(r#"{"messages": ["hi"], "temperature": 0.5}"#).is_ok());
        // A body too large to search is answered without the field.
        let long = "x".repeat(MOST_BODY_SEARCHED);
        let body = format!(r#"{{"messages": ["{long}"], "temperature": "hot"}}"#);
        let e = parse_json::<Request>(Ok(Bytes::from(body))).unwrap_err();
        assert!(
            e.message
                .starts_with("the request body does not fit this endpoint: "),
            "{}",
            e.message.chars().take(120).collect::<String>()
        );
    }
}
