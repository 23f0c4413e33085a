//! The memory cgroup that bounds this process: which of its cgroup and that cgroup's
//! ancestors sets the lowest limit, and the kernel memory charged to it.
//!
//! A cgroup's limit charges more than RSS: page tables, the page cache's index and the
//! process's other kernel objects count too. The budget is RSS, so where a limit sits close
//! above it the pager needs that kernel figure ([`KernelMemoryProbe`]) to keep the kernel
//! from reclaiming experts under the cap.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where the two hierarchies are mounted (systemd's and Docker's layout; a cgroup
/// namespace shows the process's own cgroup as the mount's root).
const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";

/// A limit this large is "no limit": v1 writes `PAGE_COUNTER_MAX` pages
/// (9,223,372,036,854,771,712 bytes on 4 KiB pages) for an unlimited cgroup.
const UNLIMITED_FROM: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    fn limit_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        }
    }
}

/// The cgroup whose memory limit binds: the lowest among this process's cgroup and its
/// ancestors (a limit bounds everything below it, and its counters count it all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    pub dir: PathBuf,
    pub version: CgroupVersion,
    pub limit_bytes: u64,
}

impl MemoryCgroup {
    /// The limit that binds this process, if any: v1's memory hierarchy where the process
    /// has one, else the v2 hierarchy.
    pub fn of_this_process() -> Option<MemoryCgroup> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        MemoryCgroup::find(&text, Path::new(V1_MEMORY_ROOT), Path::new(V2_ROOT))
    }

    /// From the text of `/proc/<pid>/cgroup`, with the hierarchies mounted at `v1_root`
    /// and `v2_root`.
    pub fn find(proc_cgroup: &str, v1_root: &Path, v2_root: &Path) -> Option<MemoryCgroup> {
        let (version, path) = memory_cgroup_path(proc_cgroup)?;
        let root = match version {
            CgroupVersion::V1 => v1_root,
            CgroupVersion::V2 => v2_root,
        };
        let mut dir = root.join(path.trim_start_matches('/'));
        let mut best: Option<MemoryCgroup> = None;
        loop {
            let limit = std::fs::read_to_string(dir.join(version.limit_file()))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .filter(|&l| l < UNLIMITED_FROM);
            if let Some(limit_bytes) = limit {
                if best.as_ref().is_none_or(|b| limit_bytes < b.limit_bytes) {
                    best = Some(MemoryCgroup {
                        dir: dir.clone(),
                        version,
                        limit_bytes,
                    });
                }
            }
            if dir == root || !dir.pop() || !dir.starts_with(root) {
                return best;
            }
        }
    }

    /// A reader of the kernel memory charged to this cgroup.
    pub fn kernel_probe(&self) -> io::Result<KernelMemoryProbe> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.kmem.usage_in_bytes",
            CgroupVersion::V2 => "memory.stat",
        };
        Ok(KernelMemoryProbe {
            file: File::open(self.dir.join(file))?,
            version: self.version,
        })
    }
}

/// The memory controller's line of `/proc/<pid>/cgroup`: v1's `N:...memory...:/path`, or
/// v2's `0::/path` where no v1 memory hierarchy is mounted.
fn memory_cgroup_path(text: &str) -> Option<(CgroupVersion, &str)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some((CgroupVersion::V1, path));
        }
        if controllers.is_empty() {
            v2 = Some((CgroupVersion::V2, path));
        }
    }
    v2
}

/// Reads the kernel memory charged to a cgroup without allocating, so the eval callback
/// can read it once per routed layer: v1's `memory.kmem.usage_in_bytes`, or the `kernel`
/// line of v2's `memory.stat` (kernel 5.18 and later).
#[derive(Debug)]
pub struct KernelMemoryProbe {
    file: File,
    version: CgroupVersion,
}

impl KernelMemoryProbe {
    /// Kernel bytes charged to the cgroup now, or `None` when the file cannot be read or
    /// does not say.
    pub fn kernel_bytes(&self) -> Option<u64> {
        let mut buf = [0u8; 4096];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        parse_kernel_bytes(self.version, &buf[..n])
    }
}

