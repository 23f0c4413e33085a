//! The official client libraries (`openai`, `anthropic`, `ollama`, and OpenAI's Agents SDK,
//! `openai-agents`), installed from PyPI, against a real `epm-run serve`: the protocol is
//! what those clients accept, not what our own tests expect. The clients go
//! into a virtualenv under cargo's target directory (made once, refreshed when
//! `tools/client-requirements.txt` changes); each check script starts its own server on a
//! loopback port and writes a JSON record whose `all_passed` this test asserts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Python with the clients of `tools/client-requirements.txt`.
fn client_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let requirements = std::fs::read_to_string(root.join("tools/client-requirements.txt")).unwrap();
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-venv");
    let python = venv.join("bin/python3");
    let marker = venv.join("requirements.installed");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(requirements.as_str()) {
        return python;
    }
    let status = Command::new("python3")
        .args(["-m", "venv", venv.to_str().unwrap()])
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "python3 -m venv failed: install python3-venv"
    );
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(root.join("tools/client-requirements.txt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "installing the official clients from PyPI failed (the protocol tests need PyPI):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&marker, requirements).unwrap();
    python
}

fn run_check(script: &str) {
    let _g = common::serial();
    let python = client_python();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.json");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python)
        .arg(root.join("tools").join(script))
        .args(["--bin", common::bin(), "--out", record.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{report}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(v["all_passed"], true, "{report}");
}

#[test]
fn the_openai_client_chats_calls_tools_parses_structured_output_and_reads_logprobs() {
    run_check("openai_client_check.py");
}

#[test]
fn the_anthropic_sdk_creates_streams_and_uses_tools() {
    run_check("anthropic_client_check.py");
}

#[test]
fn the_ollama_client_chats_generates_lists_shows_and_follows_a_format() {
    run_check("ollama_client_check.py");
}

#[test]
fn the_agents_sdk_keeps_a_conversation_on_the_server_both_ways() {
    run_check("agents_sdk_check.py");
}
