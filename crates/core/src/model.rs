//! The model as EPM sees it (`ModelIndex`): which tensors hold routed experts, where each expert's bytes live
//! (shard, absolute offset, bytes per expert, type), and the hyperparameters the planner
//! needs. Everything comes from GGUF metadata; nothing here knows a model by name.

use std::path::PathBuf;

use epm_gguf::{GgmlType, GgufError, GgufModel, Value};

/// One 3-D expert tensor (`ne[2] == expert_count`) of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertTensor {
    pub name: String,
    /// Index into [`ModelIndex::files`].
    pub file: usize,
    /// Absolute file offset of expert 0.
    pub offset: u64,
    /// Bytes of one expert's slice (`nb[2]`); expert `e` starts at `offset + e * bytes_per_expert`.
    pub bytes_per_expert: u64,
    pub ggml_type: GgmlType,
}

/// The routed experts of one MoE layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeLayer {
    pub layer: u32,
    pub tensors: Vec<ExpertTensor>,
}

impl MoeLayer {
    /// Bytes of one expert across all of this layer's expert tensors (gate + up + down).
    pub fn bytes_per_expert(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes_per_expert).sum()
    }
}

/// A layer's router (`blk.N.ffn_gate_inp.weight`, `[n_embd, n_expert]`), which the
/// cross-layer predictor reads.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterTensor {
    pub layer: u32,
    pub file: usize,
    pub offset: u64,
    pub ggml_type: GgmlType,
    pub n_embd: u64,
    pub n_expert: u64,
    /// The layer's expert-selection bias (`blk.N.exp_probs_b`, F32 `[n_expert]`), added to
    /// the gated scores: file and offset, when it has one.
    pub selection_bias: Option<(usize, u64)>,
    /// The router's own bias (`blk.N.ffn_gate_inp.bias`, F32 `[n_expert]`, gpt-oss), added
    /// to the logits before gating: file and offset, when it has one.
    pub logit_bias: Option<(usize, u64)>,
}

/// `<arch>.expert_gating_func`: how router logits become the scores experts are ranked by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GatingFunc {
    /// 1, or absent (0: the architecture's default, softmax for most).
    #[default]
    Softmax,
    /// 2.
    Sigmoid,
    /// 3: softmax over the chosen experts' weights only; selection uses the logits.
    SoftmaxWeight,
    /// 4: sqrt(softplus(x)).
    SqrtSoftplus,
    /// A value this reader does not know; the predictor then stays off.
    Unknown(u32),
}

impl GatingFunc {
    /// The metadata value, `0` or absent included.
    pub fn from_metadata(v: u32) -> GatingFunc {
        match v {
            0 | 1 => GatingFunc::Softmax,
            2 => GatingFunc::Sigmoid,
            3 => GatingFunc::SoftmaxWeight,
            4 => GatingFunc::SqrtSoftplus,
            other => GatingFunc::Unknown(other),
        }
    }

    /// The metadata value that stands for this function.
    pub fn to_metadata(self) -> u32 {
        match self {
            GatingFunc::Softmax => 1,
            GatingFunc::Sigmoid => 2,
            GatingFunc::SoftmaxWeight => 3,
            GatingFunc::SqrtSoftplus => 4,
            GatingFunc::Unknown(v) => v,
        }
    }
}

/// How router scores become selected experts (llama.cpp's `build_moe_ffn`), from metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoutingRule {
    pub gating_func: GatingFunc,
    /// `<arch>.expert_group_count` / `expert_group_used_count`: experts come in groups, the
    /// best `groups_used` groups (by the sum of each group's top two scores) are kept.
    pub groups: u32,
    pub groups_used: u32,
}

