//! The preset table: the shapes and quant mixes of every synthetic model. Model-specific
//! numbers live here and nowhere else.

use super::{Layout, Preset};
use crate::tokenizer::ChatFormat;
use epm_core::model::GatingFunc;
use epm_gguf::GgmlType;

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

/// Every preset, in the order `synth --help` lists them: the one place their numbers live.
pub fn table() -> Vec<Preset> {
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
        chat: ChatFormat::ChatMl,
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
    // gpt-oss-20b as ggml-org ships it (12.8 GiB): 24 layers, sliding-window attention (128
    // tokens) in every other one, 64 query heads of 64 over 8 KV heads with per-head sinks,
    // 32 experts (4 used) of 2,880 in MXFP4 with biases, a router bias, BF16 elsewhere,
    // o200k's 201,088-token vocabulary and the harmony chat format.
    let gpt_oss_20b = Preset {
        name: "gpt-oss-20b",
        arch: "gpt-oss",
        layout: Layout::SinkSwa {
            sliding_window: 128,
            rope_freq_base: 150_000.0,
            yarn_factor: 32.0,
            yarn_original_context: 4096,
        },
        n_layer: 24,
        n_embd: 2880,
        n_head: 64,
        n_head_kv: 8,
        head_dim: 64,
        n_expert: 32,
        n_expert_used: 4,
        expert_ff: 2880,
        n_vocab: 201_088,
        context_length: 131_072,
        expert_type: GgmlType::MXFP4,
        down_type: |_, _| GgmlType::MXFP4,
        attn_type: GgmlType::BF16,
        embd_type: GgmlType::BF16,
        qk_norm: false,
        chat: ChatFormat::Harmony,
        ..tiny.clone()
    };
    // gpt-oss-120b: the same layers, 36 of them, with 128 experts; shipped in three shards.
    let gpt_oss_120b = Preset {
        name: "gpt-oss-120b",
        n_layer: 36,
        n_expert: 128,
        shards: 3,
        ..gpt_oss_20b.clone()
    };
    // The gpt-oss -minis keep a sliding window shorter than a test's generation.
    let gpt_oss_mini = |name, n_expert, full: &Preset| Preset {
        name,
        layout: Layout::SinkSwa {
            sliding_window: 32,
            rope_freq_base: 150_000.0,
            yarn_factor: 32.0,
            yarn_original_context: 128,
        },
        n_layer: 8,
        n_embd: 512,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 64,
        n_expert,
        expert_ff: 512,
        n_vocab: 2048,
        context_length: 4096,
        shards: 1,
        ..full.clone()
    };
    vec![
        tiny.clone(),
        Preset {
            name: "tiny-dense",
            arch: "qwen3",
            n_expert: 0,
            n_expert_used: 0,
            expert_ff: 0,
            dense_ff: 1024,
            ..tiny.clone()
        },
        // `tiny`, written as two shards by default.
        Preset {
            name: "tiny-split",
            shards: 2,
            ..tiny.clone()
        },
        Preset {
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
            ..tiny.clone()
        },
        qwen3_30b.clone(),
        // Each -mini keeps its preset's architecture, quant mix and layouts, scaled down
        // to tens of MB for tests.
        Preset {
            name: "qwen3-30b-a3b-mini",
            n_layer: 8,
            n_embd: 512,
            n_head: 8,
            n_head_kv: 2,
            head_dim: 64,
            n_expert: 32,
            expert_ff: 256,
            n_vocab: 2048,
            ..qwen3_30b.clone()
        },
        smallthinker.clone(),
        Preset {
            name: "smallthinker-4b-mini",
            n_layer: 8,
            n_embd: 512,
            n_head: 4,
            n_head_kv: 2,
            expert_ff: 512,
            n_expert: 16,
            n_vocab: 2048,
            ..smallthinker.clone()
        },
        qwen36.clone(),
        qwen35moe_mini("qwen3.6-35b-a3b-mini", qwen36.clone()),
        minicpm.clone(),
        qwen35moe_mini("minicpm-v4.7-35b-a3b-mini", minicpm.clone()),
        ling.clone(),
        Preset {
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
            ..ling.clone()
        },
        gpt_oss_20b.clone(),
        gpt_oss_mini("gpt-oss-20b-mini", 32, &gpt_oss_20b),
        gpt_oss_120b.clone(),
        gpt_oss_mini("gpt-oss-120b-mini", 64, &gpt_oss_120b),
    ]
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
