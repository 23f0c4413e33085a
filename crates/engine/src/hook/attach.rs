//! Attaching the pager to a hooked context: find llama.cpp's mappings of the model's
//! files, take ownership of their page cache (drop it, `MADV_RANDOM`, advise the non-expert
//! bytes in but the token table it lends to the expert cache), and build the pager, the
//! predictor and the trace writer.

use std::path::PathBuf;
use std::sync::Arc;

use epm_core::budget::{pager_budget, Budgets, TokenRowLoan};
use epm_core::model::ModelIndex;
use epm_core::pager::{cached_experts, CachePolicy, LayerSpec, Pager, PagerConfig, PromptEviction};
use epm_core::predict::PredictReads;
use epm_core::stats::RunStats;
use epm_core::trace::TraceWriter;
use epm_sys::cgroup::MemoryCgroup;
use epm_sys::fs::UncachedWriter;
use epm_sys::{inward, outward, page_size, sigbus, FileMapping, OsAdvisor, Prefetch, RssProbe};

use super::{publish_loan, Active, CapWatch, ExpectedTensor, Predictor};
use crate::error::EngineError;

/// Whether to predict the next layers' experts and read them in early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prediction {
    Off,
    /// Asked for explicitly: on, with a warning where the kernel cannot show reads in flight.
    On {
        depth: u32,
    },
    /// The default: on where the kernel can show reads in flight (`cachestat`), off
    /// elsewhere. A wrong guess may be evicted while it is still being read; the kernel
    /// keeps such pages, and only cachestat lets the pager find them and drop them again.
    Default {
        depth: u32,
    },
}

/// How the pager reads and guesses.
#[derive(Debug, Clone)]
pub struct PagingOptions {
    pub prefetch: Prefetch,
    pub prediction: Prediction,
    /// Advise predicted experts in from a readahead thread rather than the hook.
    pub ahead_thread: bool,
    /// Make evictions on a thread of their own rather than on the hook (the pager's budget
    /// then keeps a slack for drops not yet made).
    pub evict_thread: bool,
    /// Share each routing step's system calls (those left on the hook) with a thread that
    /// works only while the hook waits for them, on a core ggml leaves idle between graph
    /// splits.
    pub assist_thread: bool,
    /// Tokens of a prefill ubatch the predictor samples (0: no prediction in prefill).
    pub prefill_predict_tokens: usize,
    /// How many of the experts a prediction names per token are read.
    pub predict_reads: PredictReads,
    /// Whether predictions add the router's own bias (`ffn_gate_inp.bias`) as llama.cpp
    /// does; off only to measure what it is worth.
    pub predict_router_bias: bool,
    /// Experts used within this many recent tokens are never evicted.
    pub hot_window_tokens: u64,
    /// What the pager evicts first.
    pub cache_policy: CachePolicy,
    /// What the pager evicts first while a prompt is evaluated.
    pub prompt_eviction: PromptEviction,
    /// Write the routing trace here.
    pub trace_file: Option<PathBuf>,
    /// Keep, as resident, the experts whose pages the page cache already holds at start
    /// (an earlier run of the model left them), as many as the expert budget holds, rather
    /// than dropping them and reading them again.
    pub keep_page_cache: bool,
}

impl Default for PagingOptions {
    fn default() -> PagingOptions {
        PagingOptions {
            prefetch: Prefetch::WillNeed,
            prediction: Prediction::Default { depth: 1 },
            ahead_thread: false,
            evict_thread: false,
            assist_thread: false,
            prefill_predict_tokens: 512,
            predict_reads: PredictReads::default(),
            predict_router_bias: true,
            hot_window_tokens: 0,
            cache_policy: CachePolicy::DEFAULT,
            prompt_eviction: PromptEviction::default(),
            trace_file: None,
            keep_page_cache: true,
        }
    }
}

