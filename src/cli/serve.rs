//! `epm-run serve`: an OpenAI-compatible server until SIGTERM or Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_server::output::BudgetDefaults;
use epm_server::{PromptStoreOptions, ServerOptions};

use super::chat_args::ChatArgs;
use super::exit::UsageError;
use super::model_run::{ModelRunArgs, PromptReuse};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    run: ModelRunArgs,
    /// Address to listen on: loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences served at once; their decode steps share one batch. The context (-c) is
    /// split evenly between them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,
    /// Requests that may wait for a free slot; beyond, the server answers 503.
    #[arg(long, default_value_t = 16)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) on every endpoint but
    /// /health and the page (/).
    #[arg(long)]
    api_key: Option<String>,
    /// Refuse request bodies larger than this (413).
    #[arg(long, default_value_t = 8)]
    max_body_mb: usize,
    /// A browser origin (`https://app.example`) allowed to call the API, besides the
    /// loopback origins always allowed; repeat for several, `*` for any.
    #[arg(long)]
    cors_origin: Vec<String>,
    /// Disk space for prompt prefixes put aside: when another prompt takes a slot (a chat
    /// UI's title request between two turns), and when the server stops, the slot's KV is
    /// saved to a file and loaded back for the next turn, in this run or the next one with
    /// the same model and settings, instead of evaluating the conversation again. Covers the
    /// folders of every model and settings under --prompt-cache-dir. 0 turns it off.
    #[arg(long, default_value_t = 4096)]
    prompt_cache_mb: u64,
    /// Where those files go (a folder per model and settings is made inside and kept for
    /// the next run; default: the user's cache folder), and the expert heat of the warm
    /// start. Not a file system held in memory: its files would take RAM outside the budget.
    #[arg(long)]
    prompt_cache_dir: Option<PathBuf>,
    /// Once the server has been idle this many seconds, put the slots' conversations aside
    /// too (each once it has grown by 256 tokens since its last save), so that a server
    /// killed later (the OOM killer, a power cut) still answers them without evaluating
    /// them again after a restart, and write the expert heat of the warm start (with
    /// --prompt-cache-mb 0 too). A request that arrives during such a save waits for it.
    /// 0: only when the server stops.
    #[arg(long, default_value_t = 10)]
    prompt_cache_idle_s: u64,
    /// Memory for Responses API responses kept so that a request can continue one by its
    /// `previous_response_id` (and `GET /v1/responses/{id}` read it back), and for
    /// Conversations API conversations; the least recently used go first. Taken from the
    /// expert cache's share of the budget as any other memory of the server's. Each is also
    /// a file in the `responses` folder of --prompt-cache-dir, read back by the next server.
    /// 0: none kept.
    #[arg(long, default_value_t = 16)]
    responses_store_mb: usize,
    #[command(flatten)]
    chat: ChatArgs,
}

/// Where the server keeps what outlives it: the prompt store's folders and the expert heat.
fn state_dir(a: &ServeArgs) -> PathBuf {
    a.prompt_cache_dir
        .clone()
        .unwrap_or_else(super::paging::default_state_dir)
}

/// Where stored responses are kept as files (`responses` in the state folder), or `None`
/// (said) when none are stored or that folder cannot hold them: they then live in memory
/// only, as long as the server.
fn responses_dir(a: &ServeArgs) -> Option<PathBuf> {
    if a.responses_store_mb == 0 {
        return None;
    }
    let dir = state_dir(a).join("responses");
    let why = match super::paging::make_writable_dir(&dir) {
        Err(e) => format!("{}: {e}", dir.display()),
        Ok(()) if epm_sys::fs::in_memory(&dir).unwrap_or(false) => format!(
            "{} is on a file system held in memory, whose files would take RAM outside the budget",
            dir.display()
        ),
        Ok(()) => return Some(dir),
    };
    eprintln!(
        "warning: stored responses will not outlive the server: {why} (give --prompt-cache-dir)"
    );
    None
}

