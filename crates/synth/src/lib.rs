//! The synthetic-model factory: presets with real architectures, a real BPE tokenizer and
//! real quant types, written with the GGUF writer. Weights are random but built so greedy
//! decoding stays diverse: the residual stream carries the current token's embedding and
//! the output head maps it through one long random cycle over the vocabulary, so each
//! step moves to a new token and routing changes from token to token.
#![forbid(unsafe_code)]

pub mod preset;
pub mod quant;
pub mod tokenizer;

pub use preset::table::q4_k_m_down;
pub use preset::{Layout, Preset};

use std::io::Write;
use std::path::{Path, PathBuf};

use epm_gguf::writer::{GgufWriter, TensorSpec};
use epm_gguf::{GgmlType, GgufError, Value};
use epm_sys::fs::{create_for_streaming, free_bytes, replace_atomically, DirectWriter};
use quant::{name_seed, Rng};

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("unknown preset {name:?}; choose one of: {}", Preset::names().join(", "))]
    UnknownPreset { name: String },
    #[error("{0}")]
    BadShape(String),
    #[error("--routing-skew {0} is out of range: use a value from 0 (uniform) to 8")]
    BadSkew(f64),
    #[error("--routing-locality {0} is out of range: use a value from 0 (none) to 0.85")]
    BadLocality(f64),
    #[error("{dir} has {available} bytes free but the model needs {needed}: free space, write elsewhere, or shrink it with --layers / --experts")]
    NoSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("{path}: {source}")]
    Write { path: PathBuf, source: GgufError },
}

impl SynthError {
    /// Whether the user's input was at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            SynthError::UnknownPreset { .. }
                | SynthError::BadShape(_)
                | SynthError::BadSkew(_)
                | SynthError::BadLocality(_)
        )
    }
}

/// Generates tensor data. Per-tensor seeds come from the tensor name, so data does not
/// depend on write order.
struct Weights<'a> {
    preset: &'a Preset,
    seed: u64,
    /// `prev_of[v]`: the token that precedes `v` on the long cycle (normal tokens only).
    prev_of: Vec<Option<u32>>,
    /// `cycle_pos[v]`: where token `v` sits on the long cycle (normal tokens only).
    cycle_pos: Vec<Option<u32>>,
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
        GgmlType::BF16 => quant::bf16_row(row, out),
        _ => quant::quantize_q8_0(row, out),
    }
}

