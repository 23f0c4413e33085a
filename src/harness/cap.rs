//! Hard memory caps for child runs: a cgroup (v1 `memory.limit_in_bytes` plus
//! `memory.memsw.limit_in_bytes`, or v2 `memory.max`), one per run and removed on drop; or,
//! where no cgroup is writable, `RLIMIT_DATA` plus a sampler that kills at the budget.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";

/// Which mechanism held the cap (the JSON's `cap` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CapKind {
    #[serde(rename = "cgroup-v1")]
    CgroupV1,
    #[serde(rename = "cgroup-v2")]
    CgroupV2,
    #[serde(rename = "rlimit+sampler")]
    RlimitSampler,
}

/// A cap of `limit` bytes. A cgroup directory is removed when this is dropped, whether the
/// run succeeded, failed or was interrupted.
#[derive(Debug)]
pub struct Cap {
    pub kind: CapKind,
    pub limit: u64,
    dir: Option<PathBuf>,
}

/// What the cap saw of a finished run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CapFacts {
    pub max_usage_bytes: Option<u64>,
    pub oom_kills: u64,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn cgroup_name() -> String {
    format!(
        "epm-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn v2_available() -> bool {
    std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.subtree_control"))
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"))
}

impl Cap {
    /// The strongest cap this machine allows.
    pub fn new(limit: u64) -> Cap {
        if let Some(cap) = Cap::cgroup_v1(limit).or_else(|| Cap::cgroup_v2(limit)) {
            return cap;
        }
        Cap {
            kind: CapKind::RlimitSampler,
            limit,
            dir: None,
        }
    }

    fn cgroup_v1(limit: u64) -> Option<Cap> {
        let dir = Path::new(V1_ROOT).join(cgroup_name());
        std::fs::create_dir(&dir).ok()?;
        let cap = Cap {
            kind: CapKind::CgroupV1,
            limit,
            dir: Some(dir.clone()),
        };
        std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            std::fs::write(memsw, limit.to_string()).ok()?;
        }
        Some(cap)
    }

    fn cgroup_v2(limit: u64) -> Option<Cap> {
        if !v2_available() {
            return None;
        }
        let dir = Path::new(V2_ROOT).join(cgroup_name());
        std::fs::create_dir(&dir).ok()?;
        let cap = Cap {
            kind: CapKind::CgroupV2,
            limit,
            dir: Some(dir.clone()),
        };
        std::fs::write(dir.join("memory.max"), limit.to_string()).ok()?;
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        Some(cap)
    }

    /// `program args` started inside the cap.
    pub fn command(&self, program: &Path, args: &[String]) -> Command {
        match &self.dir {
            Some(dir) => {
                // The shell joins the cgroup, then execs: the PID stays the same.
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0\" && exec \"$@\"")
                    .arg(dir.join("cgroup.procs"))
                    .arg(program)
                    .args(args);
                c
            }
            None if which("prlimit") => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--data={}", self.limit))
                    .arg(program)
                    .args(args);
                c
            }
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        }
    }

    /// Whether the harness's sampler must enforce the cap by killing the child.
    pub fn needs_sampler_kill(&self) -> bool {
        self.kind == CapKind::RlimitSampler
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.as_ref()?.join(file)).ok()
    }

    pub fn facts(&self) -> CapFacts {
        let counter = |text: Option<String>, key: &str| {
            text.and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            })
        };
        match self.kind {
            CapKind::CgroupV1 => CapFacts {
                max_usage_bytes: self
                    .read("memory.max_usage_in_bytes")
                    .and_then(|v| v.trim().parse().ok()),
                oom_kills: counter(self.read("memory.oom_control"), "oom_kill ").unwrap_or(0),
            },
            CapKind::CgroupV2 => CapFacts {
                max_usage_bytes: self.read("memory.peak").and_then(|v| v.trim().parse().ok()),
                oom_kills: counter(self.read("memory.events"), "oom_kill ").unwrap_or(0),
            },
            CapKind::RlimitSampler => CapFacts::default(),
        }
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
}

impl Drop for Cap {
    fn drop(&mut self) {
        let Some(dir) = &self.dir else { return };
        // Members have exited; the kernel may need a moment to let the directory go.
        for _ in 0..100 {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!("could not remove cgroup {}", dir.display());
    }
}
