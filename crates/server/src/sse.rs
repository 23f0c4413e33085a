//! What every SSE stream encoder shares: the core's events in, each turned by the
//! protocol's [`Encoder`] into zero or more SSE events, sent in order until the encoder
//! says the stream is over (or the engine drops the job).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::Event;

/// A protocol's stream encoder.
pub trait Encoder: Send + 'static {
    /// Append the SSE events `ev` becomes to `out`; true when the stream is over.
    fn encode(&mut self, ev: Event, out: &mut VecDeque<SseEvent>) -> bool;
}

/// The SSE stream of one generation.
pub fn stream<E: Encoder>(
    rx: UnboundedReceiver<Event>,
    encoder: E,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let state = (rx, encoder, VecDeque::new(), false);
    stream::unfold(
        state,
        |(mut rx, mut enc, mut pending, mut finished)| async move {
            loop {
                if let Some(e) = pending.pop_front() {
                    return Some((Ok(e), (rx, enc, pending, finished)));
                }
                if finished {
                    return None;
                }
                let ev = rx.recv().await?;
                finished = enc.encode(ev, &mut pending);
            }
        },
    )
}