/// The folder under which the prompt store keeps its folders, its capacity and when it
/// saves, or `None` when it is off.
fn prompt_store(a: &ServeArgs) -> Result<Option<PromptStoreOptions>> {
    if a.prompt_cache_mb == 0 {
        return Ok(None);
    }
    let given = a.prompt_cache_dir.is_some();
    let parent = state_dir(a);
    let made = super::paging::make_writable_dir(&parent);
    // A folder the user named must work; the default one may fall back to no store.
    let refuse = |why: String| -> Result<Option<PromptStoreOptions>> {
        if given {
            bail!(UsageError(format!(
                "--prompt-cache-dir: {why}; give another folder, or --prompt-cache-mb 0"
            )));
        }
        eprintln!(
            "warning: prompt prefixes will not be put aside: {why} (give --prompt-cache-dir)"
        );
        Ok(None)
    };
    if let Err(e) = made {
        return refuse(format!("{}: {e}", parent.display()));
    }
    if epm_sys::fs::in_memory(&parent).unwrap_or(false) {
        return refuse(format!(
            "{} is on a file system held in memory, whose files would take RAM outside the budget",
            parent.display()
        ));
    }
    // At most half the free space: the store must not fill the disk.
    let free = epm_sys::fs::free_bytes(&parent).unwrap_or(u64::MAX);
    Ok(Some(PromptStoreOptions {
        dir: parent,
        capacity_bytes: (a.prompt_cache_mb << 20).min(free / 2),
    }))
}

pub fn run(a: ServeArgs) -> Result<()> {
    if a.max_body_mb == 0 {
        bail!(UsageError("--max-body-mb must be greater than 0".into()));
    }
    let chat_template = a.chat.template()?;
    let store = prompt_store(&a)?;
    // Requests share prefixes (a system prompt, a conversation).
    let run = a.run.set_up(a.parallel, PromptReuse::Shared, &[])?;
    let opts = ServerOptions {
        addr: SocketAddr::new(a.host, a.port),
        model_name: epm_server::model_name(&a.run.model),
        index: run.index.clone(),
        engine: run.engine.clone(),
        session: run.session,
        queue: a.queue,
        api_key: a.api_key.clone(),
        chat_template,
        max_body_bytes: a.max_body_mb << 20,
        cors_origins: a.cors_origin.clone(),
        disk_mb_per_s: run.disk_mb_per_s,
        stats: run.stats.clone(),
        prompt_store: store,
        reasoning_budget: BudgetDefaults {
            tokens: a.chat.budget_tokens(),
            message: a.chat.reasoning_budget_message.clone(),
        },
        responses_store_bytes: a.responses_store_mb << 20,
        responses_dir: responses_dir(&a),
        heat_dir: (!a.run.paging.no_warm_start).then(|| state_dir(&a)),
        save_when_idle: (a.prompt_cache_idle_s > 0)
            .then(|| std::time::Duration::from_secs(a.prompt_cache_idle_s)),
    };
    let disk = run.disk_mb_per_s;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(epm_server::serve(opts, shutdown_signal(), |addr| {
        eprintln!(
            "listening on http://{addr} (loading the model; /health answers 200 once loaded)"
        );
    }));
    let stats = run.finish(result.is_ok())?;
    result?;
    if stats.pager_enabled {
        super::model_run::report_disk(&stats, disk);
    }
    eprintln!("stopped");
    Ok(())
}

/// Resolves on the first SIGTERM, SIGHUP (the terminal it runs in was closed) or Ctrl-C:
/// each stops the server the same way, its streams ending with a final event, its slots'
/// conversations put aside for the next run and its stats written.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &str| {
        signal(kind)
            .map_err(|e| tracing::error!("cannot listen for {name}: {e}"))
            .ok()
    };
    let (mut term, mut hup) = (
        listen(SignalKind::terminate(), "SIGTERM"),
        listen(SignalKind::hangup(), "SIGHUP"),
    );
    let received = |s: &mut Option<tokio::signal::unix::Signal>| {
        let s = s.take();
        async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
    };
    tokio::select! {
        _ = received(&mut term) => {}
        _ = received(&mut hup) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("shutting down: no new requests; open streams end with a final event");
}
