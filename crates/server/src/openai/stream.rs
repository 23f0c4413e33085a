//! The OpenAI stream encoder: a generation's events as SSE chunks (`chat.completion.chunk`
//! or `text_completion`), a final chunk with the finish reason, the usage when asked for,
//! then `[DONE]`. A failure (or a shutdown) ends it with an error event and `[DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::Stream;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::Event;

use super::wire::{chat_logprob, text_logprobs, FinishReason, Usage, WireToolCall};
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
    /// Send a chunk with `prompt_progress` per prefill ubatch (llama-server's
    /// `return_progress`).
    pub return_progress: bool,
    /// The request's custom tools, whose calls are `custom` tool calls.
    pub custom_tools: Vec<String>,
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

    fn chunk(
        &self,
        index: u32,
        delta: Option<&str>,
        first: bool,
        finish: Option<FinishReason>,
    ) -> Value {
        let mut d = serde_json::Map::new();
        if let Some(t) = delta {
            d.insert("content".into(), json!(t));
        }
        self.delta_chunk(index, d, first, finish, Value::Null)
    }

    /// A chunk of choice `index` with chat delta `d` (completions: its `content` as `text`).
    fn delta_chunk(
        &self,
        index: u32,
        mut d: serde_json::Map<String, Value>,
        first: bool,
        finish: Option<FinishReason>,
        logprobs: Value,
    ) -> Value {
        let choice = if self.chat {
            if first {
                d.insert("role".into(), json!("assistant"));
            }
            json!({"index": index, "delta": d, "logprobs": logprobs, "finish_reason": finish})
        } else {
            let text = d.get("content").cloned().unwrap_or(json!(""));
            json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
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

/// llama-server's `prompt_progress`: the prompt's tokens, those reused from the cache, those
/// in the cache now (reused + evaluated), and the milliseconds since the first report.
pub fn prompt_progress(p: &epm_engine::PrefillProgress, since: std::time::Instant) -> Value {
    json!({
        "total": p.cached + p.to_evaluate,
        "cache": p.cached,
        "processed": p.cached + p.evaluated,
        "time_ms": since.elapsed().as_millis() as u64,
    })
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

fn done() -> SseEvent {
    SseEvent::default().data("[DONE]")
}

/// One choice's stream.
struct State {
    shape: ChunkShape,
    /// The choice's `index`.
    index: u32,
    /// When the first progress report came: `prompt_progress.time_ms` counts from it.
    progress_since: Option<std::time::Instant>,
    usage: generation::Usage,
    pending: VecDeque<SseEvent>,
    /// The choice's finish chunk is out.
    finished: bool,
    /// The generation failed; its error is out.
    failed: bool,
    /// Tool calls sent so far: the next one's `index`.
    tool_calls: usize,
    /// Bytes of text sent so far (completions' `text_offset`).
    text_len: usize,
}

impl State {
    /// The SSE events one core event becomes.
    fn encode_event(&mut self, ev: Event) {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                self.usage.started(prompt_tokens, cached_tokens);
                if self.shape.chat {
                    self.pending
                        .push_back(data(&self.shape.chunk(self.index, None, true, None)));
                }
            }
            Event::Text(t) => {
                let c = self.shape.chunk(self.index, Some(&t), false, None);
                self.text_len += t.len();
                self.pending.push_back(data(&c));
            }
            Event::Reasoning(t) => {
                if self.shape.chat {
                    let mut d = serde_json::Map::new();
                    d.insert("reasoning_content".into(), json!(t));
                    let c = self
                        .shape
                        .delta_chunk(self.index, d, false, None, Value::Null);
                    self.pending.push_back(data(&c));
                }
            }
            Event::ToolCall(call) => {
                if self.shape.chat {
                    let mut d = serde_json::Map::new();
                    let wire =
                        WireToolCall::new(&call, Some(self.tool_calls), &self.shape.custom_tools);
                    self.tool_calls += 1;
                    d.insert("tool_calls".into(), json!([wire]));
                    let c = self
                        .shape
                        .delta_chunk(self.index, d, false, None, Value::Null);
                    self.pending.push_back(data(&c));
                }
            }
            Event::Progress(p) => {
                if self.shape.return_progress {
                    let since = *self
                        .progress_since
                        .get_or_insert_with(std::time::Instant::now);
                    let mut c = self.shape.delta_chunk(
                        self.index,
                        serde_json::Map::new(),
                        false,
                        None,
                        Value::Null,
                    );
                    c["prompt_progress"] = prompt_progress(&p, since);
                    self.pending.push_back(data(&c));
                }
            }
            Event::Logprob(l) => {
                // Sent before its token's text, which may be held back: a chunk of its own.
                let lp = if self.shape.chat {
                    json!({"content": [chat_logprob(&l)]})
                } else {
                    text_logprobs(std::slice::from_ref(&l), self.text_len)
                };
                let c = self
                    .shape
                    .delta_chunk(self.index, serde_json::Map::new(), false, None, lp);
                self.pending.push_back(data(&c));
            }
            Event::Done {
                finish_reason,
                completion_tokens,
                reasoning_tokens,
            } => {
                self.usage.finished(completion_tokens, reasoning_tokens);
                let finish = FinishReason::from(&finish_reason);
                self.pending.push_back(data(&self.shape.chunk(
                    self.index,
                    None,
                    false,
                    Some(finish),
                )));
                self.finished = true;
            }
            Event::Failed(e) => {
                let body = OpenAiError(ApiError::internal(e.to_string())).body();
                self.pending.push_back(data(&body));
                self.failed = true;
            }
        }
    }
}

/// The choices' streams as one: each choice's chunks as they come, then (once every choice
/// has finished) the usage when asked for, summed over the choices, and `[DONE]`. A failed
/// choice ends the stream with its error and `[DONE]`.
struct Choices {
    choices: Vec<State>,
    /// Choices not finished yet.
    open: usize,
}

/// The SSE stream of a request's generations, one per choice, in the order of their
/// `index`.
pub fn sse(
    rxs: Vec<UnboundedReceiver<Event>>,
    shape: ChunkShape,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let choices: Vec<State> = (0..rxs.len())
        .map(|i| State {
            shape: shape.clone(),
            index: i as u32,
            progress_since: None,
            usage: Default::default(),
            pending: VecDeque::new(),
            finished: false,
            failed: false,
            tool_calls: 0,
            text_len: 0,
        })
        .collect();
    let encoder = Choices {
        open: choices.len(),
        choices,
    };
    crate::sse::stream(crate::sse::indexed(rxs), encoder)
}

impl crate::sse::Encoder for Choices {
    type Input = (usize, Event);
    type Output = SseEvent;

    fn encode(&mut self, (i, ev): (usize, Event), out: &mut VecDeque<SseEvent>) -> bool {
        let Some(choice) = self.choices.get_mut(i) else {
            return false;
        };
        // Nothing follows a choice's finish.
        if choice.finished {
            return false;
        }
        choice.encode_event(ev);
        out.append(&mut choice.pending);
        if choice.failed {
            out.push_back(done());
            return true;
        }
        if !choice.finished {
            return false;
        }
        self.open -= 1;
        if self.open > 0 {
            return false;
        }
        let first = &self.choices[0].shape;
        if first.include_usage {
            let usage = generation::Usage::of_choices(self.choices.iter().map(|c| &c.usage));
            out.push_back(data(&first.usage(usage.into())));
        }
        out.push_back(done());
        true
    }
}
