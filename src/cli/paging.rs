//! How experts are paged: the paging flags of the commands that run a model.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use epm_core::assist::AssistMode;
use epm_core::pager::{CachePolicy, EvictBy, PromptEviction, PromptReads};
use epm_core::predict::PredictReads;
use epm_engine::{PagingOptions, Prediction};
use epm_sys::Prefetch;

/// How experts are paged: flags shared by `generate` and `serve`.
#[derive(Args, Debug)]
pub struct PagingArgs {
    /// Experts used within this many recent tokens are never evicted (tokens of a sequence:
    /// a decode step of several sessions counts one).
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
    /// Share every routing step's reads and evictions (those left on the hook) with a
    /// thread that works only while the hook waits for them, on a core that ggml leaves
    /// idle between graph splits. By default, on more than one core, the thread shares
    /// only the steps where that measures cheaper: the hook times steps both ways as it
    /// runs and makes most the cheaper way.
    #[arg(long, overrides_with = "no_assist_thread")]
    assist_thread: bool,
    /// Make every call left on the hook on the compute thread.
    #[arg(long = "no-assist-thread", overrides_with = "assist_thread")]
    no_assist_thread: bool,
    /// Predict the next layer's experts in prefill too, from this many tokens of each
    /// ubatch, spread evenly over a longer one (0: decode steps only).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(0..=512))]
    prefill_predict_tokens: u64,
    /// How many MoE layers ahead to predict in decode (1-8). Deeper predictions start reads
    /// earlier but are less accurate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    predict_depth: u32,
    /// Which of the experts a prediction names for each token of a decode step are read
    /// early: `measured` (the best ranks whose guesses the run has found right at least 4
    /// times in 5; the best three quarters until it knows), `confident` (always the
    /// best-scored three quarters; the last-ranked guesses are the ones most often wrong,
    /// and a wrong guess costs a read) or `all` (every one: more reads in early, more bytes
    /// read in vain). Prefill reads all of each token's.
    #[arg(long, value_enum, default_value_t = PredictReadsArg::Measured)]
    predict_reads: PredictReadsArg,
    /// Predict without the routers' own biases (`ffn_gate_inp.bias`, gpt-oss), which
    /// llama.cpp adds before selecting experts: only to measure what they are worth.
    #[arg(long)]
    predict_ignore_router_bias: bool,
    /// What the pager evicts first: `lfu-decay` (least frequently used, each selection's
    /// weight halving in about 14 tokens of a sequence) or `lru` (least recently used).
    #[arg(long, value_enum, default_value_t = CachePolicyArg::LfuDecay)]
    cache_policy: CachePolicyArg,
    /// What a prompt's ubatches evict: `cyclic` (the experts of the layers that ran last,
    /// which the next ubatch needs last, so the same ones stay resident from ubatch to
    /// ubatch) or `policy` (the --cache-policy order, as in decode).
    #[arg(long, value_enum, default_value_t = PromptEvictionArg::Cyclic)]
    prompt_eviction: PromptEvictionArg,
    /// Which expert the --cache-policy order evicts: `next-use` (the one whose next
    /// selection is expected last: the steps until its layer routes again, plus the steps
    /// its policy expects it to go unselected) or `coldest` (the policy's coldest, whatever
    /// its layer).
    #[arg(long, value_enum, default_value_t = EvictByArg::NextUse)]
    evict_by: EvictByArg,
    /// How a prompt's ubatches read the experts they miss: `experts` (each selected
    /// expert's bytes, in 4 KiB pages) or `whole-layers` (a layer whose routing, or
    /// prediction's guesses, miss at least half of its experts is read whole, through the
    /// kernel's read-around, into large page-cache folios that cost the kernel less work
    /// per MiB; only layers whose runs of expert tensors are long enough for the
    /// read-around's margins, so that it reaches no other layer's experts, and only when
    /// the whole layer fits the expert budget).
    #[arg(long, value_enum, default_value_t = PromptReadsArg::Experts)]
    prompt_reads: PromptReadsArg,
    /// Write the routing trace (selected experts per token and layer) here; see README.
    #[arg(long)]
    pub trace_file: Option<PathBuf>,
    /// Start cold: drop the model's experts that the page cache holds at start (without
    /// this flag, those an earlier run left are kept as resident, as many as the budget
    /// holds, rather than read again, those that earlier runs of this model selected most
    /// first), and in `serve`, do not read while idle the experts that earlier runs
    /// selected most (a small file per model counts them, in `serve --prompt-cache-dir` or
    /// `generate --heat-dir`; without this flag a restarted server fills its expert cache
    /// with them before the first request). The file is then neither read nor written.
    #[arg(long)]
    pub no_warm_start: bool,
}

/// Make the folder `dir` if need be and check that it is writable: a file can be made there
/// (and goes at once).
pub fn make_writable_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir).and_then(|()| {
        tempfile::Builder::new()
            .prefix(".probe-")
            .tempfile_in(dir)
            .map(drop)
    })
}

/// Where runs keep what outlives them when not told otherwise: the user's cache folder
/// (the prompt store's folders and the expert heat of `serve`, the heat of `generate`).
pub fn default_state_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("epm")
        .join("prompts")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CachePolicyArg {
    LfuDecay,
    Lru,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PredictReadsArg {
    Measured,
    Confident,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptEvictionArg {
    Cyclic,
    Policy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptReadsArg {
    Experts,
    WholeLayers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvictByArg {
    NextUse,
    Coldest,
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
            // The assistant runs only while the hook waits, when ggml's other threads sleep:
            // it needs a second core, not a free one.
            assist_thread: match (self.assist_thread, self.no_assist_thread) {
                (true, _) => Some(AssistMode::Always),
                (_, true) => None,
                _ => (cores > 1).then_some(AssistMode::Measured),
            },
            prefill_predict_tokens: self.prefill_predict_tokens as usize,
            predict_reads: match self.predict_reads {
                PredictReadsArg::Measured => PredictReads::Measured,
                PredictReadsArg::Confident => PredictReads::Confident,
                PredictReadsArg::All => PredictReads::All,
            },
            predict_router_bias: !self.predict_ignore_router_bias,
            hot_window_tokens: self.hot_window,
            cache_policy: match self.cache_policy {
                CachePolicyArg::LfuDecay => CachePolicy::DEFAULT,
                CachePolicyArg::Lru => CachePolicy::Lru,
            },
            prompt_eviction: match self.prompt_eviction {
                PromptEvictionArg::Cyclic => PromptEviction::Cyclic,
                PromptEvictionArg::Policy => PromptEviction::Policy,
            },
            evict_by: match self.evict_by {
                EvictByArg::NextUse => EvictBy::NextUse,
                EvictByArg::Coldest => EvictBy::Coldest,
            },
            prompt_reads: match self.prompt_reads {
                PromptReadsArg::Experts => PromptReads::Experts,
                PromptReadsArg::WholeLayers => PromptReads::WholeLayers,
            },
            trace_file: self.trace_file.clone(),
            keep_page_cache: !self.no_warm_start,
            keep_first: Vec::new(),
        }
    }
}
