//! `epm-run generate`: one prompt, or an interactive chat on stdin, with experts paged
//! within a RAM budget.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use epm_core::stats::{PagerCounters, RunStats};
use epm_core::units::MIB;
use epm_engine::generate::Request;
use epm_engine::telemetry::{self, MemorySampler};
use epm_engine::{
    Engine, EngineOptions, PagerMode, PagingOptions, Prediction, SamplingParams, SeqCache,
    SessionOptions,
};
use epm_sys::Prefetch;

use super::exit::UsageError;
use super::{budget_bytes, check_output_path, open_index, progress, signals, ShapeArgs};

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
    /// Threads (default: all cores).
    #[arg(short = 't', long)]
    threads: Option<i32>,
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
    /// Experts used within this many recent tokens are never evicted.
    #[arg(long, default_value_t = 0)]
    hot_window: u64,
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
    /// Write the routing trace (selected experts per token and layer) here; see README.
    #[arg(long)]
    trace_file: Option<PathBuf>,
    /// How missing experts are read: `willneed` (asynchronous readahead, compute faults the
    /// pages) or `populate` (MADV_POPULATE_READ on --io-threads threads before the layer runs).
    #[arg(long, value_enum, default_value_t = PrefetchMode::Willneed)]
    prefetch: PrefetchMode,
    /// I/O threads for `--prefetch populate`.
    #[arg(long, default_value_t = 4)]
    io_threads: usize,
    /// Cross-layer prediction (the default where the kernel has cachestat, Linux 6.5): while a
    /// layer computes, apply the next layer's router to its hidden state and prefetch the
    /// experts it would pick, in decode steps and (see --prefill-predict-tokens) in prefill.
    #[arg(long, overrides_with = "no_predict")]
    predict: bool,
    /// Cross-layer prediction off: read only the experts routing selected.
    #[arg(long = "no-predict", overrides_with = "predict")]
    no_predict: bool,
    /// Advise predicted experts in from a readahead thread, so the page allocation and read
    /// submission of a guess leave the compute thread (the default when -t leaves a core
    /// free).
    #[arg(long, overrides_with = "no_ahead_thread")]
    ahead_thread: bool,
    /// Advise predicted experts in from the hook, on the compute thread.
    #[arg(long = "no-ahead-thread", overrides_with = "ahead_thread")]
    no_ahead_thread: bool,
    /// Predict the next layer's experts in prefill too, from this many tokens of each
    /// ubatch, spread evenly over a longer one (0: decode steps only).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(0..=512))]
    prefill_predict_tokens: u64,
    /// How many MoE layers ahead to predict in decode (1-8). Deeper predictions start reads
    /// earlier but are less accurate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    predict_depth: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrefetchMode {
    Willneed,
    Populate,
}

impl GenerateArgs {
    fn paging(&self, threads: i32, cores: i32) -> PagingOptions {
        PagingOptions {
            prefetch: match self.prefetch {
                PrefetchMode::Willneed => Prefetch::WillNeed,
                PrefetchMode::Populate => Prefetch::PopulateRead {
                    threads: self.io_threads,
                },
            },
            prediction: match (self.predict, self.no_predict) {
                (true, _) => Prediction::On {
                    depth: self.predict_depth,
                },
                (_, true) => Prediction::Off,
                _ => Prediction::Default {
                    depth: self.predict_depth,
                },
            },
            // The readahead thread competes with compute for a core: it only pays where
            // one is left over.
            ahead_thread: match (self.ahead_thread, self.no_ahead_thread) {
                (true, _) => true,
                (_, true) => false,
                _ => threads < cores,
            },
            prefill_predict_tokens: self.prefill_predict_tokens as usize,
            hot_window_tokens: self.hot_window,
            trace_file: self.trace_file.clone(),
        }
    }
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    for (flag, path) in [
        ("--dump-logits", &a.dump_logits),
        ("--trace-file", &a.trace_file),
        ("--stats-file", &a.stats_file),
    ] {
        if let Some(p) = path {
            check_output_path(flag, p)?;
        }
    }
    let paged = !a.upstream_mmap && !a.no_pager && index.is_moe();
    let budget = paged.then(|| budget_bytes(a.ram_budget_mb)).transpose()?;
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
    let mode = if a.upstream_mmap {
        PagerMode::UpstreamMmap
    } else if a.no_pager {
        PagerMode::Off
    } else if let Some(budget) = budget {
        epm_core::plan::make_plan(&index, shape, budget, epm_sys::page_size() as u64).check()?;
        PagerMode::On {
            budget_bytes: budget,
        }
    } else {
        eprintln!(
            "notice: {} has no routed experts ({} architecture); running unpaged",
            a.model.display(),
            index.arch
        );
        PagerMode::Off
    };
    let stats = Arc::new(RunStats {
        pager_enabled: matches!(mode, PagerMode::On { .. }),
        budget_bytes: budget.filter(|_| paged).unwrap_or(0),
        model_path: a.model.clone(),
        model_bytes: index.model_bytes(),
        expert_bytes: index.expert_bytes,
        pager: Arc::new(PagerCounters::new(
            index.layers.iter().map(|l| l.layer),
            index.n_expert,
        )),
        ..Default::default()
    });
    let stats_path = a
        .stats_file
        .clone()
        .or_else(|| std::env::var_os("EPM_STATS_FILE").map(PathBuf::from));
    if let Some(p) = &stats_path {
        signals::write_stats_on_sigusr2(stats.clone(), p.clone())?;
    }
    let sampler = MemorySampler::start(stats.clone(), Duration::from_millis(20))
        .context("starting the memory sampler")?;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as i32);
    let threads = a.threads.unwrap_or(cores);
    let opts = EngineOptions {
        mode,
        paging: a.paging(threads, cores),
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
    threads: i32,
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
        n_threads: threads,
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
    let template = engine
        .chat_template()
        .context("the model has no chat template (tokenizer.chat_template)")?;
    let mut history: Vec<(String, String)> = Vec::new();
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
        history.push(("user".into(), line.into()));
        let prompt = engine.apply_builtin_template(&template, &history, true)?;
        let tokens = engine.tokenize(&prompt, true, true);
        let mut reply = Vec::new();
        epm_engine::generate::generate(
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
        writeln!(out)?;
        history.push((
            "assistant".into(),
            String::from_utf8_lossy(&reply).trim().to_string(),
        ));
    }
    Ok(())
}
