//! Cross-layer prediction on the hook: when layer L's routing arrives, apply the next MoE
//! layers' routers to layer L's router input (a hidden state the callback can already see)
//! and name the experts they would choose. The math is `epm_core::predict`; this side
//! reads llama.cpp's tensors and the router rows in the file mapping.

use llama_cpp_sys_2::{ggml_tensor, GGML_TYPE_F32};

use epm_core::model::ModelIndex;
use epm_core::predict::{PredictReads, RankScore, RouterBiases, Selector};
use epm_core::stats::RunStats;
use epm_gguf::GgmlType;
use epm_sys::FileMapping;

/// Where one layer's router (and its biases) lie in llama.cpp's file mapping: checked at
/// construction to be inside a mapped VMA, `n_expert x n_embd` and `n_expert` f32 each.
#[derive(Debug, Clone, Copy)]
struct RouterRows {
    addr: usize,
    selection_bias: Option<usize>,
    logit_bias: Option<usize>,
}

/// Ubatches of at most this many tokens (decode steps) are predicted from every token, up
/// to `depth` layers ahead.
const MAX_DECODE_TOKENS: usize = 8;

/// Whether a ubatch of `n_tokens` is predicted as a decode step (every token, `depth`
/// layers ahead, `decode_reads` of each) rather than as a prefill ubatch.
fn decode_step(n_tokens: usize) -> bool {
    n_tokens <= MAX_DECODE_TOKENS
}

pub struct Predictor {
    /// Per layer id: its router, when the layer has one the predictor can read.
    routers: Vec<Option<RouterRows>>,
    /// Per layer id: the next layer id that has a router.
    next_layer: Vec<Option<u32>>,
    /// How many routed layers ahead to predict from one hidden state in decode (>= 1).
    depth: u32,
    /// A longer (prefill) ubatch is predicted one layer ahead, from the union of this many
    /// of its tokens spread evenly over it (0: no prediction in prefill). The bound caps the
    /// router products on the hook for long ubatches; on W1 every token of a 125-token
    /// ubatch predicted better than a sample of 32 (STATUS.md).
    prefill_tokens: usize,
    /// Of each decode token's predicted experts, how many are read; a prefill ubatch reads
    /// all of each token's (the union over its tokens covers most experts either way, and
    /// its guesses are rarely wrong).
    decode_reads: PredictReads,
    selector: Selector,
    /// With `decode_reads` measured: how right each rank of the nearest layer's decode
    /// predictions has been, and how many ranks that makes worth reading now.
    score: RankScore,
    measured_reads: usize,
    /// The nearest layer's latest decode prediction, waiting for that layer's routing to
    /// score it: the layer, its tokens, and each token's whole ranking (`n_used` a token;
    /// capacity `MAX_DECODE_TOKENS * n_used` from construction, so it never allocates).
    pending: Option<(u32, usize)>,
    pending_ranked: Vec<i32>,
}

impl Predictor {
    /// The predictor, when every router is F32 inside the file mappings and the gating
    /// function is known; `None` (with a log line) otherwise. Without `logit_bias`, routers'
    /// own biases are left out (to measure what they are worth).
    pub fn new(
        index: &ModelIndex,
        files: &[FileMapping],
        depth: u32,
        prefill_tokens: usize,
        logit_bias: bool,
        reads: PredictReads,
    ) -> Option<Predictor> {
        let n_layer = index.layers.iter().map(|l| l.layer + 1).max()? as usize;
        let n_expert = index.n_expert as usize;
        let n_embd = index.n_embd as usize;
        let Some(mut selector) = Selector::new(
            n_embd,
            n_expert,
            index.n_expert_used as usize,
            index.routing,
        ) else {
            tracing::info!(
                "cross-layer prediction off: unknown expert gating function {:?}",
                index.routing.gating_func
            );
            return None;
        };
        let mut routers = vec![None; n_layer];
        for r in &index.routers {
            let m = &files[r.file];
            let addr = m.addr_of(r.offset);
            if r.ggml_type != GgmlType::F32
                || r.n_embd as usize != n_embd
                || !m.contains(addr, n_embd * n_expert * 4)
            {
                tracing::info!(
                    "cross-layer prediction off: router of layer {} is {} or outside the mapping",
                    r.layer,
                    r.ggml_type
                );
                return None;
            }
            // A bias outside the mapping is left out: predictions are then plain top-k.
            let mapped = |at: Option<(usize, u64)>| {
                at.and_then(|(file, offset)| {
                    let a = files[file].addr_of(offset);
                    files[file].contains(a, n_expert * 4).then_some(a)
                })
            };
            let rows = RouterRows {
                addr,
                selection_bias: mapped(r.selection_bias),
                logit_bias: mapped(r.logit_bias.filter(|_| logit_bias)),
            };
            if let Some(slot) = routers.get_mut(r.layer as usize) {
                *slot = Some(rows);
            }
        }
        let n_used = selector.n_used();
        let measured = reads == PredictReads::Measured;
        if measured {
            selector.keep_ranks(MAX_DECODE_TOKENS);
        }
        let next_layer = (0..n_layer)
            .map(|l| {
                (l + 1..n_layer)
                    .find(|&n| routers[n].is_some())
                    .map(|n| n as u32)
            })
            .collect();
        Some(Predictor {
            routers,
            next_layer,
            depth,
            prefill_tokens,
            decode_reads: reads,
            selector,
            score: RankScore::new(n_used),
            measured_reads: reads.per_token(n_used),
            pending: None,
            pending_ranked: Vec::with_capacity(if measured {
                MAX_DECODE_TOKENS * n_used
            } else {
                0
            }),
        })
    }

