//! The `cb_eval` hook: a C trampoline that llama.cpp's scheduler calls for every graph node.
//! It asks to see only `ffn_moe_topk-<layer>`, reads the routed expert ids before that
//! layer's `mul_mat_id` runs, and hands them to the pager. It also checks, once per expert
//! tensor, that `mul_mat_id` reads the weights from llama.cpp's file mapping.
//!
//! On the hot path: no allocation, one uncontended lock, and no panic crosses the FFI
//! boundary (`catch_unwind`; a panic disables paging and is reported through a flag).
//!
//! This module and its children hold the engine's `unsafe` code: the trampoline, reading
//! tensors the scheduler hands over, finding llama.cpp's mappings ([`attach`]), and
//! [`HookedContext`], which ties the hook's lifetime to the context that calls it, reads
//! the context's memory as llama.cpp reports it (`ffi/context_memory.cpp`), and copies a
//! sequence's state into and out of the prompt store's buffers.

pub(crate) mod attach;
mod graph;
mod predictor;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_sys_2::{ggml_tensor, GGML_OP_MUL_MAT_ID, GGML_TYPE_I32};

use epm_core::budget::{cap_deduction, pager_budget, Budgets, TokenRowLoan};
use epm_core::pager::{Pager, Phase};
use epm_core::stats::RunStats;
use epm_core::trace::TraceWriter;
use epm_sys::cgroup::KernelMemoryProbe;
use epm_sys::fs::UncachedWriter;
use epm_sys::{page_size, OsAdvisor, RssProbe};

pub(crate) use predictor::Predictor;

const TOPK_PREFIX: &[u8] = b"ffn_moe_topk-";

/// Where an expert tensor's data must be if llama.cpp reads it from the file mapping.
#[derive(Debug)]
pub(crate) struct ExpectedTensor {
    pub name: String,
    pub addr: usize,
    pub seen: bool,
}

/// The paging state the hook drives once the model and context exist.
pub(crate) struct Active {
    pub pager: Pager<OsAdvisor>,
    pub rss: RssProbe,
    /// The run's budgets: the pager's share, the RSS guard's limit, the working set.
    pub budgets: Budgets,
    /// The cgroup limit that binds the process, where there is one.
    pub cap: Option<CapWatch>,
    pub expected: Vec<ExpectedTensor>,
    pub unverified: usize,
    /// The routing trace, written past the page cache (it would take the room of experts
    /// under a cgroup limit).
    pub trace: Option<TraceWriter<UncachedWriter>>,
    pub predictor: Option<Predictor>,
    /// The token table's unread pages, lent to the pager on top of its share.
    pub loan: Option<TokenRowLoan>,
    /// The pages a batch's tokens took back (reused, so that a batch allocates only when
    /// it takes more pages than any before).
    pub fresh_pages: Vec<u64>,
    /// The pager started from an empty page cache (attach dropped the file): every
    /// non-resident expert's page in the cache is then stray. When every expert fits, a
    /// warm file's pages were kept, and only what the pager evicted should be gone.
    pub owns_page_cache: bool,
    /// What the expert cache gives up while a saved prompt prefix's file is written or read
    /// through the page cache ([`HookState::set_io_room`]).
    pub io_room: u64,
}

/// A memory cgroup limit that binds the process: the kernel memory charged to it is read
/// once per routed layer, and what it takes from the expert cache is kept here.
pub(crate) struct CapWatch {
    pub probe: KernelMemoryProbe,
    pub limit: u64,
    /// `budget::cap_deduction` at the last reading.
    pub deduction: u64,
}

impl Active {
    /// What a cgroup limit's kernel memory takes from the expert cache now.
    fn cap_deduction(&self) -> u64 {
        self.cap.as_ref().map_or(0, |c| c.deduction)
    }

    /// What the pager may hold now (`budget::pager_budget`).
    fn pager_budget(&self) -> u64 {
        pager_budget(
            &self.budgets,
            self.loan.as_ref(),
            self.cap_deduction() + self.io_room,
        )
    }

    /// Read the kernel memory the cgroup limit charges; when what it takes from the expert
    /// cache changed, give the pager its new budget (evicting at once if it shrank).
    /// Returns the RSS guard's limit under the cap.
    fn watch_cap(&mut self, stats: &RunStats) -> u64 {
        let Some(cap) = self.cap.as_mut() else {
            return self.budgets.rss_limit;
        };
        if let Some(kernel) = cap.probe.kernel_bytes() {
            stats.cgroup_kernel_peak.max(kernel);
            let deduction = cap_deduction(kernel, cap.limit, self.budgets.total);
            if deduction != cap.deduction {
                cap.deduction = deduction;
                stats.cgroup_deduction_peak.max(deduction);
                let budget = self.pager_budget();
                self.pager.set_budget(budget);
            }
        }
        self.budgets.rss_limit_under_cap(self.cap_deduction())
    }
}

