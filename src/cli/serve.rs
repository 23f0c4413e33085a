//! `epm-run serve`: an OpenAI-compatible server until SIGTERM or Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_engine::chat::ChatTemplate;
use epm_server::ServerOptions;

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
    /// A Jinja chat template to use instead of the model's own.
    #[arg(long)]
    chat_template_file: Option<PathBuf>,
    /// Refuse request bodies larger than this (413).
    #[arg(long, default_value_t = 8)]
    max_body_mb: usize,
    /// A browser origin (`https://app.example`) allowed to call the API, besides the
    /// loopback origins always allowed; repeat for several, `*` for any.
    #[arg(long)]
    cors_origin: Vec<String>,
}

pub fn run(a: ServeArgs) -> Result<()> {
    if a.max_body_mb == 0 {
        bail!(UsageError("--max-body-mb must be greater than 0".into()));
    }
    let chat_template = a
        .chat_template_file
        .as_ref()
        .map(|p| {
            let src = std::fs::read_to_string(p).map_err(|e| {
                UsageError(format!(
                    "cannot read --chat-template-file {}: {e}",
                    p.display()
                ))
            })?;
            // Compiled again on the engine thread; a template that does not compile is
            // refused before the model loads.
            ChatTemplate::new(&src)
                .map_err(|e| UsageError(format!("--chat-template-file {}: {e}", p.display())))?;
            Ok::<_, UsageError>(src)
        })
        .transpose()?;
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

/// Resolves on the first SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot listen for SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("shutting down: no new requests; open streams end with a final event");
}
