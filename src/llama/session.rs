//! A llama.cpp session: load, measure, attach the pager, generate.

use std::io::Write;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::hook::{trampoline, Active, ExpectedTensor, HookState};
use crate::gguf::ModelIndex;
use crate::os::{self, FileMapping, OsAdvisor, RssProbe};
use crate::pager::{ExpertSlice, LayerSpec, Pager, PagerConfig};
use crate::plan::{self, Measured};
use crate::stats::RunStats;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("RAM budget {budget_mb} MiB is below the minimum of {min_mb} MiB for this model at ctx {n_ctx}, ubatch {n_ubatch} (measured after load: reserve {reserve_mb} MiB + one ubatch's experts {working_set_mb} MiB); raise --ram-budget-mb, or lower -c / -ub")]
    BudgetTooSmall {
        budget_mb: u64,
        min_mb: u64,
        reserve_mb: u64,
        working_set_mb: u64,
        n_ctx: u32,
        n_ubatch: u32,
    },
    #[error("the prompt is empty: give text with -p or a non-empty file with -f")]
    EmptyPrompt,
    #[error("context too small: the prompt has {prompt} tokens and {predict} more are requested, but -c is {n_ctx}; raise -c or lower -n")]
    ContextTooSmall {
        prompt: usize,
        predict: usize,
        n_ctx: u32,
    },
    #[error("llama.cpp could not load {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("llama.cpp: {0}")]
    Llama(String),
    #[error("cannot page this model: {0}. Run with --no-pager, or build with GGML_CPU_REPACK=OFF")]
    ForeignTensor(String),
    #[error("the pager's hook panicked during generation; paging stopped and the run was aborted")]
    HookPanicked,
    #[error(transparent)]
    Os(#[from] os::OsError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// How the model's experts are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagerMode {
    /// Upstream llama.cpp's loading with MAP_POPULATE kept: the honest baseline.
    UpstreamMmap,
    /// Upstream behaviour apart from MAP_POPULATE; no hook.
    Off,
    /// Page experts to keep total RSS within `budget_bytes`.
    On {
        budget_bytes: u64,
        hot_window_tokens: u64,
    },
}

#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_threads: i32,
    pub pager: PagerMode,
    pub show_progress: bool,
    /// Write the routing trace here (paged runs only).
    pub trace_file: Option<PathBuf>,
    /// How missing experts are read in.
    pub prefetch: os::Prefetch,
    /// Cross-layer prediction of the experts of the next MoE layers (decode only).
    pub prediction: Prediction,
    /// Advise predicted experts in from a readahead thread rather than the hook.
    pub ahead_thread: bool,
    /// Tokens of a prefill ubatch the predictor samples (0: no prediction in prefill).
    pub prefill_predict_tokens: usize,
}

/// Whether to predict the next layers' experts and read them in early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prediction {
    Off,
    /// Asked for explicitly: on, with a warning where the kernel cannot show reads in flight.
    On {
        depth: u32,
    },
    /// The default: on where the kernel can show reads in flight (`cachestat`), off elsewhere.
    /// A wrong guess may be evicted while it is still being read; the kernel keeps such pages,
    /// and only cachestat lets the pager find them and drop them again.
    Default {
        depth: u32,
    },
}

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub prompt: String,
    pub n_predict: usize,
    pub temp: f32,
    pub seed: u32,
    pub dump_logits: Option<PathBuf>,
}

/// What a chat turn or a one-shot generation asks of the session.
pub enum ChatTurn {
    Once(GenerateParams),
    /// Interactive: read user lines from stdin until EOF.
    Chat(GenerateParams),
}

#[derive(Debug, Clone, Default)]
pub struct GenerationOutcome {
    pub prompt_tokens: usize,
    pub generated: Vec<i32>,
}

fn backend() -> Result<&'static LlamaBackend, SessionError> {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    if let Some(b) = BACKEND.get() {
        return Ok(b);
    }
    let b = LlamaBackend::init().map_err(|e| SessionError::Llama(e.to_string()))?;
    Ok(BACKEND.get_or_init(|| b))
}

fn llama_err(e: impl std::fmt::Display) -> SessionError {
    SessionError::Llama(e.to_string())
}

fn mib(b: u64) -> u64 {
    b.div_ceil(1 << 20)
}

