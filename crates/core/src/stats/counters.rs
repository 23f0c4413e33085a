//! Lock-free counters the hot path updates: relaxed atomics, allocated once.

use std::sync::atomic::{AtomicU64, Ordering};

/// A relaxed atomic counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
    pub fn max(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What routing asked of the cache in one phase (prompt or decode). Every count is per
/// distinct expert per routed layer and ubatch.
#[derive(Debug, Default)]
pub struct PhaseCounters {
    /// Routed (layer, ubatch) calls.
    pub routings: Counter,
    /// Distinct experts selected.
    pub selected: Counter,
    /// Selected and resident before this routing, not read in by a prediction for it: what
    /// the cache policy kept.
    pub cache_hits: Counter,
    /// Selected and resident only because a prediction for this routing read it in.
    pub prefetch_hits: Counter,
    /// Selected and not resident: read on demand.
    pub misses: Counter,
    pub miss_bytes: Counter,
    /// Speculative reads issued by predictions made in this phase, and those routing then
    /// selected (counts and page-rounded bytes), and bytes of those it did not.
    pub prefetch_issued: Counter,
    pub prefetch_issued_bytes: Counter,
    pub prefetch_useful: Counter,
    pub prefetch_useful_bytes: Counter,
    pub prefetch_wasted_bytes: Counter,
    /// In routings that had a prediction: experts predicted, experts selected, and
    /// selected experts that had been predicted.
    pub predicted: Counter,
    pub predicted_of: Counter,
    pub predicted_selected: Counter,
}

/// Per MoE layer.
#[derive(Debug, Default)]
pub struct LayerCounters {
    pub layer: u32,
    pub evictions: Counter,
    pub prompt_misses: Counter,
    pub decode_cache_hits: Counter,
    pub decode_prefetch_hits: Counter,
    pub decode_misses: Counter,
    /// How often each expert was selected (per token), for the realized popularity.
    pub selections: Vec<Counter>,
    /// Selected experts that had been predicted, of those selected in routings with a
    /// prediction (all phases).
    pub predicted_selected: Counter,
    pub predicted_of: Counter,
}

impl LayerCounters {
    /// (selections, distinct experts selected, share of selections taken by the most
    /// selected tenth of the experts).
    pub fn popularity(&self) -> (u64, u64, f64) {
        let mut counts: Vec<u64> = self.selections.iter().map(Counter::get).collect();
        let total: u64 = counts.iter().sum();
        let distinct = counts.iter().filter(|&&c| c > 0).count() as u64;
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top = counts.len().div_ceil(10);
        let share = if total == 0 {
            0.0
        } else {
            counts[..top].iter().sum::<u64>() as f64 / total as f64
        };
        (total, distinct, share)
    }
}

/// What the pager counts.
#[derive(Debug, Default)]
pub struct PagerCounters {
    pub prompt: PhaseCounters,
    pub decode: PhaseCounters,
    pub evictions: Counter,
    pub evicted_bytes: Counter,
    pub resident_bytes: Counter,
    pub resident_peak_bytes: Counter,
    /// Routing calls after which pinned experts alone exceeded the expert budget.
    pub overruns: Counter,
    /// Evictions forced by measured RSS above the budget (the RSS guard).
    pub guard_shrinks: Counter,
    /// A prompt's layers read whole (`pager::PromptReads::WholeLayers`), and the
    /// page-rounded bytes of the experts read with them that routing had not selected.
    pub whole_layer_reads: Counter,
    pub whole_layer_unselected_bytes: Counter,
    /// A warm start's reads (experts past runs selected most, read into free room while
    /// idle): experts and page-rounded bytes, and those routing then selected.
    pub warmed: Counter,
    pub warmed_bytes: Counter,
    /// Experts the page cache held at start, counted resident rather than read again,
    /// and their page-rounded bytes.
    pub adopted: Counter,
    pub adopted_bytes: Counter,
    /// Of the adopted bytes, those read again at start because large folios held them
    /// that the kernel would not split.
    pub adopted_reread_bytes: Counter,
    /// Warmed or adopted experts that routing then selected.
    pub warm_hits: Counter,
    pub layers: Vec<LayerCounters>,
    /// What the pager holds now, for the server's pager view.
    pub residency: super::ResidencyView,
}

impl PagerCounters {
    pub fn new(layers: impl IntoIterator<Item = u32>, n_expert: u32) -> PagerCounters {
        let layers: Vec<u32> = layers.into_iter().collect();
        PagerCounters {
            residency: super::ResidencyView::new(layers.clone(), n_expert),
            layers: layers
                .into_iter()
                .map(|layer| LayerCounters {
                    layer,
                    selections: (0..n_expert).map(|_| Counter::default()).collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Wall time the OS advisor spends in its system calls, on whichever thread made them, and
/// how often an eviction had to be repeated.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// `MADV_WILLNEED` calls: page-cache allocation and read submission (not the reads).
    pub will_need_ns: AtomicU64,
    /// `MADV_DONTNEED` + `POSIX_FADV_DONTNEED` calls.
    pub evict_ns: AtomicU64,
    /// Waiting for the `MADV_POPULATE_READ` pool (`--prefetch populate`).
    pub populate_wait_ns: AtomicU64,
    /// Evictions after which the page cache still held part of the range (pages under read
    /// I/O, which the kernel skips), and the drops repeated until it held none.
    pub late_evictions: AtomicU64,
    pub redrops: AtomicU64,
    /// Re-drops that found a range held by large page-cache folios shared with a
    /// neighbour, and split them (`epm_sys`'s `advisor::evict_again`).
    pub folio_splits: AtomicU64,
    /// Time the whole-layer reader spent faulting a prompt's layers in
    /// (`pager::PromptReads::WholeLayers`: `MADV_POPULATE_READ` under the kernel's
    /// read-around, on a thread of its own, while the layer computes).
    pub whole_read_ns: AtomicU64,
    /// Late evictions that found the re-drop list full and were left cached.
    pub redrop_overflows: AtomicU64,
    /// Speculative reads advised by the readahead thread, its time in `MADV_WILLNEED`, and
    /// queued reads cancelled before it got to them (evicted or read on demand first).
    pub ahead_reads: AtomicU64,
    pub ahead_will_need_ns: AtomicU64,
    pub ahead_cancelled: AtomicU64,
    /// Evictions made by the eviction thread, and its time in their system calls.
    pub worker_evictions: AtomicU64,
    pub worker_evict_ns: AtomicU64,
    /// Calls of a routing step made by the hook's assisting thread (the hook made the
    /// rest); their time is in `will_need_ns` and `evict_ns` with the hook's.
    pub assist_calls: AtomicU64,
    /// Routing steps of two calls or more made shared with the assisting thread, and made
    /// by the hook alone (`epm_core::assist`: by default the way that measures cheaper).
    pub assist_steps_shared: AtomicU64,
    pub assist_steps_alone: AtomicU64,
}

impl IoCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
