//! One reader for `/proc` and sysfs: a process's memory and I/O counters, its mappings,
//! available memory and the cgroup limit, the machine, and the block device queue that
//! decides how much the kernel reads ahead.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::page_size;

/// Which process to read: this one, or another by pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pid {
    This,
    Other(u32),
}

impl Pid {
    fn file(self, name: &str) -> String {
        match self {
            Pid::This => format!("/proc/self/{name}"),
            Pid::Other(p) => format!("/proc/{p}/{name}"),
        }
    }
}

/// Of the `pages` pages mapped from `addr` on in this process, how many sit in a folio
/// larger than one page: each present page's frame from `/proc/self/pagemap` (bit 63
/// present, bits 0-54 the frame), then the frame's compound-head or -tail bit (15, 16) from
/// `/proc/kpageflags`. `None` where frames cannot be read: the files are absent, or frame
/// numbers read as 0 (they need CAP_SYS_ADMIN). Pages not mapped are not counted.
pub fn pages_in_large_folios(addr: usize, pages: usize) -> Option<u64> {
    const PRESENT: u64 = 1 << 63;
    const FRAME: u64 = (1 << 55) - 1;
    const COMPOUND: u64 = (1 << 15) | (1 << 16);
    let page = page_size();
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let flags = File::open("/proc/kpageflags").ok()?;
    let mut entries = vec![0u8; pages.checked_mul(8)?];
    pagemap
        .read_exact_at(&mut entries, (addr / page) as u64 * 8)
        .ok()?;
    let mut large = 0u64;
    let mut word = [0u8; 8];
    for entry in entries.chunks_exact(8) {
        let entry = u64::from_le_bytes(entry.try_into().ok()?);
        if entry & PRESENT == 0 {
            continue;
        }
        let frame = entry & FRAME;
        if frame == 0 {
            return None;
        }
        flags.read_exact_at(&mut word, frame * 8).ok()?;
        if u64::from_le_bytes(word) & COMPOUND != 0 {
            large += 1;
        }
    }
    Some(large)
}

/// `value kB` of a `Key: value kB` line, in bytes.
fn kib_value(v: &str) -> Option<u64> {
    v.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()
        .map(|kb| kb * 1024)
}

/// Memory figures of a process from `/proc/<pid>/status`, in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProcMemory {
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub swap: u64,
    pub hwm: u64,
    /// Virtual size of private data (heap and anonymous mappings), touched or not.
    pub data: u64,
}

pub fn memory(pid: Pid) -> io::Result<ProcMemory> {
    let text = std::fs::read_to_string(pid.file("status"))?;
    let mut m = ProcMemory::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let bytes = kib_value(v).unwrap_or(0);
        match k {
            "VmRSS" => m.rss = bytes,
            "RssAnon" => m.rss_anon = bytes,
            "RssFile" | "RssShmem" => m.rss_file += bytes,
            "VmSwap" => m.swap = bytes,
            "VmHWM" => m.hwm = bytes,
            "VmData" => m.data = bytes,
            _ => {}
        }
    }
    Ok(m)
}

