//! Attaching the pager to a hooked context: find llama.cpp's mappings of the model's
//! files, take ownership of their page cache (drop it, `MADV_RANDOM`, advise the non-expert
//! bytes in but the token table it lends to the expert cache), and build the pager, the
//! predictor and the trace writer.

use std::path::PathBuf;
use std::sync::Arc;

use epm_core::assist::AssistMode;
use epm_core::budget::{pager_budget, Budgets, TokenRowLoan};
use epm_core::model::ModelIndex;
use epm_core::pager::{
    cached_experts, layers_readable_whole, CachePolicy, EvictBy, LayerSpec, Pager, PagerConfig,
    PromptEviction, PromptReads,
};
use epm_core::predict::PredictReads;
use epm_core::stats::RunStats;
use epm_core::trace::TraceWriter;
use epm_sys::advisor::whole_read_margins;
use epm_sys::cgroup::MemoryCgroup;
use epm_sys::fs::UncachedWriter;
use epm_sys::proc::read_ahead_kb;
use epm_sys::{
    inward, outward, page_size, sigbus, FileMapping, OsAdvisor, Prefetch, RssProbe, FOLIO_MAX_PAGES,
};

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
    /// Share routing steps' system calls (those left on the hook) with a thread that works
    /// only while the hook waits for them, on a core ggml leaves idle between graph splits:
    /// every step, or those where sharing measures cheaper (`None`: no such thread).
    pub assist_thread: Option<AssistMode>,
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
    /// Which expert the pager evicts from the cache policy's order.
    pub evict_by: EvictBy,
    /// How a prompt's ubatches read the experts they miss.
    pub prompt_reads: PromptReads,
    /// Write the routing trace here.
    pub trace_file: Option<PathBuf>,
    /// Keep, as resident, the experts whose pages the page cache already holds at start
    /// (an earlier run of the model left them), as many as the expert budget holds, rather
    /// than dropping them and reading them again.
    pub keep_page_cache: bool,
    /// When more of them is cached than the budget holds, the experts to keep first, in
    /// order: those past runs selected most (the warm start's heat, `crate::warm`); the
    /// rest by expert number.
    pub keep_first: Vec<(u32, u32)>,
}

