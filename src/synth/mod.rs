//! The synthetic-model factory: presets with real architectures, a real BPE tokenizer and
//! real quant types, written with the GGUF writer. Weights are random but built so greedy
//! decoding stays diverse: the residual stream carries the current token's embedding and
//! the output head maps it through one long random cycle over the vocabulary, so each
//! step moves to a new token and routing changes from token to token.

pub mod quant;
pub mod tokenizer;

use std::io::Write;
use std::path::Path;

use crate::gguf::writer::{GgufWriter, TensorSpec};
use crate::gguf::{GgmlType, GgufError, Value};
use quant::{name_seed, Rng};

/// The shape of a synthetic model. Model-specific numbers live only in [`Preset::named`].
#[derive(Debug, Clone)]
pub struct Preset {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    /// 0 for a dense model.
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub expert_ff: u64,
    /// Feed-forward width of a dense model's FFN.
    pub dense_ff: u64,
    pub n_vocab: usize,
    pub context_length: u32,
    pub expert_type: GgmlType,
    /// `ffn_down_exps` type per layer.
    pub down_type: fn(u32) -> GgmlType,
    pub attn_type: GgmlType,
}

pub const PRESETS: [&str; 3] = ["tiny", "tiny-dense", "demo"];

impl Preset {
    pub fn named(name: &str) -> Option<Preset> {
        let tiny = Preset {
            name: "tiny",
            arch: "qwen3moe",
            n_layer: 4,
            n_embd: 512,
            n_head: 8,
            n_head_kv: 2,
            head_dim: 64,
            n_expert: 32,
            n_expert_used: 4,
            expert_ff: 512,
            dense_ff: 0,
            n_vocab: 1024,
            context_length: 4096,
            expert_type: GgmlType::Q4_K,
            down_type: |l| {
                if l % 2 == 0 {
                    GgmlType::Q6_K
                } else {
                    GgmlType::Q4_K
                }
            },
            attn_type: GgmlType::Q8_0,
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
                down_type: |l| {
                    if !(2..6).contains(&l) {
                        GgmlType::Q6_K
                    } else {
                        GgmlType::Q4_K
                    }
                },
                ..tiny
            },
            _ => return None,
        })
    }

    fn is_moe(&self) -> bool {
        self.n_expert > 0
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (e, v) = (self.n_embd, self.n_vocab as u64);
        let q = self.n_head * self.head_dim;
        let kv = self.n_head_kv * self.head_dim;
        let mut t = vec![
            TensorSpec::new("token_embd.weight", &[e, v], GgmlType::Q8_0),
            TensorSpec::new("output_norm.weight", &[e], GgmlType::F32),
            TensorSpec::new("output.weight", &[e, v], GgmlType::Q8_0),
        ];
        for l in 0..self.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            t.push(TensorSpec::new(n("attn_norm"), &[e], GgmlType::F32));
            t.push(TensorSpec::new(n("attn_q"), &[e, q], self.attn_type));
            t.push(TensorSpec::new(n("attn_k"), &[e, kv], self.attn_type));
            t.push(TensorSpec::new(n("attn_v"), &[e, kv], self.attn_type));
            t.push(TensorSpec::new(n("attn_output"), &[q, e], self.attn_type));
            t.push(TensorSpec::new(
                n("attn_q_norm"),
                &[self.head_dim],
                GgmlType::F32,
            ));
            t.push(TensorSpec::new(
                n("attn_k_norm"),
                &[self.head_dim],
                GgmlType::F32,
            ));
            t.push(TensorSpec::new(n("ffn_norm"), &[e], GgmlType::F32));
            if self.is_moe() {
                let (x, f) = (u64::from(self.n_expert), self.expert_ff);
                t.push(TensorSpec::new(n("ffn_gate_inp"), &[e, x], GgmlType::F32));
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
                t.push(TensorSpec::new(
                    n("ffn_down_exps"),
                    &[f, e, x],
                    (self.down_type)(l),
                ));
            } else {
                let f = self.dense_ff;
                t.push(TensorSpec::new(n("ffn_gate"), &[e, f], self.expert_type));
                t.push(TensorSpec::new(n("ffn_up"), &[e, f], self.expert_type));
                t.push(TensorSpec::new(n("ffn_down"), &[f, e], (self.down_type)(l)));
            }
        }
        t
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
            (
                k("attention.head_count_kv"),
                Value::U32(self.n_head_kv as u32),
            ),
            (k("attention.key_length"), Value::U32(self.head_dim as u32)),
            (
                k("attention.value_length"),
                Value::U32(self.head_dim as u32),
            ),
            (k("rope.freq_base"), Value::F32(1_000_000.0)),
            (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        ];
        if self.is_moe() {
            m.push((
                k("feed_forward_length"),
                Value::U32((self.expert_ff * u64::from(self.n_expert_used)) as u32),
            ));
            m.push((k("expert_count"), Value::U32(self.n_expert)));
            m.push((k("expert_used_count"), Value::U32(self.n_expert_used)));
            m.push((
                k("expert_feed_forward_length"),
                Value::U32(self.expert_ff as u32),
            ));
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
                Value::String(tokenizer::CHATML_TEMPLATE.into()),
            ),
        ]);
        m
    }
}