/// Find llama.cpp's mappings, take over their page cache and build the pager.
pub(crate) fn attach(
    index: &ModelIndex,
    opts: &PagingOptions,
    budgets: Budgets,
    stats: &Arc<RunStats>,
) -> Result<Active, EngineError> {
    let files = index
        .files
        .iter()
        // SAFETY: these are llama.cpp's mappings of the model's files, owned by the model
        // that the hooked context borrows. The returned `Active` lives in that context's
        // `HookState`, which is dropped with the context, before the model unmaps them.
        .map(|f| unsafe { FileMapping::find(f) })
        .collect::<Result<Vec<_>, _>>()?;
    for m in &files {
        sigbus::watch(&m.path, m.vmas());
        tracing::info!(
            "{}: read ahead in pieces of {} KiB (the device's readahead window)",
            m.path.display(),
            m.willneed_chunk() / 1024
        );
    }
    stats.willneed_chunk_bytes.set(
        files
            .iter()
            .map(FileMapping::willneed_chunk)
            .min()
            .unwrap_or(0),
    );
    let n_expert = u64::from(index.n_expert);
    // Faults anywhere in the file read only their own page: with the kernel's readahead, a
    // fault on a non-expert tensor would read neighbouring (cold) experts into the page
    // cache behind the pager's back. Non-expert bytes are all needed and counted in the
    // reserve, so they are advised in up front, in large reads; all but the token table's
    // lent pages, added to these ranges below.
    let mut expert_ranges: Vec<Vec<(u64, u64)>> = vec![Vec::new(); files.len()];
    let mut expected = Vec::new();
    for layer in &index.layers {
        for t in &layer.tensors {
            let m = &files[t.file];
            expert_ranges[t.file].push((t.offset, t.offset + t.bytes_per_expert * n_expert));
            expected.push(ExpectedTensor {
                name: t.name.clone(),
                addr: m.addr_of(t.offset),
                seen: false,
            });
        }
    }
    // When every expert fits in the budget nothing will ever be evicted, so pages already
    // in the page cache (a warm file) may stay: they can only become resident, which the
    // budget covers. Otherwise the pager must own the cache from an empty start.
    let every_expert_fits = budgets.holds_every_expert(index.expert_bytes);
    // The token table's unread pages are lent to the expert cache: they must start
    // uncached and are never read ahead, so that a page becomes resident only when a row
    // on it is read, after `take_token_rows` took it back.
    let loan = index
        .token_table
        .filter(|_| !every_expert_fits)
        .map(|t| TokenRowLoan::new(t, page_size() as u64));
    if let Some(l) = &loan {
        let (start, end) = l.interior();
        if end > start {
            expert_ranges[l.table().file].push((start, end));
        }
    }
    // Sorted (and disjoint: tensors, and the token table's interior) for `cut_out`.
    for ranges in &mut expert_ranges {
        ranges.sort_unstable();
    }
    let page = page_size() as u64;
    let layers = LayerSpec::from_index(index);
    let expert_budget = pager_budget(&budgets, loan.as_ref(), 0);
    let mut adopted = Vec::new();
    if !every_expert_fits {
        if opts.keep_page_cache {
            adopted = cached_experts(&layers, index.n_expert, page, expert_budget, |r| {
                let (s, e) = inward(r.offset, r.len, page);
                files[r.file as usize].resident_bytes(s, e - s) == e - s
            });
        }
        if !drop_file_pages(&files, &index.file_sizes, &expert_ranges, &layers, &adopted) {
            adopted.clear();
            drop_file_pages(&files, &index.file_sizes, &expert_ranges, &layers, &[]);
        }
    }
    for (m, (ranges, &size)) in files
        .iter()
        .zip(expert_ranges.iter().zip(&index.file_sizes))
    {
        m.set_random(0, size);
        for (start, end) in cut_out(&[(0, size)], ranges) {
            m.will_need(start, end - start);
        }
    }
    // With every expert inside the budget nothing is ever evicted, and predicting would
    // only add its router products to every decode layer.
    let depth = prediction_depth(opts.prediction, &files);
    let predictor = (depth > 0 && !every_expert_fits)
        .then(|| {
            Predictor::new(
                index,
                &files,
                depth,
                opts.prefill_predict_tokens,
                opts.predict_router_bias,
                opts.predict_reads,
            )
        })
        .flatten();
    stats
        .predicted_per_token
        .set(predictor.as_ref().map_or(0, |p| p.reads_per_token() as u64));
    let mut advisor = OsAdvisor::new(files, opts.prefetch, stats.io_counters.clone());
    if predictor.is_some() && opts.ahead_thread {
        tracing::info!("predicted experts are read in from a readahead thread");
        advisor = advisor.with_ahead_thread();
    }
    // Evictions queued for the thread hold their pages until it drops them: that slack
    // comes out of the pager's budget, so resident plus queued stays within it.
    if budgets.evict_slack > 0 {
        tracing::info!(
            "evictions are made on a thread of their own, up to {} MiB ahead",
            budgets.evict_slack >> 20
        );
        advisor = advisor.with_evict_thread(budgets.evict_slack);
    }
    if opts.assist_thread {
        tracing::info!("the hook's system calls are shared with an assisting thread");
        advisor = advisor.with_assist_thread();
    }
    if let Some(l) = &loan {
        publish_loan(stats, l);
        if l.lent_bytes() > 0 {
            tracing::info!(
                "the token table's {} MiB not yet read are lent to the expert cache",
                l.lent_bytes() >> 20
            );
        }
    }
    let mut pager = Pager::new(
        advisor,
        PagerConfig {
            expert_budget_bytes: expert_budget,
            hot_window_tokens: opts.hot_window_tokens,
            page_size: page,
            policy: opts.cache_policy,
            prompt_eviction: opts.prompt_eviction,
        },
        index.n_expert,
        layers,
        stats.pager.clone(),
    );
    for &(layer, expert) in &adopted {
        pager.adopt(layer, expert);
    }
    if !adopted.is_empty() {
        tracing::info!(
            "{} experts ({} MiB) that an earlier run left in the page cache are kept, not read again",
            stats.pager.adopted.get(),
            stats.pager.adopted_bytes.get() >> 20
        );
    }
    let trace = match &opts.trace_file {
        Some(path) => Some(TraceWriter::new(
            UncachedWriter::new(std::fs::File::create(path).map_err(|source| {
                EngineError::File {
                    path: path.clone(),
                    source,
                }
            })?),
            index.n_expert,
            index.n_expert_used,
        )),
        None => None,
    };
    Ok(Active {
        pager,
        rss: RssProbe::new().map_err(|source| EngineError::File {
            path: "/proc/self/statm".into(),
            source,
        })?,
        budgets,
        cap: watch_cap(&budgets, stats),
        loan,
        fresh_pages: Vec::new(),
        owns_page_cache: !every_expert_fits,
        io_room: 0,
        unverified: expected.len(),
        expected,
        trace,
        predictor,
    })
}

