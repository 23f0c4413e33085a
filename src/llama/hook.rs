//! The `cb_eval` hook: a C trampoline that llama.cpp's scheduler calls for every graph node.
//! It asks to see only `ffn_moe_topk-<layer>`, reads the routed expert ids before that
//! layer's `mul_mat_id` runs, and hands them to the pager. It also checks, once per expert
//! tensor, that `mul_mat_id` reads the weights from llama.cpp's file mapping.
//!
//! On the hot path: no allocation, one uncontended lock, and no panic crosses the FFI
//! boundary (`catch_unwind`; a panic disables paging and is reported through a flag).

use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use llama_cpp_sys_2::{
    ggml_tensor, GGML_OP_MUL_MAT, GGML_OP_MUL_MAT_ID, GGML_TYPE_F32, GGML_TYPE_I32,
};

use crate::gguf::RoutingRule;
use crate::os::{OsAdvisor, RssProbe};
use crate::pager::Pager;
use crate::stats::RunStats;

const TOPK_PREFIX: &[u8] = b"ffn_moe_topk-";

/// Where an expert tensor's data must be if llama.cpp reads it from the file mapping.
#[derive(Debug)]
pub struct ExpectedTensor {
    pub name: String,
    pub addr: usize,
    pub seen: bool,
}

/// The routing trace (`generate --trace-file`), little-endian:
/// a 16-byte header `"EPMTRC01"`, `u32 n_expert`, `u32 n_expert_used`; then one record per
/// routed layer per ubatch, in the order the hook saw them: `u32 layer`, `u32 n_tokens`,
/// then `n_tokens * n_expert_used` `u16` expert ids, token-major. A record whose layer is not
/// above the previous one starts a new ubatch (the prompt's ubatches, then one token per step).
pub struct TraceWriter {
    file: std::fs::File,
    buf: Vec<u8>,
    pub failed: bool,
}

impl TraceWriter {
    const CAPACITY: usize = 1 << 20;

    pub fn create(
        path: &std::path::Path,
        n_expert: u32,
        n_used: u32,
    ) -> std::io::Result<TraceWriter> {
        let mut buf = Vec::with_capacity(Self::CAPACITY);
        buf.extend_from_slice(b"EPMTRC01");
        buf.extend_from_slice(&n_expert.to_le_bytes());
        buf.extend_from_slice(&n_used.to_le_bytes());
        Ok(TraceWriter {
            file: std::fs::File::create(path)?,
            buf,
            failed: false,
        })
    }

    fn flush(&mut self) {
        use std::io::Write;
        if self.file.write_all(&self.buf).is_err() {
            self.failed = true;
        }
        self.buf.clear();
    }

