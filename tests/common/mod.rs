//! Helpers shared by the integration tests: run `epm-run` as a child process, make
//! synthetic models in a per-test temp dir, read the typed stats, and put a child under a
//! hard memory cap (the harness's own [`Cap`]).
#![allow(dead_code, unused_imports)]

pub mod browser;
pub mod server;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub use epm_bench::harness::cap::{Cap, CapKind};
pub use epm_core::stats::Snapshot;
pub use epm_core::units::MIB;

/// Tests that run llama.cpp take this lock first. ggml's thread pool spin-waits, so two
/// generations at once on a 2-core machine slow each other down by orders of magnitude.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_epm-run")
}

pub fn epm(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("spawn epm-run")
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "epm-run failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn synth(dir: &Path, preset: &str, extra: &[&str]) -> PathBuf {
    let path = dir.join(format!("{preset}.gguf"));
    let mut args = vec!["synth", "--preset", preset, "-o", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    ok(&epm(&args));
    path
}

/// Drop `path` from the page cache and read it whole, as `cat` or a checksum does:
/// readahead caches it in large folios (up to 2 MiB), each holding several experts' slices.
pub fn read_whole(path: &Path) {
    epm_sys::cache::drop_file_cache(path).unwrap();
    let mut file = std::fs::File::open(path).unwrap();
    std::io::copy(&mut file, &mut std::io::sink()).unwrap();
}

/// A JSON file (plans, A/B reports) as untyped JSON.
pub fn json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// A stats file, deserialized into the typed snapshot (fails on any missing key).
pub fn stats(path: &Path) -> Snapshot {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{} is not a stats snapshot: {e}", path.display()))
}

pub fn plan(model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "-m", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&epm(&args))).expect("plan --json parses")
}

/// The plan's minimum budget, in whole MiB.
pub fn min_budget_mb(model: &Path, extra: &[&str]) -> u64 {
    plan(model, extra)["min_budget_bytes"]
        .as_u64()
        .unwrap()
        .div_ceil(MIB)
}

/// `generate` arguments: `prompt`, `n` tokens, ctx 1024, 2 threads, stats to `stats`, the
/// expert heat in the tests' own folder (each test's model is a file of its own, so its
/// heat is too).
pub fn generate_args(model: &Path, prompt: &str, n: &str, stats: &Path) -> Vec<String> {
    let model = model.to_str().unwrap();
    let stats = stats.to_str().unwrap();
    let heat = concat!(env!("CARGO_TARGET_TMPDIR"), "/heat");
    [
        "generate",
        "-m",
        model,
        "-p",
        prompt,
        "-n",
        n,
        "-c",
        "1024",
        "-t",
        "2",
        "--stats-file",
        stats,
        "--heat-dir",
        heat,
    ]
    .map(String::from)
    .to_vec()
}

/// Run `generate` (see [`generate_args`]) plus `extra` (whose `--heat-dir` or `-t` replaces
/// the default), dumping logits; returns the logits bytes and the stats. Files are
/// `dir/<tag>.logits` and `dir/<tag>.json`.
pub fn generate(
    model: &Path,
    dir: &Path,
    tag: &str,
    prompt: &str,
    n: &str,
    extra: &[&str],
) -> (Vec<u8>, Snapshot) {
    let logits = dir.join(format!("{tag}.logits"));
    let stats_path = dir.join(format!("{tag}.json"));
    let mut args = generate_args(model, prompt, n, &stats_path);
    // A heat folder or a thread count of the test's own replaces the default one.
    for own in ["--heat-dir", "-t"] {
        if extra.contains(&own) {
            let at = args.iter().position(|a| a == own).unwrap();
            args.drain(at..at + 2);
        }
    }
    args.extend([
        "--dump-logits".to_string(),
        logits.to_str().unwrap().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&epm(&refs));
    (std::fs::read(&logits).unwrap(), stats(&stats_path))
}

/// The JSON object `base` with `extra`'s keys added (replacing any of the same name).
pub fn merged(mut base: serde_json::Value, extra: &serde_json::Value) -> serde_json::Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    base
}

/// The expert heat files (`heat-<hash>.bin`) in `dir`, none where it does not exist (the
/// lock file beside them left out).
pub fn heat_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.starts_with("heat-") && name.ends_with(".bin")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Poll until `cond` holds, failing after `timeout` with `what`.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `generate` args as `String`s for [`Cap::command`].
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The JSON of each `data:` line of an SSE body (`[DONE]` as a string).
pub fn sse_events(reader: impl Read) -> Vec<serde_json::Value> {
    BufReader::new(reader)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("data: ").map(String::from))
        .map(|d| serde_json::from_str(&d).unwrap_or(serde_json::Value::String(d)))
        .collect()
}

/// Each event of a live SSE stream as it arrives (the JSON of a `data:` line), until
/// `[DONE]` or the stream's end: for a test that acts while the stream runs.
pub fn each_sse_event(reader: impl Read, mut each: impl FnMut(serde_json::Value)) {
    for line in BufReader::new(reader).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        each(serde_json::from_str(data).unwrap());
    }
}

/// The synthetic Qwen3 template with the generation prompt of Qwen3.5 and later templates:
/// the prompt opens the `<think>` block, so the reply starts inside it.
pub fn template_opening_the_block(dir: &Path) -> PathBuf {
    let stock = include_str!("../../crates/synth/src/templates/qwen3-chatml.jinja");
    let closed = "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}";
    assert!(stock.contains(closed), "the stock template changed");
    let opening = stock.replace(
        closed,
        "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}",
    );
    let path = dir.join("think-open.jinja");
    std::fs::write(&path, opening).unwrap();
    path
}

/// The text of a streamed chat's `delta[key]` (`content`, `reasoning_content`), joined.
pub fn chat_deltas(events: &[serde_json::Value], key: &str) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"][key].as_str())
        .collect()
}
