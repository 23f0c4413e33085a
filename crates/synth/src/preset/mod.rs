//! Synthetic model presets: what a preset is ([`Preset`], [`Layout`]) and its derived shape.
//! The presets themselves are in [`table`] (the only place with model-specific numbers),
//! their tensors in `tensors`, their GGUF metadata in `metadata`.

mod metadata;
pub mod table;
mod tensors;

use super::tokenizer;
use epm_core::model::GatingFunc;
use epm_gguf::writer::TensorSpec;
use epm_gguf::GgmlType;

/// How a layer's token mixer is built, beyond plain attention.
#[derive(Debug, Clone, PartialEq)]
pub enum Layout {
    /// Attention and an FFN in every layer (qwen3moe, smallthinker, qwen3).
    Plain,
    /// qwen35moe: gated delta-net (linear attention) layers, with full gated attention in
    /// every `full_attention_interval`-th layer, a post-attention norm, and gated shared experts.
    GatedDeltaNet {
        full_attention_interval: u32,
        conv_kernel: u64,
        /// Key and value head width (`ssm.state_size`).
        state_size: u64,
        /// Key heads (`ssm.group_count`).
        k_heads: u64,
        /// Value heads (`ssm.time_step_rank`).
        v_heads: u64,
        /// Rotated dimensions per attention head and their M-RoPE sections.
        rope_dim: u64,
        rope_sections: [i32; 4],
    },
    /// gpt-oss: attention with biases and per-head sinks, sliding-window attention in every
    /// other layer, YaRN-scaled RoPE; routed experts with biases and a router bias.
    SinkSwa {
        /// `attention.sliding_window`, in tokens.
        sliding_window: u32,
        rope_freq_base: f32,
        /// YaRN: the context is `yarn_factor` times the trained one.
        yarn_factor: f32,
        yarn_original_context: u32,
    },
    /// bailingmoe3: Kimi delta attention (KDA) layers, with multi-head latent attention (MLA)
    /// in every `mla_interval`-th layer; leading dense layers; shared experts.
    KimiDeltaMla {
        mla_interval: u32,
        conv_kernel: u64,
        kda_head_dim: u64,
        kv_lora_rank: u64,
        rope_dim: u64,
        nope_dim: u64,
        v_head_dim: u64,
        gate_lower_bound: f32,
    },
}

/// The shape of a synthetic model.
#[derive(Debug, Clone)]
pub struct Preset {
    pub name: &'static str,
    pub arch: &'static str,
    pub layout: Layout,
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    /// 0 for a dense model.
    pub n_expert: u32,
    pub n_expert_used: u32,
    /// Expert groups and how many a token may use (0: no groups).
    pub expert_groups: u32,
    pub expert_groups_used: u32,
    pub expert_ff: u64,
    /// Shared-expert width (0: no shared expert).
    pub shexp_ff: u64,
    /// Gate and up of the routed experts as one `ffn_gate_up_exps` tensor.
    pub merged_gate_up: bool,
    /// Leading layers with a dense FFN instead of experts.
    pub dense_lead: u32,
    /// Feed-forward width of dense FFNs (a dense model's, or the leading dense layers').
    pub dense_ff: u64,
    pub n_vocab: usize,
    pub context_length: u32,
    pub expert_type: GgmlType,
    /// `ffn_down_exps` type of layer `l` of `n`.
    pub down_type: fn(u32, u32) -> GgmlType,
    pub attn_type: GgmlType,
    /// Type of `token_embd` and `output` (Q8_0 or Q6_K).
    pub embd_type: GgmlType,
    /// Per-head RMS norms on Q and K (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// `<arch>.expert_gating_func`, where the architecture reads it.
    pub gating_func: Option<GatingFunc>,
    /// Zipf-like exponent of expert popularity (0: no bias); see `Weights::router_rows`.
    pub routing_skew: f64,
    /// Temporal locality of routing (0: none): the weight of a slowly drifting topic
    /// direction in every embedding; see `Weights::embedding_row`.
    pub routing_locality: f64,
    /// Tokens of generated text over which the topic drifts from one anchor to the next.
    pub topic_span: u32,
    /// Files the model is written as by default (1, or more for presets shipped in shards).
    pub shards: u32,
    /// The chat template and control tokens.
    pub chat: tokenizer::ChatFormat,
}

impl Preset {
    /// The preset called `name`.
    pub fn named(name: &str) -> Option<Preset> {
        table::table().into_iter().find(|p| p.name == name)
    }

    /// Every preset's name, in the table's order.
    pub fn names() -> Vec<&'static str> {
        table::table().iter().map(|p| p.name).collect()
    }

    /// The preset with `n` layers (its per-layer shapes and rules unchanged).
    pub fn with_layers(mut self, n: u32) -> Result<Preset, String> {
        if n == 0 {
            return Err("--layers must be at least 1".into());
        }
        if self.is_moe() && n <= self.dense_lead {
            return Err(format!(
                "--layers must exceed the {} leading dense layers of {}",
                self.dense_lead, self.name
            ));
        }
        self.n_layer = n;
        Ok(self)
    }

    /// The preset with `n` routed experts per layer.
    pub fn with_experts(mut self, n: u32) -> Result<Preset, String> {
        if !self.is_moe() {
            return Err(format!(
                "preset {} is dense: --experts does not apply",
                self.name
            ));
        }
        if n < self.n_expert_used {
            return Err(format!(
                "--experts must be at least the {} experts used per token",
                self.n_expert_used
            ));
        }
        if self.expert_groups > 0 {
            let per_group = n / self.expert_groups.max(1);
            if n % self.expert_groups != 0
                || per_group * self.expert_groups_used < self.n_expert_used
            {
                return Err(format!(
                    "--experts must be a multiple of the {} expert groups of {}, with at least {} \
                     experts in the {} groups a token may use",
                    self.expert_groups, self.name, self.n_expert_used, self.expert_groups_used
                ));
            }
        }
        self.n_expert = n;
        Ok(self)
    }

    pub fn is_moe(&self) -> bool {
        self.n_expert > 0
    }

    fn is_moe_layer(&self, l: u32) -> bool {
        self.is_moe() && l >= self.dense_lead
    }

    /// Whether layer `l` uses (full or latent) attention rather than a linear-attention mixer.
    pub fn is_attention_layer(&self, l: u32) -> bool {
        match self.layout {
            Layout::Plain | Layout::SinkSwa { .. } => true,
            Layout::GatedDeltaNet {
                full_attention_interval: i,
                ..
            }
            | Layout::KimiDeltaMla {
                mla_interval: i, ..
            } => (l + 1) % i == 0,
        }
    }

    /// Bytes of all routed-expert tensors.
    pub fn expert_bytes(&self) -> u64 {
        self.tensors()
            .iter()
            .filter(|t| {
                epm_core::model::is_routed_expert(&t.name, &t.dims, u64::from(self.n_expert))
            })
            .map(TensorSpec::n_bytes)
            .sum()
    }
}