impl Default for PagingOptions {
    fn default() -> PagingOptions {
        PagingOptions {
            prefetch: Prefetch::WillNeed,
            prediction: Prediction::Default { depth: 1 },
            ahead_thread: false,
            evict_thread: false,
            assist_thread: None,
            prefill_predict_tokens: 512,
            predict_reads: PredictReads::default(),
            predict_router_bias: true,
            hot_window_tokens: 0,
            cache_policy: CachePolicy::DEFAULT,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads: PromptReads::default(),
            trace_file: None,
            keep_page_cache: true,
            keep_first: Vec::new(),
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
            adopted = cached_experts(
                &layers,
                index.n_expert,
                page,
                expert_budget,
                &opts.keep_first,
                |r| {
                    let (s, e) = inward(r.offset, r.len, page);
                    files[r.file as usize].resident_bytes(s, e - s) == e - s
                },
            );
        }
        match drop_file_pages(&files, &index.file_sizes, &expert_ranges, &layers, &adopted) {
            Some(reread) => stats.pager.adopted_reread_bytes.add(reread),
            None => {
                adopted.clear();
                drop_file_pages(&files, &index.file_sizes, &expert_ranges, &layers, &[]);
            }
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
    let read_around = mapping_read_around(index);
    let whole_layers = match opts.prompt_reads {
        PromptReads::WholeLayers if !every_expert_fits => {
            layers_read_whole(index, &layers, read_around)
        }
        _ => Vec::new(),
    };
    let mut advisor = OsAdvisor::new(files, opts.prefetch, stats.io_counters.clone());
    if let Some(window) = read_around.filter(|_| !whole_layers.is_empty()) {
        advisor = advisor.with_whole_layer_reader(window);
    }
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
    if let Some(mode) = opts.assist_thread {
        tracing::info!(
            "the hook's system calls are shared with an assisting thread ({})",
            match mode {
                AssistMode::Always => "every step",
                AssistMode::Measured => "where that measures cheaper",
            }
        );
        advisor = advisor.with_assist_thread(mode);
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
            evict_by: opts.evict_by,
            prompt_reads: opts.prompt_reads,
        },
        index.n_expert,
        layers,
        stats.pager.clone(),
    );
    for &layer in &whole_layers {
        pager.allow_whole_layer_reads(layer);
    }
    for &(layer, expert) in &adopted {
        pager.adopt(layer, expert);
    }
    if !adopted.is_empty() {
        tracing::info!(
            "{} experts ({} MiB) found in the page cache are kept{}, {} MiB of them read again",
            stats.pager.adopted.get(),
            stats.pager.adopted_bytes.get() >> 20,
            if opts.keep_first.is_empty() {
                ""
            } else {
                " (those past runs selected most first)"
            },
            stats.pager.adopted_reread_bytes.get() >> 20
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

/// The readahead window the kernel applies to llama.cpp's mapping of the model, largest
/// over its files: the device's `read_ahead_kb`, doubled, since llama.cpp advises
/// `POSIX_FADV_SEQUENTIAL` on each file it maps (`llama-mmap.cpp`). `None` where a file's
/// device cannot be read (not on a block device).
fn mapping_read_around(index: &ModelIndex) -> Option<u64> {
    let windows: Option<Vec<u64>> = index.files.iter().map(|p| read_ahead_kb(p)).collect();
    windows?.into_iter().max().map(|kb| 2 * kb * 1024)
}

/// The layers a prompt may read whole (`layers_readable_whole`): those whose runs of
/// expert tensors have a middle at least one readahead window long once the ends that
/// are read exactly are set aside (`advisor::whole_read_margins`). None where the window
/// cannot be read, said once.
fn layers_read_whole(
    index: &ModelIndex,
    layers: &[LayerSpec],
    read_around: Option<u64>,
) -> Vec<u32> {
    let Some(window) = read_around else {
        tracing::warn!(
            "--prompt-reads whole-layers: the model's readahead window cannot be read \
             (not on a block device?), so its layers are read by expert"
        );
        return Vec::new();
    };
    let (head, tail) = whole_read_margins(window);
    let min_run = head + tail + window;
    let whole = layers_readable_whole(layers, index.n_expert, min_run);
    if whole.is_empty() {
        tracing::warn!(
            "--prompt-reads whole-layers: no layer's expert tensors lie in runs of at least \
             {} MiB (the readahead window's margins and one window), so every layer is read \
             by expert",
            min_run >> 20
        );
    } else {
        tracing::info!(
            "a prompt reads {} of {} layers whole, their middles through the kernel's \
             read-around (a layer's tensors must lie in runs of at least {} MiB)",
            whole.len(),
            layers.len(),
            min_run >> 20
        );
    }
    whole
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
/// so that the pager's table (the adopted experts resident, no other) is the truth; the
/// adopted bytes read again to get there, or `None` if it was not reached. Two things
/// defeat a plain drop of the expert ranges: readahead from header reads (ours and
/// llama.cpp's) may still be in flight, and the kernel skips pages under I/O; and a large
/// folio left by an earlier write or read can straddle an expert range and its neighbour,
/// and is only dropped whole. So drop, check the ranges with mincore, and repeat until they
/// are clean; if pages stay, wait for the file's dirty pages to be written back (a file
/// just written) and go on. Without adopted experts the whole file is dropped (the
/// non-expert bytes are read back right after, in exact ranges), as often as it takes; with
/// them, the expert ranges but theirs a few times, and if pages stay, the dirty pages are
/// written back, the folios at the ends of the adopted experts' slices and of the expert
/// ranges are split into single pages ([`split_boundary_folios`]) and the drop repeated.
/// Where the kernel would not split them, they are dropped whole instead
/// ([`break_boundary_folios`]), then those that still hold dropped pages beside the bytes
/// between tensors ([`break_stray_folios`]; the caller reads those bytes again), the drop
/// repeated (at last of the whole file but theirs), and their adopted pages read again.
fn drop_file_pages(
    files: &[FileMapping],
    sizes: &[u64],
    ranges: &PerFile,
    layers: &[LayerSpec],
    adopted: &[(u32, u32)],
) -> Option<u64> {
    let page = page_size() as u64;
    let kept = kept_ranges(layers, adopted, files.len(), page);
    let whole: Vec<Vec<(u64, u64)>> = sizes
        .iter()
        .map(|&size| vec![(0, size.next_multiple_of(page))])
        .collect();
    if adopted.is_empty() {
        let mut stray = drop_pages_but(files, &whole, ranges, &kept, 5);
        if stray > 0 {
            write_back(files);
            stray = drop_pages_but(files, &whole, ranges, &kept, 45);
        }
        if stray > 0 {
            tracing::warn!("{stray} bytes of expert pages stayed in the page cache after eviction");
        }
        return Some(0);
    }
    // Two attempts for reads still in flight: pages that stay after them are dirty (written
    // back next) or in folios that straddle a kept expert (split below).
    if drop_pages_but(files, ranges, ranges, &kept, 2) == 0 {
        return Some(0);
    }
    write_back(files);
    // Large folios straddle kept and dropped pages: split those at the kept slices' ends
    // and at the expert ranges' ends into single pages, all still cached. (No drop pass
    // between the write-back and the split: a file just written is cached in large folios
    // too, and on W1 each pass over the ranges costs about 0.2 s.)
    split_boundary_folios(files, ranges, layers, adopted, page);
    if drop_pages_but(files, ranges, ranges, &kept, 2) == 0 {
        tracing::info!(
            "large page-cache folios held the cached experts: those at their ends were split, so that each expert can be evicted alone"
        );
        return Some(0);
    }
    // Not split (another process maps them, or the kernel would not): break those at the
    // kept slices' ends, and read their kept pages again.
    let mut broken = match break_boundary_folios(files, layers, adopted, page) {
        Ok(broken) => broken,
        Err(why) => {
            tracing::info!("{why}: no cached expert is kept");
            return None;
        }
    };
    // What stays is in folios shared with the bytes between tensors: break those too (the
    // caller reads the non-expert bytes again), rather than drop the whole file.
    if drop_pages_but(files, ranges, ranges, &kept, 1) > 0 {
        if let Ok(more) = break_stray_folios(files, ranges, &kept, page) {
            for (b, m) in broken.iter_mut().zip(more) {
                b.extend(m);
                merge(b);
            }
        }
    }
    if drop_pages_but(files, ranges, ranges, &kept, 5) > 0
        && drop_pages_but(files, &whole, ranges, &kept, 5) > 0
    {
        tracing::info!(
            "expert pages outside the cached experts stay in the page cache: none is kept"
        );
        return None;
    }
    let mut reread = 0;
    for (f, m) in files.iter().enumerate() {
        for (start, end) in overlap(&kept[f], &broken[f]) {
            m.will_need(start, end - start);
            reread += end - start;
        }
    }
    tracing::info!(
        "large page-cache folios held the cached experts: those at their ends were dropped, so that each expert can be evicted alone"
    );
    Some(reread)
}

/// Wait for the model files' dirty pages to be written back, so that drops can take them
/// (a file just written, by a download that did not sync); a clean file returns at once.
fn write_back(files: &[FileMapping]) {
    let started = std::time::Instant::now();
    for m in files {
        if !m.write_back() {
            tracing::debug!("{}: fdatasync failed", m.path.display());
        }
    }
    let waited = started.elapsed();
    if waited > std::time::Duration::from_millis(100) {
        tracing::info!(
            "waited {:.1} s for the model's pages just written to reach the disk, so that they can be dropped",
            waited.as_secs_f64()
        );
    }
}

/// Drop the pages of `dropped` outside `kept` and check the `ranges` outside `kept` with
/// mincore, up to `attempts` times until they are clean (a page under I/O is skipped by
/// the kernel); the bytes of those ranges still cached at the end.
fn drop_pages_but(
    files: &[FileMapping],
    dropped: &PerFile,
    ranges: &PerFile,
    kept: &PerFile,
    attempts: u32,
) -> u64 {
    let page = page_size() as u64;
    let mut stray = 0;
    for attempt in 0..attempts {
        stray = 0;
        for (f, m) in files.iter().enumerate() {
            for (start, end) in cut_out(&dropped[f], &kept[f]) {
                m.evict(start, end - start);
            }
            for (start, end) in cut_out(&ranges[f], &kept[f]) {
                let (s, e) = inward(start, end - start, page);
                stray += m.resident_bytes(s, e - s);
            }
        }
        if stray == 0 || attempt + 1 == attempts {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stray
}

/// Split the large page-cache folios that may straddle two neighbours of which one is
/// kept and the other dropped, or both kept: those at the first and last page of every
/// adopted expert's slice and of every expert range (beside the bytes between tensors).
/// A folio lies wholly inside a slice or holds one of its ends, so afterwards each adopted
/// expert can be evicted alone, and a drop of the others leaves no page but the kept
/// ones, with nothing read again ([`FileMapping::split_folio`]: the caller's drop shows
/// whether the kernel split them).
fn split_boundary_folios(
    files: &[FileMapping],
    ranges: &PerFile,
    layers: &[LayerSpec],
    adopted: &[(u32, u32)],
    page: u64,
) {
    let slices =
        adopted_slices(layers, adopted, page).map(|(_, file, start, end)| (file, start, end));
    let expert_ranges = ranges
        .iter()
        .enumerate()
        .flat_map(|(file, r)| r.iter().map(move |&(start, end)| (file, start, end)));
    for (file, start, end) in slices.chain(expert_ranges) {
        let (s, e) = outward(start, end - start, page);
        if e <= s {
            continue;
        }
        files[file].split_folio(s);
        if e - page > s {
            files[file].split_folio(e - page);
        }
    }
}

/// Make each adopted expert's slices droppable on their own where the kernel would not
/// split their folios ([`split_boundary_folios`]): the kernel drops a folio only when a
/// drop covers all of it, and a large folio (a copy leaves 64 KiB ones, a sequential read
/// such as `cat` or a checksum 2 MiB ones) at a slice's first or last page also holds its
/// neighbour's, so evicting either would leave the folio cached outside the budget.
/// Drops the folio at each end of every slice ([`break_folio`]); per file, the blocks
/// dropped (sorted, merged), whose adopted pages the caller reads again (the kernel's
/// readahead for `MADV_WILLNEED` makes single pages). Gives up where a page will not go,
/// or once the blocks exceed [`MAX_REREAD_SHARE`] of the slices seen: keeping experts
/// mostly read again saves little and costs a drop per folio size tried.
fn break_boundary_folios(
    files: &[FileMapping],
    layers: &[LayerSpec],
    adopted: &[(u32, u32)],
    page: u64,
) -> Result<Vec<Vec<(u64, u64)>>, Unbroken> {
    let mut broken = vec![Vec::new(); files.len()];
    let (mut seen, mut dropped) = (0u64, 0u64);
    // Judged once the first `experts` experts' slices are all broken, from the 16th on.
    let judge = |experts: usize, seen: u64, dropped: u64| {
        if experts >= MIN_EXPERTS_JUDGED && dropped as f64 > seen as f64 * MAX_REREAD_SHARE {
            return Err(Unbroken::MostlyReadAgain {
                experts,
                percent: dropped * 100 / seen.max(1),
            });
        }
        Ok(())
    };
    let mut last = None;
    for (n, file, start, end) in adopted_slices(layers, adopted, page) {
        if last.is_some_and(|l| n > l) {
            judge(n, seen, dropped)?;
        }
        last = Some(n);
        seen += end - start;
        for p in [start, end - page] {
            let block = break_folio_at(&files[file], p, page)?;
            dropped += block.1 - block.0;
            broken[file].push(block);
        }
    }
    if let Some(l) = last {
        judge(l + 1, seen, dropped)?;
    }
    for b in &mut broken {
        merge(b);
    }
    Ok(broken)
}

/// Break the folios that hold the pages of `ranges` outside `kept` still cached
/// ([`break_folio`] at each such page); per file, the blocks dropped, sorted and merged.
fn break_stray_folios(
    files: &[FileMapping],
    ranges: &PerFile,
    kept: &PerFile,
    page: u64,
) -> Result<Vec<Vec<(u64, u64)>>, Unbroken> {
    let mut broken = vec![Vec::new(); files.len()];
    for (f, m) in files.iter().enumerate() {
        for (start, end) in cut_out(&ranges[f], &kept[f]) {
            let (s, e) = inward(start, end - start, page);
            if m.resident_bytes(s, e - s) == 0 {
                continue;
            }
            let mut p = s;
            while p < e {
                if m.resident_bytes(p, page) > 0 {
                    let block = break_folio_at(m, p, page)?;
                    broken[f].push(block);
                    p = p.max(block.1);
                } else {
                    p += page;
                }
            }
        }
        merge(&mut broken[f]);
    }
    Ok(broken)
}

/// [`break_folio`] in the page cache of `m`'s file.
fn break_folio_at(m: &FileMapping, p: u64, page: u64) -> Result<(u64, u64), Unbroken> {
    break_folio(p, page, FOLIO_MAX_PAGES, |start, len| {
        m.evict(start, len);
        m.resident_bytes(p, page) == 0
    })
    .ok_or(Unbroken::PageStays {
        max_kib: (page * FOLIO_MAX_PAGES) >> 10,
    })
}

/// Why [`break_boundary_folios`] or [`break_stray_folios`] gave up.
#[derive(Debug, thiserror::Error)]
enum Unbroken {
    #[error("a page-cache folio larger than {max_kib} KiB, a page still being read or written back, or a page another process maps, holds a cached expert")]
    PageStays { max_kib: u64 },
    #[error("large page-cache folios hold the cached experts (the first {experts} would be read again for {percent}% of their bytes)")]
    MostlyReadAgain { experts: usize, percent: u64 },
}

/// The share of the kept experts' bytes that may be read again when their folios are
/// broken: beyond it, keeping them saves too little of a read to be worth the drops.
const MAX_REREAD_SHARE: f64 = 0.5;

/// How many adopted experts [`break_boundary_folios`] breaks before it judges the share.
const MIN_EXPERTS_JUDGED: usize = 16;

/// The smallest block around page `p`, aligned to its size and of at most `max_pages`
/// pages, whose drop takes `p` out of the page cache: `drop(start, len)` drops a block and
/// says whether `p` is gone. A folio is aligned to its size, so the block is the folio
/// holding `p` (or `p` alone, if it was not cached), at the cost of a drop per size tried.
fn break_folio(
    p: u64,
    page: u64,
    max_pages: u64,
    mut drop: impl FnMut(u64, u64) -> bool,
) -> Option<(u64, u64)> {
    let mut size = page;
    while size <= page * max_pages {
        let start = p - p % size;
        if drop(start, size) {
            return Some((start, start + size));
        }
        size *= 2;
    }
    None
}

/// Sort ranges and merge those that overlap or touch.
fn merge(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(s, e) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *ranges = merged;
}

/// The parts common to two sorted, disjoint lists of ranges.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
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
    for (_, file, start, end) in adopted_slices(layers, adopted, page) {
        kept[file].push((start, end));
    }
    for k in &mut kept {
        merge(k);
    }
    kept
}

/// Each slice of the `adopted` experts, rounded outward to pages: (the expert's place in
/// `adopted`, file, start, end).
fn adopted_slices<'a>(
    layers: &'a [LayerSpec],
    adopted: &'a [(u32, u32)],
    page: u64,
) -> impl Iterator<Item = (usize, usize, u64, u64)> + 'a {
    adopted
        .iter()
        .enumerate()
        .filter_map(|(n, &(layer, expert))| {
            let l = layers.iter().find(|l| l.layer == layer)?;
            Some((n, l, expert))
        })
        .flat_map(move |(n, l, expert)| {
            l.slices.iter().map(move |slice| {
                let r = slice.range(u64::from(expert));
                let (start, end) = outward(r.offset, r.len, page);
                (n, r.file as usize, start, end)
            })
        })
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
            let stray = files[r.file as usize].resident_bytes(s, e - s);
            if stray > 0 {
                tracing::debug!("stray: {stray} bytes of the expert range {r:?} are cached");
            }
            stray
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
    fn overlap_keeps_what_both_lists_cover() {
        let a = [(0, 10), (20, 30), (40, 50)];
        assert_eq!(overlap(&a, &[(5, 25)]), [(5, 10), (20, 25)]);
        assert_eq!(overlap(&a, &[(0, 100)]), a);
        assert_eq!(overlap(&a, &[(10, 20), (30, 40)]), []);
        assert_eq!(overlap(&[(5, 25)], &a), [(5, 10), (20, 25)]);
        assert!(overlap(&[], &a).is_empty());
    }

    #[test]
    fn break_folio_drops_the_aligned_block_that_holds_the_folio() {
        // A fake page cache of 4 KiB pages: folios as (start, len); a drop takes the folios
        // it covers whole.
        let page = 4096;
        let folios = vec![(0, 4096), (65536, 65536), (2 << 20, 2 << 20)];
        let run = |p: u64, max_pages: u64| {
            let mut cache = folios.clone();
            let mut tried = Vec::new();
            let block = break_folio(p, page, max_pages, |s, len| {
                tried.push(len);
                cache.retain(|&(fs, fl)| !(fs >= s && fs + fl <= s + len));
                !cache.iter().any(|&(fs, fl)| fs <= p && p < fs + fl)
            });
            (block, tried)
        };
        assert_eq!(run(0, 512), (Some((0, 4096)), vec![4096]));
        // The last page of a 64 KiB folio: blocks of 1, 2, ... 16 pages.
        let (block, tried) = run(65536 + 61440, 512);
        assert_eq!(block, Some((65536, 131072)));
        assert_eq!(tried, [4096, 8192, 16384, 32768, 65536]);
        // A page no folio holds goes at once; a 2 MiB folio needs 512 pages, not 256.
        assert_eq!(run(8192, 512).0, Some((8192, 12288)));
        assert_eq!(run((3 << 20) + 4096, 512).0, Some((2 << 20, 4 << 20)));
        assert_eq!(run((3 << 20) + 4096, 256).0, None);
    }

    #[test]
    fn merge_joins_overlapping_and_touching_ranges() {
        let mut r = vec![(20, 30), (0, 10), (10, 15), (25, 40), (50, 60)];
        merge(&mut r);
        assert_eq!(r, [(0, 15), (20, 40), (50, 60)]);
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