/// What the pager and planner need to know about a model, from its GGUF headers.
#[derive(Debug, Clone)]
pub struct ModelIndex {
    pub files: Vec<PathBuf>,
    pub file_sizes: Vec<u64>,
    pub arch: String,
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_head: u64,
    /// The largest per-layer KV head count (hybrid models give an array).
    pub n_head_kv: u64,
    pub head_dim_k: u64,
    pub head_dim_v: u64,
    pub n_vocab: u64,
    pub context_length: u64,
    /// Multi-head latent attention: the cache stores the compressed latent once, as K, and V
    /// is a view of it.
    pub latent_kv: bool,
    /// Layers that keep a KV cache; the rest (hybrid models) keep a fixed recurrent state.
    pub n_attention_layers: u32,
    /// Bytes of recurrent state (conv and SSM/delta-net state, f32) for one sequence.
    pub recurrent_state_bytes: u64,
    /// 0 for a dense model.
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub expert_ff: u64,
    /// MoE layers in layer order; empty for a dense model.
    pub layers: Vec<MoeLayer>,
    pub routers: Vec<RouterTensor>,
    pub routing: RoutingRule,
    /// Bytes of all tensor data.
    pub tensor_bytes: u64,
    pub expert_bytes: u64,
    /// The token-embedding table, when only its rows of the tokens seen are ever read.
    pub token_table: Option<TokenTable>,
}

/// The token-embedding table (`token_embd.weight`, `[n_embd, n_vocab]`) when llama.cpp
/// reads it one row per token and nothing else: the model has its own output head
/// (`output.weight`). With tied embeddings the table is also the output matrix and every
/// decode step reads all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTable {
    /// Index into [`ModelIndex::files`].
    pub file: usize,
    /// Absolute file offset of row 0.
    pub offset: u64,
    /// Bytes of one token's row.
    pub row_bytes: u64,
    pub rows: u64,
}

impl TokenTable {
    /// Bytes of the whole table.
    pub fn bytes(&self) -> u64 {
        self.rows * self.row_bytes
    }
}

/// Where a router's bias vector applies: to the logits, or to the gated scores.
enum BiasKind {
    Logit,
    Selection,
}

fn meta_u64(model: &GgufModel, key: &str) -> Option<u64> {
    match model.get(key)? {
        Value::Array { items, .. } => items.iter().filter_map(Value::as_u64).max(),
        v => v.as_u64(),
    }
}

/// Whether a tensor is a routed-expert tensor: `blk.N.ffn_{gate,up,down,gate_up}_exps.*`,
/// 3-D with one slice per expert. Other 3-D tensors (MLA's per-head `attn_k_b`) are not
/// experts even when their head count happens to equal the expert count, and the experts'
/// 2-D biases (gpt-oss's `ffn_*_exps.bias`) are small enough to stay resident.
pub fn is_routed_expert(name: &str, dims: &[u64], n_expert: u64) -> bool {
    n_expert > 0 && dims.len() == 3 && dims[2] == n_expert && name.contains("_exps.")
}

/// Parses `blk.<N>.` at the start of a tensor name.
pub fn layer_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("blk.")?;
    let (n, _) = rest.split_once('.')?;
    n.parse().ok()
}

