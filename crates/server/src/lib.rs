//! `epm-run serve`: an HTTP server over one EPM engine, protocols as adapters over the
//! engine's generation core.
//!
//! The model loads once, on a thread of its own that then runs every request through the
//! generation core ([`generation::engine_main`]): `--parallel K` slots share one llama.cpp
//! context, each keeps its KV cache for prefix reuse, and each decode step batches every
//! active slot. HTTP is axum on tokio. A protocol adapter ([`openai`]) turns a request into
//! a job (rendering and tokenizing on the HTTP side) and the core's events into its own
//! responses, stream and error shape; [`generation`] holds what adapters share (checks,
//! admission, submission, collection); [`auth`] is a layer in front of everything but
//! `/health` and the page; [`ops`] and [`metrics`] serve the operator; [`page`] is the chat
//! and pager page at `/` with its live stream. A new protocol is a module like
//! [`openai`] with its routes merged in [`router`].
#![forbid(unsafe_code)]

pub mod anthropic;
mod auth;
mod background;
pub mod compaction;
pub mod conversations;
pub mod error;
pub mod generation;
pub mod llamacpp;
mod metrics;
pub mod ollama;
pub mod openai;
mod ops;
pub mod output;
pub mod page;
pub mod protocol;
pub mod response_socket;
pub mod response_store;
pub mod responses;
mod sse;
pub mod state;
mod truncation;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::DefaultBodyLimit;
use axum::Router;

use epm_core::model::ModelIndex;
use epm_core::stats::RunStats;
use epm_engine::generation::Job;
use epm_engine::{EngineError, EngineOptions, SessionOptions};

use state::{AppState, ServerCounters};

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
    /// `--cors-origin`: browser origins allowed besides loopback (`*`: any).
    pub cors_origins: Vec<String>,
    /// The disk's best probed speed (`--disk-probe`), to judge decode's reads against.
    pub disk_mb_per_s: Option<f64>,
    pub stats: Arc<RunStats>,
    /// Where and how prompt prefixes are put aside (`None`: not at all).
    pub prompt_store: Option<PromptStoreOptions>,
    /// The reasoning budget of requests that set none (`--reasoning-budget`).
    pub reasoning_budget: output::BudgetDefaults,
    /// Memory for stored Responses API responses (`previous_response_id`); 0: none kept.
    pub responses_store_bytes: usize,
    /// Where stored responses are kept as files too, so that a restarted server can
    /// continue their conversations (`None`: in memory only).
    pub responses_dir: Option<std::path::PathBuf>,
    /// Where the expert heat of a warm start is kept (`epm_engine::warm`); `None`: no
    /// warm start.
    pub heat_dir: Option<std::path::PathBuf>,
    /// Once the server has been idle this long, put the slots' caches aside (with a prompt
    /// store) and write the expert heat (with a warm start), so that a server killed later
    /// keeps both for its next run (`None`: only when it stops).
    pub save_when_idle: Option<std::time::Duration>,
}

/// The prompt store of a server (`epm_engine::prompt_folder`).
#[derive(Debug, Clone)]
pub struct PromptStoreOptions {
    /// The folder under which prefixes are put aside, in a folder per model and settings
    /// kept for the next run.
    pub dir: std::path::PathBuf,
    /// How many bytes of files at most, over every folder under `dir`.
    pub capacity_bytes: u64,
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

/// How often the model files are checked against their identity at load, besides the
/// cheaper check before every request.
pub const MODEL_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// Every endpoint: the protocols' and the operator's behind the API key, `/health`
/// outside it, bodies capped at `max_body_bytes`.
pub fn router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    let keyed = Router::new()
        .merge(openai::routes())
        .merge(anthropic::routes())
        .merge(ollama::routes())
        .merge(llamacpp::routes())
        .merge(responses::routes())
        .merge(conversations::routes())
        .merge(page::routes())
        .merge(ops::routes())
        .fallback(ops::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    Router::new()
        .merge(ops::health_routes())
        .merge(page::public_routes())
        .merge(keyed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            max_body_bytes,
            protocol::refuse_oversized,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            protocol::count,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            protocol::cors,
        ))
        .with_state(state)
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
    let counters = Arc::new(ServerCounters::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let state = Arc::new(AppState {
        model_name: opts.model_name.clone(),
        api_key: opts.api_key.clone(),
        slots: opts.session.n_seq.max(1) as usize,
        queue: opts.queue,
        loaded: OnceLock::new(),
        server: counters.clone(),
        generation: Arc::new(epm_engine::generation::GenerationCounters::with_slots(
            opts.session.n_seq.max(1) as usize,
        )),
        jobs: Mutex::new(tx),
        stats: opts.stats.clone(),
        started: std::time::Instant::now(),
        requests: Default::default(),
        cors: protocol::CorsOrigins::from_flags(&opts.cors_origins),
        max_body_bytes: opts.max_body_bytes,
        stop: stop_rx.clone(),
        disk_mb_per_s: opts.disk_mb_per_s,
        reasoning_controls: Default::default(),
        responses: Mutex::new(match &opts.responses_dir {
            Some(dir) => response_store::ResponseStore::with_folder(
                opts.responses_store_bytes,
                response_store::ResponseFolder::new(dir.clone()),
            ),
            None => response_store::ResponseStore::new(opts.responses_store_bytes),
        }),
        background: Default::default(),
    });
    let max_body = opts.max_body_bytes;
    let (load_tx, load_rx) = tokio::sync::oneshot::channel::<Result<(), EngineError>>();
    let engine_state = state.clone();
    let engine_thread = std::thread::Builder::new()
        .name("epm-engine".into())
        .spawn(move || generation::engine_main(opts, engine_state, rx, load_tx))
        .map_err(ServeError::Http)?;
    on_listening(local);
    let app = router(state.clone(), max_body);
    // Loading fails: stop serving and report it. Shutdown asked: stop too. Loaded: run
    // again what background responses the previous server left unfinished.
    let resume_state = state.clone();
    let load_failed = tokio::spawn(async move {
        match load_rx.await {
            Ok(Err(e)) => Some(e),
            Ok(Ok(())) => {
                responses::resume_background(&resume_state);
                None
            }
            Err(_) => None,
        }
    });
    // The model files, checked in full (header checksum too) every few seconds.
    let watcher = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(MODEL_CHECK_PERIOD);
            let mut said_disk_bound = false;
            loop {
                every.tick().await;
                let _ = generation::check_model(&state, true);
                // Said once, when decode first turns out disk-bound.
                if let Some(v) = metrics::disk_verdict(&state) {
                    if v.disk_bound && !said_disk_bound {
                        tracing::warn!("{}", v.hint);
                        said_disk_bound = true;
                    }
                }
            }
        })
    };
    let stopper = {
        let server = counters.clone();
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            server.stopping.store(true, Ordering::Release);
            let _ = stop_tx.send(true);
        })
    };
    let mut stop_rx2 = stop_rx.clone();
    let http = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stop_rx2.wait_for(|s| *s).await;
    });
    let watch_load = {
        let stop_tx = stop_tx.clone();
        let server = counters.clone();
        async move {
            let failed = load_failed.await.ok().flatten();
            if failed.is_some() {
                server.stopping.store(true, Ordering::Release);
                let _ = stop_tx.send(true);
            }
            failed
        }
    };
    let (served, failed) = tokio::join!(http, watch_load);
    stopper.abort();
    watcher.abort();
    counters.stopping.store(true, Ordering::Release);
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
