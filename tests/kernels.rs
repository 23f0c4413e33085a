//! Same kernels, same output: every preset's dumped logits hash to what the CMake build of
//! llama.cpp produced on this CPU (`tests/golden/logits.json`, recorded by
//! `tools/validate_build.py`). A compiler flag or definition that changed what llama.cpp
//! computes (an optimization level, `-march`, LLAMAFILE, REPACK) changes these digests.
//! `-march=native` makes the kernels depend on the CPU, so digests are kept per CPU flag
//! set; on a CPU with none recorded the test says so and checks nothing.

mod common;

use common::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn cpu_signature() -> (String, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let first = info.split("\n\n").next().unwrap_or("");
    let field = |name: &str| {
        first
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let mut flags: Vec<&str> = Vec::new();
    let f = field("flags");
    flags.extend(f.split_whitespace());
    flags.sort_unstable();
    let digest = Sha256::digest(flags.join(" ").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (field("model name"), hex[..16].to_string())
}

fn first_shard(dir: &Path, preset: &str) -> PathBuf {
    let single = dir.join(format!("{preset}.gguf"));
    if single.exists() {
        single
    } else {
        dir.join(format!("{preset}-00001-of-00002.gguf"))
    }
}

#[test]
fn logits_match_the_cmake_build_on_this_cpu() {
    let golden = json(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/golden/logits.json"
    )));
    let (cpu, flags) = cpu_signature();
    let Some(entry) = golden.get(&flags) else {
        eprintln!("note: no golden logits recorded for this CPU ({cpu}, flags {flags}); record them with tools/validate_build.py");
        return;
    };
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let prompt = entry["prompt"].as_str().unwrap();
    let n = entry["n_predict"].as_u64().unwrap().to_string();
    let digests = entry["logits_sha256"].as_object().unwrap();
    assert!(digests.len() >= 10, "{digests:?}");
    let mut checked = 0;
    for (key, want) in digests {
        let (preset, mode) = key.split_once('/').unwrap();
        let model = first_shard(dir.path(), preset);
        if !model.exists() {
            synth(dir.path(), preset, &[]);
        }
        let model = first_shard(dir.path(), preset);
        let budget;
        let flags: Vec<&str> = match mode {
            "unpaged" => vec!["--no-pager"],
            "paged-min" => {
                budget = min_budget_mb(&model, &["-c", "1024"]).to_string();
                vec!["--ram-budget-mb", &budget]
            }
            other => panic!("unknown mode {other}"),
        };
        let (logits, _) = common::generate(
            &model,
            dir.path(),
            &key.replace('/', "-"),
            prompt,
            &n,
            &flags,
        );
        let got: String = Sha256::digest(&logits)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            &got,
            want.as_str().unwrap(),
            "{key}: logits differ from the CMake build's"
        );
        checked += 1;
    }
    eprintln!("{checked} preset runs match the CMake build on {cpu}");
}
