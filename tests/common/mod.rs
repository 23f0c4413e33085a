//! Helpers shared by the integration tests: run `epm-run` as a child process, make
//! synthetic models in a per-test temp dir, and put a child under a cgroup v1 memory cap.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub const MIB: u64 = 1 << 20;

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

pub fn json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

pub fn plan(model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "-m", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&epm(&args))).expect("plan --json parses")
}

/// A cgroup v1 memory cap, removed on drop. `None` where the controller is not writable.
pub struct Cgroup {
    pub dir: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);
const V1_ROOT: &str = "/sys/fs/cgroup/memory";

impl Cgroup {
    pub fn new(limit_bytes: u64) -> Option<Cgroup> {
        let name = format!(
            "epm-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = Path::new(V1_ROOT).join(name);
        std::fs::create_dir(&dir).ok()?;
        let cg = Cgroup { dir };
        std::fs::write(
            cg.dir.join("memory.limit_in_bytes"),
            limit_bytes.to_string(),
        )
        .ok()?;
        let memsw = cg.dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            std::fs::write(memsw, limit_bytes.to_string()).ok()?;
        }
        Some(cg)
    }

    /// `cmd` run as a member of this cgroup (the shell joins it, then execs the command).
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg(program)
            .args(args);
        c
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    pub fn oom_kills(&self) -> u64 {
        self.read("memory.oom_control")
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn max_usage(&self) -> u64 {
        self.read("memory.max_usage_in_bytes")
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Members have exited by now; retry briefly while the kernel finishes the exit.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// `generate` arguments: `prompt`, `n` tokens, ctx 1024, 2 threads, stats to `stats`.
pub fn generate_args(model: &Path, prompt: &str, n: &str, stats: &Path) -> Vec<String> {
    let model = model.to_str().unwrap();
    let stats = stats.to_str().unwrap();
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
    ]
    .map(String::from)
    .to_vec()
}

/// Run `generate` (see [`generate_args`]) plus `extra`, dumping logits; returns the logits
/// bytes and the parsed stats. Files are `dir/<tag>.logits` and `dir/<tag>.json`.
pub fn generate(
    model: &Path,
    dir: &Path,
    tag: &str,
    prompt: &str,
    n: &str,
    extra: &[&str],
) -> (Vec<u8>, serde_json::Value) {
    let logits = dir.join(format!("{tag}.logits"));
    let stats = dir.join(format!("{tag}.json"));
    let mut args = generate_args(model, prompt, n, &stats);
    args.extend([
        "--dump-logits".to_string(),
        logits.to_str().unwrap().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&epm(&refs));
    (std::fs::read(&logits).unwrap(), json(&stats))
}
