//! The OpenAI stream encoder: a generation's events as SSE chunks (`chat.completion.chunk`
//! or `text_completion`), a final chunk with the finish reason, the usage when asked for,
//! then `[DONE]`. A failure (or a shutdown) ends it with an error event and `[DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::Event;

use super::wire::{FinishReason, Usage};
use super::OpenAiError;
use crate::error::ApiError;
use crate::generation;

/// How the chunks of one response look.
#[derive(Clone)]
pub struct ChunkShape {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub chat: bool,
    pub include_usage: bool,
}

impl ChunkShape {
    /// `object` of the whole (not streamed) response.
    pub fn whole_object(&self) -> &'static str {
        if self.chat {
            "chat.completion"
        } else {
            "text_completion"
        }
    }

    fn object(&self) -> &'static str {
        if self.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }

    fn chunk(&self, delta: Option<&str>, first: bool, finish: Option<FinishReason>) -> Value {
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
            "object": self.object(),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        })
    }

    fn usage(&self, usage: Usage) -> Value {
        json!({
            "id": self.id,
            "object": self.object(),
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        })
    }
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

fn done() -> SseEvent {
    SseEvent::default().data("[DONE]")
}

struct State {
    rx: UnboundedReceiver<Event>,
    shape: ChunkShape,
    usage: generation::Usage,
    pending: VecDeque<SseEvent>,
    finished: bool,
}

impl State {
    /// The SSE events one core event becomes.
    fn encode(&mut self, ev: Event) {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                self.usage.prompt = prompt_tokens as u64;
                self.usage.cached = cached_tokens as u64;
                if self.shape.chat {
                    self.pending
                        .push_back(data(&self.shape.chunk(None, true, None)));
                }
            }
            Event::Text(t) => {
                let c = self.shape.chunk(Some(&t), false, None);
                self.pending.push_back(data(&c));
            }
            Event::Done {
                finish_reason,
                completion_tokens,
            } => {
                self.usage.completion = completion_tokens as u64;
                let finish = FinishReason::from(&finish_reason);
                self.pending
                    .push_back(data(&self.shape.chunk(None, false, Some(finish))));
                if self.shape.include_usage {
                    let u = self.shape.usage(self.usage.into());
                    self.pending.push_back(data(&u));
                }
                self.pending.push_back(done());
                self.finished = true;
            }
            Event::Failed(e) => {
                let body = OpenAiError(ApiError::internal(e.to_string())).body();
                self.pending.push_back(data(&body));
                self.pending.push_back(done());
                self.finished = true;
            }
        }
    }
}

/// The SSE stream of one generation.
pub fn sse(
    rx: UnboundedReceiver<Event>,
    shape: ChunkShape,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let state = State {
        rx,
        shape,
        usage: Default::default(),
        pending: VecDeque::new(),
        finished: false,
    };
    stream::unfold(state, |mut s| async move {
        loop {
            if let Some(e) = s.pending.pop_front() {
                return Some((Ok(e), s));
            }
            if s.finished {
                return None;
            }
            let ev = s.rx.recv().await?;
            s.encode(ev);
        }
    })
}