    /// Append one record. Allocation-free while the record fits the preallocated buffer.
    fn record(
        &mut self,
        layer: u32,
        n_tokens: usize,
        ids: impl Iterator<Item = i32>,
        n_ids: usize,
    ) {
        if self.buf.len() + 8 + 2 * n_ids > Self::CAPACITY {
            self.flush();
        }
        self.buf.extend_from_slice(&layer.to_le_bytes());
        self.buf.extend_from_slice(&(n_tokens as u32).to_le_bytes());
        for id in ids {
            self.buf.extend_from_slice(&(id as u16).to_le_bytes());
        }
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Cross-layer prediction: when layer L's routing arrives, apply the next MoE layer's router
/// to layer L's router input (the hidden state the callback can already see) and prefetch
/// the experts it would choose. It only reads tensors; compute is never changed.
pub struct Predictor {
    /// Per layer id: address of its F32 router rows (`n_expert` rows of `n_embd` floats) in
    /// llama.cpp's file mapping, or 0 when the layer has none the predictor can read.
    pub routers: Vec<usize>,
    /// Per layer id: the next layer id that has a router.
    pub next_layer: Vec<Option<u32>>,
    /// How many routed layers ahead to predict from one hidden state (>= 1).
    pub depth: u32,
    /// Per layer id: address of its F32 expert-selection bias (`n_expert` floats) in the
    /// file mapping, or 0.
    pub biases: Vec<usize>,
    /// How scores become selections: gating function and expert groups.
    pub rule: RoutingRule,
    pub n_embd: usize,
    pub n_expert: usize,
    pub n_used: usize,
    /// Ubatches of at most this many tokens (decode) are predicted from every token, up to
    /// `depth` layers ahead.
    pub max_tokens: usize,
    /// A longer (prefill) ubatch is predicted one layer ahead, from the union of this many of
    /// its tokens spread evenly over it (0: no prediction in prefill). The bound caps the
    /// router products on the hook for long ubatches; on W1 every token of a 125-token
    /// ubatch predicted better than a sample of 32 (STATUS.md).
    pub prefill_tokens: usize,
    /// Scratch, sized at construction so the hot path never allocates: `scores` and
    /// `picked` have `n_expert` entries, `group_scores`/`group_kept` `rule.groups`;
    /// `chosen` holds distinct experts, so `n_expert` of capacity always suffice.
    pub scores: Vec<f32>,
    pub group_scores: Vec<f32>,
    pub group_kept: Vec<bool>,
    pub picked: Vec<bool>,
    pub chosen: Vec<i32>,
}

/// Router logits to the scores experts are selected by, as `build_moe_ffn` computes them.
/// Only needed when a bias is added or groups are ranked: every gating function is
/// monotonic, so plain top-k on the logits selects the same experts.
fn gate(scores: &mut [f32], gating_func: u32) {
    match gating_func {
        // Sigmoid.
        2 => scores
            .iter_mut()
            .for_each(|s| *s = 1.0 / (1.0 + (-*s).exp())),
        // Softmax over the chosen experts' weights only: selection uses the logits.
        3 => {}
        // sqrt(softplus(x)), softplus written so it cannot overflow.
        4 => scores
            .iter_mut()
            .for_each(|s| *s = (s.max(0.0) + (-s.abs()).exp().ln_1p()).sqrt()),
        // Softmax (the default).
        _ => {
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
    }
}

/// Keep the `used` best of `group_scores.len()` equal groups of experts, ranked by the sum of
/// each group's two best scores; every expert of the other groups gets -inf.
fn mask_groups(scores: &mut [f32], group_scores: &mut [f32], kept: &mut [bool], used: usize) {
    let groups = group_scores.len();
    let per = scores.len() / groups.max(1);
    if per < 2 || used >= groups {
        return;
    }
    for (g, chunk) in scores.chunks_exact(per).enumerate() {
        let (mut best, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &v in chunk {
            if v > best {
                second = best;
                best = v;
            } else if v > second {
                second = v;
            }
        }
        group_scores[g] = best + second;
        kept[g] = false;
    }
    for _ in 0..used {
        let pick = (0..groups)
            .filter(|&g| !kept[g])
            .fold(None, |m: Option<usize>, g| match m {
                Some(b) if group_scores[b] >= group_scores[g] => Some(b),
                _ => Some(g),
            });
        if let Some(g) = pick {
            kept[g] = true;
        }
    }
    for (g, chunk) in scores.chunks_exact_mut(per).enumerate() {
        if !kept[g] {
            chunk.fill(f32::NEG_INFINITY);
        }
    }
}

const ROUTER_SUFFIX: &[u8] = b"ffn_gate_inp.weight";

/// The router matmul's input among the ancestors of a `ffn_moe_topk` node: a MUL_MAT whose
/// weight is `*ffn_gate_inp.weight`. A breadth-first walk over at most `MAX_VISIT`
/// ancestors (grouped routing puts about a dozen nodes between the two); allocation-free.
fn router_input(topk: &ggml_tensor) -> Option<&ggml_tensor> {
    const MAX_VISIT: usize = 96;
    let mut queue: [*const ggml_tensor; MAX_VISIT] = [std::ptr::null(); MAX_VISIT];
    queue[0] = topk;
    let (mut head, mut tail) = (0, 1);
    while head < tail {
        // SAFETY: graph nodes and their sources stay alive during the callback; the queue
        // holds only non-null pointers taken from them.
        let t = unsafe { &*queue[head] };
        head += 1;
        if t.op == GGML_OP_MUL_MAT && !t.src[0].is_null() && !t.src[1].is_null() {
            // SAFETY: as above.
            let (w, x) = unsafe { (&*t.src[0], &*t.src[1]) };
            // SAFETY: ggml keeps `name` NUL-terminated.
            if unsafe { CStr::from_ptr(w.name.as_ptr()) }
                .to_bytes()
                .ends_with(ROUTER_SUFFIX)
            {
                return Some(x);
            }
        }
        for p in std::iter::once(t.view_src).chain(t.src) {
            let p = p as *const ggml_tensor;
            if !p.is_null() && tail < MAX_VISIT && !queue[..tail].contains(&p) {
                queue[tail] = p;
                tail += 1;
            }
        }
    }
    None
}

/// A dot product in eight independent lanes, which the compiler turns into SIMD; a single
/// running sum is one long dependency chain, about 8x slower. The sum order differs from a
/// sequential one only in rounding, and the result only chooses what to prefetch.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

impl Predictor {
    /// How to predict from a ubatch of `n_tokens`: every `stride`-th token, `depth` layers
    /// ahead; `None` when this ubatch is not predicted.
    fn plan(&self, n_tokens: usize) -> Option<(usize, u32)> {
        if n_tokens <= self.max_tokens {
            Some((1, self.depth))
        } else if self.prefill_tokens > 0 {
            Some((n_tokens.div_ceil(self.prefill_tokens), 1))
        } else {
            None
        }
    }

    /// The distinct experts layer `next`'s router would choose for every `stride`-th token
    /// of `x` (`[n_embd, n_tokens]` F32), into `self.chosen`, in first-chosen order.
    /// Returns false when it cannot predict.
    fn predict(&mut self, next: u32, x: &ggml_tensor, stride: usize) -> bool {
        let n_tokens = x.ne[1].max(0) as usize;
        let router = self.routers.get(next as usize).copied().unwrap_or(0);
        if router == 0
            || x.type_ != GGML_TYPE_F32
            || x.ne[0] as usize != self.n_embd
            || x.data.is_null()
            || n_tokens == 0
        {
            return false;
        }
        self.chosen.clear();
        self.picked.fill(false);
        for tok in (0..n_tokens).step_by(stride.max(1)) {
            // SAFETY: `x` has been computed (it is an ancestor of the topk node) and holds
            // `ne[1]` rows of `n_embd` f32, `nb[1]` bytes apart; the router rows live in the
            // file mapping for the model's life, `n_expert * n_embd` f32 from `router`.
            let (xr, w) = unsafe {
                (
                    std::slice::from_raw_parts(
                        (x.data as *const u8).add(tok * x.nb[1]) as *const f32,
                        self.n_embd,
                    ),
                    std::slice::from_raw_parts(router as *const f32, self.n_expert * self.n_embd),
                )
            };
            for (e, score) in self.scores.iter_mut().enumerate() {
                let row = &w[e * self.n_embd..(e + 1) * self.n_embd];
                *score = dot(row, xr);
            }
            let bias = self.biases.get(next as usize).copied().unwrap_or(0);
            let grouped = self.group_scores.len() > 1;
            if bias != 0 || grouped {
                gate(&mut self.scores, self.rule.gating_func);
            }
            if bias != 0 {
                // SAFETY: the bias is `n_expert` f32 inside the file mapping (checked when the
                // predictor was built), alive for the model's life.
                let b = unsafe { std::slice::from_raw_parts(bias as *const f32, self.n_expert) };
                self.scores.iter_mut().zip(b).for_each(|(s, b)| *s += b);
            }
            if grouped {
                mask_groups(
                    &mut self.scores,
                    &mut self.group_scores,
                    &mut self.group_kept,
                    self.rule.groups_used as usize,
                );
            }
            for _ in 0..self.n_used {
                let (best, _) =
                    self.scores
                        .iter()
                        .enumerate()
                        .fold(
                            (0, f32::NEG_INFINITY),
                            |m, (i, &v)| if v > m.1 { (i, v) } else { m },
                        );
                self.scores[best] = f32::NEG_INFINITY;
                if !self.picked[best] && self.chosen.len() < self.chosen.capacity() {
                    self.picked[best] = true;
                    self.chosen.push(best as i32);
                }
            }
        }
        true
    }
}

/// The paging state the hook drives once the model and context exist.
pub struct Active {
    pub pager: Pager<OsAdvisor>,
    pub rss: RssProbe,
    /// Measured RSS above this makes the hook evict more (the budget, less a guard band).
    pub rss_limit: u64,
    pub expected: Vec<ExpectedTensor>,
    pub unverified: usize,
    pub trace: Option<TraceWriter>,
    pub predictor: Option<Predictor>,
}

/// Shared with the C callback through `cb_eval_user_data`. Boxed by the session so its
/// address is stable for the life of the context.
pub struct HookState {
    pub active: Mutex<Option<Active>>,
    pub stats: Arc<RunStats>,
    /// Set when an expert tensor is computed from memory outside the file mapping
    /// (repacked or copied weights): paging it would be wrong, so the run must stop.
    pub foreign_tensor: Mutex<Option<String>>,
    pub foreign: AtomicBool,
    /// Every expert tensor has been checked: `verify` returns before taking the lock.
    verified: AtomicBool,
}

impl HookState {
    pub fn new(stats: Arc<RunStats>) -> HookState {
        HookState {
            active: Mutex::new(None),
            stats,
            foreign_tensor: Mutex::new(None),
            foreign: AtomicBool::new(false),
            verified: AtomicBool::new(false),
        }
    }

    fn on_node(&self, t: &ggml_tensor, ask: bool) -> bool {
        // SAFETY: ggml keeps `name` NUL-terminated within its 64 bytes.
        let name = unsafe { CStr::from_ptr(t.name.as_ptr()) }.to_bytes();
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
        let (n_used, n_tokens, row_stride) =
            (t.ne[0].max(0) as usize, t.ne[1].max(0) as usize, t.nb[1]);
        self.route(active, t, layer, n_used, n_tokens, row_stride);
        let busy = started.elapsed().as_nanos() as u64;
        self.stats.hook_ns.add(busy);
        if n_tokens == 1 {
            self.stats.hook_decode_ns.add(busy);
        }
        true
    }

    /// Routing of `layer` is known (`t` is its topk node): hand it to the pager, predict the
    /// next layer, and hold measured RSS under the limit.
    fn route(
        &self,
        active: &mut Active,
        t: &ggml_tensor,
        layer: u32,
        n_used: usize,
        n_tokens: usize,
        row_stride: usize,
    ) {
        let base = t.data as *const u8;
        let ids = || {
            (0..n_tokens).flat_map(move |row| {
                (0..n_used).map(move |col| {
                    // SAFETY: `data` is the topk view of `ne[1]` rows of `ne[0]` i32s, rows `nb[1]`
                    // bytes apart; the scheduler has computed it and it stays alive during this call.
                    unsafe { (base.add(row * row_stride + col * 4) as *const i32).read_unaligned() }
                })
            })
        };
        if let Some(trace) = active.trace.as_mut() {
            trace.record(layer, n_tokens, ids(), n_tokens * n_used);
        }
        active.pager.route(layer, n_tokens as u64, ids());
        let predictor = active.predictor.as_mut();
        if let Some((pred, (stride, depth))) =
            predictor.and_then(|p| p.plan(n_tokens).map(|plan| (p, plan)))
        {
            // The last routed layer has nothing to predict: skip the graph walk.
            let has_next = pred
                .next_layer
                .get(layer as usize)
                .copied()
                .flatten()
                .is_some();
            if let Some(x) = has_next.then(|| router_input(t)).flatten() {
                // Nearest layer first: its reads are needed soonest.
                let mut ahead = layer;
                for _ in 0..depth {
                    let Some(next) = pred.next_layer.get(ahead as usize).copied().flatten() else {
                        break;
                    };
                    if pred.predict(next, x, stride) {
                        active.pager.speculate(next, pred.chosen.iter().copied());
                    }
                    ahead = next;
                }
            }
        }
        let rss = active.rss.rss_bytes();
        if rss > active.rss_limit {
            let excess = rss - active.rss_limit;
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
        // SAFETY: `src[0]` of a MUL_MAT_ID node is the expert weight tensor, alive for the model's life.
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
        // SAFETY: as above, `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(src.name.as_ptr()) }.to_bytes();
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

fn parse_u32(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() {
        return None;
    }
    let mut v: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
    }
    Some(v)
}

/// The C callback. `user_data` is a `*const HookState`.
///
/// # Safety
/// Called by llama.cpp only: `t` is a valid tensor and `user_data` the `HookState` the
/// session registered, which outlives the context.
pub unsafe extern "C" fn trampoline(
    t: *mut ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
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

#[cfg(test)]
mod tests {
    use super::parse_u32;

    #[test]
    fn groups_keep_the_best_by_their_top_two() {
        // 4 groups of 3: sums of the top two are 0.9+0.8, 1.0+0.1, 0.5+0.5, 0.7+0.6.
        let mut scores = [0.9, 0.8, 0.1, 1.0, 0.1, 0.0, 0.5, 0.5, 0.2, 0.7, 0.6, 0.0];
        let (mut gs, mut kept) = ([0.0; 4], [false; 4]);
        super::mask_groups(&mut scores, &mut gs, &mut kept, 2);
        assert_eq!(kept, [true, false, false, true]);
        assert!(scores[3..9].iter().all(|s| *s == f32::NEG_INFINITY));
        assert_eq!(scores[0], 0.9);
        assert_eq!(scores[10], 0.6);
    }

    #[test]
    fn gating_functions_match_their_definitions() {
        let mut s = [0.0f32, 1.0, -1.0];
        super::gate(&mut s, 2);
        assert!((s[0] - 0.5).abs() < 1e-6 && (s[1] - 0.731_058_6).abs() < 1e-6);
        let mut s = [1.0f32, 2.0, 3.0];
        super::gate(&mut s, 1);
        assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s[2] > s[1]);
        let mut s = [100.0f32, 0.0];
        super::gate(&mut s, 4);
        assert!((s[0] - 10.0).abs() < 1e-4 && (s[1] - 2f32.ln().sqrt()).abs() < 1e-6);
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..2051).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..2051).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
        assert!((f64::from(super::dot(&a, &b)) - plain).abs() < 1e-3);
        assert_eq!(super::dot(&[2.0; 3], &[0.5; 3]), 3.0);
    }

    #[test]
    fn parses_layer_suffix() {
        assert_eq!(parse_u32(b"17"), Some(17));
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"3x"), None);
        assert_eq!(parse_u32(b"99999999999"), None);
    }
}
