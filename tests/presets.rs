//! Every `-mini` preset (and the two-shard one) loads in llama.cpp and pages bit-identically.

mod common;

use common::*;
use std::path::{Path, PathBuf};

const PROMPT: &str = "Hello world, the quick brown fox jumps over the lazy dog again";

fn run(model: &Path, dir: &Path, tag: &str, mode: &[&str]) -> (Vec<u8>, Snapshot) {
    common::generate(model, dir, tag, PROMPT, "64", mode)
}

/// Reference, then paged at the plan's minimum and a little above: byte-identical, with
/// evictions, and greedy output that does not repeat itself.
fn check_preset(model: &Path, dir: &Path) {
    let plan = plan(model, &["-c", "1024"]);
    assert!(plan["expert_bytes"].as_u64().unwrap() > 0);
    let min_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    let (ref_logits, ref_stats) = run(model, dir, "ref", &["--no-pager"]);
    let ids = &ref_stats.tokens.generated_ids;
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert!(
        distinct.len() * 2 >= ids.len(),
        "degenerate output: {} distinct of {}",
        distinct.len(),
        ids.len()
    );
    assert!(ref_logits.iter().len() > 0);
    // What llama.cpp reports it reserved stays within the plan's estimates at the same
    // shape: its compute buffer (one output per sequence) and its KV / recurrent state.
    let ubatch = ref_stats.tokens.ubatch.to_string();
    let at = common::plan(model, &["-c", "1024", "-ub", &ubatch]);
    let reported = [
        (
            "compute buffer",
            ref_stats.memory.compute_buffer_bytes,
            "compute_bytes",
        ),
        ("context memory", ref_stats.memory.context_bytes, "kv_bytes"),
    ];
    for (what, bytes, key) in reported {
        let estimate = at[key].as_u64().unwrap();
        assert!(
            bytes > 0 && bytes <= estimate,
            "llama.cpp's {what} {bytes} against the plan's {key} {estimate} at ubatch {ubatch}"
        );
    }
    // Demand paging without and with cross-layer prediction, and prefetch on a thread pool,
    // at the plan's minimum, where speculative reads compete hardest for the budget; and
    // the defaults (prediction on where the kernel shows reads in flight) a little above it.
    let sees_reads = epm_sys::cache::file_sees_reads_in_flight(model);
    let min = min_mb.to_string();
    let runs: [(u64, &[&str]); 4] = [
        (min_mb, &["--no-predict"]),
        (min_mb, &["--prefetch", "populate"]),
        (min_mb, &["--predict"]),
        (min_mb + 16, &[]),
    ];
    for (budget, extra) in runs {
        let budget_arg = budget.to_string();
        let mut args = vec!["--ram-budget-mb", &budget_arg];
        args.extend_from_slice(extra);
        let tag = format!("b{budget}{}", extra.join("").replace('-', ""));
        let (logits, stats) = run(model, dir, &tag, &args);
        assert_eq!(
            &stats.tokens.generated_ids, ids,
            "tokens differ at {budget} MiB {extra:?}"
        );
        assert!(
            logits == ref_logits,
            "logits differ at {budget} MiB {extra:?}"
        );
        if extra == ["--no-predict"] {
            assert_eq!(
                stats.prefetch.prompt.issued + stats.prefetch.decode.issued,
                0,
                "speculative reads with --no-predict"
            );
        }
        if sees_reads {
            assert_eq!(
                stats.experts.stray_cache_bytes_at_exit, 0,
                "evicted experts left in the page cache at {budget} MiB {extra:?}"
            );
        }
        if extra == ["--predict"] || (extra.is_empty() && sees_reads) {
            let coverage = stats.prediction.decode.coverage;
            assert!(
                coverage > 0.3,
                "prediction coverage {coverage} at {min} MiB"
            );
        }
        assert!(stats.experts.evictions > 0, "no evictions at {budget} MiB");
        assert!(stats.memory.peak_rss_bytes <= budget * MIB);
        check_token_table_loan(&stats, &format!("{budget} MiB {extra:?}"));
    }
    let floats: Vec<f32> = ref_logits
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(floats.iter().all(|x| x.is_finite()), "NaN or Inf in logits");
}

