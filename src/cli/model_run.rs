//! What `generate` and `serve` share: the flags that pick a model, a budget, a context and
//! threads ([`ModelRunArgs`]), and the set-up they imply ([`ModelRun`]): the index, the
//! plan (computed once), the pager mode, the compute threads, the stats and their file.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use epm_core::diagnose;
use epm_core::model::ModelIndex;
use epm_core::pager::{CachePolicy, EvictBy};
use epm_core::plan::{make_plan, reuse_auto_ubatch_max, step_selection_bound_bytes, Plan};
use epm_core::prefix::PromptCuts;
use epm_core::stats::{PagerCounters, RunStats};
use epm_core::threads::Threads;
use epm_engine::telemetry::{self, MemorySampler};
use epm_engine::{EngineOptions, PagerMode, SessionOptions};

use super::exit::UsageError;
use super::paging::PagingArgs;
use super::{budget_bytes, check_output_path, open_index, signals, ShapeArgs};

#[derive(Args, Debug)]
pub struct ModelRunArgs {
    /// The GGUF model (first shard of a split model).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Total RSS budget in MiB (default: 80% of available memory).
    #[arg(long = "ram-budget-mb", conflicts_with_all = ["no_pager", "upstream_mmap"])]
    pub ram_budget_mb: Option<u64>,
    /// Upstream behaviour apart from MAP_POPULATE: no pager, no hook.
    #[arg(long, conflicts_with = "upstream_mmap")]
    pub no_pager: bool,
    /// Upstream behaviour including MAP_POPULATE: the baseline.
    #[arg(long)]
    pub upstream_mmap: bool,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Compute threads for decode and prefill, or `auto`: one per physical core this
    /// process may run on (performance cores only on a hybrid CPU), as llama.cpp's own
    /// tools default to (a core left to the helper threads that read ahead and evict, `-t`
    /// below the cores, decoded slower wherever it was measured, even at small budgets on a
    /// slow disk).
    #[arg(short = 't', long, default_value = "auto")]
    pub threads: Threads,
    /// Logical batch size for prompts.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch: u32,
    /// Write the stats JSON here at exit and on SIGUSR2 (default: $EPM_STATS_FILE).
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
    #[command(flatten)]
    pub paging: PagingArgs,
    /// Where a prompt's ubatches end besides every `-ub` tokens: `turns` also after an
    /// end-of-turn token (`<|im_end|>`, `<|eot_id|>`, ...) once the piece since the last cut
    /// holds 256 tokens, so that a request sharing a system prompt or a conversation's
    /// earlier messages keeps all of them and evaluates only what is new (the default for
    /// `serve` and `--chat`); `grid`: every `-ub` tokens from the start only, as upstream
    /// splits a prompt (the default for one prompt). Outputs equal upstream's given the
    /// same ubatches either way; compare runs only with the same split.
    #[arg(long, value_enum)]
    pub prompt_split: Option<PromptSplitArg>,
    /// A `probe-io` report of the model's disk: decode's read throughput is then judged
    /// against the disk's best speed (at exit, and in the server's log and /metrics).
    #[arg(long)]
    pub disk_probe: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptSplitArg {
    Grid,
    Turns,
}

/// Whether a command's prompts share prefixes with earlier ones (a server's requests, a
/// chat's turns), which sets the defaults that trade the first prompt against later ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptReuse {
    /// One prompt: nothing is reused.
    None,
    /// Later prompts extend or share earlier ones: prompts are cut at turns, and `-ub auto`
    /// stays at [`reuse_auto_ubatch_max`] of the split.
    Shared,
}

/// A model run, set up and not yet loaded.
pub struct ModelRun {
    pub index: ModelIndex,
    pub stats: Arc<RunStats>,
    pub engine: EngineOptions,
    pub session: SessionOptions,
    stats_path: Option<PathBuf>,
    sampler: MemorySampler,
    /// The disk's best probed speed (`--disk-probe`).
    pub disk_mb_per_s: Option<f64>,
}

