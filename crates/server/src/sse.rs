//! What every stream encoder shares: the core's events in, each turned by the protocol's
//! [`Encoder`] into zero or more SSE events (or, for a WebSocket, the events' names and
//! data), sent in order until the encoder says the stream is over (or the engine drops the
//! job).

use std::collections::VecDeque;
use std::convert::Infallible;

use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use epm_engine::generation::Event;

/// A protocol's stream encoder.
pub trait Encoder: Send + 'static {
    /// What it encodes: a generation's [`Event`]s, or several generations' tagged by their
    /// place.
    type Input: Send + 'static;
    /// What it writes: SSE events, or what a transport other than SSE sends.
    type Output: Send + 'static;

    /// Append the events `ev` becomes to `out`; true when the stream is over.
    fn encode(&mut self, ev: Self::Input, out: &mut VecDeque<Self::Output>) -> bool;
}

/// One generation's events, as a stream that ends when the engine drops the job.
pub fn events(rx: UnboundedReceiver<Event>) -> impl Stream<Item = Event> + Send + Unpin {
    Box::pin(stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (ev, rx))
    }))
}

/// Several generations' events as they come, each with its generation's place in `rxs`.
pub fn indexed(
    rxs: Vec<UnboundedReceiver<Event>>,
) -> impl Stream<Item = (usize, Event)> + Send + Unpin {
    stream::select_all(
        rxs.into_iter()
            .enumerate()
            .map(|(i, rx)| events(rx).map(move |ev| (i, ev))),
    )
}

/// The stream of `events`, as `encoder` writes them.
pub fn stream<E: Encoder>(
    events: impl Stream<Item = E::Input> + Send + Unpin + 'static,
    encoder: E,
) -> impl Stream<Item = Result<E::Output, Infallible>> {
    let state = (events, encoder, VecDeque::new(), false);
    stream::unfold(
        state,
        |(mut events, mut enc, mut pending, mut finished)| async move {
            loop {
                if let Some(e) = pending.pop_front() {
                    return Some((Ok(e), (events, enc, pending, finished)));
                }
                if finished {
                    return None;
                }
                let ev = events.next().await?;
                finished = enc.encode(ev, &mut pending);
            }
        },
    )
}