/// Shared with the C callback through `cb_eval_user_data`. Boxed by [`HookedContext`] so
/// its address is stable for the life of the context.
pub(crate) struct HookState {
    pub active: Mutex<Option<Active>>,
    pub stats: Arc<RunStats>,
    /// Set when an expert tensor is computed from memory outside the file mapping
    /// (repacked or copied weights): paging it would be wrong, so the run must stop.
    pub foreign_tensor: Mutex<Option<String>>,
    pub foreign: AtomicBool,
    /// Every expert tensor has been checked: `verify` returns before taking the lock.
    verified: AtomicBool,
    /// The phase of the ubatches being evaluated (0 prompt, 1 decode), set by the session.
    phase: AtomicU8,
}

impl HookState {
    pub fn new(stats: Arc<RunStats>) -> HookState {
        HookState {
            active: Mutex::new(None),
            stats,
            foreign_tensor: Mutex::new(None),
            foreign: AtomicBool::new(false),
            verified: AtomicBool::new(false),
            phase: AtomicU8::new(0),
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase
            .store(u8::from(phase == Phase::Decode), Ordering::Relaxed);
    }

    /// A batch of `tokens` is about to be evaluated: the token table's pages their rows lie
    /// on are taken back from the expert cache (which evicts down to its smaller budget
    /// now), before llama.cpp reads them.
    pub fn take_token_rows(&self, tokens: impl IntoIterator<Item = i32>) {
        let mut guard = self.active.lock().unwrap_or_else(|e| e.into_inner());
        let Some(active) = guard.as_mut() else {
            return;
        };
        let Some(loan) = active.loan.as_mut() else {
            return;
        };
        // Taken out for the call, so the pager's budget can be read while it is held.
        let mut fresh = std::mem::take(&mut active.fresh_pages);
        fresh.clear();
        let taken = loan.take_rows(tokens, &mut fresh);
        if taken > 0 {
            publish_loan(&self.stats, loan);
            let file = loan.table().file;
            let budget = active.pager_budget();
            active.pager.set_budget(budget);
            // Read the new rows' pages in now, together, rather than one fault at a time
            // when llama.cpp looks them up: runs of adjacent pages as one range each.
            let page = page_size() as u64;
            let mapping = &active.pager.advisor().files[file];
            fresh.sort_unstable();
            let mut i = 0;
            while i < fresh.len() {
                let mut j = i + 1;
                while j < fresh.len() && fresh[j] == fresh[j - 1] + page {
                    j += 1;
                }
                mapping.will_need(fresh[i], (j - i) as u64 * page);
                i = j;
            }
        }
        active.fresh_pages = fresh;
    }

    /// Give up `bytes` of the expert cache (evicting now) while a file that big passes
    /// through the page cache, outside the budget's accounting otherwise; 0 gives it back.
    pub fn set_io_room(&self, bytes: u64) {
        let mut guard = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(active) = guard.as_mut() {
            active.io_room = bytes;
            let budget = active.pager_budget();
            active.pager.set_budget(budget);
        }
    }

    fn phase(&self) -> Phase {
        if self.phase.load(Ordering::Relaxed) == 1 {
            Phase::Decode
        } else {
            Phase::Prompt
        }
    }

    fn on_node(&self, t: &ggml_tensor, ask: bool) -> bool {
        let name = graph::name(t);
        if ask {
            if name.starts_with(TOPK_PREFIX) {
                return true;
            }
            if t.op == GGML_OP_MUL_MAT_ID {
                self.verify(t);
            }
            return false;
        }
        if !name.starts_with(TOPK_PREFIX) || t.type_ != GGML_TYPE_I32 || t.data.is_null() {
            return true;
        }
        let Some(layer) = parse_u32(&name[TOPK_PREFIX.len()..]) else {
            return true;
        };
        self.stats.hook_calls.inc();
        let started = Instant::now();
        let Ok(mut guard) = self.active.lock() else {
            return true;
        };
        let Some(active) = guard.as_mut() else {
            return true;
        };
        let phase = self.phase();
        self.route(active, t, layer, phase);
        let busy = started.elapsed().as_nanos() as u64;
        self.stats.hook_ns.add(busy);
        if phase == Phase::Decode {
            self.stats.hook_decode_ns.add(busy);
        }
        true
    }

    /// Routing of `layer` is known (`t` is its topk node): hand it to the pager, predict the
    /// next layers, and hold measured RSS under the limit.
    fn route(&self, active: &mut Active, t: &ggml_tensor, layer: u32, phase: Phase) {
        let (n_used, n_tokens, row_stride) =
            (t.ne[0].max(0) as usize, t.ne[1].max(0) as usize, t.nb[1]);
        let base = t.data as *const u8;
        // The expert at (token, k) of the routing; -1, an id no guess has, outside it.
        let id_at = move |row: usize, col: usize| {
            if row >= n_tokens || col >= n_used {
                return -1;
            }
            // SAFETY: `data` is the topk view of `ne[1]` rows of `ne[0]` i32s, rows `nb[1]`
            // bytes apart, and the indices are below both (checked above); the scheduler has
            // computed it and it stays alive during this call.
            unsafe { (base.add(row * row_stride + col * 4) as *const i32).read_unaligned() }
        };
        let ids = || (0..n_tokens).flat_map(move |row| (0..n_used).map(move |col| id_at(row, col)));
        if let Some(trace) = active.trace.as_mut() {
            trace.record(layer, phase, n_tokens, ids(), n_tokens * n_used);
            if trace.failed() {
                // A plain store: the run goes on, `/metrics` and the end of the run say so.
                self.stats.trace_write_failures.set(1);
            }
        }
        active.pager.route(layer, phase, n_tokens as u64, ids());
        if let Some(pred) = active.predictor.as_mut() {
            pred.score(layer, n_tokens, n_used, id_at, &self.stats);
            // The last routed layer has nothing to predict: skip the graph walk.
            let x = pred
                .plan(n_tokens)
                .filter(|_| pred.next_layer(layer).is_some())
                .and_then(|plan| Some((plan, graph::router_input(t)?)));
            if let Some(((stride, depth), x)) = x {
                // Nearest layer first: its reads are needed soonest.
                let mut ahead = layer;
                for _ in 0..depth {
                    let Some(next) = pred.next_layer(ahead) else {
                        break;
                    };
                    if let Some(chosen) = pred.predict(next, x, stride, ahead == layer) {
                        active.pager.speculate(next, chosen.iter().copied());
                    }
                    ahead = next;
                }
            }
        }
        let rss_limit = active.watch_cap(&self.stats);
        let rss = active.rss.rss_bytes();
        if rss > rss_limit {
            let excess = rss - rss_limit;
            let target = active.pager.resident_bytes().saturating_sub(excess);
            active.pager.shrink_to(target);
            self.stats.pager.guard_shrinks.inc();
        }
    }

    /// Check once per expert tensor that `mul_mat_id` reads it from the file mapping.
    fn verify(&self, t: &ggml_tensor) {
        let src = t.src[0];
        if src.is_null() || self.verified.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: `src[0]` of a MUL_MAT_ID node is the expert weight tensor, alive for the
        // model's life.
        let src = unsafe { &*src };
        let Ok(mut guard) = self.active.lock() else {
            return;
        };
        let Some(active) = guard.as_mut() else {
            return;
        };
        if active.unverified == 0 {
            self.verified.store(true, Ordering::Relaxed);
            return;
        }
        let name = graph::name(src);
        let Some(e) = active
            .expected
            .iter_mut()
            .find(|e| e.name.as_bytes() == name)
        else {
            return;
        };
        if e.seen {
            return;
        }
        e.seen = true;
        active.unverified -= 1;
        if src.data as usize != e.addr {
            self.foreign.store(true, Ordering::Relaxed);
            if let Ok(mut f) = self.foreign_tensor.lock() {
                *f = Some(format!(
                    "{} is at {:#x}, outside llama.cpp's file mapping (expected {:#x})",
                    e.name, src.data as usize, e.addr
                ));
            }
        }
    }
}

/// The loan's figures, for the stats.
pub(crate) fn publish_loan(stats: &RunStats, loan: &TokenRowLoan) {
    stats.token_table_lent.set(loan.lent_bytes());
    stats.token_table_taken.set(loan.taken_bytes());
}

fn parse_u32(digits: &[u8]) -> Option<u32> {
    epm_sys::proc::ascii_u64(digits).and_then(|v| u32::try_from(v).ok())
}

/// The C callback. `user_data` is a `*const HookState`.
///
/// # Safety
/// Called by llama.cpp only: `t` is a valid tensor and `user_data` the `HookState` that
/// [`HookedContext::new`] registered, which outlives the context.
unsafe extern "C" fn trampoline(t: *mut ggml_tensor, ask: bool, user_data: *mut c_void) -> bool {
    if t.is_null() || user_data.is_null() {
        return !ask;
    }
    // SAFETY: per this function's contract, both pointers are valid for the call.
    let (state, tensor) = unsafe { (&*(user_data as *const HookState), &*t) };
    match catch_unwind(AssertUnwindSafe(|| state.on_node(tensor, ask))) {
        Ok(answer) => answer,
        Err(_) => {
            state.stats.hook_panicked.store(true, Ordering::Relaxed);
            if let Ok(mut g) = state.active.lock() {
                *g = None;
            }
            // Keep computing: the answer only selects nodes to observe, never changes compute.
            !ask
        }
    }
}

/// A llama.cpp context and the hook state its eval callback points to. The fields drop in
/// declaration order, so the context (which may call the hook) is gone before the hook.
pub(crate) struct HookedContext<'m> {
    ctx: LlamaContext<'m>,
    hook: Box<HookState>,
    /// The compute threads of a hooked context, attached to it: after the context, which
    /// points to them, has gone.
    _pool: Option<ComputePool>,
    /// The run's stopping flag ([`HookedContext::abort_when`]), read by llama.cpp's abort
    /// callback during each [`HookedContext::decode`].
    abort: Option<Arc<AtomicBool>>,
}

