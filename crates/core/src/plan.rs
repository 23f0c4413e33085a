//! Planning: from GGUF metadata alone, the bytes a run needs besides experts (the reserve),
//! the working set of one ubatch, the minimum viable budget and the expert budget that fits.
//! After load, [`measured_reserve`] replaces the estimate with what the process measures.
//!
//! Pure functions of their arguments (measurements come in as arguments); the estimate is
//! deliberately conservative, because `min_budget_bytes` is a promise: a run at that budget
//! with the same ctx, ubatch and parallel sequences succeeds within it.

use serde::Serialize;

use crate::model::ModelIndex;

use crate::pager::expert_span_bound;
use crate::prefix::PromptCuts;
use crate::units::{mib_ceil, MIB};

/// Run settings that change the memory a run needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunShape {
    /// Context size in tokens, over all sequences (llama.cpp's `n_ctx`).
    pub n_ctx: u32,
    pub n_ubatch: u32,
    /// Sequences decoded in parallel (`serve --parallel`): each keeps its own recurrent
    /// state, and one decode step routes a ubatch of up to this many tokens.
    pub n_seq: u32,
}

impl RunShape {
    pub fn new(n_ctx: u32, n_ubatch: u32) -> RunShape {
        RunShape {
            n_ctx,
            n_ubatch,
            n_seq: 1,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LayerBytes {
    pub layer: u32,
    pub bytes_per_expert: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Plan {
    pub model: String,
    pub arch: String,
    pub model_bytes: u64,
    pub expert_bytes: u64,
    pub non_expert_bytes: u64,
    pub n_moe_layers: u32,
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub bytes_per_expert: Vec<LayerBytes>,
    /// Expert bytes one token touches: `n_expert_used` experts in every MoE layer.
    pub working_set_bytes_per_token: u64,
    /// One layer's experts for a full ubatch (`n_ubatch x n_expert_used` experts, at most
    /// all of them, page-rounded), in the largest layer: what must be resident at once.
    pub ubatch_working_set_bytes: u64,
    pub n_ctx: u32,
    pub n_ubatch: u32,
    pub n_seq: u32,
    pub kv_bytes: u64,
    pub compute_bytes: u64,
    pub runtime_bytes: u64,
    pub margin_bytes: u64,
    /// Everything that is not a routed expert: non-expert weights, KV, compute, runtime, margin.
    pub reserve_bytes: u64,
    pub min_budget_bytes: u64,
    pub budget_bytes: u64,
    /// `budget_bytes - reserve_bytes`, or 0 when the budget is below the minimum.
    pub expert_budget_bytes: u64,
    pub fits: bool,
    /// What `--ubatch-size auto` picks at this budget and ctx for one prompt (see
    /// [`choose_ubatch`]); where prompts share prefixes it picks at most
    /// [`reuse_auto_ubatch_max`].
    pub auto_ubatch: u32,
}

impl Plan {
    /// The budget, or why it is too small.
    pub fn check(&self) -> Result<(), BelowMinimum> {
        if self.fits {
            return Ok(());
        }
        Err(BelowMinimum {
            budget_bytes: self.budget_bytes,
            min_bytes: self.min_budget_bytes,
            shape: RunShape {
                n_ctx: self.n_ctx,
                n_ubatch: self.n_ubatch,
                n_seq: self.n_seq,
            },
            measured: None,
        })
    }
}

/// A budget below what the run needs: from the plan before load, or from the reserve
/// measured after load. One message for both, so it reads the same wherever it comes from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RAM budget {} MiB is below the minimum of {} MiB for this model at ctx {}, ubatch {}{}{}; raise --ram-budget-mb, or lower -c / -ub{} (see `epm-run plan`)",
    .budget_bytes / MIB,
    mib_ceil(*.min_bytes),
    .shape.n_ctx,
    .shape.n_ubatch,
    if .shape.n_seq > 1 { format!(", {} parallel sequences", .shape.n_seq) } else { String::new() },
    .measured.map_or(String::new(), |(r, w)| format!(" (measured after load: reserve {} MiB + one ubatch's experts {} MiB)", mib_ceil(r), mib_ceil(w))),
    if .shape.n_seq > 1 { " / --parallel" } else { "" })]
pub struct BelowMinimum {
    pub budget_bytes: u64,
    pub min_bytes: u64,
    pub shape: RunShape,
    /// The measured reserve and one ubatch's working set, when measured after load.
    pub measured: Option<(u64, u64)>,
}

/// Safety margin on top of a reserve: 16 MiB plus 1/64.
pub fn margin_for(bytes: u64) -> u64 {
    16 * MIB + bytes / 64
}

/// The most that must be resident at once for one ubatch: the largest layer's selection,
/// each expert's tensors at their page-rounded bound.
pub fn ubatch_working_set(index: &ModelIndex, n_ubatch: u32, page: u64) -> u64 {
    let chosen =
        (u64::from(n_ubatch) * u64::from(index.n_expert_used)).min(u64::from(index.n_expert));
    index
        .layers
        .iter()
        .map(|l| {
            l.tensors
                .iter()
                .map(|t| expert_span_bound(t.bytes_per_expert, page))
                .sum::<u64>()
                * chosen
        })
        .max()
        .unwrap_or(0)
}

/// Context memory: f16 K and V for every attention layer (K alone for latent attention)
/// over `n_ctx` cells shared by all sequences, plus the recurrent state of the
/// linear-attention layers of hybrid models, one per sequence.
pub fn kv_bytes(index: &ModelIndex, n_ctx: u32, n_seq: u32) -> u64 {
    let per_head = index.head_dim_k + if index.latent_kv { 0 } else { index.head_dim_v };
    u64::from(n_ctx) * u64::from(index.n_attention_layers) * index.n_head_kv * per_head * 2
        + index.recurrent_state_bytes * u64::from(n_seq.max(1))
}

/// Upper estimate of llama.cpp's compute buffer for one ubatch, which the engine replaces
/// after load with the size llama.cpp reports. Per token: a few hidden states, the router's
/// scores, the selected experts' gate, up and output rows, Q/K/V, and the attention mask
/// over the context (flash attention, which llama.cpp turns on for the CPU, never holds the
/// score matrix). Logits for one output per sequence: the engine reserves no more
/// (`n_outputs_max`). 1.5-3.0x what llama.cpp reserves on the full-size presets
/// (`validate/compute-buffer.json`), and an upper bound on every mini (`tests/presets.rs`).
pub fn compute_bytes(index: &ModelIndex, shape: RunShape) -> u64 {
    let u = u64::from(shape.n_ubatch);
    let head_dim = index.head_dim_k.max(index.head_dim_v);
    let per_token = index.n_embd * 4 * 16
        + u64::from(index.n_expert) * 4 * 4
        + u64::from(index.n_expert_used) * (2 * index.expert_ff + index.n_embd) * 4
        + (index.n_head.max(1) + 2 * index.n_head_kv) * head_dim * 4
        + u64::from(shape.n_ctx) * 4;
    u * per_token + index.n_vocab * 4 * u64::from(shape.n_seq.max(1)) + 8 * MIB
}

/// The process itself: code, allocator, thread stacks, and the tokenizer's tables
/// (measured at about 300 bytes per vocabulary entry).
pub fn runtime_bytes(index: &ModelIndex) -> u64 {
    32 * MIB + index.n_vocab * 384
}

/// The parts of a plan that depend only on the model and the run shape.
struct Reserve {
    kv: u64,
    compute: u64,
    runtime: u64,
    margin: u64,
    /// Everything but routed experts, margin included.
    total: u64,
    /// One ubatch's working set of experts.
    working_set: u64,
}

fn reserve_for(index: &ModelIndex, shape: RunShape, page: u64) -> Reserve {
    let kv = kv_bytes(index, shape.n_ctx, shape.n_seq);
    let compute = compute_bytes(index, shape);
    let runtime = runtime_bytes(index);
    let working_set = ubatch_working_set(index, shape.n_ubatch, page);
    let base = index.non_expert_bytes() + kv + compute + runtime;
    let margin = margin_for(base + working_set);
    Reserve {
        kv,
        compute,
        runtime,
        margin,
        total: base + margin,
        working_set,
    }
}

pub fn make_plan(index: &ModelIndex, shape: RunShape, budget_bytes: u64, page: u64) -> Plan {
    let Reserve {
        kv,
        compute,
        runtime,
        margin,
        total: reserve,
        working_set: ws,
    } = reserve_for(index, shape, page);
    let min_budget = reserve + ws;
    let fits = budget_bytes >= min_budget;
    Plan {
        model: index.files[0].display().to_string(),
        arch: index.arch.clone(),
        model_bytes: index.model_bytes(),
        expert_bytes: index.expert_bytes,
        non_expert_bytes: index.non_expert_bytes(),
        n_moe_layers: index.layers.len() as u32,
        n_expert: index.n_expert,
        n_expert_used: index.n_expert_used,
        bytes_per_expert: index
            .layers
            .iter()
            .map(|l| LayerBytes {
                layer: l.layer,
                bytes_per_expert: l.bytes_per_expert(),
            })
            .collect(),
        working_set_bytes_per_token: index
            .layers
            .iter()
            .map(|l| l.bytes_per_expert() * u64::from(index.n_expert_used))
            .sum(),
        ubatch_working_set_bytes: ws,
        n_ctx: shape.n_ctx,
        n_ubatch: shape.n_ubatch,
        n_seq: shape.n_seq,
        kv_bytes: kv,
        compute_bytes: compute,
        runtime_bytes: runtime,
        margin_bytes: margin,
        reserve_bytes: reserve,
        min_budget_bytes: min_budget,
        budget_bytes,
        expert_budget_bytes: if fits { budget_bytes - reserve } else { 0 },
        fits,
        auto_ubatch: choose_ubatch(index, shape, budget_bytes, page, u32::MAX),
    }
}

/// The ubatch sizes `--ubatch-size auto` considers, largest first.
pub const AUTO_UBATCHES: [u32; 5] = [2048, 1024, 512, 256, 128];

/// The largest ubatch `auto` picks where prompts share prefixes (the server, `--chat`),
/// by how their prompts are split. Reuse keeps whole ubatches of the split (outputs stay
/// identical to a run without reuse):
///
/// - on the grid, a later prompt re-evaluates up to a ubatch less one token of what it
///   shares, so the ubatch that shortens the first prompt lengthens every later one.
///   Measured on W1's 20-request agent session at 4 GiB: at 512 each later request waited
///   about 44 s against 27 s at 256, which more than undid the first request's gain.
/// - cut at turns, a later chat prompt re-evaluates its new messages (and a piece shorter
///   than [`TURN_PIECE_MIN_TOKENS`](crate::prefix::TURN_PIECE_MIN_TOKENS)) whatever the
///   ubatch, which then trades the first prompt's sweeps of the experts against the compute
///   buffer (the eighth of [`choose_ubatch`]) and against prompts without end-of-turn
///   tokens (raw completions), whose reuse stays on the grid. Measured on the same session:
///   the first request took 142 s at 1024 against 180 s at 256, later requests 7 s at both.
///
/// (STATUS, #22.)
pub fn reuse_auto_ubatch_max(cuts: PromptCuts) -> u32 {
    match cuts {
        PromptCuts::Grid => 256,
        PromptCuts::Turns => 1024,
    }
}

/// The largest ubatch, of [`AUTO_UBATCHES`] up to `max` and the context, whose extra compute
/// buffer costs at most an eighth of the expert cache the smallest one leaves. A prefill
/// ubatch selects most of every layer's experts, so each ubatch reloads whatever the cache
/// cannot hold: fewer, larger ubatches read less. But the compute buffer grows with the
/// ubatch and stays for the whole run, taking cache from decode; an eighth bounds that
/// loss. With every expert resident, the cost is nothing. `shape.n_ubatch` is ignored: it
/// is what this chooses.
pub fn choose_ubatch(
    index: &ModelIndex,
    shape: RunShape,
    budget_bytes: u64,
    page: u64,
    max: u32,
) -> u32 {
    let smallest = *AUTO_UBATCHES.last().expect("non-empty");
    // The expert cache a ubatch size leaves, or None when it does not fit at all.
    let usable = |n_ubatch: u32| {
        let r = reserve_for(index, RunShape { n_ubatch, ..shape }, page);
        (budget_bytes >= r.total + r.working_set)
            .then(|| (budget_bytes - r.total).min(index.expert_bytes))
    };
    let Some(base_cache) = usable(smallest) else {
        return smallest;
    };
    AUTO_UBATCHES
        .into_iter()
        .filter(|&u| u <= max && u <= shape.n_ctx)
        .find(|&u| usable(u).is_some_and(|c| base_cache - c.min(base_cache) <= base_cache / 8))
        .unwrap_or(smallest)
}

/// The most one decode step of `n_seq` sequences can select: each sequence's
/// `n_expert_used` experts in every MoE layer (no more than the layer has; less when the
/// sequences share). An expert cache smaller than this may not hold one step's selections:
/// least-recently-used eviction then drops, step after step, what the next step needs
/// first, and almost nothing hits (`epm-run sim`: 0.6% with 4 sessions on W1 at 4 GiB).
pub fn step_selection_bound_bytes(index: &ModelIndex, n_seq: u32) -> u64 {
    let per_layer =
        (u64::from(index.n_expert_used) * u64::from(n_seq)).min(u64::from(index.n_expert));
    index
        .layers
        .iter()
        .map(|l| l.bytes_per_expert() * per_layer)
        .sum()
}

/// llama.cpp's own default ubatch (`n_ubatch`), which unpaged runs keep.
pub const UPSTREAM_UBATCH: u32 = 512;

/// The ubatch for a prompt of `prompt_tokens`: the smallest of [`AUTO_UBATCHES`] that holds
/// it in one piece, never above `chosen`. A prompt no longer than a smaller ubatch reads
/// each expert once either way, and the smaller compute buffer leaves more cache to decode.
pub fn ubatch_for_prompt(chosen: u32, prompt_tokens: usize) -> u32 {
    AUTO_UBATCHES
        .into_iter()
        .rev()
        .find(|&u| u as usize >= prompt_tokens)
        .unwrap_or(chosen)
        .min(chosen)
}

/// What the process measured once the model and context exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Measured {
    /// Total RSS (anonymous + file) right after the context was created.
    pub rss_bytes: u64,
    /// The part of that RSS that is the model file's mapping.
    pub mapping_rss_bytes: u64,
    /// Anonymous memory the context reserved but has not touched yet (virtual growth of
    /// private data during context creation minus its resident growth).
    pub untouched_context_bytes: u64,
}

/// The reserve from measurements: what is resident now, minus the mapping, plus all
/// non-expert weights (they fault in on first use), plus the context memory not yet
/// touched, plus the margin.
pub fn measured_reserve(index: &ModelIndex, m: Measured) -> u64 {
    let base = m.rss_bytes.saturating_sub(m.mapping_rss_bytes)
        + index.non_expert_bytes()
        + m.untouched_context_bytes;
    base + margin_for(base)
}

/// The default budget: 80% of available memory, or of the cgroup limit when that is lower.
/// Both are measured by the caller (`MemAvailable`; the cgroup's limit, if any).
pub fn default_budget_bytes(available: u64, cgroup_limit: Option<u64>) -> u64 {
    available.min(cgroup_limit.unwrap_or(u64::MAX)) / 5 * 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExpertTensor, MoeLayer};
    use epm_gguf::GgmlType;