/// Every preset has its own output head, so the token table's unread pages are lent to
/// the expert cache: the cache used them (its peak is above its share of the measured
/// budget), and the page cache holds no more of the table than the rows read took back.
fn check_token_table_loan(stats: &Snapshot, what: &str) {
    let m = &stats.memory;
    assert!(
        m.token_table_lent_bytes > 0,
        "nothing of the token table lent at {what}"
    );
    assert!(
        m.token_table_cached_bytes_at_exit <= m.token_table_taken_bytes,
        "the page cache holds {} bytes of the token table, {} were taken back, at {what}",
        m.token_table_cached_bytes_at_exit,
        m.token_table_taken_bytes
    );
    let share = stats.expert_budget_bytes - stats.io.evict_slack_bytes;
    assert!(
        stats.experts.resident_peak_bytes > share,
        "the expert cache peaked at {} bytes, within its share {share} of the budget, at {what}",
        stats.experts.resident_peak_bytes
    );
}

/// Synthesize a single-file preset in its own temp dir and check it.
fn check_named(preset: &str) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    check_preset(&synth(dir.path(), preset, &[]), dir.path());
}

#[test]
fn qwen3_30b_a3b_mini() {
    check_named("qwen3-30b-a3b-mini");
}

#[test]
fn smallthinker_4b_mini() {
    check_named("smallthinker-4b-mini");
}

/// qwen35moe: gated delta-net layers, full attention every 4th, gated shared experts.
#[test]
fn qwen36_35b_a3b_mini() {
    check_named("qwen3.6-35b-a3b-mini");
}

/// qwen35moe with gate and up merged into one `ffn_gate_up_exps` tensor per layer.
#[test]
fn minicpm_v47_35b_a3b_mini() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "minicpm-v4.7-35b-a3b-mini", &[]);
    let index =
        epm_core::model::ModelIndex::build(&epm_gguf::GgufModel::open(&model).unwrap()).unwrap();
    assert!(index.layers.iter().all(|l| l.tensors.len() == 2
        && l.tensors
            .iter()
            .any(|t| t.name.ends_with("ffn_gate_up_exps.weight"))));
    check_preset(&model, dir.path());
}

/// bailingmoe3: KDA + MLA, leading dense layers, expert groups, written as two shards.
#[test]
fn ling_3_flash_mini() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ling.gguf");
    ok(&epm(&[
        "synth",
        "--preset",
        "ling-3.0-flash-mini",
        "-o",
        out.to_str().unwrap(),
    ]));
    let first = dir.path().join("ling-00001-of-00002.gguf");
    assert!(first.exists() && dir.path().join("ling-00002-of-00002.gguf").exists());
    let index =
        epm_core::model::ModelIndex::build(&epm_gguf::GgufModel::open(&first).unwrap()).unwrap();
    // The two leading dense layers have no experts; MLA's per-head tensors are not experts.
    assert_eq!(index.layers.first().map(|l| l.layer), Some(2));
    assert!(index.layers.iter().all(|l| l.tensors.len() == 3));
    // The predictor reproduces grouped sigmoid routing with a selection bias.
    assert_eq!(
        (
            index.routing.gating_func,
            index.routing.groups,
            index.routing.groups_used
        ),
        (epm_core::model::GatingFunc::Sigmoid, 8, 4)
    );
    assert!(index.routers.iter().all(|r| r.selection_bias.is_some()));
    check_preset(&first, dir.path());
}

