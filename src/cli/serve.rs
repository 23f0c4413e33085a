//! `epm-run serve`: an OpenAI-compatible server until SIGTERM or Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_engine::telemetry::{self, MemorySampler};
use epm_engine::{EngineOptions, SessionOptions};
use epm_server::ServerOptions;

use super::exit::UsageError;
use super::paging::{
    available_cores, compute_threads, paged_budget, pager_mode, run_stats, stats_path, PagingArgs,
};
use super::{check_output_path, open_index, signals, ShapeArgs};
use epm_core::plan::Threads;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The GGUF model (first shard of a split model).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Address to listen on: loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Total RSS budget in MiB (default: 80% of available memory).
    #[arg(long = "ram-budget-mb", conflicts_with_all = ["no_pager", "upstream_mmap"])]
    ram_budget_mb: Option<u64>,
    /// Upstream behaviour apart from MAP_POPULATE: no pager, no hook.
    #[arg(long, conflicts_with = "upstream_mmap")]
    no_pager: bool,
    /// Upstream behaviour including MAP_POPULATE.
    #[arg(long)]
    upstream_mmap: bool,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Compute threads, or `auto`: all cores, but one fewer for decode when the run pages
    /// with less than a third of the experts resident (decode then waits on the disk, and
    /// the helper threads that read ahead and evict use the free core); prefill always
    /// computes on every core.
    #[arg(short = 't', long, default_value = "auto")]
    threads: Threads,
    /// Logical batch size for prompts.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch: u32,
    /// Sequences served at once; their decode steps share one batch. The context (-c) is
    /// split evenly between them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,
    /// Requests that may wait for a free slot; beyond, the server answers 503.
    #[arg(long, default_value_t = 16)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long)]
    api_key: Option<String>,
    /// A Jinja chat template to use instead of the model's own.
    #[arg(long)]
    chat_template_file: Option<PathBuf>,
    /// Refuse request bodies larger than this (413).
    #[arg(long, default_value_t = 8)]
    max_body_mb: usize,
    /// Write the stats JSON here at exit and on SIGUSR2 (default: $EPM_STATS_FILE).
    #[arg(long)]
    stats_file: Option<PathBuf>,
    #[command(flatten)]
    paging: PagingArgs,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    for (flag, path) in [
        ("--trace-file", &a.paging.trace_file),
        ("--stats-file", &a.stats_file),
    ] {
        if let Some(p) = path {
            check_output_path(flag, p)?;
        }
    }
    if a.max_body_mb == 0 {
        bail!(UsageError("--max-body-mb must be greater than 0".into()));
    }
    let chat_template = a
        .chat_template_file
        .as_ref()
        .map(|p| {
            std::fs::read_to_string(p).map_err(|e| {
                UsageError(format!(
                    "cannot read --chat-template-file {}: {e}",
                    p.display()
                ))
            })
        })
        .transpose()?;
    let budget = paged_budget(&index, a.ram_budget_mb, a.no_pager, a.upstream_mmap)?;
    let shape = a.shape.resolve(&index, budget, a.parallel)?;
    let mode = pager_mode(&index, &a.model, budget, a.no_pager, a.upstream_mmap, shape)?;
    let stats = run_stats(&index, &a.model, mode);
    let stats_path = stats_path(&a.stats_file);
    if let Some(p) = &stats_path {
        signals::write_stats_on_sigusr2(stats.clone(), p.clone())?;
    }
    let sampler = MemorySampler::start(stats.clone(), Duration::from_millis(20))
        .context("starting the memory sampler")?;
    let cores = available_cores();
    let threads = compute_threads(a.threads, cores, &index, mode, shape);
    let opts = ServerOptions {
        addr: SocketAddr::new(a.host, a.port),
        model_name: epm_server::model_name(&a.model),
        index,
        engine: EngineOptions {
            mode,
            paging: a.paging.options(threads.decode, cores),
        },
        session: SessionOptions {
            n_ctx: shape.n_ctx,
            n_batch: a.batch.max(shape.n_ubatch),
            n_ubatch: shape.n_ubatch,
            n_threads: threads.decode as i32,
            n_threads_batch: threads.batch as i32,
            n_seq: a.parallel,
        },
        queue: a.queue,
        api_key: a.api_key.clone(),
        chat_template,
        max_body_bytes: a.max_body_mb << 20,
        stats: stats.clone(),
    };
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
    drop(sampler);
    stats.complete.store(result.is_ok(), Ordering::Relaxed);
    if let Some(p) = &stats_path {
        telemetry::write_stats(&stats, p)
            .with_context(|| format!("writing stats to {}", p.display()))?;
    }
    result?;
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
