//! Round trips through the writer and reader, and malformed input.

use super::writer::{GgufWriter, TensorSpec};
use super::*;
use std::path::Path;

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("qwen3moe".into()))
        .kv("qwen3moe.block_count", Value::U32(2))
        .kv("qwen3moe.embedding_length", Value::U32(256))
        .kv("qwen3moe.expert_count", Value::U32(4))
        .kv("qwen3moe.expert_used_count", Value::U32(2))
        .kv("u8", Value::U8(7))
        .kv("i8", Value::I8(-7))
        .kv("u16", Value::U16(700))
        .kv("i16", Value::I16(-700))
        .kv("i32", Value::I32(-70000))
        .kv("f32", Value::F32(1.5))
        .kv("u64", Value::U64(1 << 40))
        .kv("i64", Value::I64(-(1 << 40)))
        .kv("f64", Value::F64(-2.25))
        .kv("flag", Value::Bool(true))
        .kv(
            "recurrent_layers",
            Value::bools([true, false, false, true, true]),
        )
        .kv(
            "nested",
            Value::Array {
                elem_type: 9,
                items: vec![
                    Value::i32s([1, 2]),
                    Value::strings(["a", "bc"]),
                    Value::i32s([]),
                ],
            },
        )
        .kv("empty", Value::strings(Vec::<String>::new()));
    w.tensor(TensorSpec::new(
        "token_embd.weight",
        &[256, 10],
        GgmlType::Q8_0,
    ));
    for l in 0..2 {
        w.tensor(TensorSpec::new(
            format!("blk.{l}.ffn_gate_inp.weight"),
            &[256, 4],
            GgmlType::F32,
        ));
        w.tensor(TensorSpec::new(
            format!("blk.{l}.ffn_gate_exps.weight"),
            &[256, 8, 4],
            GgmlType::Q4_K,
        ));
        w.tensor(TensorSpec::new(
            format!("blk.{l}.ffn_down_exps.weight"),
            &[256, 8, 4],
            GgmlType::Q6_K,
        ));
    }
    w
}

fn write(w: &GgufWriter, path: &Path) -> Vec<Vec<u8>> {
    let mut datas = Vec::new();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    w.write_to(
        &mut out,
        |i, spec, out| {
            let data: Vec<u8> = (0..spec.n_bytes())
                .map(|b| (b as usize * 31 + i) as u8)
                .collect();
            out.write_all(&data)?;
            datas.push(data);
            Ok(())
        },
        |_| {},
    )
    .unwrap();
    std::io::Write::flush(&mut out).unwrap();
    datas
}

#[test]
fn writer_output_reads_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let w = sample_writer();
    let datas = write(&w, &path);
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.metadata, w.metadata);
    assert_eq!(f.file_size, w.file_size());
    assert_eq!(f.tensors.len(), w.tensors.len());
    let bytes = std::fs::read(&path).unwrap();
    for ((t, spec), data) in f.tensors.iter().zip(&w.tensors).zip(&datas) {
        assert_eq!(
            (&t.name, &t.dims, t.ggml_type),
            (&spec.name, &spec.dims, spec.ggml_type)
        );
        assert_eq!(t.n_bytes, spec.n_bytes());
        let start = f.abs_offset(t) as usize;
        assert_eq!(start % 32, 0);
        assert_eq!(&bytes[start..start + t.n_bytes as usize], &data[..]);
    }
    // No temporary file is left next to the output.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn split_models_open_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = GgufWriter::new();
    first
        .kv("general.architecture", Value::String("qwen3moe".into()))
        .kv("qwen3moe.block_count", Value::U32(2))
        .kv("qwen3moe.embedding_length", Value::U32(256))
        .kv("qwen3moe.expert_count", Value::U32(4))
        .kv("qwen3moe.expert_used_count", Value::U32(2))
        .kv("split.count", Value::U16(2));
    first.tensor(TensorSpec::new(
        "blk.0.ffn_up_exps.weight",
        &[256, 8, 4],
        GgmlType::Q4_K,
    ));
    let mut second = GgufWriter::new();
    second.kv("split.count", Value::U16(2));
    second.tensor(TensorSpec::new(
        "blk.1.ffn_up_exps.weight",
        &[256, 8, 4],
        GgmlType::Q4_K,
    ));
    let p1 = reader::split_path(dir.path(), "m", 1, 2);
    let p2 = reader::split_path(dir.path(), "m", 2, 2);
    write(&first, &p1);
    write(&second, &p2);
    let model = GgufModel::open(&p1).unwrap();
    assert_eq!(model.shards.len(), 2);
    assert_eq!(model.shards[1].tensors[0].name, "blk.1.ffn_up_exps.weight");
    std::fs::remove_file(&p2).unwrap();
    assert!(matches!(
        GgufModel::open(&p1),
        Err(GgufError::MissingShard { index: 2, .. })
    ));
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn open_bytes(bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    std::fs::write(&p, bytes).unwrap();
    GgufFile::open(&p)
}

#[test]
fn malformed_headers_give_typed_errors_before_allocating() {
    assert!(matches!(open_bytes(b"GG"), Err(GgufError::BadMagic { .. })));
    assert!(matches!(
        open_bytes(b"GGML0000"),
        Err(GgufError::BadMagic { .. })
    ));
    let mut v1 = header(0, 0);
    v1[4] = 1;
    assert!(matches!(
        open_bytes(&v1),
        Err(GgufError::UnsupportedVersion { version: 1, .. })
    ));
    // Absurd counts are refused by size, not attempted.
    assert!(matches!(
        open_bytes(&header(u64::MAX, 0)),
        Err(GgufError::TruncatedHeader { .. })
    ));
    assert!(matches!(
        open_bytes(&header(0, u64::MAX)),
        Err(GgufError::TruncatedHeader { .. })
    ));
    // A string whose length runs past the end.
    let mut s = header(0, 1);
    s.extend_from_slice(&(1u64 << 50).to_le_bytes());
    s.extend_from_slice(&[0u8; 16]);
    assert!(matches!(
        open_bytes(&s),
        Err(GgufError::TruncatedHeader {
            what: "metadata key",
            ..
        })
    ));
    // An array whose count cannot fit.
    let mut a = header(0, 1);
    a.extend_from_slice(&1u64.to_le_bytes());
    a.push(b'k');
    a.extend_from_slice(&9u32.to_le_bytes());
    a.extend_from_slice(&8u32.to_le_bytes());
    a.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(
        open_bytes(&a),
        Err(GgufError::TruncatedHeader {
            what: "array elements",
            ..
        })
    ));
    // An unknown value type.
    let mut t = header(0, 1);
    t.extend_from_slice(&1u64.to_le_bytes());
    t.push(b'k');
    t.extend_from_slice(&99u32.to_le_bytes());
    assert!(matches!(
        open_bytes(&t),
        Err(GgufError::BadValueType { value_type: 99, .. })
    ));
}

#[test]
fn tensor_errors_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&sample_writer(), &path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = open_bytes(&bytes[..bytes.len() - 1]);
    match cut {
        Err(GgufError::TruncatedData { tensor, .. }) => {
            assert_eq!(tensor, "blk.1.ffn_down_exps.weight")
        }
        other => panic!("expected TruncatedData, got {other:?}"),
    }
}