/// gpt-oss: MXFP4 experts with per-expert biases, a router bias, attention sinks and
/// sliding-window layers (a window shorter than the run). The predictor adds the router's
/// bias as llama.cpp does, and covers more of the selection with it than without.
#[test]
fn gpt_oss_20b_mini() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "gpt-oss-20b-mini", &[]);
    let index =
        epm_core::model::ModelIndex::build(&epm_gguf::GgufModel::open(&model).unwrap()).unwrap();
    // The expert biases are 2-D and not paged; the three weight tensors are MXFP4.
    assert!(index.layers.iter().all(|l| l.tensors.len() == 3
        && l.tensors
            .iter()
            .all(|t| t.ggml_type == epm_gguf::GgmlType::MXFP4 && t.name.ends_with(".weight"))));
    assert!(index.routers.iter().all(|r| r.logit_bias.is_some()));
    check_preset(&model, dir.path());

    let min_mb = plan(&model, &["-c", "1024"])["min_budget_bytes"]
        .as_u64()
        .unwrap()
        .div_ceil(MIB);
    let budget = (min_mb + 16).to_string();
    let coverage = |tag: &str, extra: &[&str]| {
        let mut args = vec!["--ram-budget-mb", &budget, "--predict"];
        args.extend_from_slice(extra);
        run(&model, dir.path(), tag, &args)
            .1
            .prediction
            .decode
            .coverage
    };
    let with = coverage("bias", &[]);
    let without = coverage("nobias", &["--predict-ignore-router-bias"]);
    eprintln!("decode prediction coverage: {with:.3} with the router bias, {without:.3} without");
    assert!(
        with > without + 0.1,
        "coverage {with} with the router bias against {without} without"
    );
}

#[test]
fn gpt_oss_120b_mini() {
    check_named("gpt-oss-120b-mini");
}

/// The plan's context memory for hybrid models is llama.cpp's own: KV only for the attention
/// layers (K alone for latent attention) plus the recurrent state of the others. The
/// expected figures are the KV and RS buffer sizes llama.cpp logs for these models.
#[test]
fn hybrid_plans_match_llama_cpp_context_memory() {
    let dir = tempfile::tempdir().unwrap();
    let kv = |model: &Path| plan(model, &["-c", "1024"])["kv_bytes"].as_u64().unwrap();
    // 2 attention layers x 1024 cells x 2 KV heads x (256 + 256) x f16 = 4.00 MiB;
    // 6 delta-net layers x (3 x 1024 conv + 128 x 512 state) x f32 = 1.57 MiB.
    let qwen = synth(dir.path(), "qwen3.6-35b-a3b-mini", &[]);
    assert_eq!(kv(&qwen), 4 * MIB + 6 * (3 * 1024 + 128 * 512) * 4);
    // 2 MLA layers x 1024 cells x (256 + 64) latent x f16 = 1.25 MiB;
    // 6 KDA layers x (3 x 3 x 512 conv + 4 x 128 x 128 state) x f32 = 1.61 MiB.
    let out = dir.path().join("ling.gguf");
    ok(&epm(&[
        "synth",
        "--preset",
        "ling-3.0-flash-mini",
        "-o",
        out.to_str().unwrap(),
    ]));
    let ling = dir.path().join("ling-00001-of-00002.gguf");
    assert_eq!(
        kv(&ling),
        2 * 1024 * 320 * 2 + 6 * (9 * 512 + 4 * 128 * 128) * 4
    );
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
    let model = epm_gguf::GgufModel::open(&first).unwrap();
    let index = epm_core::model::ModelIndex::build(&model).unwrap();
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
        let layers = &stats.per_layer;
        layers.iter().map(|l| l.top_decile_share).sum::<f64>() / layers.len() as f64
    };
    let (flat, skewed) = (share("0"), share("1.5"));
    assert!(
        skewed > flat + 0.15,
        "top-decile share {skewed} with skew vs {flat} without"
    );
}

/// `--dry-run` sizes a model too big for the disk without writing anything.
#[test]
fn dry_run_sizes_the_full_ling_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ling.gguf");
    let stdout = ok(&epm(&[
        "synth",
        "--preset",
        "ling-3.0-flash",
        "--dry-run",
        "-o",
        out.to_str().unwrap(),
    ]));
    assert!(stdout.contains("ling-00001-of-00002.gguf"), "{stdout}");
    assert!(stdout.contains("ling-00002-of-00002.gguf"), "{stdout}");
    let total: u64 = stdout
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // Within 3% of the real 77,010,144,672-byte GGUF.
    assert!(
        (total as f64 / 77_010_144_672.0 - 1.0).abs() < 0.03,
        "{total}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