/// ggml's compute threads kept for the life of a hooked context.
///
/// Without a pool of its own, ggml's CPU backend starts its worker threads for each graph
/// it computes and joins them at the end. Unhooked, that is once per ubatch; hooked, the
/// eval callback splits the graph at every MoE layer's routing, so the threads were started
/// and joined once per layer per ubatch. Each start rolls the scheduler's dice: a worker
/// placed on the core its main thread runs on spins with it at every barrier of the graph,
/// a scheduler slice at a time. On a 2-core VM one decode run of the qwen3 mini (8 MoE
/// layers) in three to five ran 3-25x slower so, and the others paid about 80 us per split
/// (STATUS.md). A pool's workers stay on their cores between graphs and sleep there
/// ([`ComputePool::POLL`]). The arithmetic is ggml's either way: each thread computes the
/// same share of each node, so the logits are the same bytes.
struct ComputePool(std::ptr::NonNull<llama_cpp_sys_2::ggml_threadpool>);

impl ComputePool {
    /// ggml's polling level for idle workers (0-100; its default, 50, spins for some
    /// milliseconds before sleeping). Here 0, sleep at once: between two graphs of a hooked
    /// context the hook makes its system calls, and the thread that shares them
    /// (`sys::assist`) needs the core a spinning worker would hold.
    const POLL: u32 = 0;

