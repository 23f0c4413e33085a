//! The Responses API over a WebSocket: `GET /v1/responses` upgraded, as OpenAI's WebSocket
//! mode serves it (`client.responses.connect()` in the official SDKs; Codex's transport).
//!
//! The client sends `response.create` messages, each a `POST /v1/responses` body (without
//! `stream`, which is implied, or `background`, which is refused), and receives each
//! response's stream events as messages, one response after another: a message that
//! arrives while a response streams waits for it to end. The socket remembers the last
//! response it answered, so that the next request may continue it by
//! `previous_response_id` even when it was not stored (`store: false`). `generate: false`
//! answers a response with no output to continue from, and evaluates its prompt into a
//! slot's cache meanwhile ([`crate::responses::warmup_events`]). A `stream_id` is echoed
//! on every event of its response. A failure is an `error` event (`{"type": "error", "status",
//! "error": {...}}`, the HTTP error's body) and leaves the socket open; a client that closes
//! the socket cancels the response it was streaming.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

use crate::error::{from_json, ApiError};
use crate::openai::OpenAiError;
use crate::responses::{answer, history, own_items, warmup_events, Answer, Remembered};
use crate::responses::{Events, ResponsesRequest};
use crate::state::AppState;

/// `GET /v1/responses`: the WebSocket upgrade, or a 400 that says how to connect.
pub(crate) async fn upgrade(
    State(state): State<Arc<AppState>>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    match ws {
        Ok(ws) => ws
            .max_message_size(state.max_body_bytes)
            .on_upgrade(move |socket| serve(state, socket)),
        Err(why) => OpenAiError(ApiError::bad_request(format!(
            "GET /v1/responses opens the Responses API's WebSocket mode ({why}): connect with a WebSocket client and send `response.create` messages, or POST /v1/responses"
        )))
        .into_response(),
    }
}

/// Messages that may wait while a response streams; one more is answered with an error.
const MAX_WAITING: usize = 32;

/// What the socket read that is not the answer to wait for.
enum Incoming {
    /// A client message, to answer in turn.
    Text(String),
    /// The client closed the socket (or it broke).
    Closed,
}