    /// How to predict from a ubatch of `n_tokens`: every `stride`-th token, `depth` layers
    /// ahead; `None` when this ubatch is not predicted.
    pub fn plan(&self, n_tokens: usize) -> Option<(usize, u32)> {
        if decode_step(n_tokens) {
            Some((1, self.depth))
        } else if self.prefill_tokens > 0 {
            Some((n_tokens.div_ceil(self.prefill_tokens), 1))
        } else {
            None
        }
    }

    /// How many experts each token of a decode step reads at most.
    pub fn reads_per_token(&self) -> usize {
        match self.decode_reads {
            PredictReads::Measured => self.measured_reads,
            reads => reads.per_token(self.selector.n_used()),
        }
    }

    /// `layer`'s routing of `n_tokens` is known (`id_at(token, k)`, `n_used` a token):
    /// score the decode prediction made for it, when the latest one was, count it in
    /// `stats` (`rank_scored`, `rank_right`), and update how many ranks are read (and
    /// `stats.predicted_per_token`). Any other pending prediction is dropped: layers route
    /// in order, so it named a routing that did not come.
    pub fn score(
        &mut self,
        layer: u32,
        n_tokens: usize,
        n_used: usize,
        id_at: impl Fn(usize, usize) -> i32,
        stats: &RunStats,
    ) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        if pending != (layer, n_tokens) || n_used != self.selector.n_used() {
            return;
        }
        for (token, ranking) in self.pending_ranked.chunks_exact(n_used).enumerate() {
            for (rank, &guess) in ranking.iter().enumerate() {
                let right = (0..n_used).any(|k| id_at(token, k) == guess);
                self.score.record(rank, right);
                if let (Some(n), Some(r)) =
                    (stats.rank_scored.get(rank), stats.rank_right.get(rank))
                {
                    n.inc();
                    r.add(u64::from(right));
                }
            }
        }
        let before = self.measured_reads;
        self.measured_reads = self.score.reads(self.decode_reads.per_token(n_used));
        if self.measured_reads != before {
            stats.predicted_per_token.set(self.measured_reads as u64);
            // Rare (the scores move slowly), so the log line costs the hook nothing.
            tracing::debug!(
                "decode predictions read {} of {n_used} ranks now (the next rank right {:?} of the time)",
                self.measured_reads,
                self.score.accuracy(self.measured_reads)
            );
        }
    }

    /// The next layer after `layer` that has a router.
    pub fn next_layer(&self, layer: u32) -> Option<u32> {
        self.next_layer.get(layer as usize).copied().flatten()
    }

    /// The distinct experts layer `next`'s router would choose for every `stride`-th token
    /// of `x` (`[n_embd, n_tokens]` F32), in first-chosen order; `None` when it cannot
    /// predict from this tensor. A decode step's prediction for the `nearest` layer is
    /// kept to be scored when that layer routes ([`Predictor::score`]).
    pub fn predict(
        &mut self,
        next: u32,
        x: &ggml_tensor,
        stride: usize,
        nearest: bool,
    ) -> Option<&[i32]> {
        let rows = self.routers.get(next as usize).copied().flatten()?;
        let n_embd = self.selector.n_embd();
        let n_expert = self.selector.n_expert();
        let n_tokens = x.ne[1].max(0) as usize;
        if x.type_ != GGML_TYPE_F32
            || x.ne[0] as usize != n_embd
            || x.data.is_null()
            || n_tokens == 0
        {
            return None;
        }
        // SAFETY: the router rows and biases were checked at construction to lie inside a
        // VMA of llama.cpp's file mapping (`n_expert * n_embd` and `n_expert` f32), which
        // stays mapped while the hook (and so this predictor) lives; nothing writes to it.
        let (router, biases) = unsafe {
            let vector = |b: usize| std::slice::from_raw_parts(b as *const f32, n_expert);
            (
                std::slice::from_raw_parts(rows.addr as *const f32, n_expert * n_embd),
                RouterBiases {
                    logit: rows.logit_bias.map(vector),
                    selection: rows.selection_bias.map(vector),
                },
            )
        };
        let decode = decode_step(n_tokens);
        let picks = if decode {
            self.reads_per_token()
        } else {
            self.selector.n_used()
        };
        self.selector.set_picks(picks);
        self.selector.clear();
        for tok in (0..n_tokens).step_by(stride.max(1)) {
            // SAFETY: `x` has been computed (it is an ancestor of the topk node the scheduler
            // handed over) and holds `ne[1]` rows of `n_embd` f32, `nb[1]` bytes apart.
            let hidden = unsafe {
                std::slice::from_raw_parts(
                    (x.data as *const u8).add(tok * x.nb[1]) as *const f32,
                    n_embd,
                )
            };
            self.selector.add_token(router, hidden, biases);
        }
        if decode && nearest && self.decode_reads == PredictReads::Measured {
            // Within its capacity: a decode step has at most MAX_DECODE_TOKENS tokens.
            self.pending_ranked.clear();
            self.pending_ranked
                .extend_from_slice(self.selector.ranked());
            self.pending = Some((next, n_tokens));
        }
        Some(self.selector.chosen())
    }
}
