//! `epm-run generate`: one prompt, or an interactive chat on stdin, with experts paged
//! within a RAM budget.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_core::stats::RunStats;
use epm_core::units::MIB;
use epm_engine::generate::Request;
use epm_engine::telemetry::{self, MemorySampler};
use epm_engine::{Engine, EngineOptions, SamplingParams, SeqCache, SessionOptions};

use super::exit::UsageError;
use super::paging::{
    available_cores, compute_threads, paged_budget, pager_mode, run_stats, stats_path, PagingArgs,
};
use super::{check_output_path, open_index, progress, signals, ShapeArgs};
use epm_core::plan::{ComputeThreads, Threads};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The GGUF model (first shard of a split model).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 64)]
    n_predict: usize,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Compute threads, or `auto`: all cores, but one fewer for decode when the run pages
    /// with less than a third of the experts resident (decode then waits on the disk, and
    /// the helper threads that read ahead and evict use the free core); prefill always
    /// computes on every core.
    #[arg(short = 't', long, default_value = "auto")]
    threads: Threads,
    /// Logical batch size.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch: u32,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 42)]
    seed: u32,
    /// Total RSS budget in MiB (default: 80% of available memory).
    #[arg(long = "ram-budget-mb", conflicts_with_all = ["no_pager", "upstream_mmap"])]
    ram_budget_mb: Option<u64>,
    /// Upstream behaviour apart from MAP_POPULATE: no pager, no hook.
    #[arg(long, conflicts_with = "upstream_mmap")]
    no_pager: bool,
    /// Upstream behaviour including MAP_POPULATE: the baseline.
    #[arg(long)]
    upstream_mmap: bool,
    /// Write the stats JSON here at exit and on SIGUSR2 (default: $EPM_STATS_FILE).
    #[arg(long)]
    stats_file: Option<PathBuf>,
    /// Write the f32 little-endian logits of every sampled position, concatenated.
    #[arg(long)]
    dump_logits: Option<PathBuf>,
    /// Interactive chat on stdin using the model's chat template; each turn evaluates only
    /// its new tokens.
    #[arg(long)]
    chat: bool,
    #[command(flatten)]
    paging: PagingArgs,
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    for (flag, path) in [
        ("--dump-logits", &a.dump_logits),
        ("--trace-file", &a.paging.trace_file),
        ("--stats-file", &a.stats_file),
    ] {
        if let Some(p) = path {
            check_output_path(flag, p)?;
        }
    }
    let budget = paged_budget(&index, a.ram_budget_mb, a.no_pager, a.upstream_mmap)?;
    let shape = a.shape.resolve(&index, budget, 1)?;
    let prompt = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| UsageError(format!("cannot read prompt file {}: {e}", f.display())))?,
        (None, None) if a.chat => String::new(),
        (None, None) => bail!(UsageError(
            "give a prompt with -p TEXT or -f FILE (or use --chat)".into()
        )),
    };
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
    let opts = EngineOptions {
        mode,
        paging: a.paging.options(threads.decode, cores),
    };
    let result = generate(&a, index, opts, &stats, shape, threads, prompt);
    drop(sampler);
    stats.complete.store(result.is_ok(), Ordering::Relaxed);
    if let Some(p) = &stats_path {
        telemetry::write_stats(&stats, p)
            .with_context(|| format!("writing stats to {}", p.display()))?;
    }
    result?;
    if stats.pager_enabled {
        let s = telemetry::snapshot(&stats);
        tracing::info!(
            "decode cache hit rate {:.3}, evictions {}, peak RSS {} MiB (budget {} MiB), prefill {:.1} tok/s, decode {:.1} tok/s",
            s.experts.decode.cache_hit_rate,
            s.experts.evictions,
            s.memory.peak_rss_bytes / MIB,
            s.budget_bytes / MIB,
            s.tok_per_s.prefill,
            s.tok_per_s.decode
        );
    }
    Ok(())
}

fn generate(
    a: &GenerateArgs,
    index: epm_gguf::ModelIndex,
    opts: EngineOptions,
    stats: &Arc<RunStats>,
    shape: epm_core::plan::RunShape,
    threads: ComputeThreads,
    prompt: String,
) -> Result<()> {
    let mut logits = match &a.dump_logits {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let engine = Engine::load(index, opts, stats.clone(), progress::loading())?;
    let mut session = engine.start(SessionOptions {
        n_ctx: shape.n_ctx,
        n_batch: a.batch.max(shape.n_ubatch),
        n_ubatch: shape.n_ubatch,
        n_threads: threads.decode as i32,
        n_threads_batch: threads.batch as i32,
        n_seq: 1,
    })?;
    let sampling = SamplingParams {
        temperature: a.temp,
        top_p: 1.0,
        seed: a.seed,
    };
    let mut stdout = std::io::stdout().lock();
    let mut cache = SeqCache::default();
    if a.chat {
        chat(&engine, &mut session, &mut cache, a, sampling, &mut stdout)?;
    } else {
        let tokens = engine.tokenize(&prompt, true, true);
        epm_engine::generate::generate(
            &mut session,
            0,
            &mut cache,
            Request {
                prompt: &tokens,
                n_predict: a.n_predict,
                sampling,
                logits: logits.as_mut().map(|w| w as &mut dyn Write),
            },
            &mut |piece| {
                stdout.write_all(piece)?;
                stdout.flush()
            },
        )?;
        writeln!(stdout)?;
    }
    if let Some(mut w) = logits {
        w.flush().context("writing the logits")?;
    }
    session.finish();
    Ok(())
}

/// An interactive chat on stdin with the model's chat template. The conversation's KV
/// stays in the sequence's cache, so each turn evaluates only its new tokens.
fn chat(
    engine: &Engine,
    session: &mut epm_engine::Session<'_>,
    cache: &mut SeqCache,
    a: &GenerateArgs,
    sampling: SamplingParams,
    out: &mut dyn Write,
) -> Result<()> {
    let mut history: Vec<serde_json::Value> = Vec::new();
    let stdin = std::io::stdin();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.is_empty() {
            continue;
        }
        history.push(serde_json::json!({"role": "user", "content": line}));
        let prompt = engine.render_chat(None, &history, None, None)?;
        let tokens = engine.tokenize(&prompt, true, true);
        let mut reply = Vec::new();
        let outcome = epm_engine::generate::generate(
            session,
            0,
            cache,
            Request {
                prompt: &tokens,
                n_predict: a.n_predict,
                sampling,
                logits: None,
            },
            &mut |piece| {
                reply.extend_from_slice(piece);
                out.write_all(piece)?;
                out.flush()
            },
        )?;
        tracing::info!(
            "turn: {} prompt tokens, {} reused from the conversation so far",
            outcome.prompt_tokens,
            outcome.reused_tokens
        );
        writeln!(out)?;
        history.push(serde_json::json!({
            "role": "assistant",
            "content": String::from_utf8_lossy(&reply).trim().to_string(),
        }));
    }
    Ok(())
}
