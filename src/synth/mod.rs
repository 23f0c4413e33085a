//! The synthetic-model factory: presets with real architectures, a real BPE tokenizer and
//! real quant types, written with the GGUF writer. Weights are random but built so greedy
//! decoding stays diverse: the residual stream carries the current token's embedding and
//! the output head maps it through one long random cycle over the vocabulary, so each
//! step moves to a new token and routing changes from token to token.

pub mod quant;
pub mod tokenizer;

use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// `ffn_down_exps` type of layer `l` of `n`.
    pub down_type: fn(u32, u32) -> GgmlType,
    pub attn_type: GgmlType,
    /// Type of `token_embd` and `output` (Q8_0 or Q6_K).
    pub embd_type: GgmlType,
    /// Per-head RMS norms on Q and K (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// `<arch>.expert_gating_func`, where the architecture reads it.
    pub gating_func: Option<u32>,
    /// Zipf-like exponent of expert popularity (0: no bias); see `Weights::router_rows`.
    pub routing_skew: f64,
    /// Files the model is written as by default (1, or 2 for presets shipped in shards).
    pub shards: u32,
}

pub const PRESETS: [&str; 8] = [
    "tiny",
    "tiny-dense",
    "demo",
    "qwen3-30b-a3b",
    "qwen3-30b-a3b-mini",
    "smallthinker-4b",
    "smallthinker-4b-mini",
    "tiny-split",
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
            gating_func: Some(2),
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
            // Qwen3-30B-A3B Q4_K_M shapes: 48 layers, 128 experts (8 used) of 768, vocab 151,936.
            "qwen3-30b-a3b" => qwen3_30b,
            // The same architecture and quant mix, scaled down to tens of MB for tests.
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
            // `tiny`, written as two shards by default (see `default_split_bytes`).
            "tiny-split" => Preset {
                name: "tiny-split",
                shards: 2,
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
            TensorSpec::new("token_embd.weight", &[e, v], self.embd_type),
            TensorSpec::new("output_norm.weight", &[e], GgmlType::F32),
            TensorSpec::new("output.weight", &[e, v], self.embd_type),
        ];
        for l in 0..self.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            t.push(TensorSpec::new(n("attn_norm"), &[e], GgmlType::F32));
            t.push(TensorSpec::new(n("attn_q"), &[e, q], self.attn_type));
            t.push(TensorSpec::new(n("attn_k"), &[e, kv], self.attn_type));
            t.push(TensorSpec::new(n("attn_v"), &[e, kv], self.attn_type));
            t.push(TensorSpec::new(n("attn_output"), &[q, e], self.attn_type));
            if self.qk_norm {
                let hd = [self.head_dim];
                t.push(TensorSpec::new(n("attn_q_norm"), &hd, GgmlType::F32));
                t.push(TensorSpec::new(n("attn_k_norm"), &hd, GgmlType::F32));
            }
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
                    (self.down_type)(l, self.n_layer),
                ));
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
            if let Some(g) = self.gating_func {
                m.push((k("expert_gating_func"), Value::U32(g)));
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
    /// `prev_of[v]`: the token that precedes `v` on the long cycle (normal tokens only).
    prev_of: Vec<Option<u32>>,
    /// A direction every embedding shares when routing is skewed (empty otherwise).
    common: Vec<f32>,
}

/// Weight of the shared direction in each embedding when routing is skewed.
const COMMON: f32 = 0.5;
/// Spread of the router logits' random part (their standard deviation).
const ROUTER_STD: f32 = 2.0;

fn quantize_row(ty: GgmlType, row: &[f32], out: &mut Vec<u8>) {
    match ty {
        GgmlType::Q6_K => quant::quantize_q6_k(row, out),
        _ => quant::quantize_q8_0(row, out),
    }
}

