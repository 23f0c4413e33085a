//! Argument structs (clap), their validation into library calls, and the subcommands.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use epm::gguf::{GgufError, GgufModel, ModelIndex};
use epm::llama::{
    self, ChatTurn, GenerateParams, PagerMode, Prediction, SessionError, SessionOptions,
};
use epm::plan::{self, RunShape};
use epm::stats::{self, PagerCounters, RunStats};
use epm::{harness, os, synth};

const MIB: u64 = 1 << 20;

/// Bad input or usage: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Parser, Debug)]
#[command(
    name = "epm-run",
    version,
    about = "Expert Paging for MoE: run MoE GGUF models larger than RAM on llama.cpp"
)]
struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text, paging experts within a RAM budget.
    Generate(GenerateArgs),
    /// Show what a model needs: expert bytes, working set, minimum and expert budget.
    Plan(PlanArgs),
    /// Write a synthetic GGUF model.
    Synth(SynthArgs),
    /// Synthesize a demo model and run it unpaged and paged, side by side.
    Demo(DemoArgs),
    /// A/B runs against upstream llama.cpp under the same hard memory cap.
    Ab(AbArgs),
    /// Measure the disk a model lives on: O_DIRECT reads at several sizes and queue depths.
    ProbeIo(ProbeIoArgs),
}

#[derive(Args, Debug)]
struct AbArgs {
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// A budget (and cap) in MiB; repeat for several.
    #[arg(long = "budget-mb", required = true)]
    budgets_mb: Vec<u64>,
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    #[arg(short = 'n', long = "n-predict", default_value_t = 32)]
    n_predict: usize,
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx: u32,
    #[arg(short = 't', long, default_value_t = 2)]
    threads: u32,
    #[arg(long = "ubatch-size", default_value_t = 128)]
    ubatch: u32,
    /// Repeat the whole set this many times, alternating configurations.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[arg(long, default_value = "validate/ab-test.json")]
    out: PathBuf,
    /// Also write the budget curve as a PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run the kernel-paging configuration at this read_ahead_kb (restored afterwards).
    #[arg(long)]
    kernel_readahead_kb: Option<u64>,
    /// Configurations to run, comma-separated, from reference, kernel, epm.
    #[arg(long, value_delimiter = ',', default_values_t = ["reference".to_string(), "kernel".to_string(), "epm".to_string()])]
    configs: Vec<String>,
    /// An extra `generate` flag for the epm runs (repeat for several), e.g. --epm-arg=--no-predict.
    #[arg(long = "epm-arg", allow_hyphen_values = true)]
    epm_args: Vec<String>,
    /// Keep the page cache between runs (default: every run starts cold).
    #[arg(long)]
    warm: bool,
}

#[derive(Args, Debug)]
struct ProbeIoArgs {
    /// A file on the disk to measure (default: a scratch file in the current directory).
    path: Option<PathBuf>,
    /// Bytes to read per measurement.
    #[arg(long, default_value_t = 256)]
    mb_per_test: u64,
    #[arg(long, default_value = "validate/io-probe.json")]
    out: PathBuf,
}

#[derive(Args, Debug, Clone)]
struct ShapeArgs {
    /// Context size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx: u32,
    /// Micro-batch size (`-ub`): tokens per graph evaluation, or `auto` to pick the largest
    /// of 512/256/128 whose compute buffer costs at most an eighth of the expert cache
    /// (`plan` shows the pick). Compare runs only at equal ubatch sizes.
    #[arg(long = "ubatch-size", default_value = "128", value_parser = parse_ubatch)]
    ubatch: Ubatch,
}

#[derive(Debug, Clone, Copy)]
enum Ubatch {
    Auto,
    Fixed(u32),
}

fn parse_ubatch(s: &str) -> Result<Ubatch, String> {
    match s {
        "auto" => Ok(Ubatch::Auto),
        n => match n.parse::<u32>() {
            Ok(0) | Err(_) => Err(format!("{s:?} is not a positive number or `auto`")),
            Ok(n) => Ok(Ubatch::Fixed(n)),
        },
    }
}

