//! Every `-mini` preset (and the two-shard one) loads in llama.cpp and pages bit-identically.

mod common;

use common::*;
use std::path::{Path, PathBuf};

const PROMPT: &str = "Hello world, the quick brown fox jumps over the lazy dog again";

fn run(model: &Path, dir: &Path, tag: &str, mode: &[&str]) -> (Vec<u8>, serde_json::Value) {
    common::generate(model, dir, tag, PROMPT, "64", mode)
}

/// Reference, then paged at the plan's minimum and a little above: byte-identical, with
/// evictions, and greedy output that does not repeat itself.
fn check_preset(model: &Path, dir: &Path) {
    let plan = plan(model, &["-c", "1024"]);
    assert!(plan["expert_bytes"].as_u64().unwrap() > 0);
    let min_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    let (ref_logits, ref_stats) = run(model, dir, "ref", &["--no-pager"]);
    let ids = ref_stats["tokens"]["generated_ids"].as_array().unwrap();
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert!(
        distinct.len() * 2 >= ids.len(),
        "degenerate output: {} distinct of {}",
        distinct.len(),
        ids.len()
    );
    assert!(ref_logits.iter().len() > 0);
    for budget in [min_mb, min_mb + 16] {
        let (logits, stats) = run(
            model,
            dir,
            &format!("b{budget}"),
            &["--ram-budget-mb", &budget.to_string()],
        );
        assert_eq!(
            stats["tokens"]["generated_ids"].as_array().unwrap(),
            ids,
            "tokens differ at {budget} MiB"
        );
        assert!(logits == ref_logits, "logits differ at {budget} MiB");
        assert!(
            stats["experts"]["evictions"].as_u64().unwrap() > 0,
            "no evictions at {budget} MiB"
        );
        assert!(stats["memory"]["peak_rss_bytes"].as_u64().unwrap() <= budget * MIB);
    }
    let floats: Vec<f32> = ref_logits
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(floats.iter().all(|x| x.is_finite()), "NaN or Inf in logits");
}

#[test]
fn qwen3_30b_a3b_mini() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    check_preset(&synth(dir.path(), "qwen3-30b-a3b-mini", &[]), dir.path());
}

#[test]
fn smallthinker_4b_mini() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    check_preset(&synth(dir.path(), "smallthinker-4b-mini", &[]), dir.path());
}

#[test]
fn two_shard_model() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny-split.gguf");
    let stdout = ok(&epm(&[
        "synth",
        "--preset",
        "tiny-split",
        "--experts",
        "64",
        "-o",
        out.to_str().unwrap(),
    ]));
    assert!(stdout.contains("-00002-of-00002.gguf"), "{stdout}");
    let first: PathBuf = dir.path().join("tiny-split-00001-of-00002.gguf");
    let second = dir.path().join("tiny-split-00002-of-00002.gguf");
    assert!(first.exists() && second.exists() && !out.exists());
    // Experts live in both shards.
    let model = epm::gguf::GgufModel::open(&first).unwrap();
    let index = epm::gguf::ModelIndex::build(&model).unwrap();
    let files: std::collections::HashSet<usize> = index
        .layers
        .iter()
        .flat_map(|l| l.tensors.iter().map(|t| t.file))
        .collect();
    assert_eq!(files.len(), 2, "experts should span both shards");
    check_preset(&first, dir.path());
}

#[test]
fn routing_skew_concentrates_expert_popularity() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let share = |skew: &str| {
        let sub = dir.path().join(format!("skew{skew}"));
        std::fs::create_dir_all(&sub).unwrap();
        let model = synth(&sub, "tiny", &["--experts", "64", "--routing-skew", skew]);
        let (_, stats) = run(&model, &sub, "s", &["--ram-budget-mb", "2048"]);
        let layers = stats["per_layer"].as_array().unwrap();
        layers
            .iter()
            .map(|l| l["top_decile_share"].as_f64().unwrap())
            .sum::<f64>()
            / layers.len() as f64
    };
    let (flat, skewed) = (share("0"), share("1.5"));
    assert!(
        skewed > flat + 0.15,
        "top-decile share {skewed} with skew vs {flat} without"
    );
}