/// The cgroup limit that binds the process, with a reader of the kernel memory charged to
/// it; `None` without a limit, or (with a warning) when the counter cannot be read.
fn watch_cap(budgets: &Budgets, stats: &RunStats) -> Option<CapWatch> {
    let cgroup = MemoryCgroup::of_this_process()?;
    stats.cgroup_limit.set(cgroup.limit_bytes);
    let probe = match cgroup.kernel_probe() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(
                "the memory cgroup {} limits this run to {} MiB, but its kernel memory \
                 cannot be read ({e}): the expert cache does not make room for it",
                cgroup.dir.display(),
                cgroup.limit_bytes >> 20
            );
            return None;
        }
    };
    if cgroup.limit_bytes < budgets.total {
        tracing::warn!(
            "the memory cgroup {} limits this run to {} MiB, below --ram-budget-mb {}: \
             the expert cache keeps within the cgroup's limit",
            cgroup.dir.display(),
            cgroup.limit_bytes >> 20,
            budgets.total >> 20
        );
    } else {
        tracing::info!(
            "memory cgroup limit {} MiB ({} MiB above the budget): kernel memory charged \
             beyond that comes out of the expert cache",
            cgroup.limit_bytes >> 20,
            (cgroup.limit_bytes - budgets.total) >> 20
        );
    }
    Some(CapWatch {
        probe,
        limit: cgroup.limit_bytes,
        deduction: 0,
    })
}