#[derive(Args, Debug)]
struct GenerateArgs {
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
    /// Interactive chat on stdin using the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Write the routing trace (selected experts per token and layer) here; see README.
    #[arg(long)]
    trace_file: Option<PathBuf>,
    /// How missing experts are read: `willneed` (asynchronous readahead, compute faults the
    /// pages) or `populate` (MADV_POPULATE_READ on --io-threads threads before the layer runs).
    #[arg(long, default_value = "willneed", value_parser = ["willneed", "populate"])]
    prefetch: String,
    /// I/O threads for `--prefetch populate`.
    #[arg(long, default_value_t = 4)]
    io_threads: usize,
    /// Cross-layer prediction (the default where the kernel has cachestat, Linux 6.5): while a
    /// layer computes, apply the next layer's router to its hidden state and prefetch the
    /// experts it would pick (decode steps only).
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
    /// How many MoE layers ahead to predict and prefetch (1-8). Deeper predictions start
    /// reads earlier but are less accurate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    predict_depth: u32,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Total RSS budget in MiB (default: 80% of available memory).
    #[arg(long = "ram-budget-mb")]
    ram_budget_mb: Option<u64>,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct SynthArgs {
    /// A preset name (the README lists them; an unknown name prints them all).
    #[arg(long)]
    preset: String,
    #[arg(short = 'o', long)]
    output: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Override the preset's layer count (keeps per-layer shapes).
    #[arg(long)]
    layers: Option<u32>,
    /// Override the preset's expert count (keeps per-expert shapes).
    #[arg(long)]
    experts: Option<u32>,
    /// Zipf-like exponent of expert popularity: 0 routes uniformly, higher is more skewed.
    #[arg(long, default_value_t = 0.0)]
    routing_skew: f64,
    /// Split into shards of at most this size (e.g. 500M, 8G), named -0000k-of-0000N.gguf.
    #[arg(long, value_parser = parse_size)]
    split_max_size: Option<u64>,
    /// Print the files and sizes that would be written, and write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// `123`, `500K`, `500M`, `8G` (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    match num.trim().parse::<u64>() {
        Ok(n) if n > 0 => n
            .checked_mul(mult)
            .ok_or_else(|| format!("{s} is too large")),
        _ => Err(format!("{s:?} is not a size like 500M or 8G")),
    }
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Tokens to generate in each run.
    #[arg(short = 'n', long, default_value_t = 48)]
    n_predict: usize,
}

/// clap has no two-letter short flags; accept llama.cpp's `-ub N` as `--ubatch-size N`.
pub fn normalize_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    args.map(|a| {
        if a == "-ub" {
            "--ubatch-size".into()
        } else {
            a
        }
    })
    .collect()
}

pub fn exit_code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.is::<UsageError>() || cause.is::<GgufError>() {
            return 2;
        }
        if let Some(harness::HarnessError::Interrupted) = cause.downcast_ref() {
            return 130;
        }
        if let Some(s) = cause.downcast_ref::<SessionError>() {
            return match s {
                SessionError::BudgetTooSmall { .. }
                | SessionError::EmptyPrompt
                | SessionError::ContextTooSmall { .. } => 2,
                _ => 1,
            };
        }
    }
    1
}

static STATS_TARGET: OnceLock<(Arc<RunStats>, PathBuf)> = OnceLock::new();

/// A thread that writes the stats file on every SIGUSR2 (once a run has registered one).
pub fn install_stats_signal() {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2])
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("epm-stats-signal".into())
        .spawn(move || {
            for _ in signals.forever() {
                if let Some((stats, path)) = STATS_TARGET.get() {
                    if let Err(e) = stats::write_snapshot(stats, path) {
                        tracing::warn!("cannot write stats to {}: {e}", path.display());
                    }
                }
            }
        });
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    llama_cpp_2::send_logs_to_tracing(
        llama_cpp_2::LogOptions::default().with_logs_enabled(verbose >= 2),
    );
}

pub fn run(args: Vec<OsString>) -> Result<()> {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version print and succeed; usage errors exit 2 through clap.
            e.exit();
        }
    };
    init_logging(cli.verbose);
    match cli.command {
        Command::Generate(a) => generate(a),
        Command::Plan(a) => plan_cmd(a),
        Command::Synth(a) => synth_cmd(a),
        Command::Demo(a) => demo(a),
        Command::Ab(a) => ab(a),
        Command::ProbeIo(a) => probe_io(a),
    }
}

fn open_index(path: &Path) -> Result<ModelIndex> {
    let model = GgufModel::open(path)?;
    Ok(ModelIndex::build(&model)?)
}