impl Weights<'_> {
    /// The topic anchor `k`: a random direction with unit spread.
    fn topic_anchor(&self, k: u64) -> Vec<f32> {
        let mut rng = Rng::new(name_seed(self.seed, "topic") ^ (k << 24));
        (0..self.preset.n_embd).map(|_| rng.uniform(1.0)).collect()
    }

    /// The topic at cycle position `pos`: between anchor `pos / span` and the next, moved
    /// along linearly and rescaled to unit spread. Generation walks the cycle, so the topic
    /// of consecutive generated tokens drifts slowly.
    fn topic(&self, pos: u32) -> Vec<f32> {
        let span = self.preset.topic_span.max(1);
        let (k, f) = (u64::from(pos / span), (pos % span) as f32 / span as f32);
        let (a, b) = (self.topic_anchor(k), self.topic_anchor(k + 1));
        let norm = ((1.0 - f) * (1.0 - f) + f * f).sqrt();
        a.iter()
            .zip(&b)
            .map(|(x, y)| ((1.0 - f) * x + f * y) / norm)
            .collect()
    }

    /// Token `t`'s embedding: random with unit spread, plus (when routing is skewed) the
    /// shared direction, which lets the router add a per-expert bias, and (with routing
    /// locality) the topic of its place on the cycle, which routers see as a bias towards
    /// the experts that topic favours, shared by the tokens around it.
    fn embedding_row(&self, token: u32) -> Vec<f32> {
        let mut rng = Rng::new(name_seed(self.seed, "token_embd") ^ (u64::from(token) << 20));
        let z: Vec<f32> = (0..self.preset.n_embd).map(|_| rng.uniform(1.0)).collect();
        let c = if self.common.is_empty() { 0.0 } else { COMMON };
        let pos = self.cycle_pos.get(token as usize).copied().flatten();
        let t = match pos {
            Some(_) => self.preset.routing_locality as f32,
            None => 0.0,
        };
        if c == 0.0 && t == 0.0 {
            return z;
        }
        let b = (1.0 - c * c - t * t).max(0.0).sqrt();
        let topic = pos.filter(|_| t > 0.0).map(|p| self.topic(p));
        (0..z.len())
            .map(|i| {
                b * z[i]
                    + c * self.common.get(i).copied().unwrap_or(0.0)
                    + t * topic.as_ref().map_or(0.0, |v| v[i])
            })
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

    /// `token_embd` and `output`: one truly quantized row per token, built in parallel slabs
    /// (their quantization is most of the synthesis CPU time). An output row scores how well
    /// the hidden state matches the embedding of the token's predecessor on the cycle; the
    /// peak logit is about 20.
    fn vocab_rows(
        &self,
        spec: &TensorSpec,
        is_output: bool,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        const SLAB: usize = 2048;
        let (row_len, n_rows) = (spec.dims[0], spec.dims[1] as usize);
        let alpha = 20.0 / self.preset.n_embd as f32;
        let row = |v: usize, buf: &mut Vec<u8>| {
            let values: Vec<f32> = match (is_output, self.prev_of[v]) {
                (false, _) => self.embedding_row(v as u32),
                (true, Some(prev)) => self.embedding_row(prev).iter().map(|x| x * alpha).collect(),
                (true, None) => {
                    let mut rng = Rng::new(name_seed(self.seed, &spec.name) ^ ((v as u64) << 20));
                    (0..row_len).map(|_| rng.uniform(0.1 * alpha)).collect()
                }
            };
            quantize_row(spec.ggml_type, &values, buf);
        };
        let row = &row;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let mut parts: Vec<Vec<u8>> = vec![Vec::new(); threads];
        for start in (0..n_rows).step_by(SLAB) {
            let end = (start + SLAB).min(n_rows);
            let per = (end - start).div_ceil(threads);
            std::thread::scope(|scope| {
                for (i, part) in parts.iter_mut().enumerate() {
                    part.clear();
                    let rows = (start + i * per).min(end)..(start + (i + 1) * per).min(end);
                    scope.spawn(move || rows.for_each(|v| row(v, part)));
                }
            });
            for part in &parts {
                out.write_all(part)?;
            }
        }
        Ok(())
    }

    fn fill(&self, spec: &TensorSpec, out: &mut dyn Write) -> std::io::Result<()> {
        let mut rng = Rng::new(name_seed(self.seed, &spec.name));
        let row_len = spec.dims[0];
        let n_rows: u64 = spec.dims[1..].iter().product();
        let n_values = (row_len * n_rows) as usize;
        let kind = tensor_kind(&spec.name);
        let mut buf = Vec::with_capacity(1 << 22);
        let flush = |buf: &mut Vec<u8>, out: &mut dyn Write| -> std::io::Result<()> {
            out.write_all(buf)?;
            buf.clear();
            Ok(())
        };
        match kind {
            "token_embd" | "output" => self.vocab_rows(spec, kind == "output", out)?,
            // The router's bias (gpt-oss): logits it adds before selection, with about half
            // the spread of the router's own, so it changes which experts are chosen.
            "ffn_gate_inp" if spec.name.ends_with(".bias") => {
                let b: Vec<f32> = (0..n_values)
                    .map(|_| rng.uniform(ROUTER_STD / 2.0))
                    .collect();
                quant::f32_row(&b, &mut buf);
            }
            "ffn_gate_inp" => self.router_rows(&spec.name, row_len, n_rows, &mut rng, &mut buf),
            kind if kind.ends_with("norm") => {
                quant::f32_row(&vec![1.0; n_values], &mut buf);
            }
            // Linear-attention decay parameters: negative A (gated delta-net stores -exp(A_log))
            // with small step biases keep the recurrent state decaying, never growing.
            "ssm_a" => {
                let a: Vec<f32> = (0..n_values).map(|_| -1.0 + rng.uniform(0.3)).collect();
                quant::f32_row(&a, &mut buf);
            }
            "ssm_dt" => {
                let b: Vec<f32> = (0..n_values).map(|_| rng.uniform(0.3)).collect();
                quant::f32_row(&b, &mut buf);
            }
            // The expert-selection bias of sigmoid routers: neutral.
            "exp_probs_b" => quant::f32_row(&vec![0.0; n_values], &mut buf),
            _ => {
                let inv = 1.0 / (row_len as f32).sqrt();
                let std = match kind {
                    // Small writes back into the residual keep the token's embedding dominant.
                    "attn_output" | "ssm_out" => 0.2 * inv,
                    "ffn_down_exps" | "ffn_down" | "ffn_down_shexp" => 0.33 * inv,
                    // Short causal convolutions over the projected Q, K and V.
                    k if k.starts_with("ssm_conv1d") => 0.5,
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

/// What a tensor is, from its name: `blk.7.ffn_down_exps.weight` -> `ffn_down_exps`,
/// `blk.3.ssm_a` -> `ssm_a`, `output.weight` -> `output`.
fn tensor_kind(name: &str) -> &str {
    let name = name
        .strip_suffix(".weight")
        .or_else(|| name.strip_suffix(".bias"))
        .unwrap_or(name);
    match name.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, kind)| kind),
        None => name,
    }
}

/// The cycle the output head walks through the normal tokens, in a seeded random order:
/// `prev_of[v]` is the token before `v` on it, `pos[v]` the place of `v`.
struct Cycle {
    prev_of: Vec<Option<u32>>,
    pos: Vec<Option<u32>>,
}

fn long_cycle(tok: &tokenizer::Tokenizer, n_vocab: usize, seed: u64) -> Cycle {
    let mut order = tok.normal_ids.clone();
    let mut rng = Rng::new(seed ^ 0xC7C1E);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut prev_of = vec![None; n_vocab];
    let mut pos = vec![None; n_vocab];
    for i in 0..order.len() {
        let next = order[(i + 1) % order.len()];
        prev_of[next as usize] = Some(order[i]);
        pos[order[i] as usize] = Some(i as u32);
    }
    Cycle { prev_of, pos }
}

/// The files a synthetic model is written as: each path with its header (metadata and tensor
/// infos). With `max_shard_bytes` (or a preset shipped in shards), the tensors are split
/// across files named `<stem>-0000k-of-0000N.gguf` next to `path`, as llama.cpp's
/// `gguf-split` names them; the first holds all metadata.
pub fn model_files(
    preset: &Preset,
    tok: &tokenizer::Tokenizer,
    path: &Path,
    max_shard_bytes: Option<u64>,
) -> Vec<(PathBuf, GgufWriter)> {
    let tensors = preset.tensors();
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
    let mut files = Vec::new();
    for (i, group) in groups.into_iter().enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            for (k, v) in preset.metadata(tok) {
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
            epm_gguf::split_path(dir, &stem, i as u32 + 1, count)
        } else {
            path.to_path_buf()
        };
        files.push((p, w));
    }
    files
}

/// The files `write_model` would write, with their sizes, without writing anything.
pub fn model_sizes(
    preset: &Preset,
    path: &Path,
    max_shard_bytes: Option<u64>,
) -> Vec<(PathBuf, u64)> {
    let tok = tokenizer::build(preset.n_vocab, 400, preset.chat);
    model_files(preset, &tok, path, max_shard_bytes)
        .into_iter()
        .map(|(p, w)| {
            let size = w.file_size();
            (p, size)
        })
        .collect()
}

/// Write a synthetic model for `preset` to `path` (see [`model_files`] for shards),
/// atomically per file, after checking the disk has room. `progress(done, total)` reports
/// bytes. Returns the files written.
pub fn write_model(
    preset: &Preset,
    path: &Path,
    seed: u64,
    max_shard_bytes: Option<u64>,
    mut progress: impl FnMut(u64, u64),
) -> Result<Vec<PathBuf>, SynthError> {
    let tok = tokenizer::build(preset.n_vocab, 400, preset.chat);
    let files = model_files(preset, &tok, path, max_shard_bytes);
    let total: u64 = files.iter().map(|(_, w)| w.file_size()).sum();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A file being replaced keeps its space until the new one is renamed over it, so the
    // whole model must fit next to it.
    if let Ok(available) = free_bytes(dir) {
        if available < total {
            return Err(SynthError::NoSpace {
                dir: dir.to_path_buf(),
                needed: total,
                available,
            });
        }
    }
    let common = if preset.routing_skew > 0.0 {
        let mut r = Rng::new(name_seed(seed, "common_direction"));
        (0..preset.n_embd).map(|_| r.uniform(1.0)).collect()
    } else {
        Vec::new()
    };
    let cycle = long_cycle(&tok, preset.n_vocab, seed);
    let weights = Weights {
        preset,
        seed,
        prev_of: cycle.prev_of,
        cycle_pos: cycle.pos,
        common,
    };
    let mut before = 0;
    let mut written = Vec::new();
    for (p, w) in &files {
        // Written under a temporary name and renamed into place only when complete, so an
        // interrupted write never leaves a file that looks whole.
        let size = replace_atomically(p, |tmp| -> Result<u64, GgufError> {
            let (file, _direct) = create_for_streaming(tmp)?;
            let mut out = DirectWriter::new(file)?;
            let n = w.write_to(
                &mut out,
                |_, spec, out| weights.fill(spec, out),
                |done| progress(before + done, total),
            )?;
            out.finish()?.sync_all()?;
            Ok(n)
        })
        .map_err(|source| SynthError::Write {
            path: p.clone(),
            source,
        })?;
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
        let expert = p.expert_bytes();
        let mut w = GgufWriter::new();
        for (k, v) in p.metadata(&tokenizer::build(p.n_vocab, 400, p.chat)) {
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
            ("qwen3.6-35b-a3b", 18.22 * gib, 22.1e9),
            ("minicpm-v4.7-35b-a3b", 18.16 * gib, 21_166_255_008.0),
            ("ling-3.0-flash", 69.46 * gib, 77_010_144_672.0),
            // ggml-org's MXFP4 GGUFs: 12.8 GiB, and about 60 GiB in three shards.
            ("gpt-oss-20b", 9.45 * gib, 12.8 * gib),
            ("gpt-oss-120b", 56.73 * gib, 60.6 * gib),
        ] {
            let (e, f) = sizes(name);
            eprintln!(
                "{name}: expert {:+.2}%, file {:+.2}%",
                (e as f64 / expert - 1.0) * 100.0,
                (f as f64 / file - 1.0) * 100.0
            );
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