/// Start from a page cache that holds no expert pages but those of the `adopted` experts,
/// so that the pager's table (the adopted experts resident, no other) is the truth; whether
/// that was reached. Two things defeat a plain drop of the expert ranges: readahead from
/// header reads (ours and llama.cpp's) may still be in flight, and the kernel skips pages
/// under I/O; and a large folio left by an earlier write or read can straddle an expert
/// range and its neighbour, and is only dropped whole. So drop, check the ranges with
/// mincore, and repeat until they are clean. Without adopted experts the whole file is
/// dropped (the non-expert bytes are read back right after, in exact ranges), as often as
/// it takes; with them, the expert ranges but theirs, then the whole file but theirs, a few
/// times each: a folio that straddles an adopted expert and a dropped one never goes, and
/// the caller then drops everything.
fn drop_file_pages(
    files: &[FileMapping],
    sizes: &[u64],
    ranges: &[Vec<(u64, u64)>],
    layers: &[LayerSpec],
    adopted: &[(u32, u32)],
) -> bool {
    let page = page_size() as u64;
    let kept = kept_ranges(layers, adopted, files.len(), page);
    let whole: Vec<Vec<(u64, u64)>> = sizes
        .iter()
        .map(|&size| vec![(0, size.next_multiple_of(page))])
        .collect();
    let stages: &[(&PerFile, u32)] = if adopted.is_empty() {
        &[(&whole, 50)]
    } else {
        &[(ranges, 5), (&whole, 5)]
    };
    for &(dropped, attempts) in stages {
        for attempt in 0..attempts {
            let mut stray = 0;
            for (f, m) in files.iter().enumerate() {
                for (start, end) in cut_out(&dropped[f], &kept[f]) {
                    m.evict(start, end - start);
                }
                for (start, end) in cut_out(&ranges[f], &kept[f]) {
                    let (s, e) = inward(start, end - start, page);
                    stray += m.resident_bytes(s, e - s);
                }
            }
            if stray == 0 {
                return true;
            }
            if attempt + 1 == attempts && adopted.is_empty() {
                tracing::warn!(
                    "{stray} bytes of expert pages stayed in the page cache after eviction"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    adopted.is_empty()
}

/// Byte ranges `[start, end)` of each model file.
type PerFile = [Vec<(u64, u64)>];

/// Per file, the pages of the `adopted` experts' slices (rounded outward), sorted and
/// merged.
fn kept_ranges(
    layers: &[LayerSpec],
    adopted: &[(u32, u32)],
    n_files: usize,
    page: u64,
) -> Vec<Vec<(u64, u64)>> {
    let mut kept = vec![Vec::new(); n_files];
    for &(layer, expert) in adopted {
        let Some(l) = layers.iter().find(|l| l.layer == layer) else {
            continue;
        };
        for s in &l.slices {
            let r = s.range(u64::from(expert));
            kept[r.file as usize].push(outward(r.offset, r.len, page));
        }
    }
    for k in &mut kept {
        k.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(k.len());
        for &(s, e) in k.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *k = merged;
    }
    kept
}

/// The parts of `ranges` outside `cut` (sorted, disjoint).
fn cut_out(ranges: &[(u64, u64)], cut: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(start, end) in ranges {
        let mut pos = start;
        let first = cut.partition_point(|&(_, e)| e <= start);
        for &(cs, ce) in &cut[first..] {
            if cs >= end {
                break;
            }
            if cs > pos {
                out.push((pos, cs));
            }
            pos = pos.max(ce);
        }
        if pos < end {
            out.push((pos, end));
        }
    }
    out
}

/// How many layers ahead to predict (0: off), given the request and the kernel.
fn prediction_depth(prediction: Prediction, files: &[FileMapping]) -> u32 {
    let sees_reads = files.iter().all(FileMapping::sees_reads_in_flight);
    match prediction {
        Prediction::Off => 0,
        Prediction::On { depth } => {
            if !sees_reads {
                tracing::warn!(
                    "this kernel has no cachestat (Linux 6.5): a wrong guess evicted while it is still being read stays in the page cache, outside the budget"
                );
            }
            depth
        }
        Prediction::Default { depth } if sees_reads => depth,
        Prediction::Default { .. } => {
            tracing::info!(
                "cross-layer prediction off: this kernel has no cachestat (Linux 6.5), which the pager needs to drop wrong guesses still being read; --predict turns it on anyway"
            );
            0
        }
    }
}

/// Bytes of the token table's pages in the page cache (0 without a loan): the loan
/// promises no more than the pages it took back.
pub(crate) fn token_table_cached_bytes(active: &Active) -> u64 {
    let Some(loan) = &active.loan else {
        return 0;
    };
    let (start, end) = loan.pages();
    active.pager.advisor().files[loan.table().file].resident_bytes(start, end - start)
}

/// Bytes of non-resident experts' pages found in the page cache: pages the pager dropped
/// (or, when it started from an empty page cache, never read) that are cached anyway,
/// outside the budget's accounting.
pub(crate) fn stray_expert_cache_bytes(active: &Active) -> u64 {
    let page = page_size() as u64;
    let files = &active.pager.advisor().files;
    active
        .pager
        .non_resident_ranges(!active.owns_page_cache)
        .map(|r| {
            let (s, e) = inward(r.offset, r.len, page);
            files[r.file as usize].resident_bytes(s, e - s)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use epm_core::pager::ExpertSlice;

    #[test]
    fn cut_out_keeps_what_lies_outside_the_cut() {
        let cut = [(10, 20), (30, 40)];
        assert_eq!(cut_out(&[(0, 50)], &cut), [(0, 10), (20, 30), (40, 50)]);
        assert_eq!(cut_out(&[(12, 18), (35, 45)], &cut), [(40, 45)]);
        assert_eq!(cut_out(&[(0, 10), (20, 30)], &cut), [(0, 10), (20, 30)]);
        assert_eq!(cut_out(&[(5, 15)], &[]), [(5, 15)]);
        assert!(cut_out(&[(10, 40)], &[(0, 100)]).is_empty());
    }

    #[test]
    fn kept_ranges_round_each_adopted_slice_outward_and_merge_them() {
        let page = 4096;
        // Experts of 6,000 bytes: neighbours share a page.
        let layers = [LayerSpec {
            layer: 3,
            slices: vec![
                ExpertSlice {
                    file: 0,
                    offset: 100,
                    bytes_per_expert: 6000,
                },
                ExpertSlice {
                    file: 1,
                    offset: 0,
                    bytes_per_expert: 8192,
                },
            ],
        }];
        let kept = kept_ranges(&layers, &[(3, 0), (3, 1), (7, 0)], 2, page);
        assert_eq!(
            kept[0],
            [(0, 12288)],
            "experts 0 and 1 merged, page-rounded"
        );
        assert_eq!(kept[1], [(0, 16384)]);
        let kept = kept_ranges(&layers, &[(3, 2)], 2, page);
        assert_eq!(kept[0], [(8192, 20480)]);
    }
}