    /// qwen3-30b-a3b's shapes: 48 layers of 128 experts of about 2.9 MB, 1.2 GB of the rest.
    fn qwen3_30b() -> ModelIndex {
        let per_expert = 2 * 884_736 + 1_290_240;
        let layers: Vec<MoeLayer> = (0..48)
            .map(|l| MoeLayer {
                layer: l,
                tensors: vec![ExpertTensor {
                    name: format!("blk.{l}.ffn_down_exps.weight"),
                    file: 0,
                    offset: 0,
                    bytes_per_expert: per_expert,
                    ggml_type: GgmlType::Q4_K,
                }],
            })
            .collect();
        let expert_bytes = 48 * 128 * per_expert;
        ModelIndex {
            files: vec!["m.gguf".into()],
            file_sizes: vec![expert_bytes + 1_200 * MIB],
            arch: "qwen3moe".into(),
            n_layer: 48,
            n_embd: 2048,
            n_head: 32,
            n_head_kv: 4,
            head_dim_k: 128,
            head_dim_v: 128,
            n_vocab: 151_936,
            context_length: 40_960,
            latent_kv: false,
            n_attention_layers: 48,
            recurrent_state_bytes: 0,
            n_expert: 128,
            n_expert_used: 8,
            expert_ff: 768,
            layers,
            routers: Vec::new(),
            routing: Default::default(),
            tensor_bytes: expert_bytes + 1_200 * MIB,
            expert_bytes,
            token_table: None,
        }
    }

