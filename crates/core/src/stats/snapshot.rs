//! The run's shared telemetry ([`RunStats`]) and its JSON form ([`Snapshot`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::counters::{Counter, IoCounters, PagerCounters, PhaseCounters};
use super::SCHEMA_VERSION;

/// Ranks of a prediction whose accuracy the stats keep (`prediction.rank_accuracy`); models
/// route a token to at most a few dozen experts.
pub const SCORED_RANKS: usize = 32;

/// Everything a stats snapshot is made from; shared by the run, the stats-signal thread,
/// the memory sampler and the server.
#[derive(Debug, Default)]
pub struct RunStats {
    pub pager_enabled: bool,
    pub budget_bytes: u64,
    /// Set once the engine has measured its reserve.
    pub expert_budget_bytes: Counter,
    pub model_path: PathBuf,
    pub model_bytes: u64,
    pub expert_bytes: u64,
    pub reserve_bytes: Counter,
    pub mapping_rss_after_load: Counter,
    /// What llama.cpp reserved for the context, by its own accounting (0 when it did not
    /// say): the compute buffers, and the KV cache with any recurrent state.
    pub compute_buffer: Counter,
    pub context_memory: Counter,
    /// The token table's pages lent to the expert cache now, those taken back (read, or
    /// edge pages), and those the page cache held as the run ended
    /// (`budget::TokenRowLoan`; all 0 without a loan).
    pub token_table_lent: Counter,
    pub token_table_taken: Counter,
    pub token_table_cached_at_exit: Counter,
    /// The memory cgroup limit that binds the run (0 without one), the most kernel memory
    /// it charged while the pager ran, and the most the expert cache gave up for it
    /// (`budget::cap_deduction`).
    pub cgroup_limit: Counter,
    pub cgroup_kernel_peak: Counter,
    pub cgroup_deduction_peak: Counter,
    /// Batches llama.cpp stopped part-way because the run was shutting down.
    pub aborted_batches: Counter,
    /// Prompt ubatches llama.cpp stopped part-way because their client had gone.
    pub cancelled_batches: Counter,
    /// Prompt prefixes put aside on disk and loaded back (`prompt_store`), their bytes,
    /// and saves or loads that failed.
    pub prefixes_saved: Counter,
    /// Of those, the saves made while a server was idle (`serve --prompt-cache-idle-s`).
    pub prefixes_saved_idle: Counter,
    pub prefixes_loaded: Counter,
    pub prefix_bytes_written: Counter,
    pub prefix_bytes_read: Counter,
    pub prefix_store_failures: Counter,
    /// Saves not written because the prefix alone was larger than the whole store.
    pub prefixes_too_large: Counter,
    /// Wall time the engine spent saving and loading prefixes (a request waits for it).
    pub prefix_save_us: Counter,
    pub prefix_load_us: Counter,
    /// Prefixes an earlier run left that this run took up at its start, and their bytes.
    pub prefixes_restored: Counter,
    pub prefix_bytes_restored: Counter,
    /// Prompt tokens evaluated (prefilled), and prompt tokens whose KV was reused instead.
    pub prompt_tokens: Counter,
    pub reused_prompt_tokens: Counter,
    pub generated_tokens: Counter,
    /// The context's ubatch (`n_ubatch`), once one exists.
    pub n_ubatch: Counter,
    /// 1 when the context's prompts are cut at turns as well as every `n_ubatch` tokens
    /// (`prefix::PromptSplit::cuts_at_turns`), 0 on the grid.
    pub prompt_split_turns: Counter,
    pub prefill_us: Counter,
    pub decode_us: Counter,
    pub read_bytes_after_load: Counter,
    /// Bytes read from storage during decode steps (summed over the steps), and the decode
    /// steps evaluated.
    pub decode_read_bytes: Counter,
    pub decode_steps: Counter,
    /// Writes of the stats file and of the routing trace that failed (the run went on).
    pub stats_write_failures: Counter,
    pub trace_write_failures: Counter,
    /// The prompt being evaluated now: its positions computed or kept, and its length (both
    /// 0 when none).
    pub prefill_done: Counter,
    pub prefill_total: Counter,
    pub peak_rss: Counter,
    pub peak_anon: Counter,
    pub peak_file: Counter,
    pub hook_calls: Counter,
    /// Wall time inside the hook for routed layers: all ubatches, and decode steps only.
    pub hook_ns: Counter,
    pub hook_decode_ns: Counter,
    /// The compute threads of the pool kept for a hooked context (0: none).
    pub hook_pool_threads: Counter,
    pub io_counters: Arc<IoCounters>,
    /// The longest range one readahead call reads in full (smallest over the model's files).
    pub willneed_chunk_bytes: Counter,
    /// Of the experts a prediction names per decode token, how many are read (0: no
    /// prediction).
    pub predicted_per_token: Counter,
    /// Per rank (0 the best-scored) of the nearest layer's decode predictions, with
    /// `--predict-reads measured`: the guesses scored against the routing that followed,
    /// and those right. Ranks from `SCORED_RANKS` on are not kept.
    pub rank_scored: [Counter; SCORED_RANKS],
    pub rank_right: [Counter; SCORED_RANKS],
    /// Of the expert budget, the bytes kept for evictions queued on the eviction thread.
    pub evict_slack_bytes: Counter,
    /// Set at the end of a paged run: see `ExpertsSection::stray_cache_bytes_at_exit`.
    pub stray_expert_cache: Counter,
    pub hook_panicked: AtomicBool,
    pub complete: AtomicBool,
    /// Ids generated by the latest generation (`generate` has one).
    pub generated_ids: Mutex<Vec<i32>>,
    pub pager: Arc<PagerCounters>,
}