fn budget_bytes(mb: Option<u64>) -> Result<u64> {
    match mb {
        Some(0) => Err(UsageError("--ram-budget-mb must be greater than 0".into()).into()),
        Some(mb) => Ok(mb * MIB),
        None => Ok(plan::default_budget_bytes()),
    }
}

/// The run shape; `auto` ubatch is resolved against `budget` (128 without one).
fn check_shape(s: &ShapeArgs, index: &ModelIndex, budget: Option<u64>) -> Result<RunShape> {
    if s.ctx == 0 {
        bail!(UsageError("-c must be greater than 0".into()));
    }
    let n_ubatch = match (s.ubatch, budget) {
        (Ubatch::Fixed(n), _) => n,
        (Ubatch::Auto, Some(b)) => plan::choose_ubatch(index, s.ctx, b, os::page_size() as u64),
        (Ubatch::Auto, None) => *plan::AUTO_UBATCHES.last().expect("non-empty"),
    };
    Ok(RunShape {
        n_ctx: s.ctx,
        n_ubatch,
    })
}

fn generate(a: GenerateArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    let paged = !a.upstream_mmap && !a.no_pager && index.is_moe();
    let budget = if paged {
        Some(budget_bytes(a.ram_budget_mb)?)
    } else {
        None
    };
    let shape = check_shape(&a.shape, &index, budget)?;
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
    } else if !index.is_moe() {
        eprintln!(
            "notice: {} has no routed experts ({} architecture); running unpaged",
            a.model.display(),
            index.arch
        );
        PagerMode::Off
    } else {
        let budget = budget.expect("a budget when paged");
        let p = plan::make_plan(&index, shape, budget, os::page_size() as u64);
        if !p.fits {
            bail!(UsageError(format!(
                "RAM budget {} MiB is below the minimum of {} MiB for this model at ctx {}, ubatch {}; raise --ram-budget-mb, or lower -c / -ub (see `epm-run plan`)",
                budget / MIB,
                p.min_budget_bytes.div_ceil(MIB),
                shape.n_ctx,
                shape.n_ubatch
            )));
        }
        PagerMode::On {
            budget_bytes: budget,
            hot_window_tokens: a.hot_window,
        }
    };
    let budget = match mode {
        PagerMode::On { budget_bytes, .. } => budget_bytes,
        _ => 0,
    };
    let stats = Arc::new(RunStats {
        pager_enabled: matches!(mode, PagerMode::On { .. }),
        budget_bytes: budget,
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
        let _ = STATS_TARGET.set((stats.clone(), p.clone()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sampler =
        stats::spawn_memory_sampler(stats.clone(), stop.clone(), Duration::from_millis(20));

    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as i32);
    let threads = a.threads.unwrap_or(cores);
    let opts = SessionOptions {
        n_ctx: shape.n_ctx,
        n_batch: a.batch.max(shape.n_ubatch),
        n_ubatch: shape.n_ubatch,
        n_threads: threads,
        pager: mode,
        show_progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        trace_file: a.trace_file.clone(),
        prefetch: if a.prefetch == "populate" {
            os::Prefetch::PopulateRead {
                threads: a.io_threads,
            }
        } else {
            os::Prefetch::WillNeed
        },
        prediction: match (a.predict, a.no_predict) {
            (true, _) => Prediction::On {
                depth: a.predict_depth,
            },
            (_, true) => Prediction::Off,
            _ => Prediction::Default {
                depth: a.predict_depth,
            },
        },
        // The readahead thread competes with compute for a core: it only pays where one is
        // left over.
        prefill_predict_tokens: a.prefill_predict_tokens as usize,
        ahead_thread: match (a.ahead_thread, a.no_ahead_thread) {
            (true, _) => true,
            (_, true) => false,
            _ => threads < cores,
        },
    };
    let params = GenerateParams {
        prompt,
        n_predict: a.n_predict,
        temp: a.temp,
        seed: a.seed,
        dump_logits: a.dump_logits.clone(),
    };
    let turn = if a.chat {
        ChatTurn::Chat(params)
    } else {
        ChatTurn::Once(params)
    };
    let mut stdout = std::io::stdout().lock();
    let result = llama::run(&index, &opts, turn, stats.clone(), &mut stdout);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    stats.complete.store(result.is_ok(), Ordering::Relaxed);
    if let Some(p) = &stats_path {
        stats::write_snapshot(&stats, p)
            .with_context(|| format!("writing stats to {}", p.display()))?;
    }
    result?;
    if stats.pager_enabled {
        let s = stats.snapshot();
        tracing::info!(
            "hit rate {:.3}, evictions {}, peak RSS {} MiB (budget {} MiB), prefill {:.1} tok/s, decode {:.1} tok/s",
            s.experts.hit_rate,
            s.experts.evictions,
            s.memory.peak_rss_bytes / MIB,
            budget / MIB,
            s.tok_per_s.prefill,
            s.tok_per_s.decode
        );
    }
    Ok(())
}

fn plan_cmd(a: PlanArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    let budget = budget_bytes(a.ram_budget_mb)?;
    let shape = check_shape(&a.shape, &index, Some(budget))?;
    let p = plan::make_plan(&index, shape, budget, os::page_size() as u64);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let m = |b: u64| format!("{:.1} MiB", b as f64 / MIB as f64);
    println!("model            {} ({})", p.model, p.arch);
    println!("model bytes      {}", m(p.model_bytes));
    println!(
        "expert bytes     {}  in {} MoE layers, {} experts, {} used",
        m(p.expert_bytes),
        p.n_moe_layers,
        p.n_expert,
        p.n_expert_used
    );
    println!("non-expert bytes {}", m(p.non_expert_bytes));
    for l in &p.bytes_per_expert {
        println!(
            "  layer {:>3}: {} bytes per expert",
            l.layer, l.bytes_per_expert
        );
    }
    println!(
        "working set      {} per token, {} per ubatch of {}",
        m(p.working_set_bytes_per_token),
        m(p.ubatch_working_set_bytes),
        p.n_ubatch
    );
    println!(
        "reserve          {}  (KV {}, compute {}, runtime {}, margin {})",
        m(p.reserve_bytes),
        m(p.kv_bytes),
        m(p.compute_bytes),
        m(p.runtime_bytes),
        m(p.margin_bytes)
    );
    println!("min budget       {}", m(p.min_budget_bytes));
    println!(
        "ubatch auto      {} at this budget (largest of 512/256/128 costing at most 1/8 of the expert cache)",
        p.auto_ubatch
    );
    if p.fits {
        println!(
            "budget           {}  -> expert budget {} ({:.0}% of experts)",
            m(p.budget_bytes),
            m(p.expert_budget_bytes),
            100.0 * (p.expert_budget_bytes.min(p.expert_bytes)) as f64
                / p.expert_bytes.max(1) as f64
        );
    } else {
        println!(
            "budget           {}  is below the minimum",
            m(p.budget_bytes)
        );
    }
    Ok(())
}

fn synth_cmd(a: SynthArgs) -> Result<()> {
    let mut preset = synth::Preset::named(&a.preset).ok_or_else(|| {
        UsageError(format!(
            "unknown preset {:?}; choose one of: {}",
            a.preset,
            synth::PRESETS.join(", ")
        ))
    })?;
    if let Some(l) = a.layers {
        preset = preset.with_layers(l).map_err(UsageError)?;
    }
    if let Some(x) = a.experts {
        preset = preset.with_experts(x).map_err(UsageError)?;
    }
    if !(0.0..=8.0).contains(&a.routing_skew) {
        bail!(UsageError("--routing-skew must be between 0 and 8".into()));
    }
    preset.routing_skew = a.routing_skew;
    if a.dry_run {
        let files = synth::model_sizes(&preset, &a.output, a.split_max_size);
        for (path, size) in &files {
            println!("would write {} ({size} bytes)", path.display());
        }
        println!(
            "{} bytes in {} file(s), {} of them routed experts",
            files.iter().map(|(_, s)| s).sum::<u64>(),
            files.len(),
            preset.expert_bytes()
        );
        return Ok(());
    }
    let start = std::time::Instant::now();
    let files = write_synth(&preset, &a.output, a.seed, a.split_max_size)?;
    let secs = start.elapsed().as_secs_f64();
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    for f in &files {
        println!("wrote {}", f.display());
    }
    println!(
        "{} bytes in {secs:.1} s ({:.0} MB/s)",
        bytes,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}

fn write_synth(
    preset: &synth::Preset,
    path: &Path,
    seed: u64,
    split: Option<u64>,
) -> Result<Vec<PathBuf>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "synth {bar:40} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .expect("static template"),
    );
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let files = synth::write_model(preset, path, seed, split, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    Ok(files)
}

fn demo(a: DemoArgs) -> Result<()> {
    let dir = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("epm");
    let model = dir.join(format!("demo-v{}.gguf", env!("CARGO_PKG_VERSION")));
    let preset = synth::Preset::named("demo").expect("demo preset exists");
    if GgufModel::open(&model).is_err() {
        println!(
            "Synthesizing the demo model (synthetic random weights, not a trained model) at {}",
            model.display()
        );
        write_synth(&preset, &model, 7, None)?;
    }
    let index = open_index(&model)?;
    let shape = RunShape {
        n_ctx: 1024,
        n_ubatch: 128,
    };
    let base = plan::make_plan(&index, shape, u64::MAX, os::page_size() as u64);
    let budget = (base.reserve_bytes + index.expert_bytes * 3 / 10).max(base.min_budget_bytes);
    let budget_mb = budget.div_ceil(MIB);
    println!(
        "Demo model: {} experts x {} MoE layers, {:.0} MiB of experts, {:.0} MiB file. The weights are synthetic: the text is not meant to read well.",
        index.n_expert,
        index.layers.len(),
        index.expert_bytes as f64 / MIB as f64,
        index.model_bytes() as f64 / MIB as f64
    );
    let (_, exe) = self_exe()?;
    let work = tempdir_in(&dir)?;
    let prompt = "The quick brown fox jumps over the lazy dog. The pager reads each expert";
    let mut rows = Vec::new();
    for (label, flags) in [
        ("unpaged", vec!["--no-pager".to_string()]),
        (
            "paged",
            vec!["--ram-budget-mb".to_string(), budget_mb.to_string()],
        ),
    ] {
        let stats_path = work.join(format!("{label}.json"));
        let logits = work.join(format!("{label}.logits"));
        // Both runs start from a cold page cache, as after a reboot.
        os::drop_file_cache(&model)
            .with_context(|| format!("dropping {} from the page cache", model.display()))?;
        let out = std::process::Command::new(&exe)
            .args(["generate", "-m"])
            .arg(&model)
            .args([
                "-p",
                prompt,
                "-n",
                &a.n_predict.to_string(),
                "-c",
                "1024",
                "-ub",
                "128",
            ])
            .args(&flags)
            .arg("--stats-file")
            .arg(&stats_path)
            .arg("--dump-logits")
            .arg(&logits)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !out.status.success() {
            bail!("demo run '{label}' failed ({})", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let s: stats::Snapshot = serde_json::from_slice(&std::fs::read(&stats_path)?)?;
        println!("\n[{label}] {text}");
        rows.push((label, s, std::fs::read(&logits)?));
    }
    let identical =
        rows[0].2 == rows[1].2 && rows[0].1.tokens.generated_ids == rows[1].1.tokens.generated_ids;
    println!(
        "\nbit-identical tokens and logits: {}",
        if identical { "yes" } else { "NO" }
    );
    println!("\nBoth runs started from a cold page cache.");
    println!(
        "{:<8} {:>10} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "run", "peak RSS", "budget", "hit rate", "SSD/token", "prefill", "decode"
    );
    for (label, s, _) in &rows {
        let budget = if s.pager_enabled {
            format!("{} MiB", s.budget_bytes / MIB)
        } else {
            "-".into()
        };
        println!(
            "{:<8} {:>6} MiB {:>10} {:>9} {:>6} KiB {:>6.1} t/s {:>6.1} t/s",
            label,
            s.memory.peak_rss_bytes / MIB,
            budget,
            if s.pager_enabled {
                format!("{:.2}", s.experts.hit_rate)
            } else {
                "-".into()
            },
            (s.io.read_bytes_per_token / 1024.0) as u64,
            s.tok_per_s.prefill,
            s.tok_per_s.decode
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    if !identical {
        bail!("paged output differs from unpaged output");
    }
    Ok(())
}

/// This binary as reports name it, and the path to start copies of it from. A rebuild
/// during a long `ab` run replaces the file; `/proc/<pid>/exe` still runs the binary that
/// started the run (`current_exe` would then name a "(deleted)" path that does not exist).
fn self_exe() -> Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe().context("locating the epm-run binary")?;
    let shown = exe
        .to_str()
        .and_then(|s| s.strip_suffix(" (deleted)"))
        .map_or_else(|| exe.clone(), PathBuf::from);
    let own = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    let spawn = if own.exists() { own } else { exe };
    Ok((shown, spawn))
}

fn tempdir_in(dir: &Path) -> Result<PathBuf> {
    let p = dir.join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

fn ab(a: AbArgs) -> Result<()> {
    open_index(&a.model)?;
    if a.budgets_mb.contains(&0) || a.runs == 0 || a.n_predict == 0 {
        bail!(UsageError(
            "--budget-mb, --runs and -n must be greater than 0".into()
        ));
    }
    let prompt_args = match (&a.prompt, &a.file) {
        (Some(p), _) => vec!["-p".to_string(), p.clone()],
        (None, Some(f)) => vec!["-f".to_string(), f.display().to_string()],
        (None, None) => vec!["-p".to_string(), "The quick brown fox jumps over the lazy dog. Experts are paged in as routing asks for them.".to_string()],
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())?;
    }
    let out_dir = a
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let work_dir = std::env::temp_dir().join(format!("epm-ab-{}", std::process::id()));
    let mut configs = Vec::new();
    for name in &a.configs {
        let c = harness::RunConfig::ALL
            .into_iter()
            .find(|c| c.name() == name.trim())
            .ok_or_else(|| {
                UsageError(format!(
                    "unknown --configs entry {name:?}: use reference, kernel and/or epm"
                ))
            })?;
        if !configs.contains(&c) {
            configs.push(c);
        }
    }
    // The reference runs first: the others are compared with it.
    configs.sort_by_key(|c| harness::RunConfig::ALL.iter().position(|x| x == c));
    let (exe, spawn_exe) = self_exe()?;
    let cfg = harness::AbConfig {
        exe,
        spawn_exe,
        model: a.model.clone(),
        budgets_mb: a.budgets_mb.clone(),
        prompt_args,
        n_predict: a.n_predict,
        n_ctx: a.ctx,
        n_threads: a.threads,
        n_ubatch: a.ubatch,
        runs: a.runs,
        kernel_readahead_kb: a.kernel_readahead_kb,
        configs,
        epm_args: a.epm_args.clone(),
        warm: a.warm,
        work_dir: work_dir.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    if let Some(kb) = a.kernel_readahead_kb {
        eprintln!("note: kernel-paging runs set read_ahead_kb of the model's disk to {kb} for their duration (restored after each)");
    }
    let result = harness::run_ab(&cfg, &interrupted, |row| {
        eprintln!(
            "rep {} budget {} MiB {:<9} {} ({:.1} s)",
            row.rep,
            row.budget_mb,
            row.config.name(),
            row.outcome,
            row.child.wall_s
        );
    });
    let _ = std::fs::remove_dir_all(&work_dir);
    let report = result?;
    if report.cap != harness::cap::CapKind::CgroupV1
        && report.cap != harness::cap::CapKind::CgroupV2
    {
        eprintln!("WARNING: no writable cgroup: the cap was RLIMIT_DATA plus a sampler that kills at the budget, which does not bound page cache");
    }
    let json = serde_json::to_vec_pretty(&report)?;
    stats::write_atomic(&a.out, &json).with_context(|| format!("writing {}", a.out.display()))?;
    print!("{}", harness::render_table(&report));
    println!("wrote {}", a.out.display());
    if let Some(png) = &a.plot {
        harness::plot::write_png(&report, png).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        println!("wrote {}", png.display());
    }
    if !report.all_passed {
        bail!("A/B check failed: {}", report.failures.join("; "));
    }
    Ok(())
}

fn probe_io(a: ProbeIoArgs) -> Result<()> {
    let report = epm::probe::run(a.path.as_deref(), a.mb_per_test << 20)?;
    let out_dir = a
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(out_dir)?;
    stats::write_atomic(&a.out, &serde_json::to_vec_pretty(&report)?)?;
    for r in &report.results {
        println!(
            "{:<10} block {:>8} KiB  qd {:>2}  {:>8.1} MB/s",
            r.pattern,
            r.block_bytes / 1024,
            r.queue_depth,
            r.mb_per_s
        );
    }
    println!("wrote {}", a.out.display());
    Ok(())
}