/// How many layers keep a KV cache, and the recurrent state of the others, from the generic
/// metadata keys hybrid architectures use: `attention.recurrent_layers` (BOOL array),
/// a per-layer `attention.head_count_kv` with 0 for recurrent layers, or
/// `full_attention_interval`; state sizes from `kda.head_dim` or `ssm.*`.
fn recurrent_layout(model: &GgufModel, arch: &str, n_layer: u32, n_head: u64) -> (u32, u64) {
    let get = |k: &str| meta_u64(model, &format!("{arch}.{k}"));
    let d_conv = get("ssm.conv_kernel").unwrap_or(0);
    let per_layer_state = if let Some(hd) = get("kda.head_dim") {
        // Kimi delta attention: Q, K and V convolutions plus a head_dim² state per head.
        let d_inner = hd * n_head;
        (3 * d_conv.saturating_sub(1) * d_inner + hd * hd * n_head) * 4
    } else if let (Some(d_state), Some(d_inner)) = (get("ssm.state_size"), get("ssm.inner_size")) {
        let n_group = get("ssm.group_count").unwrap_or(0);
        (d_conv.saturating_sub(1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner) * 4
    } else {
        return (n_layer, 0);
    };
    let recurrent = match model.get(&format!("{arch}.attention.recurrent_layers")) {
        Some(Value::Array { items, .. }) => items
            .iter()
            .filter(|v| matches!(v, Value::Bool(true)) || v.as_u64().is_some_and(|x| x != 0))
            .count() as u32,
        _ => match model.get(&format!("{arch}.attention.head_count_kv")) {
            Some(Value::Array { items, .. }) => {
                items.iter().filter(|v| v.as_u64() == Some(0)).count() as u32
            }
            _ => match get("full_attention_interval").filter(|&i| i > 0) {
                Some(i) => n_layer - (n_layer as u64 / i) as u32,
                None => n_layer,
            },
        },
    }
    .min(n_layer);
    (n_layer - recurrent, u64::from(recurrent) * per_layer_state)
}

impl ModelIndex {
    pub fn build(model: &GgufModel) -> Result<ModelIndex, GgufError> {
        let path = model.first_path().to_path_buf();
        let bad = |key: &str, reason: &str| GgufError::BadMetadata {
            path: path.clone(),
            key: key.to_string(),
            reason: reason.to_string(),
        };
        let arch = model
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("general.architecture", "missing or not a string"))?
            .to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let get = |k: &str| meta_u64(model, &key(k));
        let n_layer = get("block_count").ok_or_else(|| bad(&key("block_count"), "missing"))? as u32;
        let n_embd =
            get("embedding_length").ok_or_else(|| bad(&key("embedding_length"), "missing"))?;
        let n_head = get("attention.head_count").unwrap_or(0);
        let n_head_kv = get("attention.head_count_kv").unwrap_or(n_head);
        let head_dim = n_embd.checked_div(n_head).unwrap_or(0);
        let head_dim_k = get("attention.key_length").unwrap_or(head_dim);
        let head_dim_v = get("attention.value_length").unwrap_or(head_dim);
        let n_vocab = model
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .map(|a| a.len() as u64)
            .or_else(|| get("vocab_size"))
            .unwrap_or(0);
        let context_length = get("context_length").unwrap_or(0);
        let n_expert = get("expert_count").unwrap_or(0) as u32;
        let n_expert_used = get("expert_used_count").unwrap_or(0) as u32;
        let expert_ff = get("expert_feed_forward_length").unwrap_or(0);

        let latent_kv = get("attention.key_length_mla").is_some();
        let (n_attention_layers, recurrent_state_bytes) =
            recurrent_layout(model, &arch, n_layer, n_head);

        let mut layers: Vec<MoeLayer> = Vec::new();
        let mut routers: Vec<RouterTensor> = Vec::new();
        let mut biases = Vec::new();
        let mut tensor_bytes = 0u64;
        let mut expert_bytes = 0u64;
        let mut token_table = None;
        let mut has_output_head = false;
        for (file, shard) in model.shards.iter().enumerate() {
            for t in &shard.tensors {
                tensor_bytes += t.n_bytes;
                has_output_head |= t.name == "output.weight";
                if let ("token_embd.weight", [ne0, rows]) = (t.name.as_str(), t.dims.as_slice()) {
                    token_table = t.ggml_type.row_bytes(*ne0).map(|row_bytes| TokenTable {
                        file,
                        offset: shard.abs_offset(t),
                        row_bytes,
                        rows: *rows,
                    });
                }
                if let (Some(layer), [n_embd, n_exp]) = (layer_of(&t.name), t.dims.as_slice()) {
                    if t.name.ends_with(".ffn_gate_inp.weight") && *n_exp == u64::from(n_expert) {
                        routers.push(RouterTensor {
                            layer,
                            file,
                            offset: shard.abs_offset(t),
                            ggml_type: t.ggml_type,
                            n_embd: *n_embd,
                            n_expert: *n_exp,
                            selection_bias: None,
                            logit_bias: None,
                        });
                    }
                }
                if let (Some(layer), [n]) = (layer_of(&t.name), t.dims.as_slice()) {
                    if *n == u64::from(n_expert) && t.ggml_type == GgmlType::F32 {
                        let at = (file, shard.abs_offset(t));
                        if t.name.contains(".exp_probs_b.") {
                            biases.push((layer, BiasKind::Selection, at));
                        } else if t.name.ends_with(".ffn_gate_inp.bias") {
                            biases.push((layer, BiasKind::Logit, at));
                        }
                    }
                }
                let is_expert = is_routed_expert(&t.name, &t.dims, u64::from(n_expert));
                let Some(layer) = layer_of(&t.name).filter(|_| is_expert) else {
                    continue;
                };
                expert_bytes += t.n_bytes;
                let et = ExpertTensor {
                    name: t.name.clone(),
                    file,
                    offset: shard.abs_offset(t),
                    bytes_per_expert: t.n_bytes / u64::from(n_expert),
                    ggml_type: t.ggml_type,
                };
                match layers.iter_mut().find(|l| l.layer == layer) {
                    Some(l) => l.tensors.push(et),
                    None => layers.push(MoeLayer {
                        layer,
                        tensors: vec![et],
                    }),
                }
            }
        }
        layers.sort_by_key(|l| l.layer);
        for (layer, kind, at) in biases {
            if let Some(r) = routers.iter_mut().find(|r| r.layer == layer) {
                match kind {
                    BiasKind::Selection => r.selection_bias = Some(at),
                    BiasKind::Logit => r.logit_bias = Some(at),
                }
            }
        }
        let routing = RoutingRule {
            gating_func: GatingFunc::from_metadata(get("expert_gating_func").unwrap_or(0) as u32),
            groups: get("expert_group_count").unwrap_or(0) as u32,
            groups_used: get("expert_group_used_count").unwrap_or(0) as u32,
        };
        if n_expert > 0 && n_expert_used == 0 {
            return Err(bad(
                &key("expert_used_count"),
                "missing or 0 in a model with experts",
            ));
        }
        Ok(ModelIndex {
            files: model.shards.iter().map(|s| s.path.clone()).collect(),
            file_sizes: model.shards.iter().map(|s| s.file_size).collect(),
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_vocab,
            context_length,
            latent_kv,
            n_attention_layers,
            recurrent_state_bytes,
            n_expert,
            n_expert_used,
            expert_ff,
            layers,
            routers,
            routing,
            tensor_bytes,
            expert_bytes,
            token_table: token_table.filter(|_| has_output_head),
        })
    }

    pub fn is_moe(&self) -> bool {
        !self.layers.is_empty()
    }

    pub fn model_bytes(&self) -> u64 {
        self.file_sizes.iter().sum()
    }

    /// Everything in the files that is not a routed expert: dense weights, shared experts,
    /// embeddings, and the headers.
    pub fn non_expert_bytes(&self) -> u64 {
        self.model_bytes() - self.expert_bytes
    }

    pub fn layer(&self, layer: u32) -> Option<&MoeLayer> {
        self.layers.iter().find(|l| l.layer == layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epm_gguf::writer::{GgufWriter, TensorSpec};
    use std::path::Path;

    fn qwen3moe(w: &mut GgufWriter, layers: u32) {
        w.kv("general.architecture", Value::String("qwen3moe".into()))
            .kv("qwen3moe.block_count", Value::U32(layers))
            .kv("qwen3moe.embedding_length", Value::U32(256))
            .kv("qwen3moe.expert_count", Value::U32(4))
            .kv("qwen3moe.expert_used_count", Value::U32(2));
    }

    fn write_zeros(w: &GgufWriter, path: &Path) {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        w.write_to(
            &mut out,
            |_, spec, out| out.write_all(&vec![0u8; spec.n_bytes() as usize]),
            |_| {},
        )
        .unwrap();
        std::io::Write::flush(&mut out).unwrap();
    }

    /// A one-file qwen3moe model of `layers` layers with `specs`' tensors (zeros), opened.
    fn written(dir: &Path, layers: u32, specs: Vec<(String, Vec<u64>, GgmlType)>) -> GgufModel {
        let path = dir.join("m.gguf");
        let mut w = GgufWriter::new();
        qwen3moe(&mut w, layers);
        for (name, dims, ty) in specs {
            w.tensor(TensorSpec::new(name, &dims, ty));
        }
        write_zeros(&w, &path);
        GgufModel::open(&path).unwrap()
    }

    /// Absolute file offset of tensor `name` in the first shard.
    fn offset_of(model: &GgufModel, name: &str) -> u64 {
        let shard = &model.shards[0];
        shard.abs_offset(shard.tensors.iter().find(|t| t.name == name).unwrap())
    }

    #[test]
    fn index_finds_expert_tensors_with_offsets_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let experts = [("gate", GgmlType::Q4_K), ("down", GgmlType::Q6_K)];
        let mut specs = vec![(
            "token_embd.weight".to_string(),
            vec![256, 10],
            GgmlType::Q8_0,
        )];
        for l in 0..2 {
            specs.push((
                format!("blk.{l}.ffn_gate_inp.weight"),
                vec![256, 4],
                GgmlType::F32,
            ));
            for (kind, ty) in experts {
                specs.push((
                    format!("blk.{l}.ffn_{kind}_exps.weight"),
                    vec![256, 8, 4],
                    ty,
                ));
            }
        }
        let model = written(dir.path(), 2, specs);
        let idx = ModelIndex::build(&model).unwrap();
        assert_eq!(idx.n_expert, 4);
        assert_eq!(idx.layers.len(), 2);
        let l0 = &idx.layers[0];
        assert_eq!(
            l0.tensors.len(),
            2,
            "gate_inp is 2-D and not an expert tensor"
        );
        assert_eq!(l0.tensors[0].bytes_per_expert, 8 * 144);
        assert_eq!(l0.tensors[1].bytes_per_expert, 8 * 210);
        assert_eq!(l0.bytes_per_expert(), 8 * (144 + 210));
        assert_eq!(
            idx.layers[1].tensors[1].offset,
            offset_of(&model, "blk.1.ffn_down_exps.weight")
        );
        assert_eq!(idx.expert_bytes, 2 * 4 * 8 * (144 + 210));
        assert_eq!(idx.non_expert_bytes(), idx.model_bytes() - idx.expert_bytes);
        assert_eq!(idx.routers.len(), 2);
        assert_eq!(
            idx.token_table, None,
            "without output.weight the table is the output head too"
        );
    }

    #[test]
    fn the_token_table_is_lendable_only_beside_an_output_head() {
        let dir = tempfile::tempdir().unwrap();
        let specs = vec![
            ("output.weight".to_string(), vec![256, 10], GgmlType::Q6_K),
            (
                "token_embd.weight".to_string(),
                vec![256, 10],
                GgmlType::Q8_0,
            ),
            (
                "blk.0.ffn_up_exps.weight".to_string(),
                vec![256, 8, 4],
                GgmlType::Q4_K,
            ),
        ];
        let model = written(dir.path(), 1, specs);
        let idx = ModelIndex::build(&model).unwrap();
        assert_eq!(
            idx.token_table,
            Some(TokenTable {
                file: 0,
                offset: offset_of(&model, "token_embd.weight"),
                row_bytes: 8 * 34,
                rows: 10,
            })
        );
    }

    #[test]
    fn experts_of_a_split_model_name_their_shard() {
        let dir = tempfile::tempdir().unwrap();
        // Layer l's experts in shard l + 1; the metadata in the first.
        let shards: Vec<_> = (0..2u32)
            .map(|l| {
                let mut w = GgufWriter::new();
                if l == 0 {
                    qwen3moe(&mut w, 2);
                }
                w.kv("split.count", Value::U16(2));
                let name = format!("blk.{l}.ffn_up_exps.weight");
                w.tensor(TensorSpec::new(name, &[256, 8, 4], GgmlType::Q4_K));
                let p = epm_gguf::split_path(dir.path(), "m", l + 1, 2);
                write_zeros(&w, &p);
                p
            })
            .collect();
        let p1 = &shards[0];
        let idx = ModelIndex::build(&GgufModel::open(p1).unwrap()).unwrap();
        assert_eq!(idx.layers.len(), 2);
        assert_eq!(
            (idx.layers[0].tensors[0].file, idx.layers[1].tensors[0].file),
            (0, 1)
        );
    }
}