/// A reading of the process, taken by the caller when it asks for a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcReading {
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub swap: u64,
    /// VmHWM: the kernel's own peak of total RSS.
    pub hwm: u64,
    /// Bytes this process caused to be read from storage.
    pub read_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    pub schema_version: u32,
    pub complete: bool,
    pub pager_enabled: bool,
    pub budget_bytes: u64,
    pub expert_budget_bytes: u64,
    pub model: ModelSection,
    pub tokens: TokensSection,
    pub tok_per_s: TokPerSec,
    pub experts: ExpertsSection,
    pub prefetch: PrefetchSection,
    pub prediction: PredictionSection,
    pub io: IoSection,
    pub memory: MemorySection,
    pub per_layer: Vec<LayerSection>,
    pub hook: HookSection,
    #[serde(default)]
    pub prompt_store: PromptStoreSection,
}

/// Prompt prefixes put aside on disk when another prompt took their slot, and loaded back
/// for a later prompt that extends them (`serve`; all 0 elsewhere).
#[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct PromptStoreSection {
    pub saved: u64,
    pub loaded: u64,
    pub written_bytes: u64,
    pub read_bytes: u64,
    pub failures: u64,
    /// Saved by an earlier run with the same model and settings, and taken up by this one.
    #[serde(default)]
    pub restored: u64,
    #[serde(default)]
    pub restored_bytes: u64,
    /// Of `saved`, those made while a server was idle, for a restart after a crash.
    #[serde(default)]
    pub saved_idle: u64,
    /// Prefixes not put aside because each alone was larger than the whole store.
    #[serde(default)]
    pub too_large: u64,
    /// Wall time spent saving (writing, summing, syncing and dropping from the page cache)
    /// and loading prefixes, failed tries included: the engine does nothing else meanwhile.
    #[serde(default)]
    pub save_us: u64,
    #[serde(default)]
    pub load_us: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelSection {
    pub path: String,
    pub bytes: u64,
    pub expert_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TokensSection {
    /// Prompt tokens evaluated.
    pub prompt: u64,
    /// Prompt tokens whose KV cache was reused from an earlier request (not evaluated).
    pub prompt_reused: u64,
    pub generated: u64,
    pub generated_ids: Vec<i32>,
    /// Tokens per graph evaluation of the run's context (0 before it exists).
    #[serde(default)]
    pub ubatch: u64,
    /// How prompts are split into ubatches: `grid` (every `ubatch` tokens from 0) or
    /// `turns` (also after end-of-turn tokens); outputs compare only at the same split.
    #[serde(default)]
    pub prompt_split: String,
    /// Batches llama.cpp stopped part-way because the server was shutting down (their
    /// tokens are not counted above).
    #[serde(default)]
    pub aborted_batches: u64,
    /// Prompt ubatches llama.cpp stopped part-way because their client had gone (their
    /// tokens are not counted above).
    #[serde(default)]
    pub cancelled_batches: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TokPerSec {
    pub prefill: f64,
    pub decode: f64,
}

/// What routing asked of the expert cache in one phase. Counts are per distinct expert per
/// routed layer and ubatch.
#[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct CachePhase {
    pub routings: u64,
    pub selected: u64,
    /// Resident before routing and not read in by a prediction for this routing.
    pub cache_hits: u64,
    /// Resident only because a prediction for this routing read it in.
    pub prefetch_hits: u64,
    pub misses: u64,
    pub miss_bytes: u64,
    /// `cache_hits / selected`: what the cache policy kept.
    pub cache_hit_rate: f64,
    /// `(cache_hits + prefetch_hits) / selected`: resident when the layer computed.
    pub resident_rate: f64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ExpertsSection {
    pub prompt: CachePhase,
    pub decode: CachePhase,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub resident_bytes: u64,
    pub resident_peak_bytes: u64,
    pub overruns: u64,
    pub guard_shrinks: u64,
    /// A prompt's layers read whole (`--prompt-reads whole-layers`), and the page-rounded
    /// bytes of the experts read with them that routing had not selected.
    #[serde(default)]
    pub whole_layer_reads: u64,
    #[serde(default)]
    pub whole_layer_unselected_bytes: u64,
    /// What a warm start read while idle, and how much of it routing used.
    #[serde(default)]
    pub warm_start: WarmStartSection,
    /// Measured (mincore) when the run ends: bytes of experts the pager does not count as
    /// resident that the page cache holds anyway. 0 is the pager's promise; written at exit.
    pub stray_cache_bytes_at_exit: u64,
}

/// A warm start: experts past runs selected most, read into the expert cache's free room
/// while no request ran.
#[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct WarmStartSection {
    /// Experts read, and their page-rounded bytes.
    pub experts: u64,
    pub bytes: u64,
    /// Of those and the adopted ones, experts routing selected before they were evicted.
    pub hits: u64,
    /// Experts the page cache held at start (an earlier run of the model or a write of the
    /// file left them), counted resident rather than read again (but
    /// `adopted_reread_bytes`; dropped from the cache when they do not fit), and their
    /// page-rounded bytes.
    #[serde(default)]
    pub adopted: u64,
    #[serde(default)]
    pub adopted_bytes: u64,
    /// Of those bytes, the ones read again at start: where large page-cache folios (a copy,
    /// a download, a sequential read) held the adopted experts and the kernel would not
    /// split those at their ends, they are dropped whole so that each expert can later be
    /// evicted alone, and read again.
    #[serde(default)]
    pub adopted_reread_bytes: u64,
}

/// Speculative reads issued by predictions made in one phase.
#[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct PrefetchPhase {
    pub issued: u64,
    pub issued_bytes: u64,
    pub useful: u64,
    pub useful_bytes: u64,
    pub wasted_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct PrefetchSection {
    pub prompt: PrefetchPhase,
    pub decode: PrefetchPhase,
}

/// Prediction quality in one phase, over routings that had a prediction.
#[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct PredictionPhase {
    pub predicted: u64,
    pub selected: u64,
    pub predicted_selected: u64,
    /// `predicted_selected / selected`: share of the selected experts that were predicted.
    pub coverage: f64,
    /// `predicted_selected / predicted`: share of the predicted experts that were selected.
    pub accuracy: f64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct PredictionSection {
    /// Of the experts a prediction names for each decode token, how many are read: the
    /// best-scored ones (`--predict-reads`); 0 without prediction.
    #[serde(default)]
    pub experts_per_token: u64,
    /// With `--predict-reads measured`: per rank of the nearest layer's decode predictions
    /// (the best-scored first), the share of its guesses that the routing then selected,
    /// over the run; empty otherwise or before any was scored.
    #[serde(default)]
    pub rank_accuracy: Vec<f64>,
    pub prompt: PredictionPhase,
    pub decode: PredictionPhase,
    /// Coverage per layer, all phases.
    pub per_layer: Vec<LayerCoverage>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct LayerCoverage {
    pub layer: u32,
    pub coverage: f64,
    pub scored: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct IoSection {
    pub read_bytes: u64,
    /// Bytes read after load / (prompt tokens evaluated + generated tokens).
    pub read_bytes_per_token: f64,
    /// Bytes read from storage during decode, and the decode steps evaluated.
    pub decode_read_bytes: u64,
    pub decode_steps: u64,
    /// Wall time in the advisor's system calls (`MADV_WILLNEED`; `MADV_DONTNEED` +
    /// `POSIX_FADV_DONTNEED`; waiting for the populate pool), microseconds.
    pub will_need_us: u64,
    pub evict_us: u64,
    pub populate_wait_us: u64,
    /// Ranges are advised in pieces of at most this many bytes: the kernel reads no more
    /// than the device's max(read_ahead_kb, max_sectors_kb) per call.
    pub willneed_chunk_bytes: u64,
    /// Evictions after which part of the range was still cached (its read in flight), the
    /// repeated drops that followed, and late evictions left cached because the list of
    /// ranges to drop again was full.
    pub late_evictions: u64,
    pub redrops: u64,
    pub redrop_overflows: u64,
    /// Re-drops that found their range held by large page-cache folios shared with a
    /// neighbour (cached before the run, where every expert fits the budget and the pager
    /// kept the page cache it found) and split those folios so that the drop could take it.
    #[serde(default)]
    pub folio_splits: u64,
    /// Wall time the whole-layer reader's thread spent faulting a prompt's layers in
    /// (`--prompt-reads whole-layers`), microseconds.
    #[serde(default)]
    pub whole_read_us: u64,
    /// Speculative reads advised by the readahead thread, its wall time in `MADV_WILLNEED`
    /// (microseconds), and queued reads cancelled before it got to them.
    pub ahead_reads: u64,
    pub ahead_will_need_us: u64,
    pub ahead_cancelled: u64,
    /// With an eviction thread: the evictions it made and its wall time in their system
    /// calls (microseconds); `evict_us` then counts only evictions made on the hook.
    #[serde(default)]
    pub worker_evictions: u64,
    #[serde(default)]
    pub worker_evict_us: u64,
    /// With an eviction thread: the part of `expert_budget_bytes` kept for evictions queued
    /// and not yet made (the cache holds at most `expert_budget_bytes` minus this).
    #[serde(default)]
    pub evict_slack_bytes: u64,
    /// With the hook's assisting thread: the calls of routing steps it made (their time is
    /// in `will_need_us` and `evict_us`, which then count both threads' time).
    #[serde(default)]
    pub assist_calls: u64,
    /// With the hook's assisting thread: routing steps of two calls or more made shared
    /// with it, and made by the hook alone (by default the way that measures cheaper here,
    /// the other still tried about one step in sixteen).
    #[serde(default)]
    pub assist_steps_shared: u64,
    #[serde(default)]
    pub assist_steps_alone: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct MemorySection {
    pub peak_rss_bytes: u64,
    pub peak_rss_anon_bytes: u64,
    pub peak_rss_file_bytes: u64,
    pub rss_bytes: u64,
    pub swap_bytes: u64,
    pub reserve_bytes: u64,
    pub model_mapping_rss_after_load_bytes: u64,
    /// llama.cpp's compute buffers for the worst-case ubatch (allocated at load, resident
    /// as prompts touch them), and its KV cache and recurrent state.
    #[serde(default)]
    pub compute_buffer_bytes: u64,
    #[serde(default)]
    pub context_bytes: u64,
    /// The token-embedding table's pages that no token has read, lent to the expert cache
    /// (the reserve counts the whole table), and the pages taken back as rows were read.
    #[serde(default)]
    pub token_table_lent_bytes: u64,
    #[serde(default)]
    pub token_table_taken_bytes: u64,
    /// Measured with mincore as the run ends: the table's bytes in the page cache, which the
    /// loan promises are no more than `token_table_taken_bytes`.
    #[serde(default)]
    pub token_table_cached_bytes_at_exit: u64,
    /// The memory cgroup limit that binds the run (0 without one), the most kernel memory
    /// charged to it while the pager ran (page tables, the page cache's index, ...), and the
    /// most the expert cache gave up so that RSS plus that stays within the limit.
    #[serde(default)]
    pub cgroup_limit_bytes: u64,
    #[serde(default)]
    pub cgroup_kernel_peak_bytes: u64,
    #[serde(default)]
    pub cgroup_deduction_peak_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct LayerSection {
    pub layer: u32,
    pub evictions: u64,
    pub prompt_misses: u64,
    pub decode_cache_hits: u64,
    pub decode_prefetch_hits: u64,
    pub decode_misses: u64,
    /// Expert selections (one per token per chosen expert) in this layer.
    pub selections: u64,
    pub distinct_experts: u64,
    /// Share of selections that went to the most-selected 10% of the experts: 0.1 for
    /// perfectly uniform routing, towards 1 for heavily skewed routing.
    pub top_decile_share: f64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct HookSection {
    pub calls: u64,
    pub panicked: bool,
    /// Wall time inside the hook for routed layers (routing, eviction, advice, prediction),
    /// microseconds: over the run, and over decode steps only.
    pub busy_us: u64,
    pub decode_busy_us: u64,
    /// The compute threads ggml keeps for the hooked context between graphs, since the
    /// hook splits each ubatch's graph at every MoE layer; 0 when each graph starts its own
    /// (unpaged runs, as upstream's). Added within schema 2.
    #[serde(default)]
    pub pool_threads: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn rate(tokens: u64, us: u64) -> f64 {
    if us == 0 {
        0.0
    } else {
        tokens as f64 * 1e6 / us as f64
    }
}

impl CachePhase {
    fn of(c: &PhaseCounters) -> CachePhase {
        let selected = c.selected.get();
        let cache_hits = c.cache_hits.get();
        let prefetch_hits = c.prefetch_hits.get();
        CachePhase {
            routings: c.routings.get(),
            selected,
            cache_hits,
            prefetch_hits,
            misses: c.misses.get(),
            miss_bytes: c.miss_bytes.get(),
            cache_hit_rate: ratio(cache_hits, selected),
            resident_rate: ratio(cache_hits + prefetch_hits, selected),
        }
    }
}

impl PrefetchPhase {
    fn of(c: &PhaseCounters) -> PrefetchPhase {
        PrefetchPhase {
            issued: c.prefetch_issued.get(),
            issued_bytes: c.prefetch_issued_bytes.get(),
            useful: c.prefetch_useful.get(),
            useful_bytes: c.prefetch_useful_bytes.get(),
            wasted_bytes: c.prefetch_wasted_bytes.get(),
        }
    }
}

impl PredictionPhase {
    fn of(c: &PhaseCounters) -> PredictionPhase {
        let (predicted, selected, hit) = (
            c.predicted.get(),
            c.predicted_of.get(),
            c.predicted_selected.get(),
        );
        PredictionPhase {
            predicted,
            selected,
            predicted_selected: hit,
            coverage: ratio(hit, selected),
            accuracy: ratio(hit, predicted),
        }
    }
}

impl RunStats {
    /// Fold a reading of the process into the peaks.
    pub fn fold_memory(&self, m: &ProcReading) {
        self.peak_rss.max(m.rss.max(m.hwm));
        self.peak_anon.max(m.rss_anon);
        self.peak_file.max(m.rss_file);
    }

    pub fn snapshot(&self, now: ProcReading) -> Snapshot {
        self.fold_memory(&now);
        let p = &self.pager;
        let prompt = self.prompt_tokens.get();
        let generated = self.generated_tokens.get();
        let after_load = now
            .read_bytes
            .saturating_sub(self.read_bytes_after_load.get());
        let io = &self.io_counters;
        let us = |c: &std::sync::atomic::AtomicU64| IoCounters::get(c) / 1000;
        Snapshot {
            schema_version: SCHEMA_VERSION,
            complete: self.complete.load(Ordering::Relaxed),
            pager_enabled: self.pager_enabled,
            budget_bytes: self.budget_bytes,
            expert_budget_bytes: self.expert_budget_bytes.get(),
            model: ModelSection {
                path: self.model_path.display().to_string(),
                bytes: self.model_bytes,
                expert_bytes: self.expert_bytes,
            },
            tokens: TokensSection {
                prompt,
                prompt_reused: self.reused_prompt_tokens.get(),
                generated,
                generated_ids: self
                    .generated_ids
                    .lock()
                    .map(|v| v.clone())
                    .unwrap_or_default(),
                ubatch: self.n_ubatch.get(),
                prompt_split: if self.prompt_split_turns.get() > 0 {
                    "turns"
                } else {
                    "grid"
                }
                .to_string(),
                aborted_batches: self.aborted_batches.get(),
                cancelled_batches: self.cancelled_batches.get(),
            },
            tok_per_s: TokPerSec {
                prefill: rate(prompt, self.prefill_us.get()),
                decode: rate(generated, self.decode_us.get()),
            },
            experts: ExpertsSection {
                prompt: CachePhase::of(&p.prompt),
                decode: CachePhase::of(&p.decode),
                evictions: p.evictions.get(),
                evicted_bytes: p.evicted_bytes.get(),
                resident_bytes: p.resident_bytes.get(),
                resident_peak_bytes: p.resident_peak_bytes.get(),
                overruns: p.overruns.get(),
                guard_shrinks: p.guard_shrinks.get(),
                whole_layer_reads: p.whole_layer_reads.get(),
                whole_layer_unselected_bytes: p.whole_layer_unselected_bytes.get(),
                warm_start: WarmStartSection {
                    experts: p.warmed.get(),
                    bytes: p.warmed_bytes.get(),
                    hits: p.warm_hits.get(),
                    adopted: p.adopted.get(),
                    adopted_bytes: p.adopted_bytes.get(),
                    adopted_reread_bytes: p.adopted_reread_bytes.get(),
                },
                stray_cache_bytes_at_exit: self.stray_expert_cache.get(),
            },
            prefetch: PrefetchSection {
                prompt: PrefetchPhase::of(&p.prompt),
                decode: PrefetchPhase::of(&p.decode),
            },
            prediction: PredictionSection {
                experts_per_token: self.predicted_per_token.get(),
                rank_accuracy: self
                    .rank_scored
                    .iter()
                    .zip(&self.rank_right)
                    .map(|(n, r)| (n.get(), r.get()))
                    .take_while(|&(n, _)| n > 0)
                    .map(|(n, r)| ratio(r, n))
                    .collect(),
                prompt: PredictionPhase::of(&p.prompt),
                decode: PredictionPhase::of(&p.decode),
                per_layer: p
                    .layers
                    .iter()
                    .map(|l| LayerCoverage {
                        layer: l.layer,
                        coverage: ratio(l.predicted_selected.get(), l.predicted_of.get()),
                        scored: l.predicted_of.get(),
                    })
                    .collect(),
            },
            io: IoSection {
                read_bytes: now.read_bytes,
                read_bytes_per_token: ratio(after_load, prompt + generated),
                decode_read_bytes: self.decode_read_bytes.get(),
                decode_steps: self.decode_steps.get(),
                will_need_us: us(&io.will_need_ns),
                evict_us: us(&io.evict_ns),
                populate_wait_us: us(&io.populate_wait_ns),
                willneed_chunk_bytes: self.willneed_chunk_bytes.get(),
                late_evictions: IoCounters::get(&io.late_evictions),
                redrops: IoCounters::get(&io.redrops),
                redrop_overflows: IoCounters::get(&io.redrop_overflows),
                folio_splits: IoCounters::get(&io.folio_splits),
                whole_read_us: us(&io.whole_read_ns),
                ahead_reads: IoCounters::get(&io.ahead_reads),
                ahead_will_need_us: us(&io.ahead_will_need_ns),
                ahead_cancelled: IoCounters::get(&io.ahead_cancelled),
                worker_evictions: IoCounters::get(&io.worker_evictions),
                worker_evict_us: us(&io.worker_evict_ns),
                evict_slack_bytes: self.evict_slack_bytes.get(),
                assist_calls: IoCounters::get(&io.assist_calls),
                assist_steps_shared: IoCounters::get(&io.assist_steps_shared),
                assist_steps_alone: IoCounters::get(&io.assist_steps_alone),
            },
            memory: MemorySection {
                peak_rss_bytes: self.peak_rss.get(),
                peak_rss_anon_bytes: self.peak_anon.get(),
                peak_rss_file_bytes: self.peak_file.get(),
                rss_bytes: now.rss,
                swap_bytes: now.swap,
                reserve_bytes: self.reserve_bytes.get(),
                model_mapping_rss_after_load_bytes: self.mapping_rss_after_load.get(),
                compute_buffer_bytes: self.compute_buffer.get(),
                context_bytes: self.context_memory.get(),
                token_table_lent_bytes: self.token_table_lent.get(),
                token_table_taken_bytes: self.token_table_taken.get(),
                token_table_cached_bytes_at_exit: self.token_table_cached_at_exit.get(),
                cgroup_limit_bytes: self.cgroup_limit.get(),
                cgroup_kernel_peak_bytes: self.cgroup_kernel_peak.get(),
                cgroup_deduction_peak_bytes: self.cgroup_deduction_peak.get(),
            },
            per_layer: p
                .layers
                .iter()
                .map(|l| {
                    let (selections, distinct_experts, top_decile_share) = l.popularity();
                    LayerSection {
                        layer: l.layer,
                        evictions: l.evictions.get(),
                        prompt_misses: l.prompt_misses.get(),
                        decode_cache_hits: l.decode_cache_hits.get(),
                        decode_prefetch_hits: l.decode_prefetch_hits.get(),
                        decode_misses: l.decode_misses.get(),
                        selections,
                        distinct_experts,
                        top_decile_share,
                    }
                })
                .collect(),
            hook: HookSection {
                calls: self.hook_calls.get(),
                panicked: self.hook_panicked.load(Ordering::Relaxed),
                busy_us: self.hook_ns.get() / 1000,
                decode_busy_us: self.hook_decode_ns.get() / 1000,
                pool_threads: self.hook_pool_threads.get(),
            },
            prompt_store: PromptStoreSection {
                saved: self.prefixes_saved.get(),
                loaded: self.prefixes_loaded.get(),
                written_bytes: self.prefix_bytes_written.get(),
                read_bytes: self.prefix_bytes_read.get(),
                failures: self.prefix_store_failures.get(),
                restored: self.prefixes_restored.get(),
                restored_bytes: self.prefix_bytes_restored.get(),
                saved_idle: self.prefixes_saved_idle.get(),
                too_large: self.prefixes_too_large.get(),
                save_us: self.prefix_save_us.get(),
                load_us: self.prefix_load_us.get(),
            },
        }
    }

    /// The snapshot as the stats file holds it: pretty JSON and a final newline.
    pub fn to_json(&self, now: ProcReading) -> Vec<u8> {
        let mut json =
            serde_json::to_vec_pretty(&self.snapshot(now)).expect("a snapshot always serializes");
        json.push(b'\n');
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_keeps_phases_apart() {
        let stats = RunStats {
            pager_enabled: true,
            budget_bytes: 1 << 30,
            pager: Arc::new(PagerCounters::new([0, 1], 4)),
            ..Default::default()
        };
        let p = &stats.pager;
        p.decode.selected.add(10);
        p.decode.cache_hits.add(6);
        p.decode.prefetch_hits.add(3);
        p.decode.misses.add(1);
        p.prompt.selected.add(100);
        p.prompt.misses.add(100);
        p.decode.predicted.add(8);
        p.decode.predicted_of.add(10);
        p.decode.predicted_selected.add(6);
        stats.prompt_tokens.set(20);
        stats.generated_tokens.set(10);
        let now = ProcReading {
            rss: 5 << 20,
            hwm: 7 << 20,
            read_bytes: 3000,
            ..Default::default()
        };
        let bytes = stats.to_json(now);
        let s: Snapshot = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(s, stats.snapshot(now));
        assert_eq!(s.schema_version, 2);
        assert_eq!(s.experts.decode.cache_hit_rate, 0.6);
        assert_eq!(s.experts.decode.resident_rate, 0.9);
        assert_eq!(s.experts.prompt.cache_hit_rate, 0.0);
        assert_eq!(s.prediction.decode.coverage, 0.6);
        assert_eq!(s.prediction.decode.accuracy, 0.75);
        assert_eq!(s.memory.peak_rss_bytes, 7 << 20);
        assert_eq!(s.io.read_bytes_per_token, 100.0);
        assert_eq!(s.per_layer.len(), 2);
    }
}