    /// A pool of `threads` (at least one) workers (the calling thread is the first),
    /// attached to `ctx` for its decode and prompt graphs alike; `None` (each graph starts
    /// its own threads, as before) when ggml cannot make one.
    fn attach(ctx: &LlamaContext<'_>, threads: i32) -> Option<ComputePool> {
        // SAFETY: plain value initialisation by ggml; the threads count is positive.
        let mut params = unsafe { llama_cpp_sys_2::ggml_threadpool_params_default(threads) };
        params.poll = Self::POLL;
        // SAFETY: `params` is initialised above and only read during the call.
        let pool =
            std::ptr::NonNull::new(unsafe { llama_cpp_sys_2::ggml_threadpool_new(&mut params) })?;
        // SAFETY: `ctx` is live; the pool outlives it (`HookedContext` drops the context
        // first), so the context never computes on a freed pool.
        unsafe {
            llama_cpp_sys_2::llama_attach_threadpool(
                ctx.as_ptr().cast_mut(),
                pool.as_ptr(),
                pool.as_ptr(),
            )
        };
        Some(ComputePool(pool))
    }
}

impl Drop for ComputePool {
    fn drop(&mut self) {
        // SAFETY: the pool came from `ggml_threadpool_new`, is freed once, here, and the
        // context it was attached to has already been freed.
        unsafe { llama_cpp_sys_2::ggml_threadpool_free(self.0.as_ptr()) }
    }
}

/// Whether the client of a batch's only sequence has gone: read between graph nodes, so it
/// must be cheap and must not block.
pub type GoneProbe<'a> = &'a (dyn Fn() -> bool + Sync);