fn parse_kernel_bytes(version: CgroupVersion, text: &[u8]) -> Option<u64> {
    let digits = match version {
        CgroupVersion::V1 => text,
        CgroupVersion::V2 => text
            .split(|&b| b == b'\n')
            .find_map(|l| l.strip_prefix(b"kernel "))?,
    };
    crate::proc::ascii_u64(digits.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_LINES: &str = "9:name=systemd:/\n4:memory:/outer/inner\n0::/\n";
    const V2_LINES: &str = "0::/user.slice/run.scope\n";

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }

    #[test]
    fn the_memory_line_names_the_hierarchy() {
        assert_eq!(
            memory_cgroup_path(V1_LINES),
            Some((CgroupVersion::V1, "/outer/inner"))
        );
        assert_eq!(
            memory_cgroup_path("5:cpu,memory:/a\n"),
            Some((CgroupVersion::V1, "/a"))
        );
        assert_eq!(
            memory_cgroup_path(V2_LINES),
            Some((CgroupVersion::V2, "/user.slice/run.scope"))
        );
        assert_eq!(memory_cgroup_path("3:cpuset:/\n"), None);
    }

    #[test]
    fn the_lowest_limit_on_the_way_to_the_root_binds() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = tmp.path().join("v1");
        let unlimited = "9223372036854771712\n";
        write(&v1, "memory.limit_in_bytes", unlimited);
        write(&v1.join("outer"), "memory.limit_in_bytes", "1073741824\n");
        write(&v1.join("outer/inner"), "memory.limit_in_bytes", unlimited);
        let found = MemoryCgroup::find(V1_LINES, &v1, tmp.path()).unwrap();
        assert_eq!(found.dir, v1.join("outer"));
        assert_eq!(found.limit_bytes, 1 << 30);
        assert_eq!(found.version, CgroupVersion::V1);

        // The inner cgroup's own, lower limit binds instead.
        write(
            &v1.join("outer/inner"),
            "memory.limit_in_bytes",
            "536870912\n",
        );
        let found = MemoryCgroup::find(V1_LINES, &v1, tmp.path()).unwrap();
        assert_eq!(found.dir, v1.join("outer/inner"));

        // No limit anywhere: none.
        write(&v1.join("outer"), "memory.limit_in_bytes", unlimited);
        write(&v1.join("outer/inner"), "memory.limit_in_bytes", unlimited);
        assert_eq!(MemoryCgroup::find(V1_LINES, &v1, tmp.path()), None);
    }

    #[test]
    fn v2_reads_memory_max_and_the_kernel_line_of_memory_stat() {
        let tmp = tempfile::tempdir().unwrap();
        let scope = tmp.path().join("user.slice/run.scope");
        write(&tmp.path().join("user.slice"), "memory.max", "max\n");
        write(&scope, "memory.max", "2147483648\n");
        write(
            &scope,
            "memory.stat",
            "anon 4096\nfile 8192\nkernel 1234567\nsock 0\n",
        );
        let found = MemoryCgroup::find(V2_LINES, Path::new("/nonexistent"), tmp.path()).unwrap();
        assert_eq!(found.dir, scope);
        assert_eq!(found.limit_bytes, 2 << 30);
        assert_eq!(
            found.kernel_probe().unwrap().kernel_bytes(),
            Some(1_234_567)
        );
    }

    #[test]
    fn kernel_bytes_are_digits_or_nothing() {
        assert_eq!(
            parse_kernel_bytes(CgroupVersion::V1, b"831488\n"),
            Some(831_488)
        );
        assert_eq!(parse_kernel_bytes(CgroupVersion::V1, b""), None);
        assert_eq!(parse_kernel_bytes(CgroupVersion::V1, b"12a\n"), None);
        assert_eq!(
            parse_kernel_bytes(CgroupVersion::V1, b"99999999999999999999999\n"),
            None
        );
        assert_eq!(
            parse_kernel_bytes(CgroupVersion::V2, b"anon 1\nfile 2\n"),
            None
        );
    }

    /// On a machine with a memory cgroup, the probe reads this process's own counter.
    #[test]
    fn this_process_kernel_memory_is_read_where_a_limit_binds() {
        let Some(cg) = MemoryCgroup::of_this_process() else {
            eprintln!("note: no memory cgroup limit binds this process");
            return;
        };
        assert!(cg.limit_bytes > 0);
        let probe = cg.kernel_probe().unwrap();
        assert!(probe.kernel_bytes().is_some_and(|b| b > 0));
    }
}