impl ModelRunArgs {
    /// Open the model, check every output path (`outputs` names the command's own) and the
    /// budget against the plan, and start the stats (file on SIGUSR2, memory sampler), for
    /// `n_seq` parallel sequences, whose prompts are reused as `reuse` says.
    pub fn set_up(
        &self,
        n_seq: u32,
        reuse: PromptReuse,
        outputs: &[(&str, &Option<PathBuf>)],
    ) -> Result<ModelRun> {
        let index = open_index(&self.model)?;
        let disk_mb_per_s = self.disk_probe.as_ref().map(read_probe).transpose()?;
        let own = [
            ("--trace-file", &self.paging.trace_file),
            ("--stats-file", &self.stats_file),
        ];
        for (flag, path) in outputs.iter().chain(own.iter()) {
            if let Some(p) = path {
                check_output_path(flag, p)?;
            }
        }
        let paged = !self.upstream_mmap && !self.no_pager && index.is_moe();
        let budget = paged
            .then(|| budget_bytes(self.ram_budget_mb))
            .transpose()?;
        let prompt_cuts = match (self.prompt_split, reuse) {
            (Some(PromptSplitArg::Grid), _) | (None, PromptReuse::None) => PromptCuts::Grid,
            (Some(PromptSplitArg::Turns), _) | (None, PromptReuse::Shared) => PromptCuts::Turns,
        };
        let auto_max = match reuse {
            PromptReuse::None => u32::MAX,
            PromptReuse::Shared => reuse_auto_ubatch_max(prompt_cuts),
        };
        let shape = self.shape.resolve(&index, budget, n_seq, auto_max)?;
        let page = epm_sys::page_size() as u64;
        let plan = budget.map(|b| make_plan(&index, shape, b, page));
        let mode = self.pager_mode(&index, plan.as_ref())?;
        let stats = run_stats(&index, &self.model, mode);
        let stats_path = self
            .stats_file
            .clone()
            .or_else(|| std::env::var_os("EPM_STATS_FILE").map(PathBuf::from));
        if let Some(p) = &stats_path {
            signals::write_stats_on_sigusr2(stats.clone(), p.clone())?;
            // A model file truncated under the run (SIGBUS on its mapping): the stats
            // file is still written, marked incomplete, before the process exits.
            let (stats, path) = (stats.clone(), p.clone());
            epm_sys::sigbus::on_fault(Box::new(move || {
                stats.complete.store(false, Ordering::Relaxed);
                telemetry::write_stats_or_count(&stats, &path);
            }));
        }
        let sampler = MemorySampler::start(stats.clone(), Duration::from_millis(20))
            .context("starting the memory sampler")?;
        let cores = epm_sys::proc::compute_cores();
        let threads = self.threads.on_cores(cores);
        let expert_budget = match mode {
            PagerMode::On { .. } => plan.as_ref().map(|p| p.expert_budget_bytes),
            _ => None,
        };
        let engine = EngineOptions {
            mode,
            paging: self.paging.options(threads, cores),
        };
        let (policy, evict_by) = (engine.paging.cache_policy, engine.paging.evict_by);
        if let (Some(cache), CachePolicy::Lru, EvictBy::Coldest) = (expert_budget, policy, evict_by)
        {
            let step = step_selection_bound_bytes(&index, n_seq);
            if step > cache {
                tracing::warn!(
                    "--cache-policy lru --evict-by coldest: one decode step of {n_seq} \
                     sequence(s) can select {} MiB of experts, more than the {} MiB expert \
                     cache; LRU's coldest is then what the next step needs first and few \
                     selections hit (--evict-by next-use, the default, evicts the layers just \
                     routed first)",
                    step >> 20,
                    cache >> 20
                );
            }
        }
        let session = SessionOptions {
            n_ctx: shape.n_ctx,
            n_batch: self.batch.max(shape.n_ubatch),
            n_ubatch: shape.n_ubatch,
            n_threads: threads as i32,
            n_threads_batch: threads as i32,
            n_seq,
            prompt_cuts,
        };
        Ok(ModelRun {
            index,
            stats,
            engine,
            session,
            stats_path,
            sampler,
            disk_mb_per_s,
        })
    }

    /// Upstream's loading, no pager, or paging within the plan's budget (refused below its
    /// minimum). A model without routed experts runs unpaged, with a notice.
    fn pager_mode(&self, index: &ModelIndex, plan: Option<&Plan>) -> Result<PagerMode> {
        if self.upstream_mmap {
            return Ok(PagerMode::UpstreamMmap);
        }
        if self.no_pager {
            return Ok(PagerMode::Off);
        }
        if !index.is_moe() {
            eprintln!(
                "notice: {} has no routed experts ({} architecture); running unpaged",
                self.model.display(),
                index.arch
            );
            return Ok(PagerMode::Off);
        }
        let Some(plan) = plan else {
            return Ok(PagerMode::Off);
        };
        plan.check()?;
        Ok(PagerMode::On {
            budget_bytes: plan.budget_bytes,
        })
    }
}

impl ModelRun {
    /// The run is over (`ok`: it succeeded): stop sampling and write the stats file.
    pub fn finish(self, ok: bool) -> Result<Arc<RunStats>> {
        drop(self.sampler);
        self.stats.complete.store(ok, Ordering::Relaxed);
        if let Some(p) = &self.stats_path {
            telemetry::write_stats(&self.stats, p)
                .with_context(|| format!("writing stats to {}", p.display()))?;
        }
        Ok(self.stats)
    }
}

/// The best speed of a `probe-io` report.
fn read_probe(path: &PathBuf) -> Result<f64> {
    let bad = |why: String| UsageError(format!("--disk-probe {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    Ok(diagnose::best_probed_mb_per_s(&v).ok_or_else(|| {
        bad("no `results[].mb_per_s`: give a report that `epm-run probe-io` wrote".into())
    })?)
}

/// Log whether decode was disk-bound, and what would help.
pub fn report_disk(stats: &RunStats, disk_mb_per_s: Option<f64>) {
    let reads = diagnose::DecodeReads {
        read_bytes: stats.decode_read_bytes.get(),
        seconds: stats.decode_us.get() as f64 / 1e6,
    };
    match diagnose::diagnose(reads, disk_mb_per_s) {
        Some(v) if v.disk_bound => tracing::warn!("{}", v.hint),
        Some(v) => tracing::info!("{}", v.hint),
        None => {}
    }
}

/// The run's shared stats for `mode`.
fn run_stats(index: &ModelIndex, model: &Path, mode: PagerMode) -> Arc<RunStats> {
    let budget = match mode {
        PagerMode::On { budget_bytes } => budget_bytes,
        _ => 0,
    };
    Arc::new(RunStats {
        pager_enabled: budget > 0,
        budget_bytes: budget,
        model_path: model.to_path_buf(),
        model_bytes: index.model_bytes(),
        expert_bytes: index.expert_bytes,
        pager: Arc::new(PagerCounters::new(
            index.layers.iter().map(|l| l.layer),
            index.n_expert,
        )),
        ..Default::default()
    })
}