/// Generates tensor data. Per-tensor seeds come from the tensor name, so data does not
/// depend on write order.
struct Weights<'a> {
    preset: &'a Preset,
    seed: u64,
    /// `next[t]`: the token that follows `t` on the long cycle (normal tokens only).
    prev_of: Vec<Option<u32>>,
}

impl Weights<'_> {
    fn embedding_row(&self, token: u32) -> Vec<f32> {
        let mut rng = Rng::new(name_seed(self.seed, "token_embd") ^ (u64::from(token) << 20));
        (0..self.preset.n_embd).map(|_| rng.uniform(1.0)).collect()
    }

    fn fill(&self, spec: &TensorSpec, out: &mut dyn Write) -> std::io::Result<()> {
        let p = self.preset;
        let mut rng = Rng::new(name_seed(self.seed, &spec.name));
        let row_len = spec.dims[0];
        let n_rows: u64 = spec.dims[1..].iter().product();
        let suffix = spec.name.rsplit_once('.').map_or("", |(h, _)| h);
        let kind = suffix.rsplit('.').next().unwrap_or("");
        let mut buf = Vec::with_capacity(1 << 22);
        let flush = |buf: &mut Vec<u8>, out: &mut dyn Write| -> std::io::Result<()> {
            out.write_all(buf)?;
            buf.clear();
            Ok(())
        };
        match kind {
            "token_embd" => {
                for t in 0..n_rows as u32 {
                    quant::quantize_q8_0(&self.embedding_row(t), &mut buf);
                    if buf.len() > 1 << 21 {
                        flush(&mut buf, out)?;
                    }
                }
            }
            "output" => {
                // Row v scores how well the hidden state matches the embedding of v's
                // predecessor on the cycle; the peak logit is about 20.
                let alpha = 20.0 / p.n_embd as f32;
                for v in 0..n_rows as usize {
                    let row: Vec<f32> = match self.prev_of[v] {
                        Some(prev) => self.embedding_row(prev).iter().map(|x| x * alpha).collect(),
                        None => (0..row_len).map(|_| rng.uniform(0.1 * alpha)).collect(),
                    };
                    quant::quantize_q8_0(&row, &mut buf);
                    if buf.len() > 1 << 21 {
                        flush(&mut buf, out)?;
                    }
                }
            }
            "output_norm" | "attn_norm" | "ffn_norm" | "attn_q_norm" | "attn_k_norm" => {
                quant::f32_row(&vec![1.0; (row_len * n_rows) as usize], &mut buf);
            }
            _ => {
                let inv = 1.0 / (row_len as f32).sqrt();
                let std = match kind {
                    "ffn_gate_inp" => 2.0 * inv,
                    // Small writes back into the residual keep the token's embedding dominant.
                    "attn_output" => 0.2 * inv,
                    "ffn_down_exps" | "ffn_down" => 0.33 * inv,
                    _ => inv,
                };
                // Stream in slabs of rows so memory stays small for big tensors.
                let slab = ((4 << 20) / spec.ggml_type.row_bytes(row_len).unwrap_or(1)).max(1);
                let mut done = 0;
                while done < n_rows {
                    let k = slab.min(n_rows - done);
                    quant::random_rows(spec.ggml_type, row_len, k, std, &mut rng, &mut buf);
                    flush(&mut buf, out)?;
                    done += k;
                }
            }
        }
        flush(&mut buf, out)
    }
}

/// Write a synthetic model for `preset` to `path` (atomically). `progress(done, total)`
/// reports bytes. Returns the file size.
pub fn write_model(
    preset: &Preset,
    path: &Path,
    seed: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<u64, GgufError> {
    let tok = tokenizer::build(preset.n_vocab, 400);
    let mut w = GgufWriter::new();
    for (k, v) in preset.metadata(&tok) {
        w.kv(k, v);
    }
    for t in preset.tensors() {
        w.tensor(t);
    }
    // One long cycle through the normal tokens, in a seeded random order.
    let mut order = tok.normal_ids.clone();
    let mut rng = Rng::new(seed ^ 0xC7C1E);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut prev_of = vec![None; preset.n_vocab];
    for i in 0..order.len() {
        let next = order[(i + 1) % order.len()];
        prev_of[next as usize] = Some(order[i]);
    }
    let weights = Weights {
        preset,
        seed,
        prev_of,
    };
    let total = w.file_size();
    w.write_atomic(
        path,
        |_, spec, out| weights.fill(spec, out),
        |done| progress(done, total),
    )
}
