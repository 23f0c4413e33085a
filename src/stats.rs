//! Telemetry: lock-free counters updated on the hot path, snapshots of them as the stats
//! JSON (`schema_version` 1, documented in the README), and atomic writes of that file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::os;

pub const SCHEMA_VERSION: u32 = 1;

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

#[derive(Debug, Default)]
pub struct LayerCounters {
    pub layer: u32,
    pub hits: Counter,
    pub misses: Counter,
    pub evictions: Counter,
    /// How often each expert was selected (per token), for the realized popularity.
    pub selections: Vec<Counter>,
    /// Distinct experts selected in routings that had a prediction, and how many of them
    /// had been predicted.
    pub predicted_of: Counter,
    pub predicted_selected: Counter,
}

impl LayerCounters {
    /// (selections, distinct experts selected, share of selections taken by the most
    /// selected tenth of the experts).
    fn popularity(&self) -> (u64, u64, f64) {
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

/// What the pager counts. Hits and misses count distinct experts per routed ubatch.
#[derive(Debug, Default)]
pub struct PagerCounters {
    pub hits: Counter,
    pub misses: Counter,
    pub miss_bytes: Counter,
    /// Misses of single-token (decode) ubatches and their bytes.
    pub decode_misses: Counter,
    pub decode_miss_bytes: Counter,
    pub evictions: Counter,
    pub evicted_bytes: Counter,
    pub resident_bytes: Counter,
    pub resident_peak_bytes: Counter,
    /// Routing calls after which pinned experts alone exceeded the expert budget.
    pub overruns: Counter,
    /// Evictions forced by measured RSS above the budget (the RSS guard).
    pub guard_shrinks: Counter,
    /// Experts read in on a cross-layer prediction; those routing then selected; bytes of
    /// those it did not.
    pub prefetch_issued: Counter,
    pub prefetch_useful: Counter,
    pub prefetch_wasted_bytes: Counter,
    /// Bytes of the speculative reads issued, and of those routing then selected.
    pub prefetch_issued_bytes: Counter,
    pub prefetch_useful_bytes: Counter,
    /// The same two for guesses made during single-token (decode) steps.
    pub decode_prefetch_issued_bytes: Counter,
    pub decode_prefetch_useful_bytes: Counter,
    pub layers: Vec<LayerCounters>,
}

impl PagerCounters {
    pub fn new(layers: impl IntoIterator<Item = u32>, n_expert: u32) -> PagerCounters {
        PagerCounters {
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

/// Everything a stats snapshot is made from; shared by the run, the SIGUSR2 thread and
/// the memory sampler.
#[derive(Debug, Default)]
pub struct RunStats {
    pub pager_enabled: bool,
    pub budget_bytes: u64,
    /// Set once the session has measured its reserve.
    pub expert_budget_bytes: Counter,
    pub model_path: PathBuf,
    pub model_bytes: u64,
    pub expert_bytes: u64,
    pub reserve_bytes: Counter,
    pub mapping_rss_after_load: Counter,
    pub prompt_tokens: Counter,
    pub generated_tokens: Counter,
    pub prefill_us: Counter,
    pub decode_us: Counter,
    pub read_bytes_after_load: Counter,
    /// `read_bytes` when decoding started, and the decode steps evaluated since.
    pub read_bytes_at_decode: Counter,
    pub decode_steps: Counter,
    pub peak_rss: Counter,
    pub peak_anon: Counter,
    pub peak_file: Counter,
    pub hook_calls: Counter,
    /// Wall time inside the hook for routed layers, all ubatches and decode (1-token) only.
    pub hook_ns: Counter,
    pub hook_decode_ns: Counter,
    pub io_counters: Arc<os::IoCounters>,
    /// The longest range one readahead call reads in full (smallest over the model's files).
    pub willneed_chunk_bytes: Counter,
    /// Set at the end of a paged run: see `ExpertsSection::stray_cache_bytes_at_exit`.
    pub stray_expert_cache: Counter,
    pub hook_panicked: AtomicBool,
    pub complete: AtomicBool,
    pub generated_ids: Mutex<Vec<i32>>,
    pub pager: Arc<PagerCounters>,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
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
    pub io: IoSection,
    pub memory: MemorySection,
    pub per_layer: Vec<LayerSection>,
    pub hook: HookSection,
    pub prefetch: PrefetchSection,
    pub prediction: PredictionSection,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct PrefetchSection {
    pub issued: u64,
    pub useful: u64,
    pub wasted_bytes: u64,
    #[serde(default)]
    pub issued_bytes: u64,
    #[serde(default)]
    pub useful_bytes: u64,
    /// `issued_bytes` and `useful_bytes` of guesses made during decode (single-token) steps.
    #[serde(default)]
    pub decode_issued_bytes: u64,
    #[serde(default)]
    pub decode_useful_bytes: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct PredictionSection {
    /// Share of selected experts that had been predicted (0 when nothing was predicted).
    pub accuracy: f64,
    pub per_layer: Vec<LayerAccuracy>,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LayerAccuracy {
    pub layer: u32,
    pub accuracy: f64,
    pub scored: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct ModelSection {
    pub path: String,
    pub bytes: u64,
    pub expert_bytes: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct TokensSection {
    pub prompt: u64,
    pub generated: u64,
    pub generated_ids: Vec<i32>,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct TokPerSec {
    pub prefill: f64,
    pub decode: f64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct ExpertsSection {
    pub hits: u64,
    pub misses: u64,
    pub hit_rate: f64,
    pub miss_bytes: u64,
    #[serde(default)]
    pub decode_misses: u64,
    #[serde(default)]
    pub decode_miss_bytes: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub resident_bytes: u64,
    pub resident_peak_bytes: u64,
    pub overruns: u64,
    pub guard_shrinks: u64,
    /// Measured (mincore) when the run ends: bytes of experts the pager does not count as
    /// resident that the page cache holds anyway. 0 is the pager's promise; written at exit.
    #[serde(default)]
    pub stray_cache_bytes_at_exit: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct IoSection {
    pub read_bytes: u64,
    pub read_bytes_per_token: f64,
    /// Bytes read from storage during decode, and per decode step.
    #[serde(default)]
    pub decode_read_bytes: u64,
    #[serde(default)]
    pub decode_steps: u64,
    /// Wall time in the advisor's system calls (`MADV_WILLNEED`; `MADV_DONTNEED` +
    /// `POSIX_FADV_DONTNEED`; waiting for the populate pool), microseconds.
    #[serde(default)]
    pub will_need_us: u64,
    #[serde(default)]
    pub evict_us: u64,
    #[serde(default)]
    pub populate_wait_us: u64,
    /// Ranges are advised in pieces of at most this many bytes: the kernel reads no more
    /// than the device's max(read_ahead_kb, max_sectors_kb) per call.
    #[serde(default)]
    pub willneed_chunk_bytes: u64,
    /// Evictions after which part of the range was still cached (its read in flight), the
    /// repeated drops that followed, and late evictions left cached because the list of
    /// ranges to drop again was full.
    #[serde(default)]
    pub late_evictions: u64,
    #[serde(default)]
    pub redrops: u64,
    #[serde(default)]
    pub redrop_overflows: u64,
    /// Speculative reads advised by the readahead thread (`--ahead-thread`), its wall time
    /// in `MADV_WILLNEED` (microseconds), and queued reads cancelled before it got to them.
    #[serde(default)]
    pub ahead_reads: u64,
    #[serde(default)]
    pub ahead_will_need_us: u64,
    #[serde(default)]
    pub ahead_cancelled: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct MemorySection {
    pub peak_rss_bytes: u64,
    pub peak_rss_anon_bytes: u64,
    pub peak_rss_file_bytes: u64,
    pub rss_bytes: u64,
    pub swap_bytes: u64,
    pub reserve_bytes: u64,
    pub model_mapping_rss_after_load_bytes: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LayerSection {
    pub layer: u32,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Expert selections (one per token per chosen expert) in this layer.
    pub selections: u64,
    pub distinct_experts: u64,
    /// Share of selections that went to the most-selected 10% of the experts: 0.1 for
    /// perfectly uniform routing, towards 1 for heavily skewed routing.
    pub top_decile_share: f64,
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct HookSection {
    pub calls: u64,
    pub panicked: bool,
    /// Wall time inside the hook for routed layers (routing, eviction, advice, prediction),
    /// microseconds: over the run, and over decode steps only.
    #[serde(default)]
    pub busy_us: u64,
    #[serde(default)]
    pub decode_busy_us: u64,
}

fn rate(tokens: u64, us: u64) -> f64 {
    if us == 0 {
        0.0
    } else {
        tokens as f64 * 1e6 / us as f64
    }
}

impl RunStats {
    /// Fold a fresh reading of `/proc/self/status` into the peaks.
    pub fn sample_memory(&self) -> os::ProcMemory {
        let m = os::proc_memory(None).unwrap_or_default();
        self.peak_rss.max(m.rss.max(m.hwm));
        self.peak_anon.max(m.rss_anon);
        self.peak_file.max(m.rss_file);
        m
    }

    pub fn snapshot(&self) -> Snapshot {
        let m = self.sample_memory();
        let p = &self.pager;
        let (hits, misses) = (p.hits.get(), p.misses.get());
        let prompt = self.prompt_tokens.get();
        let generated = self.generated_tokens.get();
        let read_bytes = os::proc_read_bytes();
        let after_load = read_bytes.saturating_sub(self.read_bytes_after_load.get());
        let tokens = prompt + generated;
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
                generated,
                generated_ids: self
                    .generated_ids
                    .lock()
                    .map(|v| v.clone())
                    .unwrap_or_default(),
            },
            tok_per_s: TokPerSec {
                prefill: rate(prompt, self.prefill_us.get()),
                decode: rate(generated, self.decode_us.get()),
            },
            experts: ExpertsSection {
                hits,
                misses,
                hit_rate: if hits + misses == 0 {
                    0.0
                } else {
                    hits as f64 / (hits + misses) as f64
                },
                miss_bytes: p.miss_bytes.get(),
                decode_misses: p.decode_misses.get(),
                decode_miss_bytes: p.decode_miss_bytes.get(),
                evictions: p.evictions.get(),
                evicted_bytes: p.evicted_bytes.get(),
                resident_bytes: p.resident_bytes.get(),
                resident_peak_bytes: p.resident_peak_bytes.get(),
                overruns: p.overruns.get(),
                guard_shrinks: p.guard_shrinks.get(),
                stray_cache_bytes_at_exit: self.stray_expert_cache.get(),
            },
            io: IoSection {
                read_bytes,
                read_bytes_per_token: if tokens == 0 {
                    0.0
                } else {
                    after_load as f64 / tokens as f64
                },
                decode_read_bytes: match self.read_bytes_at_decode.get() {
                    0 => 0,
                    at => read_bytes.saturating_sub(at),
                },
                decode_steps: self.decode_steps.get(),
                will_need_us: self.io_counters.will_need_ns.load(Ordering::Relaxed) / 1000,
                evict_us: self.io_counters.evict_ns.load(Ordering::Relaxed) / 1000,
                populate_wait_us: self.io_counters.populate_wait_ns.load(Ordering::Relaxed) / 1000,
                willneed_chunk_bytes: self.willneed_chunk_bytes.get(),
                late_evictions: self.io_counters.late_evictions.load(Ordering::Relaxed),
                redrops: self.io_counters.redrops.load(Ordering::Relaxed),
                redrop_overflows: self.io_counters.redrop_overflows.load(Ordering::Relaxed),
                ahead_reads: self.io_counters.ahead_reads.load(Ordering::Relaxed),
                ahead_will_need_us: self.io_counters.ahead_will_need_ns.load(Ordering::Relaxed)
                    / 1000,
                ahead_cancelled: self.io_counters.ahead_cancelled.load(Ordering::Relaxed),
            },
            memory: MemorySection {
                peak_rss_bytes: self.peak_rss.get(),
                peak_rss_anon_bytes: self.peak_anon.get(),
                peak_rss_file_bytes: self.peak_file.get(),
                rss_bytes: m.rss,
                swap_bytes: m.swap,
                reserve_bytes: self.reserve_bytes.get(),
                model_mapping_rss_after_load_bytes: self.mapping_rss_after_load.get(),
            },
            per_layer: p
                .layers
                .iter()
                .map(|l| {
                    let (selections, distinct_experts, top_decile_share) = l.popularity();
                    LayerSection {
                        layer: l.layer,
                        hits: l.hits.get(),
                        misses: l.misses.get(),
                        evictions: l.evictions.get(),
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
            },
            prefetch: PrefetchSection {
                issued: p.prefetch_issued.get(),
                useful: p.prefetch_useful.get(),
                wasted_bytes: p.prefetch_wasted_bytes.get(),
                issued_bytes: p.prefetch_issued_bytes.get(),
                useful_bytes: p.prefetch_useful_bytes.get(),
                decode_issued_bytes: p.decode_prefetch_issued_bytes.get(),
                decode_useful_bytes: p.decode_prefetch_useful_bytes.get(),
            },
            prediction: {
                let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                let (sel, of) = p.layers.iter().fold((0, 0), |(s, o), l| {
                    (s + l.predicted_selected.get(), o + l.predicted_of.get())
                });
                PredictionSection {
                    accuracy: ratio(sel, of),
                    per_layer: p
                        .layers
                        .iter()
                        .map(|l| LayerAccuracy {
                            layer: l.layer,
                            accuracy: ratio(l.predicted_selected.get(), l.predicted_of.get()),
                            scored: l.predicted_of.get(),
                        })
                        .collect(),
                }
            },
        }
    }
}

static WRITE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` to `path` atomically: a unique temporary file in the same directory,
/// fsync, then rename over the target. Readers see the old file or the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stats.json".into());
    let seq = WRITE_SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.tmp-{}-{seq}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Serialize a snapshot and write it atomically; one writer at a time.
pub fn write_snapshot(stats: &RunStats, path: &Path) -> std::io::Result<()> {
    static WRITER: Mutex<()> = Mutex::new(());
    let _guard = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let mut json = serde_json::to_vec_pretty(&stats.snapshot()).map_err(std::io::Error::other)?;
    json.push(b'\n');
    write_atomic(path, &json)
}

/// Samples `/proc/self/status` every `period` into `stats`' peaks until `stop` is set.
pub fn spawn_memory_sampler(
    stats: Arc<RunStats>,
    stop: Arc<AtomicBool>,
    period: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("epm-mem-sampler".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                stats.sample_memory();
                std::thread::sleep(period);
            }
        })
        .expect("spawn memory sampler")
}