/// Load the model, attach the pager if asked, and run `turn`. Stats land in `stats`.
pub fn run(
    index: &ModelIndex,
    opts: &SessionOptions,
    turn: ChatTurn,
    stats: Arc<RunStats>,
    out: &mut dyn Write,
) -> Result<GenerationOutcome, SessionError> {
    let backend = backend()?;
    let path = index.files[0].clone();
    let upstream = opts.pager == PagerMode::UpstreamMmap;
    // Extra buffer types (AMX, CPU_REPACK) stay off in every mode: they copy weights out of
    // the mapping and use other kernels (AMX repacking of Q8_0 changes logits on this kind of
    // machine), so every mode computes with the same kernels and outputs can be compared.
    let mut mparams = LlamaModelParams::default()
        .with_n_gpu_layers(0)
        .with_no_populate(!upstream)
        .with_use_extra_bufts(false);
    let bar = opts.show_progress.then(|| {
        let b = indicatif::ProgressBar::new(100);
        b.set_style(
            indicatif::ProgressStyle::with_template("loading {bar:40} {pos:>3}%")
                .expect("static template"),
        );
        b
    });
    if let Some(b) = bar.clone() {
        mparams = mparams.with_progress_callback(move |p| {
            b.set_position((p * 100.0) as u64);
            true
        });
    }
    let model =
        LlamaModel::load_from_file(backend, &path, &mparams).map_err(|e| SessionError::Load {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }

    let hook = Box::new(HookState::new(stats.clone()));
    let paging = matches!(opts.pager, PagerMode::On { .. }) && index.is_moe();
    let mut cparams = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(opts.n_ctx))
        .with_n_batch(opts.n_batch)
        .with_n_ubatch(opts.n_ubatch)
        .with_n_threads(opts.n_threads)
        .with_n_threads_batch(opts.n_threads);
    if paging {
        // SAFETY: `hook` is boxed (stable address) and declared before `ctx`, so it outlives
        // the context; the trampoline catches panics and only reads the tensors it is given.
        cparams = unsafe {
            cparams.with_cb_eval(
                Some(trampoline),
                &*hook as *const HookState as *mut std::ffi::c_void,
            )
        };
    }
    let before = os::proc_memory(None)?;
    let mut ctx = model.new_context(backend, cparams).map_err(llama_err)?;
    let after = os::proc_memory(None)?;
    let mapping_rss: u64 = index.files.iter().map(|f| os::mapping_rss(f)).sum();
    stats.mapping_rss_after_load.set(mapping_rss);

    if let PagerMode::On {
        budget_bytes,
        hot_window_tokens,
    } = opts.pager
    {
        if paging {
            // Context creation reserves memory it touches later: the compute buffer, but also
            // the scheduler's split metadata (about 100 MB of address space on hybrid graphs
            // with 5,120 nodes, almost none of it ever touched). The compute buffer is the part
            // that becomes resident, and the plan's compute estimate bounds it.
            let virtual_growth = (after.data.saturating_sub(before.data))
                .saturating_sub(after.rss_anon.saturating_sub(before.rss_anon));
            let shape = plan::RunShape {
                n_ctx: opts.n_ctx,
                n_ubatch: opts.n_ubatch,
            };
            let measured = Measured {
                rss_bytes: after.rss,
                mapping_rss_bytes: mapping_rss,
                untouched_context_bytes: virtual_growth.min(plan::compute_bytes(index, shape)),
            };
            let reserve = plan::measured_reserve(index, measured);
            tracing::info!("measured after load: {measured:?}");
            stats.reserve_bytes.set(reserve);
            let page = os::page_size() as u64;
            let ws = plan::ubatch_working_set(index, opts.n_ubatch, page);
            if budget_bytes < reserve + ws {
                return Err(SessionError::BudgetTooSmall {
                    budget_mb: budget_bytes >> 20,
                    min_mb: mib(reserve + ws),
                    reserve_mb: mib(reserve),
                    working_set_mb: mib(ws),
                    n_ctx: opts.n_ctx,
                    n_ubatch: opts.n_ubatch,
                });
            }
            let expert_budget = budget_bytes - reserve;
            stats.expert_budget_bytes.set(expert_budget);
            tracing::info!(
                "pager: budget {} MiB, measured reserve {} MiB, expert budget {} MiB of {} MiB experts",
                budget_bytes >> 20,
                reserve >> 20,
                expert_budget >> 20,
                index.expert_bytes >> 20
            );
            let budgets = Budgets {
                expert: expert_budget,
                hot_window_tokens,
                rss_limit: budget_bytes - plan::margin_for(0) / 4,
            };
            *hook.active.lock().expect("hook lock") =
                Some(attach(index, opts, budgets, stats.clone())?);
        }
    }
    stats.read_bytes_after_load.set(os::proc_read_bytes());

    let outcome = match turn {
        ChatTurn::Once(p) => generate(&model, &mut ctx, &hook, &p, &stats, out)?,
        ChatTurn::Chat(p) => chat(&model, &mut ctx, &hook, &p, &stats, out)?,
    };
    if let Some(active) = hook.active.lock().ok().as_mut().and_then(|a| a.as_mut()) {
        active.pager.finish();
        let stray = stray_expert_cache_bytes(active);
        stats.stray_expert_cache.set(stray);
        if stray > 0 {
            tracing::warn!(
                "{stray} bytes of evicted experts are still in the page cache at exit, outside the budget's accounting"
            );
        }
    }
    drop(ctx);
    drop(hook);
    Ok(outcome)
}

