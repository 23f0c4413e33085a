//! `epm-run serve`: an OpenAI-compatible HTTP server over one EPM engine.
//!
//! The model loads once, on a thread of its own that then runs every request
//! ([`scheduler`]): `--parallel K` sequences share one llama.cpp context, each keeps its KV
//! cache for prefix reuse, and each decode step batches every active sequence. HTTP is
//! axum on tokio ([`routes`]); requests are rendered and tokenized there and handed over
//! through a channel. Requests beyond `K` wait, up to `--queue N`; more are refused with
//! 503 and `Retry-After`.
#![forbid(unsafe_code)]

pub mod api;
mod metrics;
mod routes;
pub mod scheduler;
pub mod text;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use epm_core::stats::RunStats;
use epm_engine::chat::ChatTemplate;
use epm_engine::{Engine, EngineError, EngineOptions, SessionOptions};
use epm_gguf::ModelIndex;

pub use routes::router;
use scheduler::{Job, Scheduler, Shared};

/// How to serve.
pub struct ServerOptions {
    pub addr: SocketAddr,
    /// The model's name in `/v1/models` and responses.
    pub model_name: String,
    pub index: ModelIndex,
    pub engine: EngineOptions,
    pub session: SessionOptions,
    /// Requests that may wait for a slot; beyond, 503.
    pub queue: usize,
    pub api_key: Option<String>,
    /// Overrides the model's chat template.
    pub chat_template: Option<String>,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    pub stats: Arc<RunStats>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the HTTP server failed: {0}")]
    Http(std::io::Error),
    #[error("the inference thread panicked")]
    EnginePanicked,
}

impl ServeError {
    pub fn is_bad_input(&self) -> bool {
        match self {
            ServeError::Engine(e) => e.is_bad_input(),
            ServeError::Bind { .. } => true,
            _ => false,
        }
    }
}

/// What the engine thread publishes once the model is loaded.
pub struct Loaded {
    pub engine: Arc<Engine>,
    pub template: Option<ChatTemplate>,
    pub n_ctx_per_seq: u32,
}

/// State every handler sees.
pub struct AppState {
    pub model_name: String,
    pub api_key: Option<String>,
    pub slots: usize,
    pub queue: usize,
    pub loaded: OnceLock<Loaded>,
    pub shared: Arc<Shared>,
    pub jobs: std::sync::Mutex<std::sync::mpsc::Sender<Job>>,
    pub stats: Arc<RunStats>,
    pub started: std::time::Instant,
}

/// Serve until `shutdown` resolves: bind, load the model on the engine thread, answer
/// requests; then stop accepting, end open streams with a final event and return.
/// `on_listening` is told the address once the socket is bound.
pub async fn serve(
    opts: ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(SocketAddr) + Send,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(opts.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: opts.addr,
            source,
        })?;
    let local = listener.local_addr().map_err(ServeError::Http)?;
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let shared = Arc::new(Shared::default());
    let state = Arc::new(AppState {
        model_name: opts.model_name.clone(),
        api_key: opts.api_key.clone(),
        slots: opts.session.n_seq.max(1) as usize,
        queue: opts.queue,
        loaded: OnceLock::new(),
        shared: shared.clone(),
        jobs: std::sync::Mutex::new(tx),
        stats: opts.stats.clone(),
        started: std::time::Instant::now(),
    });
    let max_body = opts.max_body_bytes;
    let (load_tx, load_rx) = tokio::sync::oneshot::channel::<Result<(), EngineError>>();
    let engine_state = state.clone();
    let engine_thread = std::thread::Builder::new()
        .name("epm-engine".into())
        .spawn(move || engine_main(opts, engine_state, rx, load_tx))
        .map_err(ServeError::Http)?;
    on_listening(local);
    let app = router(state.clone(), max_body);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Loading fails: stop serving and report it. Shutdown asked: stop too.
    let load_failed = tokio::spawn(async move {
        match load_rx.await {
            Ok(Err(e)) => Some(e),
            _ => None,
        }
    });
    let stopper = {
        let shared = shared.clone();
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            shared.stopping.store(true, Ordering::Release);
            let _ = stop_tx.send(true);
        })
    };
    let mut stop_rx2 = stop_rx.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stop_rx2.wait_for(|s| *s).await;
    });
    let watch_load = {
        let stop_tx = stop_tx.clone();
        let shared = shared.clone();
        async move {
            let failed = load_failed.await.ok().flatten();
            if failed.is_some() {
                shared.stopping.store(true, Ordering::Release);
                let _ = stop_tx.send(true);
            }
            failed
        }
    };
    let (served, failed) = tokio::join!(server, watch_load);
    stopper.abort();
    shared.stopping.store(true, Ordering::Release);
    drop(stop_rx);
    let joined = tokio::task::spawn_blocking(move || engine_thread.join())
        .await
        .map_err(|_| ServeError::EnginePanicked)?;
    if joined.is_err() {
        return Err(ServeError::EnginePanicked);
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    served.map_err(ServeError::Http)
}

/// The engine thread: load, start the session, publish, then schedule until stopped.
fn engine_main(
    opts: ServerOptions,
    state: Arc<AppState>,
    jobs: std::sync::mpsc::Receiver<Job>,
    loaded: tokio::sync::oneshot::Sender<Result<(), EngineError>>,
) {
    let template = match opts.chat_template.as_deref().map(ChatTemplate::new) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            let _ = loaded.send(Err(e.into()));
            return;
        }
        None => None,
    };
    let engine = match Engine::load(opts.index, opts.engine, opts.stats.clone(), None) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    let mut session = match engine.start(opts.session) {
        Ok(s) => s,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    let _ = state.loaded.set(Loaded {
        engine: engine.clone(),
        template,
        n_ctx_per_seq: session.n_ctx_per_seq(),
    });
    let _ = loaded.send(Ok(()));
    tracing::info!("model loaded; serving");
    let mut scheduler = Scheduler::new(&mut session, state.shared.clone());
    scheduler.run(&jobs);
    drop(scheduler);
    session.finish();
}

/// The model's name for responses: the file name without `.gguf` (and shard suffix).
pub fn model_name(path: &std::path::Path) -> String {
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let stem = stem.strip_suffix(".gguf").unwrap_or(&stem).to_string();
    match stem.rsplit_once("-00001-of-") {
        Some((base, _)) => base.to_string(),
        None => stem,
    }
}