/// Serve one socket until the client closes it.
async fn serve(state: Arc<AppState>, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    // Messages that came while a response streamed, answered after it in their order.
    let mut waiting: VecDeque<String> = VecDeque::new();
    let mut remembered: Option<Remembered> = None;
    let mut stop = state.stop.clone();
    loop {
        let text = match waiting.pop_front() {
            Some(t) => t,
            None => tokio::select! {
                incoming = read(&mut rx) => match incoming {
                    Incoming::Text(t) => t,
                    Incoming::Closed => return,
                },
                // A response under way when the server stops ends with its error event
                // first (the engine ends it); then the socket closes, going away.
                () = async { drop(stop.wait_for(|s| *s).await) } => {
                    let close = CloseFrame {
                        code: axum::extract::ws::close_code::AWAY,
                        reason: "the server is shutting down".into(),
                    };
                    let _ = tx.send(Message::Close(Some(close))).await;
                    return;
                }
            },
        };
        let (stream_id, events) = match request(&state, &text, remembered.clone()).await {
            Ok(r) => r,
            Err((stream_id, e)) => {
                // OpenAI drops what the socket remembered when a request fails.
                remembered = None;
                if send(&mut tx, error_event(&e, stream_id.as_deref()))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        let (conversation, mut events) = events;
        remembered = None;
        loop {
            tokio::select! {
                ev = events.next() => {
                    let Some((kind, data)) = ev else { break };
                    let Ok(mut v) = serde_json::from_str::<Value>(&data) else { continue };
                    match kind.as_str() {
                        "response.completed" => remembered = remember(&v["response"], &conversation),
                        "error" => v = socket_error(v),
                        _ => {}
                    }
                    if let Some(id) = &stream_id {
                        v["stream_id"] = json!(id);
                    }
                    if send(&mut tx, v).await.is_err() {
                        return;
                    }
                }
                incoming = read(&mut rx) => match incoming {
                    Incoming::Text(t) if waiting.len() < MAX_WAITING => waiting.push_back(t),
                    Incoming::Text(_) => {
                        let e = ApiError::bad_request(format!(
                            "{MAX_WAITING} messages already wait for the response under way: wait for its end before sending more"
                        ));
                        if send(&mut tx, error_event(&e, None)).await.is_err() {
                            return;
                        }
                    }
                    // Dropping the events ends the generation at its next token.
                    Incoming::Closed => return,
                },
            }
        }
    }
}

/// The next text message (a binary one read as UTF-8), skipping pings and pongs.
async fn read(rx: &mut futures_util::stream::SplitStream<WebSocket>) -> Incoming {
    loop {
        match rx.next().await {
            Some(Ok(Message::Text(t))) => return Incoming::Text(t.to_string()),
            Some(Ok(Message::Binary(b))) => {
                return Incoming::Text(String::from_utf8_lossy(&b).into_owned())
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Incoming::Closed,
        }
    }
}

async fn send(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    v: Value,
) -> Result<(), axum::Error> {
    tx.send(Message::Text(v.to_string().into())).await
}

/// A request's answer: its `stream_id`, the conversation before its output, and its
/// events. A failure carries the `stream_id` too.
type Started = (Option<String>, (Vec<Value>, Events));

/// Answer client message `text`, the socket remembering `remembered`.
async fn request(
    state: &Arc<AppState>,
    text: &str,
    remembered: Option<Remembered>,
) -> Result<Started, (Option<String>, ApiError)> {
    let mut raw: Value = serde_json::from_str(text).map_err(|e| {
        (
            None,
            ApiError::bad_request(format!(
                "the message is not JSON ({e}): send `{{\"type\": \"response.create\", ...}}`"
            )),
        )
    })?;
    let Some(fields) = raw.as_object_mut() else {
        return Err((
            None,
            ApiError::bad_request(
                "the message is not a JSON object: send `{\"type\": \"response.create\", ...}`",
            ),
        ));
    };
    let stream_id = fields
        .remove("stream_id")
        .and_then(|v| v.as_str().map(str::to_string));
    let failed = |e: ApiError| (stream_id.clone(), e);
    match fields.remove("type").as_ref().and_then(Value::as_str) {
        Some("response.create") => {}
        Some("response.steer") => {
            return Err(failed(ApiError::bad_field(
                "type",
                "`response.steer` is not served: wait for the response to end, then send a `response.create` with `previous_response_id`",
            )))
        }
        Some(other) => {
            return Err(failed(ApiError::bad_field(
                "type",
                format!("unknown event type `{other}`: send `response.create`"),
            )))
        }
        None => {
            return Err(failed(ApiError::bad_field(
                "type",
                "the message has no `type`: send `{\"type\": \"response.create\", ...}`",
            )))
        }
    }
    if fields.remove("background").and_then(|b| b.as_bool()) == Some(true) {
        return Err(failed(ApiError::bad_field(
            "background",
            "`background` is not served over a WebSocket: leave it out, or POST /v1/responses",
        )));
    }
    let generate = match fields.remove("generate") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(failed(ApiError::bad_field(
                "generate",
                "`generate` must be true or false",
            )))
        }
    };
    fields.insert("stream".into(), Value::Bool(true));
    let mut req: ResponsesRequest = from_json(&raw).map_err(failed)?;
    req.remembered = remembered;
    let own = own_items(&req).map_err(failed)?;
    // A `compaction_trigger` asks for the response; it is not part of the conversation.
    let mut conversation = history(state, &req, own).map_err(failed)?;
    conversation.retain(|i| i.get("type").and_then(Value::as_str) != Some("compaction_trigger"));
    let events: Events = if generate {
        match answer(state.clone(), req, raw, None)
            .await
            .map_err(|e| failed(e.0))?
        {
            Answer::Streamed(events) => events,
            // `stream` is set and `background` refused above.
            Answer::Whole(_) | Answer::Background(_) => {
                return Err(failed(ApiError::internal(
                    "the response was not streamed over the WebSocket",
                )))
            }
        }
    } else {
        let events = warmup_events(state, &req).map_err(|e| failed(e.0))?;
        futures_util::stream::iter(events).boxed()
    };
    Ok((stream_id, (conversation, events)))
}

/// What the socket remembers of a completed `response` whose conversation before its
/// output was `conversation` (a compaction item in its output included: a request that
/// continues it reads the conversation from there).
fn remember(response: &Value, conversation: &[Value]) -> Option<Remembered> {
    let id = response.get("id")?.as_str()?.to_string();
    let output = response.get("output")?.as_array()?;
    let mut items = conversation.to_vec();
    items.extend(output.iter().cloned());
    Some(Remembered { id, items })
}

/// An `error` event for failure `e`: its HTTP status and OpenAI's error body.
fn error_event(e: &ApiError, stream_id: Option<&str>) -> Value {
    let status = e.kind.status().as_u16();
    let mut v = OpenAiError(e.clone()).body();
    v["type"] = json!("error");
    v["status"] = json!(status);
    if let Some(id) = stream_id {
        v["stream_id"] = json!(id);
    }
    v
}

/// A streamed response's `error` event (its code, message and param at the top, as SSE
/// carries them) in a WebSocket's shape: under `error`, as a server error.
fn socket_error(mut v: Value) -> Value {
    if v.get("error").is_some_and(Value::is_object) {
        return v;
    }
    let field = |v: &mut Value, k: &str| v.as_object_mut().and_then(|o| o.remove(k));
    let error = json!({
        "type": "server_error",
        "code": field(&mut v, "code"),
        "message": field(&mut v, "message"),
        "param": field(&mut v, "param"),
    });
    v["error"] = error;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn an_error_event_has_the_status_and_the_http_body() {
        let e = ApiError::bad_field("generate", "`generate` must be true or false");
        let v = error_event(&e, Some("lane-1"));
        assert_eq!(v["type"], "error");
        assert_eq!(v["status"], 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "generate");
        assert_eq!(v["stream_id"], "lane-1");
        let e = ApiError::new(ErrorKind::Unavailable, "loading");
        assert_eq!(error_event(&e, None)["status"], 503);
        assert!(error_event(&e, None).get("stream_id").is_none());
    }

    #[test]
    fn a_streamed_error_is_put_in_the_sockets_shape() {
        let sse = json!({"type": "error", "code": "server_error", "message": "stopped",
                         "param": null, "sequence_number": 7});
        let v = socket_error(sse);
        assert_eq!(v["error"]["message"], "stopped");
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["sequence_number"], 7);
        assert!(v.get("message").is_none());
        let already = error_event(&ApiError::bad_request("x"), None);
        assert_eq!(socket_error(already.clone()), already);
    }

    #[test]
    fn a_completed_response_is_remembered_after_its_conversation() {
        let before = vec![json!({"type": "message", "role": "user", "content": "hi"})];
        let response = json!({"id": "resp_1", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yes"}]}
        ]});
        let r = remember(&response, &before).unwrap();
        assert_eq!(r.id, "resp_1");
        assert_eq!(r.items.len(), 2);
        assert_eq!(r.items[0], before[0]);
        assert_eq!(r.items[1]["role"], "assistant");
        assert!(remember(&json!({"output": []}), &before).is_none());
    }
}