impl Weights<'_> {
    /// Token `t`'s embedding: random with unit spread, plus (when routing is skewed) the
    /// shared direction, which lets the router add a per-expert bias.
    fn embedding_row(&self, token: u32) -> Vec<f32> {
        let mut rng = Rng::new(name_seed(self.seed, "token_embd") ^ (u64::from(token) << 20));
        let z = (0..self.preset.n_embd).map(|_| rng.uniform(1.0));
        if self.common.is_empty() {
            return z.collect();
        }
        let b = (1.0 - COMMON * COMMON).sqrt();
        self.common
            .iter()
            .zip(z)
            .map(|(u, z)| COMMON * u + b * z)
            .collect()
    }

    /// Router rows: random, plus a bias along the shared direction that makes expert
    /// popularity fall off with a per-layer random rank as `rank^-skew` (roughly).
    fn router_rows(
        &self,
        name: &str,
        n_embd: u64,
        n_expert: u64,
        rng: &mut Rng,
        out: &mut Vec<u8>,
    ) {
        let inv = 1.0 / (n_embd as f32).sqrt();
        let mut rank: Vec<u64> = (0..n_expert).collect();
        let mut perm_rng = Rng::new(name_seed(self.seed ^ 0x5EED, name));
        for i in (1..rank.len()).rev() {
            rank.swap(i, perm_rng.below(i as u64 + 1) as usize);
        }
        for &r in rank.iter() {
            let bias = -(self.preset.routing_skew as f32) * ROUTER_STD * ((r + 1) as f32).ln();
            let along = if self.common.is_empty() {
                0.0
            } else {
                bias / (COMMON * n_embd as f32)
            };
            let row: Vec<f32> = (0..n_embd)
                .map(|i| {
                    rng.uniform(ROUTER_STD * inv)
                        + along * self.common.get(i as usize).copied().unwrap_or(0.0)
                })
                .collect();
            quant::f32_row(&row, out);
        }
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
                    quantize_row(spec.ggml_type, &self.embedding_row(t), &mut buf);
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
                    quantize_row(spec.ggml_type, &row, &mut buf);
                    if buf.len() > 1 << 21 {
                        flush(&mut buf, out)?;
                    }
                }
            }
            "ffn_gate_inp" => self.router_rows(&spec.name, row_len, n_rows, &mut rng, &mut buf),
            "output_norm" | "attn_norm" | "ffn_norm" | "attn_q_norm" | "attn_k_norm" => {
                quant::f32_row(&vec![1.0; (row_len * n_rows) as usize], &mut buf);
            }
            _ => {
                let inv = 1.0 / (row_len as f32).sqrt();
                let std = match kind {
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

/// Write a synthetic model for `preset` to `path`, atomically per file. With
/// `max_shard_bytes` (or a preset written in shards), the tensors are split across files named
/// `<stem>-0000k-of-0000N.gguf` next to `path`, as llama.cpp's `gguf-split` names them; the
/// first holds all metadata. `progress(done, total)` reports bytes. Returns the files written.
pub fn write_model(
    preset: &Preset,
    path: &Path,
    seed: u64,
    max_shard_bytes: Option<u64>,
    mut progress: impl FnMut(u64, u64),
) -> Result<Vec<PathBuf>, GgufError> {
    let tok = tokenizer::build(preset.n_vocab, 400);
    let tensors = preset.tensors();
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
    let common = if preset.routing_skew > 0.0 {
        let mut r = Rng::new(name_seed(seed, "common_direction"));
        (0..preset.n_embd).map(|_| r.uniform(1.0)).collect()
    } else {
        Vec::new()
    };
    let weights = Weights {
        preset,
        seed,
        prev_of,
        common,
    };

    // With a size limit, fill each shard greedily; for a preset shipped in N shards, cut at
    // the tensor boundaries nearest to equal parts.
    let data_bytes: u64 = tensors.iter().map(TensorSpec::n_bytes).sum();
    let mut groups: Vec<Vec<TensorSpec>> = vec![Vec::new()];
    let mut in_group = 0u64;
    let mut before_tensor = 0u64;
    let per_shard = data_bytes.div_ceil(u64::from(preset.shards.max(1)));
    for t in tensors {
        let n = t.n_bytes();
        let new_shard = match max_shard_bytes {
            Some(max) => in_group > 0 && in_group + n > max,
            None => before_tensor / per_shard >= groups.len() as u64,
        };
        if new_shard {
            groups.push(Vec::new());
            in_group = 0;
        }
        in_group += n;
        before_tensor += n;
        groups.last_mut().expect("one group").push(t);
    }
    let count = groups.len() as u32;
    let n_tensors = groups.iter().map(Vec::len).sum::<usize>();
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_else(|| "model".into());
    let mut writers = Vec::new();
    for (i, group) in groups.into_iter().enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            for (k, v) in preset.metadata(&tok) {
                w.kv(k, v);
            }
        }
        if count > 1 {
            w.kv("split.no", Value::U16(i as u16));
            w.kv("split.count", Value::U16(count as u16));
            w.kv("split.tensors.count", Value::I32(n_tensors as i32));
        }
        for t in group {
            w.tensor(t);
        }
        let p = if count > 1 {
            crate::gguf::split_path(dir, &stem, i as u32 + 1, count)
        } else {
            path.to_path_buf()
        };
        writers.push((p, w));
    }
    let total: u64 = writers.iter().map(|(_, w)| w.file_size()).sum();
    let mut before = 0;
    let mut written = Vec::new();
    for (p, w) in &writers {
        let size = w.write_atomic(
            p,
            |_, spec, out| weights.fill(spec, out),
            |done| progress(before + done, total),
        )?;
        before += size;
        written.push(p.clone());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(name: &str) -> (u64, u64) {
        let p = Preset::named(name).unwrap();
        let expert: u64 = p
            .tensors()
            .iter()
            .filter(|t| t.name.contains("_exps"))
            .map(TensorSpec::n_bytes)
            .sum();
        let mut w = GgufWriter::new();
        for (k, v) in p.metadata(&tokenizer::build(p.n_vocab, 400)) {
            w.kv(k, v);
        }
        for t in p.tensors() {
            w.tensor(t);
        }
        (expert, w.file_size())
    }

    fn within(actual: u64, expected: f64, tolerance: f64) -> bool {
        (actual as f64 - expected).abs() <= expected * tolerance
    }

    /// Expert bytes within 1% and file size within 3% of the real GGUFs (prior-art table).
    #[test]
    fn full_presets_match_real_model_sizes() {
        let gib = (1u64 << 30) as f64;
        for (name, expert, file) in [
            ("smallthinker-4b", 2_194_145_280.0, 2_630_212_704.0),
            ("qwen3-30b-a3b", 16.3 * gib, 17.3 * gib),
        ] {
            let (e, f) = sizes(name);
            assert!(
                within(e, expert, 0.01),
                "{name}: expert bytes {e} vs {expert}"
            );
            assert!(within(f, file, 0.03), "{name}: file bytes {f} vs {file}");
        }
    }

    #[test]
    fn smallthinker_down_types_follow_the_real_layer_split() {
        let q6: Vec<u32> = (0..32)
            .filter(|&l| q4_k_m_down(l, 32) == GgmlType::Q6_K)
            .collect();
        assert_eq!(
            q6,
            vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
    }
}