/// Why llama.cpp stopped a batch part-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The run's stopping flag was set.
    ShuttingDown,
    /// The client of the batch's sequence had gone.
    ClientGone,
}

/// What llama.cpp's abort callback reads during one decode: it lives on that decode's
/// stack, and the callback is unset before it goes.
struct AbortProbe<'a> {
    stopping: Option<&'a AtomicBool>,
    gone: Option<GoneProbe<'a>>,
    /// 0 while nothing fired, else which fired (`SHUTTING_DOWN`, `CLIENT_GONE`).
    fired: AtomicU8,
}

impl AbortProbe<'_> {
    const SHUTTING_DOWN: u8 = 1;
    const CLIENT_GONE: u8 = 2;

    fn check(&self) -> bool {
        let why = if self.stopping.is_some_and(|f| f.load(Ordering::Relaxed)) {
            Self::SHUTTING_DOWN
        } else if self.gone.is_some_and(|gone| gone()) {
            Self::CLIENT_GONE
        } else {
            return false;
        };
        self.fired.store(why, Ordering::Relaxed);
        true
    }

    fn stopped(&self) -> Option<Stopped> {
        match self.fired.load(Ordering::Relaxed) {
            Self::SHUTTING_DOWN => Some(Stopped::ShuttingDown),
            Self::CLIENT_GONE => Some(Stopped::ClientGone),
            _ => None,
        }
    }
}

/// llama.cpp's abort callback: checked between graph nodes; `true` stops the graph.
extern "C" fn abort_requested(data: *mut c_void) -> bool {
    // SAFETY: `data` is the `AbortProbe` on the stack of the `HookedContext::decode` that
    // is running, which unsets the callback before the probe goes out of scope.
    let probe = unsafe { &*(data as *const AbortProbe) };
    // A panicking probe must not unwind into C: it then stops nothing.
    catch_unwind(AssertUnwindSafe(|| probe.check())).unwrap_or(false)
}

/// Unsets llama.cpp's abort callback when dropped, so that the probe it points to can go.
struct AbortCallbackSet<'c> {
    ctx: *mut llama_cpp_sys_2::llama_context,
    _ctx: std::marker::PhantomData<&'c mut ()>,
}

impl Drop for AbortCallbackSet<'_> {
    fn drop(&mut self) {
        // SAFETY: `ctx` is the live context of the `HookedContext::decode` that made this
        // guard and that holds the context exclusively until the guard drops.
        unsafe { llama_cpp_sys_2::llama_set_abort_callback(self.ctx, None, std::ptr::null_mut()) }
    }
}

