//! Synthetic model presets: the shapes, quant mix, tensor list and GGUF metadata of each
//! architecture we write. Model-specific numbers live only in [`Preset::named`]; the rest
//! derives everything from the preset's fields.

use super::tokenizer;
use epm_gguf::writer::TensorSpec;
use epm_gguf::{GatingFunc, GgmlType, Value};

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
    /// Files the model is written as by default (1, or 2 for presets shipped in shards).
    pub shards: u32,
}

pub const PRESETS: [&str; 14] = [
    "tiny",
    "tiny-dense",
    "tiny-split",
    "demo",
    "qwen3-30b-a3b",
    "qwen3-30b-a3b-mini",
    "smallthinker-4b",
    "smallthinker-4b-mini",
    "qwen3.6-35b-a3b",
    "qwen3.6-35b-a3b-mini",
    "minicpm-v4.7-35b-a3b",
    "minicpm-v4.7-35b-a3b-mini",
    "ling-3.0-flash",
    "ling-3.0-flash-mini",
];

/// llama.cpp's Q4_K_M rule for `ffn_down` (`use_more_bits`): Q6_K in the first and last
/// eighth of the layers and every third layer between, Q4_K elsewhere.
pub fn q4_k_m_down(l: u32, n: u32) -> GgmlType {
    if l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2 {
        GgmlType::Q6_K
    } else {
        GgmlType::Q4_K
    }
}

/// Qwen3.6-35B-A3B's mix: Q5_K down everywhere but the first and the last two layers (Q6_K).
fn q5_k_down_q6_k_ends(l: u32, n: u32) -> GgmlType {
    if l == 0 || l + 2 >= n {
        GgmlType::Q6_K
    } else {
        GgmlType::Q5_K
    }
}

/// MiniCPM-V-4.7's mix: Q6_K down in half of the layers (the even ones), Q4_K in the rest.
fn q6_k_down_even(l: u32, _n: u32) -> GgmlType {
    if l % 2 == 0 {
        GgmlType::Q6_K
    } else {
        GgmlType::Q4_K
    }
}

/// Ling-3.0-flash's mix: Q4_K down everywhere but one layer, the last (Q6_K).
fn q4_k_down_last_q6_k(l: u32, n: u32) -> GgmlType {
    if l + 1 == n {
        GgmlType::Q6_K
    } else {
        GgmlType::Q4_K
    }
}