    #[test]
    fn a_step_selects_at_most_n_used_per_sequence_and_never_more_than_every_expert() {
        let index = qwen3_30b();
        let one = step_selection_bound_bytes(&index, 1);
        assert_eq!(one, 48 * 8 * index.layers[0].bytes_per_expert());
        assert_eq!(step_selection_bound_bytes(&index, 4), 4 * one);
        // 32 sequences x 8 would be 256 of a layer's 128 experts: every expert, once.
        assert_eq!(step_selection_bound_bytes(&index, 32), index.expert_bytes);
    }

    #[test]
    fn short_prompts_take_the_smallest_ubatch_that_holds_them() {
        assert_eq!(ubatch_for_prompt(512, 40), 128);
        assert_eq!(ubatch_for_prompt(512, 128), 128);
        assert_eq!(ubatch_for_prompt(512, 129), 256);
        assert_eq!(ubatch_for_prompt(512, 2000), 512);
        assert_eq!(ubatch_for_prompt(256, 2000), 256);
        assert_eq!(ubatch_for_prompt(128, 300), 128);
        // A fixed choice outside the list is only ever lowered to one in it.
        assert_eq!(ubatch_for_prompt(64, 10), 64);
    }

    #[test]
    fn auto_ubatch_is_largest_when_every_expert_fits_and_smallest_at_the_minimum() {
        let index = qwen3_30b();
        let page = 4096;
        let shape = RunShape::new(4096, 128);
        assert_eq!(choose_ubatch(&index, shape, 64 << 30, page, u32::MAX), 2048);
        let grid = reuse_auto_ubatch_max(PromptCuts::Grid);
        assert_eq!(choose_ubatch(&index, shape, 64 << 30, page, grid), 256);
        let turns = reuse_auto_ubatch_max(PromptCuts::Turns);
        assert_eq!(choose_ubatch(&index, shape, 64 << 30, page, turns), 1024);
        // Never above the context, which llama.cpp would clamp it to.
        let small_ctx = RunShape::new(1024, 128);
        assert_eq!(
            choose_ubatch(&index, small_ctx, 64 << 30, page, u32::MAX),
            1024
        );
        let min = make_plan(&index, shape, 0, page).min_budget_bytes;
        assert_eq!(choose_ubatch(&index, shape, min, page, u32::MAX), 128);
        // Below every minimum it still answers (the run is then refused by the plan).
        assert_eq!(choose_ubatch(&index, shape, MIB, page, u32::MAX), 128);
    }

    #[test]
    fn auto_ubatch_never_shrinks_as_the_budget_grows() {
        let index = qwen3_30b();
        let mut last = 0;
        for gib in 2..40u64 {
            let u = choose_ubatch(&index, RunShape::new(4096, 128), gib << 30, 4096, u32::MAX);
            assert!(u >= last, "{gib} GiB picked {u} after {last}");
            let p = make_plan(&index, RunShape::new(4096, u), gib << 30, 4096);
            assert!(
                p.fits || u == 128,
                "{gib} GiB picked {u}, which does not fit"
            );
            last = u;
        }
        assert_eq!(last, 2048);
    }

    #[test]
    fn default_budget_is_four_fifths_of_the_lower_limit() {
        assert_eq!(default_budget_bytes(10 << 30, None), 8 << 30);
        assert_eq!(default_budget_bytes(10 << 30, Some(5 << 30)), 4 << 30);
    }

    #[test]
    fn parallel_sequences_multiply_recurrent_state_not_kv() {
        let mut index = qwen3_30b();
        index.recurrent_state_bytes = 10 * MIB;
        let one = kv_bytes(&index, 4096, 1);
        let four = kv_bytes(&index, 4096, 4);
        assert_eq!(four - one, 30 * MIB);
    }
}
