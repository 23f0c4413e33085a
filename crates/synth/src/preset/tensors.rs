//! The tensors of a preset: every architecture's token mixers, FFNs and experts, with the
//! quant type of each.

use super::{Layout, Preset};
use epm_gguf::writer::TensorSpec;
use epm_gguf::GgmlType;

impl Preset {
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
                Layout::GatedDeltaNet { .. } | Layout::SinkSwa { .. } => {
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
            Layout::SinkSwa { .. } => {
                let q = self.n_head * self.head_dim;
                let kv = self.n_head_kv * self.head_dim;
                let b = |s: &str| format!("blk.{l}.{s}.bias");
                for (name, width) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                    t.push(TensorSpec::new(n(name), &[e, width], at));
                    t.push(TensorSpec::new(b(name), &[width], f32));
                }
                t.push(TensorSpec::new(n("attn_output"), &[q, e], at));
                t.push(TensorSpec::new(b("attn_output"), &[e], f32));
                t.push(TensorSpec::new(n("attn_sinks"), &[self.n_head], f32));
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
        let biased = matches!(self.layout, Layout::SinkSwa { .. });
        let bias = |s: &str| format!("blk.{l}.{s}.bias");
        if biased {
            t.push(TensorSpec::new(bias("ffn_gate_inp"), &[x], GgmlType::F32));
        }
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
        if biased {
            for (name, width) in [
                ("ffn_gate_exps", f),
                ("ffn_up_exps", f),
                ("ffn_down_exps", e),
            ] {
                t.push(TensorSpec::new(bias(name), &[width, x], GgmlType::F32));
            }
        }
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
}