/// Find llama.cpp's mappings, put `MADV_RANDOM` on every expert range, drop any expert
/// pages already cached (the pager owns them from here), and build the pager.
/// The pager's limits, from the measured reserve.
struct Budgets {
    expert: u64,
    hot_window_tokens: u64,
    /// Measured RSS above this makes the hook evict more.
    rss_limit: u64,
}

fn attach(
    index: &ModelIndex,
    opts: &SessionOptions,
    budgets: Budgets,
    stats: Arc<RunStats>,
) -> Result<Active, SessionError> {
    let files = index
        .files
        .iter()
        .map(|f| FileMapping::find(f))
        .collect::<Result<Vec<_>, _>>()?;
    for m in &files {
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
    // fault on a non-expert tensor would read neighbouring (cold) experts into the page cache
    // behind the pager's back. Non-expert bytes are all needed and counted in the reserve, so
    // they are advised in up front, in large reads.
    let mut expert_ranges: Vec<Vec<(u64, u64)>> = vec![Vec::new(); files.len()];
    let mut expected = Vec::new();
    for layer in &index.layers {
        for t in &layer.tensors {
            let m = &files[t.file];
            let len = t.bytes_per_expert * n_expert;
            expert_ranges[t.file].push((t.offset, t.offset + len));
            expected.push(ExpectedTensor {
                name: t.name.clone(),
                addr: m.addr_of(t.offset),
                seen: false,
            });
        }
    }
    // When every expert fits in the budget nothing will ever be evicted, so pages already in
    // the page cache (a warm file) may stay: they can only become resident, which the budget
    // covers. Otherwise the pager must own the cache from an empty start.
    if budgets.expert < index.expert_bytes {
        drop_file_pages(&files, &index.file_sizes, &expert_ranges);
    }
    for (m, (ranges, &size)) in files
        .iter()
        .zip(expert_ranges.iter_mut().zip(&index.file_sizes))
    {
        m.set_random(0, size);
        ranges.sort_unstable();
        let mut pos = 0;
        for &(start, end) in ranges.iter() {
            if start > pos {
                m.will_need(pos, start - pos);
            }
            pos = pos.max(end);
        }
        if size > pos {
            m.will_need(pos, size - pos);
        }
    }
    // With every expert inside the budget nothing is ever evicted, and predicting would
    // only add its router products to every decode layer.
    let depth = prediction_depth(opts.prediction, &files);
    let predictor = (depth > 0 && budgets.expert < index.expert_bytes)
        .then(|| predictor(index, &files, depth, opts.prefill_predict_tokens))
        .flatten();
    let layers = index
        .layers
        .iter()
        .map(|l| LayerSpec {
            layer: l.layer,
            slices: l
                .tensors
                .iter()
                .map(|t| ExpertSlice {
                    file: t.file as u32,
                    offset: t.offset,
                    bytes_per_expert: t.bytes_per_expert,
                })
                .collect(),
        })
        .collect();
    let mut advisor = OsAdvisor::new(files, opts.prefetch, stats.io_counters.clone());
    if predictor.is_some() && opts.ahead_thread {
        tracing::info!("predicted experts are read in from a readahead thread");
        advisor = advisor.with_ahead_thread();
    }
    let pager = Pager::new(
        advisor,
        PagerConfig {
            expert_budget_bytes: budgets.expert,
            hot_window_tokens: budgets.hot_window_tokens,
            page_size: os::page_size() as u64,
        },
        index.n_expert,
        layers,
        stats.pager.clone(),
    );
    Ok(Active {
        pager,
        rss: RssProbe::new()?,
        rss_limit: budgets.rss_limit,
        unverified: expected.len(),
        expected,
        trace: opts
            .trace_file
            .as_deref()
            .map(|p| super::hook::TraceWriter::create(p, index.n_expert, index.n_expert_used))
            .transpose()?,
        predictor,
    })
}

/// Start from a clean page cache, so that the pager's table (no expert resident) is the
/// truth: drop the whole file (the non-expert bytes are read back right after, in exact
/// ranges). Two things defeat a plain drop of the expert ranges: readahead from header reads
/// (ours and llama.cpp's) may still be in flight, and the kernel skips pages under I/O; and a
/// large folio left by an earlier write or read can straddle an expert range and its
/// neighbour, and is only dropped whole. So drop everything, check the expert ranges with
/// mincore, and repeat until they are clean.
fn drop_file_pages(files: &[FileMapping], sizes: &[u64], ranges: &[Vec<(u64, u64)>]) {
    let page = os::page_size() as u64;
    for attempt in 0..50 {
        let mut stray = 0;
        for ((m, &size), rs) in files.iter().zip(sizes).zip(ranges) {
            m.evict(0, size.next_multiple_of(page));
            for &(start, end) in rs {
                let (s, e) = os::inward(start, end - start, page);
                stray += m.resident_bytes(s, e - s);
            }
        }
        if stray == 0 {
            return;
        }
        if attempt == 49 {
            tracing::warn!("{stray} bytes of expert pages stayed in the page cache after eviction");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
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

/// Bytes of non-resident experts' pages found in the page cache: pages the pager dropped
/// (or never read) that are cached anyway, outside the budget's accounting.
fn stray_expert_cache_bytes(active: &Active) -> u64 {
    let page = os::page_size() as u64;
    let files = &active.pager.advisor().files;
    active
        .pager
        .non_resident_ranges()
        .map(|r| {
            let (s, e) = os::inward(r.offset, r.len, page);
            files[r.file as usize].resident_bytes(s, e - s)
        })
        .sum()
}

/// The cross-layer predictor, when every router is F32 inside the file mapping.
fn predictor(
    index: &ModelIndex,
    files: &[FileMapping],
    depth: u32,
    prefill_tokens: usize,
) -> Option<super::hook::Predictor> {
    const MAX_TOKENS: usize = 8;
    let n_layer = index.layers.iter().map(|l| l.layer + 1).max()? as usize;
    let n_expert = index.n_expert as usize;
    let n_embd = index.n_embd as usize;
    let mut routers = vec![0usize; n_layer];
    let mut biases = vec![0usize; n_layer];
    for r in &index.routers {
        let m = &files[r.file];
        let addr = m.addr_of(r.offset);
        let bytes = n_embd * n_expert * 4;
        if r.ggml_type != crate::gguf::GgmlType::F32
            || r.n_embd as usize != n_embd
            || !m.contains(addr, bytes)
        {
            tracing::info!(
                "cross-layer prediction off: router of layer {} is {} or outside the mapping",
                r.layer,
                r.ggml_type
            );
            return None;
        }
        if let Some(slot) = routers.get_mut(r.layer as usize) {
            *slot = addr;
        }
        // A bias outside the mapping is left out: predictions are then plain top-k.
        if let Some((file, offset)) = r.selection_bias {
            let addr = files[file].addr_of(offset);
            if let Some(slot) = biases
                .get_mut(r.layer as usize)
                .filter(|_| files[file].contains(addr, n_expert * 4))
            {
                *slot = addr;
            }
        }
    }
    let mut rule = index.routing;
    if rule.groups < 2 || n_expert % rule.groups as usize != 0 {
        rule.groups = 0;
    }
    let next_layer = (0..n_layer)
        .map(|l| {
            (l + 1..n_layer)
                .find(|&n| routers[n] != 0)
                .map(|n| n as u32)
        })
        .collect();
    Some(super::hook::Predictor {
        routers,
        next_layer,
        depth,
        biases,
        rule,
        n_embd,
        n_expert,
        n_used: index.n_expert_used as usize,
        max_tokens: MAX_TOKENS,
        prefill_tokens,
        scores: vec![0.0; n_expert],
        group_scores: vec![0.0; rule.groups as usize],
        group_kept: vec![false; rule.groups as usize],
        picked: vec![false; n_expert],
        chosen: Vec::with_capacity(n_expert),
    })
}

fn check_hook(hook: &HookState) -> Result<(), SessionError> {
    if hook.foreign.load(Ordering::Relaxed) {
        let what = hook
            .foreign_tensor
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default();
        return Err(SessionError::ForeignTensor(what));
    }
    if hook.stats.hook_panicked.load(Ordering::Relaxed) {
        return Err(SessionError::HookPanicked);
    }
    Ok(())
}

fn sampler(p: &GenerateParams) -> LlamaSampler {
    if p.temp <= 0.0 {
        LlamaSampler::greedy()
    } else {
        LlamaSampler::chain_simple([LlamaSampler::temp(p.temp), LlamaSampler::dist(p.seed)])
    }
}

/// Decode `tokens` starting at position `pos`, in batches of n_batch, asking for logits of
/// the last token only.
fn decode_tokens(
    ctx: &mut LlamaContext<'_>,
    hook: &HookState,
    tokens: &[LlamaToken],
    pos: usize,
) -> Result<i32, SessionError> {
    let n_batch = ctx.n_batch() as usize;
    let mut batch = LlamaBatch::new(n_batch, 1);
    let mut last_idx = 0;
    for (chunk_no, chunk) in tokens.chunks(n_batch).enumerate() {
        batch.clear();
        let start = pos + chunk_no * n_batch;
        for (i, &t) in chunk.iter().enumerate() {
            let is_last = start + i + 1 == pos + tokens.len();
            batch
                .add(t, (start + i) as i32, &[0], is_last)
                .map_err(llama_err)?;
        }
        ctx.decode(&mut batch).map_err(llama_err)?;
        check_hook(hook)?;
        last_idx = batch.n_tokens() - 1;
    }
    Ok(last_idx)
}

fn generate(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    hook: &HookState,
    p: &GenerateParams,
    stats: &RunStats,
    out: &mut dyn Write,
) -> Result<GenerationOutcome, SessionError> {
    let vocab = model.vocab();
    let tokens = vocab.tokenize(p.prompt.as_bytes(), true, true);
    if tokens.is_empty() {
        return Err(SessionError::EmptyPrompt);
    }
    if tokens.len() + p.n_predict > ctx.n_ctx() as usize {
        return Err(SessionError::ContextTooSmall {
            prompt: tokens.len(),
            predict: p.n_predict,
            n_ctx: ctx.n_ctx(),
        });
    }
    let mut logits_out = match &p.dump_logits {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    stats.prompt_tokens.set(tokens.len() as u64);
    let t0 = Instant::now();
    let mut idx = decode_tokens(ctx, hook, &tokens, 0)?;
    stats.prefill_us.set(t0.elapsed().as_micros() as u64);

    let mut sampler = sampler(p);
    let mut generated = Vec::new();
    let t1 = Instant::now();
    stats.read_bytes_at_decode.set(os::proc_read_bytes().max(1));
    let mut piece = Vec::new();
    for pos in tokens.len()..tokens.len() + p.n_predict {
        if let Some(w) = logits_out.as_mut() {
            for &x in ctx.get_logits_ith(idx) {
                w.write_all(&x.to_le_bytes())?;
            }
        }
        let token = sampler.sample(ctx, idx);
        generated.push(token.0);
        if let Ok(mut ids) = stats.generated_ids.lock() {
            ids.push(token.0);
        }
        stats.generated_tokens.inc();
        if vocab.is_eog(token) {
            break;
        }
        piece.clear();
        vocab.token_to_piece_into(token, &mut piece, false, None);
        out.write_all(&piece)?;
        out.flush()?;
        if generated.len() == p.n_predict {
            break; // the last token's logits would never be used
        }
        idx = decode_tokens(ctx, hook, &[token], pos)?;
        stats.decode_steps.inc();
        stats.decode_us.set(t1.elapsed().as_micros() as u64);
    }
    stats.decode_us.set(t1.elapsed().as_micros() as u64);
    if let Some(mut w) = logits_out {
        w.flush()?;
    }
    writeln!(out)?;
    Ok(GenerationOutcome {
        prompt_tokens: tokens.len(),
        generated,
    })
}

/// An interactive chat on stdin using the model's chat template. Each turn re-evaluates
/// the whole conversation from a cleared KV cache.
fn chat(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    hook: &HookState,
    p: &GenerateParams,
    stats: &RunStats,
    out: &mut dyn Write,
) -> Result<GenerationOutcome, SessionError> {
    let template = model.chat_template(None).map_err(llama_err)?;
    let mut history: Vec<LlamaChatMessage> = Vec::new();
    let mut last = GenerationOutcome::default();
    let stdin = std::io::stdin();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.is_empty() {
            continue;
        }
        history.push(LlamaChatMessage::new("user".into(), line.into()).map_err(llama_err)?);
        let prompt = model
            .apply_chat_template(&template, &history, true)
            .map_err(llama_err)?;
        ctx.clear_kv_cache();
        let mut reply = Vec::new();
        let turn = GenerateParams {
            prompt,
            dump_logits: None,
            ..p.clone()
        };
        last = generate(model, ctx, hook, &turn, stats, &mut reply)?;
        out.write_all(&reply)?;
        let text = String::from_utf8_lossy(&reply).trim().to_string();
        history.push(LlamaChatMessage::new("assistant".into(), text).map_err(llama_err)?);
    }
    Ok(last)
}