/// `read_bytes` from `/proc/<pid>/io`: bytes the process caused to be read from storage.
pub fn read_bytes(pid: Pid) -> Option<u64> {
    std::fs::read_to_string(pid.file("io"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes:")?.trim().parse().ok())
}

/// One line of `/proc/<pid>/maps`: `start-end perms offset dev inode path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsLine<'a> {
    pub start: usize,
    pub end: usize,
    pub perms: &'a str,
    pub offset: usize,
    pub inode: u64,
    /// Empty for anonymous mappings.
    pub path: &'a str,
}

impl<'a> MapsLine<'a> {
    pub fn parse(line: &'a str) -> Option<MapsLine<'a>> {
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset, _dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let (s, e) = range.split_once('-')?;
        Some(MapsLine {
            start: usize::from_str_radix(s, 16).ok()?,
            end: usize::from_str_radix(e, 16).ok()?,
            perms,
            offset: usize::from_str_radix(offset, 16).ok()?,
            inode: inode.parse().ok()?,
            path: f.next().unwrap_or("").trim_start(),
        })
    }
}

/// Bytes of `path` mapped into this process and resident (sum of `Rss:` over its VMAs in
/// `/proc/self/smaps`).
pub fn mapping_rss(path: &Path) -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let want = path.canonicalize().ok();
    let mut inside = false;
    let mut total = 0;
    for line in text.lines() {
        if let Some(vma) = MapsLine::parse(line) {
            inside = !vma.path.is_empty() && Path::new(vma.path).canonicalize().ok() == want;
        } else if inside {
            if let Some(v) = line.strip_prefix("Rss:") {
                total += kib_value(v).unwrap_or(0);
            }
        }
    }
    total
}

/// Reads this process's resident set from `/proc/self/statm` without allocating, for the
/// eval-callback hot path.
#[derive(Debug)]
pub struct RssProbe {
    statm: File,
    page: u64,
}

impl RssProbe {
    pub fn new() -> io::Result<RssProbe> {
        Ok(RssProbe {
            statm: File::open("/proc/self/statm")?,
            page: page_size() as u64,
        })
    }

    /// Total resident bytes (anonymous + file), or 0 when the read fails.
    pub fn rss_bytes(&self) -> u64 {
        let mut buf = [0u8; 128];
        let n = self.statm.read_at(&mut buf, 0).unwrap_or(0);
        // statm: size resident shared text lib data dt (pages)
        let mut fields = buf[..n].split(|&b| b == b' ');
        let _size = fields.next();
        let pages = fields.next().and_then(ascii_u64).unwrap_or(0);
        pages * self.page
    }
}

/// A decimal number written in ASCII digits only, without allocating (the hot path's
/// readers of kernel counters and tensor names); `None` when empty, not all digits, or
/// past `u64`.
pub fn ascii_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A `Key:` of `/proc/meminfo`, in bytes.
pub fn meminfo(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').and_then(kib_value))
}

/// The memory limit that binds this process: the lowest of its cgroup's and that cgroup's
/// ancestors' ([`crate::cgroup::MemoryCgroup`]), if one is set.
pub fn cgroup_memory_limit() -> Option<u64> {
    crate::cgroup::MemoryCgroup::of_this_process().map(|c| c.limit_bytes)
}

/// The cores compute should use by default: one thread per physical core, as llama.cpp's
/// own tools default to (`common_cpu_get_num_math`), since two hyperthreads of one core
/// share its vector units and decode's memory bandwidth; on a hybrid CPU only its
/// performance cores, since ggml's threads work in lockstep and wait for the slowest; and
/// no more than the CPUs this process may run on (affinity, a cgroup's CPU quota). At least
/// one. Matching upstream's default count matters beyond speed: llama.cpp's logits at long
/// contexts depend on the thread count, so a default run is bit-identical to upstream's
/// default run only at the same count.
pub fn compute_cores() -> u32 {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = math_cores(Path::new("/sys/devices"), allowed);
    u32::try_from(cores).unwrap_or(u32::MAX)
}

/// [`compute_cores`] over a sysfs `devices` directory (a fake one in tests).
///
/// Physical cores are the distinct `system/cpu/cpuN/topology/thread_siblings` masks of
/// `cpu0`, `cpu1`, ... until one is missing (`common_cpu_get_num_physical_cores`). A hybrid
/// CPU is one whose kernel lists two core types as perf devices, `cpu_core` and `cpu_atom`
/// (Intel's performance and efficiency cores, Linux 5.13 on); there only the CPUs of
/// `cpu_core/cpus` count, as llama.cpp's CPUID walk counts every core but Intel's Atom
/// type. Nothing readable: `allowed`.
fn math_cores(sys_devices: &Path, allowed: usize) -> usize {
    let cpu_dir = sys_devices.join("system/cpu");
    let masks = (0u32..).map_while(|cpu| {
        std::fs::read_to_string(cpu_dir.join(format!("cpu{cpu}/topology/thread_siblings")))
            .ok()
            .map(|mask| (cpu, mask))
    });
    let hybrid = sys_devices.join("cpu_atom/cpus").exists();
    let performance = hybrid
        .then(|| std::fs::read_to_string(sys_devices.join("cpu_core/cpus")).ok())
        .flatten()
        .and_then(|list| parse_cpu_list(&list));
    let masks: Vec<String> = masks
        .filter(|(cpu, _)| performance.as_ref().is_none_or(|p| p.contains(cpu)))
        .map(|(_, mask)| mask)
        .collect();
    let physical = distinct_cores(masks);
    if physical == 0 {
        allowed.max(1)
    } else {
        physical.min(allowed).max(1)
    }
}

/// A sysfs CPU list (`0-7,16,18-19`) as a set; `None` when malformed or empty.
fn parse_cpu_list(list: &str) -> Option<std::collections::BTreeSet<u32>> {
    let mut cpus = std::collections::BTreeSet::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let cpu = part.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if last < first || last - first > 1 << 16 {
            return None;
        }
        cpus.extend(first..=last);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The physical cores among CPUs' thread-sibling masks: one per distinct non-empty mask.
fn distinct_cores(masks: impl IntoIterator<Item = String>) -> usize {
    masks
        .into_iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// What machine this is, for reports.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub mem_total_bytes: u64,
    pub kernel: String,
    /// The smallest free block, as a page order, that the kernel reports to a hypervisor
    /// for it to take back (free page reporting, a VM's balloon driver;
    /// `/sys/module/page_reporting/parameters/page_reporting_order`), where the kernel has
    /// it. Memory taken back costs a host fault at its next first touch, which falls on
    /// large page-cache folios above all (`probe-paging`; 9 is 2 MiB, 11 reports nothing).
    #[serde(default)]
    pub free_page_reporting_order: Option<u32>,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|v| v.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mem_total_bytes: meminfo("MemTotal").unwrap_or(0),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        free_page_reporting_order: std::fs::read_to_string(
            "/sys/module/page_reporting/parameters/page_reporting_order",
        )
        .ok()
        .and_then(|s| s.trim().parse().ok()),
    }
}

/// The sysfs `queue` directory of the block device holding a file; a partition's queue
/// limits are its disk's. `None` when the file is not on a block device sysfs describes
/// (tmpfs, overlayfs, btrfs).
fn block_queue(meta: &std::fs::Metadata) -> Option<PathBuf> {
    let dev = meta.dev();
    let node = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ))
    .canonicalize()
    .ok()?;
    [node.join("queue"), node.parent()?.join("queue")]
        .into_iter()
        .find(|q| q.is_dir())
}

