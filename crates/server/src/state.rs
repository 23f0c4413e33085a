//! What every handler sees: the server's settings, the model once it is loaded (with its
//! chat format compiled once), the channel to the engine thread, and the counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use epm_core::stats::RunStats;
use epm_engine::chat::ChatRenderer;
use epm_engine::generation::{GenerationCounters, Job};
use epm_engine::integrity::ModelIdentity;
use epm_engine::Engine;

use crate::protocol::{CorsOrigins, RequestCounts};

/// What the engine thread publishes once the model is loaded.
pub struct Loaded {
    pub engine: Arc<Engine>,
    pub chat: ChatRenderer,
    pub n_ctx_per_seq: u32,
    /// Tokens per `llama_decode` call (`-b`): what `/infill` fits its prompt to.
    pub n_batch: u32,
    /// The model files as they were when loaded.
    pub identity: ModelIdentity,
    /// The reasoning budget of requests that set none.
    pub budget: crate::output::BudgetDefaults,
}

/// The server's own counts, beside the generation core's.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Requests admitted and not yet ended: running or waiting for a slot.
    pub in_flight: AtomicUsize,
    pub rejected_overload: AtomicU64,
    /// Conversations compacted: summaries written ([`crate::compaction`]).
    pub compactions: AtomicU64,
    /// No new requests; the engine thread must end every request and stop. Shared with
    /// llama.cpp's abort callback, which stops the batch in flight.
    pub stopping: Arc<AtomicBool>,
    /// Set once a model file changed on disk: why (every new request gets a 503 saying so).
    pub model_changed: OnceLock<String>,
}

pub struct AppState {
    /// The model's name in responses.
    pub model_name: String,
    pub api_key: Option<String>,
    pub slots: usize,
    pub queue: usize,
    pub loaded: OnceLock<Loaded>,
    pub server: Arc<ServerCounters>,
    pub generation: Arc<GenerationCounters>,
    pub jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    pub stats: Arc<RunStats>,
    pub started: Instant,
    /// Requests per protocol, for `/metrics`.
    pub requests: RequestCounts,
    /// Browser origins that may call the API.
    pub cors: CorsOrigins,
    /// The largest request body (`--max-body-mb`), and the largest WebSocket message.
    pub max_body_bytes: usize,
    /// Turns true once the server stops accepting requests: a WebSocket then closes.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// The disk's best probed speed, when given.
    pub disk_mb_per_s: Option<f64>,
    /// Running chat completions a client may tell to end their reasoning.
    pub reasoning_controls: Arc<ReasoningControls>,
    /// Responses API responses kept for `previous_response_id` and `GET /v1/responses/{id}`.
    pub responses: Mutex<crate::response_store::ResponseStore>,
    /// Responses API responses running in the background, and the last finished.
    pub background: crate::background::Runs,
}

/// Running chat completions that a client may tell to end their reasoning block now
/// (`/v1/chat/completions/control`), by completion id: each holds the flag its jobs read
/// before every pick, and how many jobs hold it (a request's choices share its id).
#[derive(Debug, Default)]
pub struct ReasoningControls(Mutex<HashMap<String, (Arc<AtomicBool>, usize)>>);

impl ReasoningControls {
    /// Make `id` controllable until the guard is dropped (with the job); the jobs registered
    /// under one id share its flag.
    pub fn register(self: &Arc<Self>, id: String) -> (Arc<AtomicBool>, ControlGuard) {
        let flag = match self.0.lock() {
            Ok(mut m) => {
                let entry = m
                    .entry(id.clone())
                    .or_insert_with(|| (Arc::new(AtomicBool::new(false)), 0));
                entry.1 += 1;
                entry.0.clone()
            }
            Err(_) => Arc::new(AtomicBool::new(false)),
        };
        let guard = ControlGuard {
            controls: self.clone(),
            id,
        };
        (flag, guard)
    }

    /// Ask the running completion `id` to end its reasoning; false when none runs.
    pub fn end_reasoning(&self, id: &str) -> bool {
        let m = match self.0.lock() {
            Ok(m) => m,
            Err(_) => return false,
        };
        match m.get(id) {
            Some((flag, _)) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

/// Keeps a completion controllable; dropped with its job, it takes the id out.
#[derive(Debug)]
pub struct ControlGuard {
    controls: Arc<ReasoningControls>,
    id: String,
}

impl Drop for ControlGuard {
    fn drop(&mut self) {
        if let Ok(mut m) = self.controls.0.lock() {
            if let Some(entry) = m.get_mut(&self.id) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    m.remove(&self.id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choices_of_one_request_share_its_control_until_the_last_ends() {
        let controls = Arc::new(ReasoningControls::default());
        let (first, g1) = controls.register("chatcmpl-1".into());
        let (second, g2) = controls.register("chatcmpl-1".into());
        assert!(Arc::ptr_eq(&first, &second));
        drop(g1);
        assert!(controls.end_reasoning("chatcmpl-1"));
        assert!(second.load(Ordering::Relaxed));
        drop(g2);
        assert!(!controls.end_reasoning("chatcmpl-1"));
        // A new request under a used id starts unended.
        let (again, _g) = controls.register("chatcmpl-1".into());
        assert!(!again.load(Ordering::Relaxed));
    }
}