impl<'m> HookedContext<'m> {
    /// Create a context on `model`; with `hooked`, its eval callback is the trampoline over
    /// a fresh [`HookState`] (not yet attached to a pager: see [`attach`]).
    pub fn new(
        model: &'m LlamaModel,
        backend: &LlamaBackend,
        mut cparams: LlamaContextParams,
        stats: Arc<RunStats>,
        hooked: bool,
    ) -> Result<HookedContext<'m>, llama_cpp_2::LlamaContextLoadError> {
        let hook = Box::new(HookState::new(stats));
        if hooked {
            // SAFETY: the callback's user data is the boxed `hook`, whose address is stable
            // and which `HookedContext` drops only after the context (field order); the
            // trampoline catches panics and only reads the tensors it is handed.
            cparams = unsafe {
                cparams.with_cb_eval(Some(trampoline), &*hook as *const HookState as *mut c_void)
            };
        }
        let threads = cparams.n_threads().max(cparams.n_threads_batch()).max(1);
        let ctx = model.new_context(backend, cparams)?;
        let pool = hooked.then(|| ComputePool::attach(&ctx, threads)).flatten();
        if pool.is_some() {
            hook.stats.hook_pool_threads.set(threads as u64);
        }
        Ok(HookedContext {
            ctx,
            hook,
            _pool: pool,
            abort: None,
        })
    }

    /// Stop a graph in flight, between two nodes, once `flag` is set: `llama_decode` then
    /// returns 2, and llama.cpp removes the unfinished ubatch's positions from the KV cache.
    pub fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        self.abort = Some(flag);
    }

    /// Evaluate `batch`. It stops between two graph nodes once the stopping flag is set, or,
    /// with `gone`, once that says the client of the batch's sequence has gone; the error
    /// then says which ([`Stopped`]), and llama.cpp has removed the unfinished ubatch's
    /// positions from the KV cache.
    pub fn decode(
        &mut self,
        batch: &mut llama_cpp_2::llama_batch::LlamaBatch,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<(), (llama_cpp_2::DecodeError, Option<Stopped>)> {
        let probe = AbortProbe {
            stopping: self.abort.as_deref(),
            gone,
            fired: AtomicU8::new(0),
        };
        if probe.stopping.is_none() && probe.gone.is_none() {
            return self.ctx.decode(batch).map_err(|e| (e, None));
        }
        let raw = self.ctx.as_ptr().cast_mut();
        // SAFETY: the context is live and held exclusively (`&mut self`); the callback's
        // data is `probe`, which outlives `_set`, whose drop unsets the callback again
        // before `probe` goes (locals drop in reverse order), panics included.
        let _set = unsafe {
            llama_cpp_sys_2::llama_set_abort_callback(
                raw,
                Some(abort_requested),
                &probe as *const AbortProbe as *mut c_void,
            );
            AbortCallbackSet {
                ctx: raw,
                _ctx: std::marker::PhantomData,
            }
        };
        self.ctx.decode(batch).map_err(|e| (e, probe.stopped()))
    }

    pub fn ctx(&self) -> &LlamaContext<'m> {
        &self.ctx
    }

    pub fn ctx_mut(&mut self) -> &mut LlamaContext<'m> {
        &mut self.ctx
    }

    pub fn hook(&self) -> &HookState {
        &self.hook
    }

    /// Copy all of sequence `seq`'s state, as `llama_state_seq_get_data_ext` gives it, into
    /// `out`, which `state_seq_get_size_ext` sized. Returns the bytes llama.cpp wrote: 0 when
    /// it failed, which it reports rather than writing past `out`.
    pub fn copy_seq_state(&self, seq: i32, out: &mut [u8]) -> usize {
        // SAFETY: the context is live for the call; llama.cpp writes through a writer bounded
        // by the size passed, `out.len()`, and `out` is ours and writable that far.
        unsafe {
            llama_cpp_sys_2::llama_state_seq_get_data_ext(
                self.ctx.as_ptr().cast_mut(),
                out.as_mut_ptr(),
                out.len(),
                seq,
                0,
            )
        }
    }

    /// Make sequence `seq` hold `state`, bytes that [`copy_seq_state`](Self::copy_seq_state)
    /// gave. Returns the bytes llama.cpp read: 0 when it refused them (a state of another
    /// shape), with the sequence then cleared.
    pub fn restore_seq_state(&mut self, seq: i32, state: &[u8]) -> usize {
        // SAFETY: the context is live and held exclusively (`&mut self`); llama.cpp reads
        // through a reader bounded by `state.len()`, checks the magic and the shapes it
        // reads, and throws (caught there: it returns 0) instead of reading further.
        unsafe {
            llama_cpp_sys_2::llama_state_seq_set_data_ext(
                self.ctx.as_ptr().cast_mut(),
                state.as_ptr(),
                state.len(),
                seq,
                0,
            )
        }
    }

    /// What llama.cpp reserved for this context, by its own accounting.
    pub fn memory(&self) -> Option<ContextMemory> {
        let (mut compute, mut context) = (0usize, 0usize);
        // SAFETY: the pointer is this live context's (it outlives the call); the shim only
        // reads llama.cpp's buffer sizes, writes the two integers we own, and catches every
        // C++ exception (returning false).
        let ok = unsafe { epm_context_memory(self.ctx.as_ptr(), &mut compute, &mut context) };
        ok.then_some(ContextMemory {
            compute_bytes: compute as u64,
            context_bytes: context as u64,
        })
    }
}

/// A context's memory as llama.cpp reports it (`llama_get_memory_breakdown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContextMemory {
    /// The compute buffers the scheduler reserved for the worst-case ubatch.
    pub compute_bytes: u64,
    /// KV cache and recurrent state.
    pub context_bytes: u64,
}

extern "C" {
    /// `ffi/context_memory.cpp`: sums llama.cpp's memory breakdown over buffer types.
    fn epm_context_memory(
        ctx: *const llama_cpp_sys_2::llama_context,
        compute: *mut usize,
        context: *mut usize,
    ) -> bool;
}

#[cfg(test)]
mod tests {
    use super::parse_u32;

    #[test]
    fn parses_layer_suffix() {
        assert_eq!(parse_u32(b"17"), Some(17));
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"3x"), None);
        assert_eq!(parse_u32(b"99999999999"), None);
    }
}