/// `MAJ:MIN` of the disk holding a file (a partition's disk, whose queue throttling rules
/// apply to), or `None` when it is not on a block device sysfs describes.
pub fn disk_device(path: &Path) -> Option<String> {
    let queue = block_queue(&std::fs::metadata(path).ok()?)?;
    let dev = std::fs::read_to_string(queue.parent()?.join("dev")).ok()?;
    Some(dev.trim().to_string())
}

fn queue_value(queue: &Path, name: &str) -> Option<u64> {
    std::fs::read_to_string(queue.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What one `MADV_WILLNEED` (or `POSIX_FADV_WILLNEED`) call on a file of this device reads
/// at most: the kernel clamps each call to max(`read_ahead_kb`, `max_sectors_kb`) of the
/// block device (`force_page_cache_ra`). A longer range must be advised in pieces, or its
/// tail is left to demand faults, one page at a time under `MADV_RANDOM`. (Checked on a
/// 6.18 kernel: with both at 128 KiB, one call over a 3 MiB range read 128 KiB.)
pub fn readahead_window(meta: &std::fs::Metadata) -> Option<u64> {
    let queue = block_queue(meta)?;
    let window =
        queue_value(&queue, "read_ahead_kb")?.max(queue_value(&queue, "max_sectors_kb")?) * 1024;
    (window > 0).then_some(window)
}

/// `read_ahead_kb` of the device holding `path`: how much the kernel reads per page fault
/// when it pages a plain mmap.
pub fn read_ahead_kb(path: &Path) -> Option<u64> {
    queue_value(
        &block_queue(&std::fs::metadata(path).ok()?)?,
        "read_ahead_kb",
    )
}

/// A block-device queue setting a benchmark may change for its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSetting {
    /// `read_ahead_kb`: how much the kernel reads ahead per fault or readahead call.
    ReadAheadKb,
    /// `max_sectors_kb`: the largest request the device is sent.
    MaxSectorsKb,
}

impl QueueSetting {
    pub fn name(self) -> &'static str {
        match self {
            QueueSetting::ReadAheadKb => "read_ahead_kb",
            QueueSetting::MaxSectorsKb => "max_sectors_kb",
        }
    }
}

impl std::str::FromStr for QueueSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<QueueSetting, String> {
        [QueueSetting::ReadAheadKb, QueueSetting::MaxSectorsKb]
            .into_iter()
            .find(|q| q.name() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a queue setting: use read_ahead_kb or max_sectors_kb")
            })
    }
}

/// Sets a queue setting of the device of a file and restores the old value on drop.
#[derive(Debug)]
pub struct QueueGuard {
    sys: PathBuf,
    old: u64,
}

