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
    // A heat folder that cannot be made (its parent is a file): said before the load.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let heat = file.join("heat");
    run_gen(
        &model,
        &["--heat-dir", heat.to_str().unwrap()],
        "--heat-dir: ",
    );
}

#[test]
fn output_files_in_missing_folders_are_named_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    for flag in ["--dump-logits", "--trace-file", "--stats-file"] {
        let target = dir.path().join("no-such-folder").join("out.bin");
        let t = target.to_str().unwrap();
        let out = epm(&[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "hello",
            "-n",
            "2",
            flag,
            t,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert_eq!(err.matches(t).count(), 1, "{flag}: {err}");
        assert!(err.contains("does not exist"), "{flag}: {err}");
        assert!(!err.contains("os error 2): No such"), "{flag}: {err}");
    }
}

/// A model file truncated under a running process: a read of the vanished pages raises
/// SIGBUS, which must end in a message naming the file and exit code 2, not "Bus error".
#[test]
fn a_model_truncated_while_running_is_named() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let min_mb = min_budget_mb(&model, &["-c", "1024"]).to_string();
    let stats_path = dir.path().join("stats.json");
    let mut child = Command::new(bin())
        .args(["generate", "-m", model.to_str().unwrap(), "-p", "hello"])
        .args(["-n", "900", "-c", "1024", "--ram-budget-mb", &min_mb])
        .args(["--stats-file", stats_path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(model.to_str().unwrap()), "stderr: {err}");
    assert!(err.contains("SIGBUS"), "stderr: {err}");
    // The stats file was written on the way out, whole, and says the run did not complete.
    let s = stats(&stats_path);
    assert!(!s.complete);
    assert!(s.tokens.generated > 0);
}