impl Preset {
    pub fn named(name: &str) -> Option<Preset> {
        let tiny = Preset {
            name: "tiny",
            arch: "qwen3moe",
            layout: Layout::Plain,
            n_layer: 4,
            n_embd: 512,
            n_head: 8,
            n_head_kv: 2,
            head_dim: 64,
            n_expert: 32,
            n_expert_used: 4,
            expert_groups: 0,
            expert_groups_used: 0,
            expert_ff: 512,
            shexp_ff: 0,
            merged_gate_up: false,
            dense_lead: 0,
            dense_ff: 0,
            n_vocab: 1024,
            context_length: 4096,
            expert_type: GgmlType::Q4_K,
            down_type: |l, _| {
                if l % 2 == 0 {
                    GgmlType::Q6_K
                } else {
                    GgmlType::Q4_K
                }
            },
            attn_type: GgmlType::Q8_0,
            embd_type: GgmlType::Q8_0,
            qk_norm: true,
            gating_func: None,
            routing_skew: 0.0,
            routing_locality: 0.0,
            topic_span: 32,
            shards: 1,
        };
        let qwen3_30b = Preset {
            name: "qwen3-30b-a3b",
            n_layer: 48,
            n_embd: 2048,
            n_head: 32,
            n_head_kv: 4,
            head_dim: 128,
            n_expert: 128,
            n_expert_used: 8,
            expert_ff: 768,
            n_vocab: 151_936,
            context_length: 40_960,
            down_type: q4_k_m_down,
            attn_type: GgmlType::Q4_K,
            ..tiny.clone()
        };
        // SmallThinker-4B-A0.6B Q4_K_M shapes: 32 layers, 32 experts (4 used) of 768, ReLU
        // experts, sigmoid router, no Q/K norms.
        let smallthinker = Preset {
            name: "smallthinker-4b",
            arch: "smallthinker",
            n_layer: 32,
            n_embd: 1536,
            n_head: 12,
            n_head_kv: 2,
            head_dim: 128,
            n_expert: 32,
            n_expert_used: 4,
            expert_ff: 768,
            n_vocab: 151_936,
            context_length: 32_768,
            down_type: q4_k_m_down,
            attn_type: GgmlType::Q4_K,
            embd_type: GgmlType::Q6_K,
            qk_norm: false,
            gating_func: Some(GatingFunc::Sigmoid),
            ..tiny.clone()
        };
        // Qwen3.6-35B-A3B Q4_K_M shapes: 40 layers (full attention in every 4th, gated
        // delta-net in the rest), 256 experts (8 used) of 512, a gated shared expert of 512,
        // 16 query heads of 256 over 2 KV heads, vocab 248,320.
        let qwen36 = Preset {
            name: "qwen3.6-35b-a3b",
            arch: "qwen35moe",
            layout: Layout::GatedDeltaNet {
                full_attention_interval: 4,
                conv_kernel: 4,
                state_size: 128,
                k_heads: 16,
                v_heads: 32,
                rope_dim: 64,
                rope_sections: [11, 11, 10, 0],
            },
            n_layer: 40,
            n_embd: 2048,
            n_head: 16,
            n_head_kv: 2,
            head_dim: 256,
            n_expert: 256,
            n_expert_used: 8,
            expert_ff: 512,
            shexp_ff: 512,
            n_vocab: 248_320,
            context_length: 262_144,
            down_type: q5_k_down_q6_k_ends,
            attn_type: GgmlType::Q8_0,
            embd_type: GgmlType::Q6_K,
            ..tiny.clone()
        };
        // MiniCPM-V-4.7-35B-A3B's language model: the same qwen35moe shapes with vocab 248,144,
        // its own down mix, and gate/up stored merged (`ffn_gate_up_exps`), the other layout
        // llama.cpp accepts for this architecture.
        let minicpm = Preset {
            name: "minicpm-v4.7-35b-a3b",
            n_vocab: 248_144,
            down_type: q6_k_down_even,
            merged_gate_up: true,
            attn_type: GgmlType::Q5_K,
            ..qwen36.clone()
        };
        // Ling-3.0-flash Q4_K_M (bailingmoe3): 2 dense + 41 MoE layers, KDA linear attention
        // with MLA in every 4th layer, 512 experts (8 used) of 512 in 8 groups of which a token
        // uses 4, one shared expert, sigmoid routing; shipped in two shards. Widths are
        // estimates that reproduce the real expert bytes (see prior art §2). The MTP layer is
        // not written (llama.cpp skips it unless asked for MTP).
        let ling = Preset {
            name: "ling-3.0-flash",
            arch: "bailingmoe3",
            layout: Layout::KimiDeltaMla {
                mla_interval: 4,
                conv_kernel: 4,
                kda_head_dim: 128,
                kv_lora_rank: 512,
                rope_dim: 64,
                nope_dim: 128,
                v_head_dim: 128,
                gate_lower_bound: -5.0,
            },
            n_layer: 43,
            n_embd: 4096,
            n_head: 32,
            n_head_kv: 1,
            head_dim: 128,
            n_expert: 512,
            n_expert_used: 8,
            expert_groups: 8,
            expert_groups_used: 4,
            expert_ff: 512,
            shexp_ff: 512,
            dense_lead: 2,
            dense_ff: 9216,
            n_vocab: 157_184,
            context_length: 262_144,
            down_type: q4_k_down_last_q6_k,
            attn_type: GgmlType::Q4_K,
            embd_type: GgmlType::Q6_K,
            qk_norm: false,
            gating_func: Some(GatingFunc::Sigmoid),
            shards: 2,
            ..tiny.clone()
        };
        Some(match name {
            "tiny" => tiny,
            "tiny-dense" => Preset {
                name: "tiny-dense",
                arch: "qwen3",
                n_expert: 0,
                n_expert_used: 0,
                expert_ff: 0,
                dense_ff: 1024,
                ..tiny
            },
            // `tiny`, written as two shards by default.
            "tiny-split" => Preset {
                name: "tiny-split",
                shards: 2,
                ..tiny
            },
            "demo" => Preset {
                name: "demo",
                n_layer: 8,
                n_embd: 768,
                n_head: 12,
                n_head_kv: 4,
                n_expert: 64,
                n_expert_used: 8,
                expert_ff: 512,
                n_vocab: 4096,
                down_type: q4_k_m_down,
                ..tiny
            },
            "qwen3-30b-a3b" => qwen3_30b,
            // Each -mini keeps its preset's architecture, quant mix and layouts, scaled down
            // to tens of MB for tests.
            "qwen3-30b-a3b-mini" => Preset {
                name: "qwen3-30b-a3b-mini",
                n_layer: 8,
                n_embd: 512,
                n_head: 8,
                n_head_kv: 2,
                head_dim: 64,
                n_expert: 32,
                expert_ff: 256,
                n_vocab: 2048,
                ..qwen3_30b
            },
            "smallthinker-4b" => smallthinker,
            "smallthinker-4b-mini" => Preset {
                name: "smallthinker-4b-mini",
                n_layer: 8,
                n_embd: 512,
                n_head: 4,
                n_head_kv: 2,
                expert_ff: 512,
                n_expert: 16,
                n_vocab: 2048,
                ..smallthinker
            },
            "qwen3.6-35b-a3b" => qwen36,
            "qwen3.6-35b-a3b-mini" => qwen35moe_mini("qwen3.6-35b-a3b-mini", qwen36),
            "minicpm-v4.7-35b-a3b" => minicpm,
            "minicpm-v4.7-35b-a3b-mini" => qwen35moe_mini("minicpm-v4.7-35b-a3b-mini", minicpm),
            "ling-3.0-flash" => ling,
            "ling-3.0-flash-mini" => Preset {
                name: "ling-3.0-flash-mini",
                layout: Layout::KimiDeltaMla {
                    mla_interval: 4,
                    conv_kernel: 4,
                    kda_head_dim: 128,
                    kv_lora_rank: 256,
                    rope_dim: 64,
                    nope_dim: 64,
                    v_head_dim: 64,
                    gate_lower_bound: -5.0,
                },
                n_layer: 8,
                n_embd: 512,
                n_head: 4,
                n_expert: 64,
                n_expert_used: 4,
                expert_groups: 8,
                expert_groups_used: 4,
                expert_ff: 256,
                shexp_ff: 256,
                dense_lead: 2,
                dense_ff: 1024,
                n_vocab: 2048,
                context_length: 4096,
                ..ling
            },
            _ => return None,
        })
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
            Layout::Plain => true,
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
            .filter(|t| epm_gguf::index::is_routed_expert_name(&t.name))
            .map(TensorSpec::n_bytes)
            .sum()
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (e, v) = (self.n_embd, self.n_vocab as u64);
        let mut t = vec![
            TensorSpec::new("token_embd.weight", &[e, v], self.embd_type),
            TensorSpec::new("output_norm.weight", &[e], GgmlType::F32),
            TensorSpec::new("output.weight", &[e, v], self.embd_type),
        ];
        for l in 0..self.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            t.push(TensorSpec::new(n("attn_norm"), &[e], GgmlType::F32));
            self.mixer_tensors(l, &mut t);
            match self.layout {
                Layout::GatedDeltaNet { .. } => {
                    t.push(TensorSpec::new(
                        n("post_attention_norm"),
                        &[e],
                        GgmlType::F32,
                    ));
                }
                _ => t.push(TensorSpec::new(n("ffn_norm"), &[e], GgmlType::F32)),
            }
            if self.is_moe_layer(l) {
                self.moe_tensors(l, &mut t);
            } else {
                let f = self.dense_ff;
                t.push(TensorSpec::new(n("ffn_gate"), &[e, f], self.expert_type));
                t.push(TensorSpec::new(n("ffn_up"), &[e, f], self.expert_type));
                t.push(TensorSpec::new(
                    n("ffn_down"),
                    &[f, e],
                    (self.down_type)(l, self.n_layer),
                ));
            }
        }
        t
    }

    /// Attention, or the layer's linear-attention mixer.
    fn mixer_tensors(&self, l: u32, t: &mut Vec<TensorSpec>) {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        let e = self.n_embd;
        let (at, f32) = (self.attn_type, GgmlType::F32);
        match self.layout {
            Layout::Plain => {
                let q = self.n_head * self.head_dim;
                let kv = self.n_head_kv * self.head_dim;
                t.push(TensorSpec::new(n("attn_q"), &[e, q], at));
                t.push(TensorSpec::new(n("attn_k"), &[e, kv], at));
                t.push(TensorSpec::new(n("attn_v"), &[e, kv], at));
                t.push(TensorSpec::new(n("attn_output"), &[q, e], at));
                if self.qk_norm {
                    let hd = [self.head_dim];
                    t.push(TensorSpec::new(n("attn_q_norm"), &hd, f32));
                    t.push(TensorSpec::new(n("attn_k_norm"), &hd, f32));
                }
            }
            Layout::GatedDeltaNet {
                conv_kernel,
                state_size,
                k_heads,
                v_heads,
                ..
            } => {
                if self.is_attention_layer(l) {
                    // The query projection also yields the output gate: twice the width.
                    let q = self.n_head * self.head_dim;
                    let kv = self.n_head_kv * self.head_dim;
                    t.push(TensorSpec::new(n("attn_q"), &[e, 2 * q], at));
                    t.push(TensorSpec::new(n("attn_k"), &[e, kv], at));
                    t.push(TensorSpec::new(n("attn_v"), &[e, kv], at));
                    t.push(TensorSpec::new(n("attn_output"), &[q, e], at));
                    let hd = [self.head_dim];
                    t.push(TensorSpec::new(n("attn_q_norm"), &hd, f32));
                    t.push(TensorSpec::new(n("attn_k_norm"), &hd, f32));
                } else {
                    let key_dim = state_size * k_heads;
                    let value_dim = state_size * v_heads;
                    let conv_dim = 2 * key_dim + value_dim;
                    t.push(TensorSpec::new(n("attn_qkv"), &[e, conv_dim], at));
                    t.push(TensorSpec::new(n("attn_gate"), &[e, value_dim], at));
                    t.push(TensorSpec::new(
                        n("ssm_conv1d"),
                        &[conv_kernel, conv_dim],
                        f32,
                    ));
                    t.push(TensorSpec::new(
                        format!("blk.{l}.ssm_dt.bias"),
                        &[v_heads],
                        f32,
                    ));
                    t.push(TensorSpec::new(format!("blk.{l}.ssm_a"), &[v_heads], f32));
                    t.push(TensorSpec::new(n("ssm_beta"), &[e, v_heads], f32));
                    t.push(TensorSpec::new(n("ssm_alpha"), &[e, v_heads], f32));
                    t.push(TensorSpec::new(n("ssm_norm"), &[state_size], f32));
                    t.push(TensorSpec::new(n("ssm_out"), &[value_dim, e], at));
                }
            }
            Layout::KimiDeltaMla {
                conv_kernel,
                kda_head_dim,
                kv_lora_rank,
                rope_dim,
                nope_dim,
                v_head_dim,
                ..
            } => {
                let h = self.n_head;
                if self.is_attention_layer(l) {
                    let qk = nope_dim + rope_dim;
                    t.push(TensorSpec::new(n("attn_q"), &[e, h * qk], at));
                    t.push(TensorSpec::new(
                        n("attn_kv_a_mqa"),
                        &[e, kv_lora_rank + rope_dim],
                        at,
                    ));
                    t.push(TensorSpec::new(n("attn_kv_a_norm"), &[kv_lora_rank], f32));
                    // Rows of `nope_dim` are too short for K-quants; llama.cpp's own quantizer
                    // falls back to Q8_0 for them too.
                    let q8 = GgmlType::Q8_0;
                    t.push(TensorSpec::new(
                        n("attn_k_b"),
                        &[nope_dim, kv_lora_rank, h],
                        q8,
                    ));
                    t.push(TensorSpec::new(
                        n("attn_v_b"),
                        &[kv_lora_rank, v_head_dim, h],
                        q8,
                    ));
                    t.push(TensorSpec::new(n("attn_gate"), &[e, h], f32));
                    t.push(TensorSpec::new(n("attn_output"), &[h * v_head_dim, e], at));
                } else {
                    let d_inner = kda_head_dim * h;
                    for c in ["q", "k", "v"] {
                        t.push(TensorSpec::new(
                            n(&format!("ssm_conv1d_{c}")),
                            &[conv_kernel, 1, d_inner],
                            f32,
                        ));
                    }
                    t.push(TensorSpec::new(n("attn_q"), &[e, d_inner], at));
                    t.push(TensorSpec::new(n("attn_k"), &[e, d_inner], at));
                    t.push(TensorSpec::new(n("attn_v"), &[e, d_inner], at));
                    t.push(TensorSpec::new(n("ssm_f_a"), &[e, d_inner], at));
                    t.push(TensorSpec::new(n("ssm_beta"), &[e, h], f32));
                    t.push(TensorSpec::new(format!("blk.{l}.ssm_a"), &[1, h], f32));
                    t.push(TensorSpec::new(
                        format!("blk.{l}.ssm_dt.bias"),
                        &[d_inner],
                        f32,
                    ));
                    t.push(TensorSpec::new(n("ssm_g_a"), &[e, d_inner], at));
                    t.push(TensorSpec::new(n("ssm_norm"), &[kda_head_dim], f32));
                    t.push(TensorSpec::new(n("attn_output"), &[d_inner, e], at));
                }
            }
        }
    }

    /// Router, routed experts and (where the architecture has them) shared experts.
    fn moe_tensors(&self, l: u32, t: &mut Vec<TensorSpec>) {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        let (e, x, f) = (self.n_embd, u64::from(self.n_expert), self.expert_ff);
        t.push(TensorSpec::new(n("ffn_gate_inp"), &[e, x], GgmlType::F32));
        if matches!(self.layout, Layout::KimiDeltaMla { .. }) {
            t.push(TensorSpec::new(
                format!("blk.{l}.exp_probs_b.bias"),
                &[x],
                GgmlType::F32,
            ));
        }
        if self.merged_gate_up {
            t.push(TensorSpec::new(
                n("ffn_gate_up_exps"),
                &[e, 2 * f, x],
                self.expert_type,
            ));
        } else {
            t.push(TensorSpec::new(
                n("ffn_gate_exps"),
                &[e, f, x],
                self.expert_type,
            ));
            t.push(TensorSpec::new(
                n("ffn_up_exps"),
                &[e, f, x],
                self.expert_type,
            ));
        }
        t.push(TensorSpec::new(
            n("ffn_down_exps"),
            &[f, e, x],
            (self.down_type)(l, self.n_layer),
        ));
        if self.shexp_ff > 0 {
            let s = self.shexp_ff;
            if matches!(self.layout, Layout::GatedDeltaNet { .. }) {
                t.push(TensorSpec::new(
                    n("ffn_gate_inp_shexp"),
                    &[e],
                    GgmlType::F32,
                ));
            }
            t.push(TensorSpec::new(
                n("ffn_gate_shexp"),
                &[e, s],
                self.attn_type,
            ));
            t.push(TensorSpec::new(n("ffn_up_shexp"), &[e, s], self.attn_type));
            t.push(TensorSpec::new(
                n("ffn_down_shexp"),
                &[s, e],
                self.attn_type,
            ));
        }
    }

    pub fn metadata(&self, tok: &tokenizer::Tokenizer) -> Vec<(String, Value)> {
        let a = self.arch;
        let k = |s: &str| format!("{a}.{s}");
        let mut m = vec![
            ("general.architecture".to_string(), Value::String(a.into())),
            (
                "general.name".into(),
                Value::String(format!("epm-synthetic-{}", self.name)),
            ),
            (
                "general.description".into(),
                Value::String(
                    "synthetic weights generated by epm-run synth; not a trained model".into(),
                ),
            ),
            (k("context_length"), Value::U32(self.context_length)),
            (k("embedding_length"), Value::U32(self.n_embd as u32)),
            (k("block_count"), Value::U32(self.n_layer)),
            (k("attention.head_count"), Value::U32(self.n_head as u32)),
            (k("rope.freq_base"), Value::F32(1_000_000.0)),
            (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        ];
        match self.layout {
            Layout::Plain => m.extend([
                (
                    k("attention.head_count_kv"),
                    Value::U32(self.n_head_kv as u32),
                ),
                (k("attention.key_length"), Value::U32(self.head_dim as u32)),
                (
                    k("attention.value_length"),
                    Value::U32(self.head_dim as u32),
                ),
            ]),
            Layout::GatedDeltaNet {
                full_attention_interval,
                conv_kernel,
                state_size,
                k_heads,
                v_heads,
                rope_dim,
                rope_sections,
            } => m.extend([
                (
                    k("attention.head_count_kv"),
                    Value::U32(self.n_head_kv as u32),
                ),
                (k("attention.key_length"), Value::U32(self.head_dim as u32)),
                (
                    k("attention.value_length"),
                    Value::U32(self.head_dim as u32),
                ),
                (k("rope.dimension_count"), Value::U32(rope_dim as u32)),
                (
                    k("rope.dimension_sections"),
                    Value::i32s(rope_sections.iter().copied()),
                ),
                (
                    k("full_attention_interval"),
                    Value::U32(full_attention_interval),
                ),
                // Written as well as the interval: real GGUFs of this architecture carry
                // this BOOL array, which header parsers have misread before.
                (
                    k("attention.recurrent_layers"),
                    Value::bools((0..self.n_layer).map(|l| !self.is_attention_layer(l))),
                ),
                (k("ssm.conv_kernel"), Value::U32(conv_kernel as u32)),
                (
                    k("ssm.inner_size"),
                    Value::U32((state_size * v_heads) as u32),
                ),
                (k("ssm.state_size"), Value::U32(state_size as u32)),
                (k("ssm.time_step_rank"), Value::U32(v_heads as u32)),
                (k("ssm.group_count"), Value::U32(k_heads as u32)),
            ]),
            Layout::KimiDeltaMla {
                conv_kernel,
                kda_head_dim,
                kv_lora_rank,
                rope_dim,
                nope_dim,
                v_head_dim,
                gate_lower_bound,
                ..
            } => m.extend([
                // 0 KV heads marks a KDA (recurrent) layer; MLA layers cache one latent head.
                (
                    k("attention.head_count_kv"),
                    Value::Array {
                        elem_type: 4,
                        items: (0..self.n_layer)
                            .map(|l| Value::U32(u32::from(self.is_attention_layer(l))))
                            .collect(),
                    },
                ),
                (
                    k("attention.key_length"),
                    Value::U32((kv_lora_rank + rope_dim) as u32),
                ),
                (k("attention.value_length"), Value::U32(kv_lora_rank as u32)),
                (
                    k("attention.key_length_mla"),
                    Value::U32((nope_dim + rope_dim) as u32),
                ),
                (
                    k("attention.value_length_mla"),
                    Value::U32(v_head_dim as u32),
                ),
                (k("attention.kv_lora_rank"), Value::U32(kv_lora_rank as u32)),
                (k("rope.dimension_count"), Value::U32(rope_dim as u32)),
                (k("ssm.conv_kernel"), Value::U32(conv_kernel as u32)),
                (k("kda.head_dim"), Value::U32(kda_head_dim as u32)),
                (k("kda.safe_gate"), Value::Bool(true)),
                (k("kda.gate_lower_bound"), Value::F32(gate_lower_bound)),
                (k("leading_dense_block_count"), Value::U32(self.dense_lead)),
                (k("expert_shared_count"), Value::U32(1)),
                (k("expert_weights_norm"), Value::Bool(true)),
                (k("expert_weights_scale"), Value::F32(1.0)),
            ]),
        }
        if self.is_moe() {
            let ff = if self.dense_lead > 0 {
                self.dense_ff
            } else {
                self.expert_ff * u64::from(self.n_expert_used)
            };
            m.push((k("feed_forward_length"), Value::U32(ff as u32)));
            m.push((k("expert_count"), Value::U32(self.n_expert)));
            m.push((k("expert_used_count"), Value::U32(self.n_expert_used)));
            m.push((
                k("expert_feed_forward_length"),
                Value::U32(self.expert_ff as u32),
            ));
            if self.shexp_ff > 0 {
                m.push((
                    k("expert_shared_feed_forward_length"),
                    Value::U32(self.shexp_ff as u32),
                ));
            }
            if self.expert_groups > 0 {
                m.push((k("expert_group_count"), Value::U32(self.expert_groups)));
                m.push((
                    k("expert_group_used_count"),
                    Value::U32(self.expert_groups_used),
                ));
            }
            if let Some(g) = self.gating_func {
                m.push((k("expert_gating_func"), Value::U32(g.to_metadata())));
            }
        } else {
            m.push((k("feed_forward_length"), Value::U32(self.dense_ff as u32)));
        }
        m.extend([
            (
                "tokenizer.ggml.model".to_string(),
                Value::String("gpt2".into()),
            ),
            ("tokenizer.ggml.pre".into(), Value::String("qwen2".into())),
            (
                "tokenizer.ggml.tokens".into(),
                Value::strings(tok.tokens.iter().cloned()),
            ),
            (
                "tokenizer.ggml.token_type".into(),
                Value::i32s(tok.types.iter().copied()),
            ),
            (
                "tokenizer.ggml.merges".into(),
                Value::strings(tok.merges.iter().cloned()),
            ),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(tok.bos_id)),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(tok.eos_id)),
            (
                "tokenizer.ggml.padding_token_id".into(),
                Value::U32(tok.bos_id),
            ),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            (
                "tokenizer.chat_template".into(),
                Value::String(tokenizer::CHAT_TEMPLATE.into()),
            ),
        ]);
        m
    }
}

/// A qwen35moe preset scaled down for tests: 8 layers (2 with full attention), 32 experts
/// of 256, narrow heads, a 2,048-token vocabulary. Keeps the head widths the kernels expect.
fn qwen35moe_mini(name: &'static str, full: Preset) -> Preset {
    Preset {
        name,
        layout: Layout::GatedDeltaNet {
            full_attention_interval: 4,
            conv_kernel: 4,
            state_size: 128,
            k_heads: 2,
            v_heads: 4,
            rope_dim: 64,
            rope_sections: [11, 11, 10, 0],
        },
        n_layer: 8,
        n_embd: 512,
        n_head: 4,
        n_head_kv: 2,
        n_expert: 32,
        n_expert_used: 4,
        expert_ff: 256,
        shexp_ff: 256,
        n_vocab: 2048,
        context_length: 4096,
        ..full
    }
}
