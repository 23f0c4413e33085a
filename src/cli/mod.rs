//! The command line: clap definitions shared by the subcommands, dispatch, logging, and
//! helpers. Each subcommand lives in its own file; terminal output and stdin are theirs.

mod ab;
mod chat_args;
mod demo;
pub mod exit;
mod generate;
mod model_run;
mod paging;
mod plan;
mod probe_io;
mod probe_paging;
mod progress;
mod serve;
mod signals;
mod sim;
mod synth;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};

use epm_core::model::ModelIndex;
use epm_core::plan::{self as planning, RunShape};
use epm_core::units::MIB;
use epm_gguf::GgufModel;
use epm_sys::proc;
use exit::UsageError;

#[derive(Parser, Debug)]
#[command(
    name = "epm-run",
    version,
    about = "Expert Paging for MoE: run MoE GGUF models larger than RAM on llama.cpp"
)]
struct Cli {
    /// More log output (-v info, -vv debug and llama.cpp's own log); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text, paging experts within a RAM budget.
    // Boxed: its sampling flags make it several times the size of the other variants.
    Generate(Box<generate::GenerateArgs>),
    /// Show what a model needs: expert bytes, working set, minimum and expert budget.
    Plan(plan::PlanArgs),
    /// Write a synthetic GGUF model.
    Synth(synth::SynthArgs),
    /// Synthesize a demo model and run it unpaged and paged, side by side.
    Demo(demo::DemoArgs),
    /// A/B runs against upstream llama.cpp under the same hard memory cap.
    Ab(ab::AbArgs),
    /// Measure the disk a model lives on: O_DIRECT reads at several sizes and queue depths.
    ProbeIo(probe_io::ProbeIoArgs),
    /// Measure what paging a model's experts in and out costs the kernel, per MiB, with
    /// 4 KiB and with large page-cache folios.
    ProbePaging(probe_paging::ProbePagingArgs),
    /// A server for the clients of OpenAI's API (Chat Completions, Responses), Anthropic's,
    /// Ollama's and llama-server's, with a chat page, paging experts within the budget, with
    /// prefix reuse and parallel sessions.
    Serve(serve::ServeArgs),
    /// Replay routing traces through expert-cache policies (Belady's optimum included).
    Sim(sim::SimArgs),
}

/// Run settings shared by the commands that size a context.
#[derive(Args, Debug, Clone)]
pub struct ShapeArgs {
    /// Context size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx: u32,
    /// Micro-batch size (`-ub`): tokens per graph evaluation. `auto` (the default): paged,
    /// the largest of 2048/1024/512/256/128 (at most 1024 for `serve` and `--chat`, whose
    /// prompts reuse whole ubatches, or 256 with `--prompt-split grid`) whose compute buffer costs at most an eighth of the
    /// expert cache (`plan` shows the pick); unpaged, llama.cpp's 512; in `generate`, no
    /// larger than the prompt needs. Compare runs only at equal ubatch sizes.
    #[arg(long = "ubatch-size", default_value = "auto", value_parser = parse_ubatch)]
    pub ubatch: Ubatch,
}

#[derive(Debug, Clone, Copy)]
pub enum Ubatch {
    Auto,
    Fixed(u32),
}

impl Ubatch {
    pub fn is_auto(self) -> bool {
        matches!(self, Ubatch::Auto)
    }
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

impl ShapeArgs {
    /// The run shape for `n_seq` sequences; `auto` ubatch is resolved against `budget`
    /// (the smallest choice without one).
    /// `auto` picks at most `auto_max` (see [`planning::reuse_auto_ubatch_max`]).
    pub fn resolve(
        &self,
        index: &ModelIndex,
        budget: Option<u64>,
        n_seq: u32,
        auto_max: u32,
    ) -> Result<RunShape> {
        if self.ctx == 0 {
            bail!(UsageError("-c must be greater than 0".into()));
        }
        let shape = RunShape {
            n_ctx: self.ctx,
            n_ubatch: *planning::AUTO_UBATCHES.last().expect("non-empty"),
            n_seq,
        };
        let n_ubatch = match (self.ubatch, budget) {
            (Ubatch::Fixed(n), _) => n,
            (Ubatch::Auto, Some(b)) => {
                planning::choose_ubatch(index, shape, b, epm_sys::page_size() as u64, auto_max)
            }
            (Ubatch::Auto, None) => planning::UPSTREAM_UBATCH,
        };
        Ok(RunShape { n_ubatch, ..shape })
    }
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
    epm_engine::telemetry::route_llama_logs(verbose >= 2);
}

pub fn run(args: Vec<OsString>) -> Result<()> {
    // --help and --version print and succeed; usage errors print and exit 2 through clap.
    let cli = Cli::try_parse_from(args).unwrap_or_else(|e| e.exit());
    init_logging(cli.verbose);
    // A model file truncated under a run raises SIGBUS on its mapping: name the file and
    // exit as bad input instead of dying with a bare "Bus error".
    epm_sys::sigbus::install(exit::BAD_INPUT);
    match cli.command {
        Command::Generate(a) => generate::run(*a),
        Command::Plan(a) => plan::run(a),
        Command::Synth(a) => synth::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Ab(a) => ab::run(a),
        Command::ProbeIo(a) => probe_io::run(a),
        Command::ProbePaging(a) => probe_paging::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Sim(a) => sim::run(a),
    }
}

/// The model's index, from its GGUF headers (first shard of a split model).
pub fn open_index(path: &Path) -> Result<ModelIndex> {
    let model = GgufModel::open(path)?;
    Ok(ModelIndex::build(&model)?)
}

/// `--ram-budget-mb` in bytes, or the default: 80% of available memory (or of the cgroup
/// limit, if lower).
pub fn budget_bytes(mb: Option<u64>) -> Result<u64> {
    match mb {
        Some(0) => Err(UsageError("--ram-budget-mb must be greater than 0".into()).into()),
        Some(mb) => Ok(mb * MIB),
        None => Ok(planning::default_budget_bytes(
            proc::meminfo("MemAvailable").unwrap_or(4096 * MIB),
            proc::cgroup_memory_limit(),
        )),
    }
}

/// A file this run will write: its folder must exist. Checked before the model loads, so
/// a typo fails in a second rather than after the load.
pub fn check_output_path(flag: &str, path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => return Ok(()),
    };
    if !dir.is_dir() {
        bail!(UsageError(format!(
            "cannot write {flag} {}: the folder {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Create the folder of an output file if it is missing.
pub fn create_parent(path: &Path) -> Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

/// This binary as reports name it, and the path to start copies of it from. A rebuild
/// during a long `ab` run replaces the file; `/proc/<pid>/exe` still runs the binary that
/// started the run (`current_exe` would then name a "(deleted)" path that does not exist).
pub fn self_exe() -> Result<(PathBuf, PathBuf)> {
    use anyhow::Context;
    let exe = std::env::current_exe().context("locating the epm-run binary")?;
    let shown = exe
        .to_str()
        .and_then(|s| s.strip_suffix(" (deleted)"))
        .map_or_else(|| exe.clone(), PathBuf::from);
    let own = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    let spawn = if own.exists() { own } else { exe };
    Ok((shown, spawn))
}
