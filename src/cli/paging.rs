//! Flags and set-up shared by the commands that run a model (`generate`, `serve`): how
//! experts are paged, the pager mode for a budget, and the run's stats.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use clap::{Args, ValueEnum};

use epm_core::pager::CachePolicy;
use epm_core::plan::{make_plan, ComputeThreads, RunShape, Threads};
use epm_core::stats::{PagerCounters, RunStats};
use epm_engine::{PagerMode, PagingOptions, Prediction};
use epm_gguf::ModelIndex;
use epm_sys::Prefetch;

use super::budget_bytes;

/// How experts are paged: flags shared by `generate` and `serve`.
#[derive(Args, Debug)]
pub struct PagingArgs {
    /// Experts used within this many recent tokens are never evicted.
    #[arg(long, default_value_t = 0)]
    pub hot_window: u64,
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
    /// Make evictions on a thread of their own, a small slack of the budget ahead (the
    /// default when -t leaves a core free).
    #[arg(long, overrides_with = "no_evict_thread")]
    evict_thread: bool,
    /// Make evictions on the hook, on the compute thread.
    #[arg(long = "no-evict-thread", overrides_with = "evict_thread")]
    no_evict_thread: bool,
    /// Predict the next layer's experts in prefill too, from this many tokens of each
    /// ubatch, spread evenly over a longer one (0: decode steps only).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(0..=512))]
    prefill_predict_tokens: u64,
    /// How many MoE layers ahead to predict in decode (1-8). Deeper predictions start reads
    /// earlier but are less accurate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    predict_depth: u32,
    /// What the pager evicts first: `lfu-decay` (least frequently used, each selection's
    /// weight halving in about 14 tokens) or `lru` (least recently used).
    #[arg(long, value_enum, default_value_t = CachePolicyArg::LfuDecay)]
    cache_policy: CachePolicyArg,
    /// Write the routing trace (selected experts per token and layer) here; see README.
    #[arg(long)]
    pub trace_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CachePolicyArg {
    LfuDecay,
    Lru,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrefetchMode {
    Willneed,
    Populate,
}

impl PagingArgs {
    /// The engine's paging options for `threads` compute threads on `cores` cores.
    pub fn options(&self, threads: u32, cores: u32) -> PagingOptions {
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
            // The helper threads compete with compute for a core: they only pay where one
            // is left over.
            ahead_thread: match (self.ahead_thread, self.no_ahead_thread) {
                (true, _) => true,
                (_, true) => false,
                _ => threads < cores,
            },
            evict_thread: match (self.evict_thread, self.no_evict_thread) {
                (true, _) => true,
                (_, true) => false,
                _ => threads < cores,
            },
            prefill_predict_tokens: self.prefill_predict_tokens as usize,
            hot_window_tokens: self.hot_window,
            cache_policy: match self.cache_policy {
                CachePolicyArg::LfuDecay => CachePolicy::DEFAULT,
                CachePolicyArg::Lru => CachePolicy::Lru,
            },
            trace_file: self.trace_file.clone(),
        }
    }
}

/// Whether a run pages experts, and its budget in bytes if so: `--ram-budget-mb`, or the
/// default (80% of available memory or of the cgroup limit).
pub fn paged_budget(
    index: &ModelIndex,
    ram_budget_mb: Option<u64>,
    no_pager: bool,
    upstream_mmap: bool,
) -> Result<Option<u64>> {
    let paged = !upstream_mmap && !no_pager && index.is_moe();
    paged.then(|| budget_bytes(ram_budget_mb)).transpose()
}

/// The pager mode a command's flags ask for: upstream's loading, no pager, or paging within
/// `budget` (from [`paged_budget`]; checked against the plan's minimum for `shape`). A
/// model without routed experts runs unpaged, with a notice.
pub fn pager_mode(
    index: &ModelIndex,
    model: &Path,
    budget: Option<u64>,
    no_pager: bool,
    upstream_mmap: bool,
    shape: RunShape,
) -> Result<PagerMode> {
    if upstream_mmap {
        return Ok(PagerMode::UpstreamMmap);
    }
    if no_pager {
        return Ok(PagerMode::Off);
    }
    if !index.is_moe() {
        eprintln!(
            "notice: {} has no routed experts ({} architecture); running unpaged",
            model.display(),
            index.arch
        );
        return Ok(PagerMode::Off);
    }
    let Some(budget) = budget else {
        return Ok(PagerMode::Off);
    };
    make_plan(index, shape, budget, epm_sys::page_size() as u64).check()?;
    Ok(PagerMode::On {
        budget_bytes: budget,
    })
}

/// The run's shared stats for `mode`.
pub fn run_stats(index: &ModelIndex, model: &Path, mode: PagerMode) -> Arc<RunStats> {
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

/// The cores this process may run on.
pub fn available_cores() -> u32 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as u32)
}

/// Compute threads for `-t` on `cores` cores (`auto`: see `ComputeThreads::new`).
pub fn compute_threads(
    t: Threads,
    cores: u32,
    index: &ModelIndex,
    mode: PagerMode,
    shape: RunShape,
) -> ComputeThreads {
    let expert_budget = match mode {
        PagerMode::On { budget_bytes } => Some(
            make_plan(index, shape, budget_bytes, epm_sys::page_size() as u64).expert_budget_bytes,
        ),
        _ => None,
    };
    ComputeThreads::new(t, cores, expert_budget, index.expert_bytes)
}

/// `--stats-file`, else `$EPM_STATS_FILE`.
pub fn stats_path(flag: &Option<PathBuf>) -> Option<PathBuf> {
    flag.clone()
        .or_else(|| std::env::var_os("EPM_STATS_FILE").map(PathBuf::from))
}
