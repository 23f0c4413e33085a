//! Hard memory caps for child runs: a cgroup (v1 `memory.limit_in_bytes` plus
//! `memory.memsw.limit_in_bytes`, or v2 `memory.max`), one per run and removed on drop; or,
//! where no cgroup is writable, `RLIMIT_DATA` plus a sampler that kills at the budget.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V1_BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";
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
    /// A v1 blkio cgroup the child joins too (`with_read_limit`).
    blkio: Option<PathBuf>,
}

/// A read-bandwidth limit could not be set.
#[derive(Debug, thiserror::Error)]
#[error("cannot throttle reads of {device}: {reason}")]
pub struct ThrottleError {
    pub device: String,
    pub reason: String,
}

/// What the cap saw of a finished run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CapFacts {
    pub max_usage_bytes: Option<u64>,
    pub oom_kills: u64,
    /// Times a charge met the limit and the kernel had to reclaim (v1 `memory.failcnt`, v2
    /// the `max` count of `memory.events`): pages of the run's, experts included, taken
    /// from it by the kernel rather than evicted by the pager.
    #[serde(default)]
    pub limit_hits: u64,
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
        if let Some(cap) = Cap::hard(limit) {
            return cap;
        }
        Cap {
            kind: CapKind::RlimitSampler,
            limit,
            dir: None,
            blkio: None,
        }
    }

    /// Throttle the child's reads of disk `device` (`MAJ:MIN`) to `bytes_per_s`: cgroup v1
    /// `blkio.throttle.read_bps_device` in a blkio cgroup of its own, or v2 `io.max` in the
    /// cap's cgroup.
    pub fn with_read_limit(mut self, device: &str, bytes_per_s: u64) -> Result<Cap, ThrottleError> {
        let fail = |reason: String| ThrottleError {
            device: device.to_string(),
            reason,
        };
        let rule = |v2: bool| {
            if v2 {
                format!("{device} rbps={bytes_per_s}")
            } else {
                format!("{device} {bytes_per_s}")
            }
        };
        if self.dir.is_none() {
            return Err(fail("reads can only be throttled inside a cgroup, and no memory cgroup is writable here".into()));
        }
        if self.kind == CapKind::CgroupV2 {
            let dir = self.dir.clone().ok_or_else(|| fail("no cgroup".into()))?;
            std::fs::write(dir.join("io.max"), rule(true))
                .map_err(|e| fail(format!("io.max: {e} (is the io controller enabled?)")))?;
            return Ok(self);
        }
        let dir = Path::new(V1_BLKIO_ROOT).join(cgroup_name());
        std::fs::create_dir(&dir).map_err(|e| {
            fail(format!(
                "{}: {e} (a writable cgroup v1 blkio controller is needed)",
                dir.display()
            ))
        })?;
        // Set now, so that drop removes it whatever happens next.
        self.blkio = Some(dir.clone());
        std::fs::write(dir.join("blkio.throttle.read_bps_device"), rule(false))
            .map_err(|e| fail(format!("blkio.throttle.read_bps_device: {e}")))?;
        Ok(self)
    }

    /// A cgroup cap (v1, else v2), which bounds page cache too; `None` where no memory
    /// controller is writable.
    pub fn hard(limit: u64) -> Option<Cap> {
        Cap::cgroup_v1(limit).or_else(|| Cap::cgroup_v2(limit))
    }

    /// The cgroup's directory, for a cgroup cap.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn cgroup_v1(limit: u64) -> Option<Cap> {
        // memsw, where present, keeps the cap from leaking into swap.
        let files = [
            ("memory.limit_in_bytes", limit, true),
            ("memory.memsw.limit_in_bytes", limit, false),
        ];
        Cap::cgroup(CapKind::CgroupV1, V1_ROOT, limit, &files)
    }

    fn cgroup_v2(limit: u64) -> Option<Cap> {
        if !v2_available() {
            return None;
        }
        let files = [("memory.max", limit, true), ("memory.swap.max", 0, false)];
        Cap::cgroup(CapKind::CgroupV2, V2_ROOT, limit, &files)
    }

    /// Create a cgroup under `root` and write each `(file, value, required)`: a required
    /// file that cannot be written fails the cap (drop then removes the directory); an
    /// optional one is written only where the kernel has it.
    fn cgroup(kind: CapKind, root: &str, limit: u64, files: &[(&str, u64, bool)]) -> Option<Cap> {
        let dir = Path::new(root).join(cgroup_name());
        std::fs::create_dir(&dir).ok()?;
        let cap = Cap {
            kind,
            limit,
            dir: Some(dir.clone()),
            blkio: None,
        };
        for &(file, value, required) in files {
            let path = dir.join(file);
            if required {
                std::fs::write(&path, value.to_string()).ok()?;
            } else if path.exists() {
                let _ = std::fs::write(&path, value.to_string());
            }
        }
        Some(cap)
    }

    /// `program args` started inside the cap.
    pub fn command(&self, program: &Path, args: &[String]) -> Command {
        match &self.dir {
            Some(dir) => {
                // The shell joins the cgroups, then execs: the PID stays the same.
                let blkio = self
                    .blkio
                    .as_ref()
                    .map_or_else(|| PathBuf::from("/dev/null"), |b| b.join("cgroup.procs"));
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0\" && echo $$ > \"$1\" && shift && exec \"$@\"")
                    .arg(dir.join("cgroup.procs"))
                    .arg(blkio)
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

    /// A cgroup file that holds one number.
    fn number(&self, file: &str) -> Option<u64> {
        self.read(file)?.trim().parse().ok()
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
                max_usage_bytes: self.number("memory.max_usage_in_bytes"),
                oom_kills: counter(self.read("memory.oom_control"), "oom_kill ").unwrap_or(0),
                limit_hits: self.number("memory.failcnt").unwrap_or(0),
            },
            CapKind::CgroupV2 => CapFacts {
                max_usage_bytes: self.number("memory.peak"),
                oom_kills: counter(self.read("memory.events"), "oom_kill ").unwrap_or(0),
                limit_hits: counter(self.read("memory.events"), "max ").unwrap_or(0),
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
        for dir in [&self.dir, &self.blkio].into_iter().flatten() {
            remove_cgroup(dir);
        }
    }
}

fn remove_cgroup(dir: &Path) {
    // Members have exited; the kernel may need a moment to let the directory go.
    for _ in 0..100 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tracing::warn!("could not remove cgroup {}", dir.display());
}
