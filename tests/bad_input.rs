//! Bad input gets a clear message and exit code 2, never a panic.

mod common;

use common::*;
use std::path::Path;

fn expect_usage_error(args: &[&str], needle: &str) {
    let out = epm(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "args {args:?}: stderr {err}");
    assert!(
        err.contains(needle),
        "args {args:?}: expected {needle:?} in {err}"
    );
    assert!(!err.contains("panicked"), "args {args:?} panicked: {err}");
}

fn gen(model: &Path) -> Vec<String> {
    [
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "hello",
        "-n",
        "4",
    ]
    .map(String::from)
    .to_vec()
}

fn run_gen(model: &Path, extra: &[&str], needle: &str) {
    let mut args = gen(model);
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_usage_error(&refs, needle);
}

#[test]
fn missing_directory_and_non_gguf_paths() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    run_gen(&dir.path().join("nope.gguf"), &[], "cannot open");
    run_gen(dir.path(), &[], "is a directory");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "this is not a model").unwrap();
    run_gen(&text, &[], "is not a GGUF file");
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, "").unwrap();
    run_gen(&empty, &[], "is not a GGUF file");
}

#[test]
fn truncated_models() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let bytes = std::fs::read(&model).unwrap();
    let header_cut = dir.path().join("header-cut.gguf");
    std::fs::write(&header_cut, &bytes[..2000]).unwrap();
    run_gen(&header_cut, &[], "truncated header");
    let data_cut = dir.path().join("data-cut.gguf");
    std::fs::write(&data_cut, &bytes[..bytes.len() - 100_000]).unwrap();
    run_gen(&data_cut, &[], "runs past the end of the file");
    // plan reads the same way
    expect_usage_error(&["plan", "-m", data_cut.to_str().unwrap()], "truncated");
}

#[test]
fn budgets_below_minimum_or_not_numbers() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let plan = plan(&model, &[]);
    let min_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    run_gen(
        &model,
        &["--ram-budget-mb", "16"],
        &format!("minimum of {min_mb} MiB"),
    );
    run_gen(&model, &["--ram-budget-mb", "lots"], "invalid value 'lots'");
    run_gen(&model, &["--ram-budget-mb", "0"], "greater than 0");
    run_gen(
        &model,
        &["--ram-budget-mb", "512", "--no-pager"],
        "cannot be used with",
    );
}

#[test]
fn other_usage_errors() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    expect_usage_error(
        &["generate", "-m", model.to_str().unwrap()],
        "give a prompt",
    );
    expect_usage_error(
        &[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "hello",
            "-c",
            "16",
            "-n",
            "5000",
        ],
        "context too small",
    );
    expect_usage_error(
        &["synth", "--preset", "nonesuch", "-o", "/tmp/x.gguf"],
        "unknown preset",
    );
    let missing = dir.path().join("missing.txt");
    expect_usage_error(
        &[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-f",
            missing.to_str().unwrap(),
        ],
        "cannot read prompt file",
    );
}