impl QueueGuard {
    pub fn set(file: &Path, setting: QueueSetting, value: u64) -> io::Result<QueueGuard> {
        let queue = std::fs::metadata(file)
            .ok()
            .and_then(|m| block_queue(&m))
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{} is not on a block device with a {}",
                    file.display(),
                    setting.name()
                ))
            })?;
        let sys = queue.join(setting.name());
        let old = queue_value(&queue, setting.name())
            .ok_or_else(|| io::Error::other(format!("cannot read {}", sys.display())))?;
        std::fs::write(&sys, value.to_string())?;
        Ok(QueueGuard { sys, old })
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.sys, self.old.to_string()) {
            tracing::error!(
                "could not restore {} to {}: {e}",
                self.sys.display(),
                self.old
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let l = "7f12a000-7f12c000 r--s 00003000 fd:01 1234 /models/a b.gguf";
        let m = MapsLine::parse(l).unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f12a000, 0x7f12c000, 0x3000));
        assert_eq!(
            (m.perms, m.inode, m.path),
            ("r--s", 1234, "/models/a b.gguf")
        );
        let anon = MapsLine::parse("7f000000-7f001000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(anon.path, "");
        assert!(MapsLine::parse("Rss:                 4 kB").is_none());
    }

    #[test]
    fn reads_this_process() {
        let m = memory(Pid::This).unwrap();
        assert!(m.rss > 0 && m.hwm >= m.rss / 2);
        assert!(read_bytes(Pid::This).is_some());
        assert!(RssProbe::new().unwrap().rss_bytes() > 0);
        assert!(meminfo("MemTotal").unwrap() > 0);
        assert!(meminfo("MemAvailable").unwrap() > 0);
        assert!(machine().cores >= 1);
    }

    #[test]
    fn hyperthreads_of_one_core_count_once() {
        let masks = |m: &[&str]| m.iter().map(|s| format!("{s}\n")).collect::<Vec<_>>();
        // Four cores of two hyperthreads each: cpu0 and cpu4 share a core, and so on.
        let smt = masks(&["11", "22", "44", "88", "11", "22", "44", "88"]);
        assert_eq!(distinct_cores(smt), 4);
        assert_eq!(distinct_cores(masks(&["1", "2", "4"])), 3);
        assert_eq!(distinct_cores(masks(&["", " "])), 0);
        let cores = compute_cores();
        assert!(cores >= 1);
        assert!(cores as usize <= std::thread::available_parallelism().unwrap().get());
    }

    /// A fake sysfs `devices` tree: each CPU's thread-sibling mask, and the perf devices'
    /// CPU lists where given.
    fn fake_sysfs(masks: &[&str], core: Option<&str>, atom: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (cpu, mask) in masks.iter().enumerate() {
            let topology = dir.path().join(format!("system/cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&topology).unwrap();
            std::fs::write(topology.join("thread_siblings"), format!("{mask}\n")).unwrap();
        }
        for (device, list) in [("cpu_core", core), ("cpu_atom", atom)] {
            if let Some(list) = list {
                std::fs::create_dir_all(dir.path().join(device)).unwrap();
                std::fs::write(dir.path().join(device).join("cpus"), format!("{list}\n")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn a_hybrid_cpu_computes_on_its_performance_cores_only() {
        // Six performance cores of two hyperthreads (cpu0-11, siblings adjacent) and eight
        // efficiency cores (cpu12-19), as an Intel laptop part lists them.
        let mut masks: Vec<String> = (0..6)
            .flat_map(|c| {
                let mask = format!("{:x}", 3u32 << (2 * c));
                [mask.clone(), mask]
            })
            .collect();
        masks.extend((12..20).map(|c| format!("{:x}", 1u32 << c)));
        let masks: Vec<&str> = masks.iter().map(String::as_str).collect();
        let hybrid = fake_sysfs(&masks, Some("0-11"), Some("12-19"));
        assert_eq!(math_cores(hybrid.path(), 20), 6);
        // The CPUs this process may run on still cap it.
        assert_eq!(math_cores(hybrid.path(), 4), 4);
        // The same topology without the two perf devices: every physical core.
        let plain = fake_sysfs(&masks, None, None);
        assert_eq!(math_cores(plain.path(), 20), 14);
        // A `cpu_core` device alone (one core type: a non-hybrid Intel CPU) filters nothing.
        let one_type = fake_sysfs(&masks, Some("0-19"), None);
        assert_eq!(math_cores(one_type.path(), 20), 14);
        // An unreadable performance list: every physical core rather than none.
        let broken = fake_sysfs(&masks, Some("garbage"), Some("12-19"));
        assert_eq!(math_cores(broken.path(), 20), 14);
        // No topology at all (a container without sysfs): the allowed CPUs.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(math_cores(empty.path(), 3), 3);
        assert_eq!(math_cores(empty.path(), 0), 1);
    }

    #[test]
    fn cpu_lists_parse_as_sysfs_writes_them() {
        let set = |v: &[u32]| v.iter().copied().collect::<std::collections::BTreeSet<_>>();
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(set(&[0, 1, 2, 3, 8, 10, 11]))
        );
        assert_eq!(parse_cpu_list("5"), Some(set(&[5])));
        for bad in ["", "\n", "3-1", "a-b", "1,,x", "0-4294967295"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn readahead_window_matches_sysfs_when_the_device_is_known() {
        let meta = std::fs::metadata(env!("CARGO_MANIFEST_DIR")).unwrap();
        if let Some(w) = readahead_window(&meta) {
            assert!(w >= 4096, "window {w}");
            assert_eq!(w % 1024, 0);
            let kb = read_ahead_kb(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
            assert!(kb * 1024 <= w);
        }
    }
}
