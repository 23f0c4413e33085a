//! The OS layer: madvise / posix_fadvise / mincore on llama.cpp's file mapping, and
//! readers for `/proc` memory and I/O counters; its submodules run advice on threads of
//! their own (`ahead`: the predictor's guesses, `populate`: the `MADV_POPULATE_READ` pool).
//! This is the only module besides the llama.cpp hook that contains `unsafe`.
//!
//! Advice that cannot change what memory holds (`MADV_RANDOM`, `MADV_WILLNEED`) is offered
//! on any [`FileMapping`]. Dropping pages (`MADV_DONTNEED`) zeroes anonymous memory, so it
//! is only offered by [`FileMapping`], whose constructor proves from `/proc/self/maps` that
//! the range is a shared, read-only mapping of a regular file, where dropped pages simply
//! fault back in from the file.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::pager::{Advisor, FileRange};

mod ahead;
mod populate;

#[derive(Debug, thiserror::Error)]
pub enum OsError {
    #[error("{path} is not mapped into this process (no VMA in /proc/self/maps)")]
    NotMapped { path: PathBuf },
    #[error("{path}: mapping at {start:#x}-{end:#x} is {perms}, expected a shared read-only file mapping")]
    UnexpectedMapping {
        path: PathBuf,
        start: usize,
        end: usize,
        perms: String,
    },
    #[error("{path}: the file is mapped more than once (bases {first:#x} and {second:#x})")]
    MappedTwice {
        path: PathBuf,
        first: usize,
        second: usize,
    },
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Rounds `[offset, offset+len)` inward to whole pages: only pages that lie entirely in the
/// range (and so belong to no neighbour) are returned.
pub fn inward(offset: u64, len: u64, page: u64) -> (u64, u64) {
    let start = offset.next_multiple_of(page);
    let end = (offset + len) / page * page;
    (start, end.max(start))
}

/// `[start, end)` cut into consecutive pieces of at most `chunk` bytes (`chunk` > 0).
pub fn chunks(start: u64, end: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let chunk = chunk.max(1);
    (start..end)
        .step_by(chunk as usize)
        .map(move |s| (s, (s + chunk).min(end)))
}

/// Rounds `[offset, offset+len)` outward to whole pages.
pub fn outward(offset: u64, len: u64, page: u64) -> (u64, u64) {
    (offset / page * page, (offset + len).next_multiple_of(page))
}

/// One file as llama.cpp mapped it. Invariants, established by [`FileMapping::find`]:
/// 1. every `[start, end)` in `vmas` is a `r--s` mapping of this file's inode;
/// 2. all of them map file offset `o` at address `base + o`;
/// 3. `fd` is an open descriptor of the same file (for `posix_fadvise`).
#[derive(Debug)]
pub struct FileMapping {
    pub path: PathBuf,
    fd: File,
    base: usize,
    vmas: Vec<(usize, usize)>,
    page: u64,
    /// 4. The longest range one `MADV_WILLNEED` call reads in full (see [`readahead_window`]).
    willneed_chunk: u64,
}

/// What one `MADV_WILLNEED` (or `POSIX_FADV_WILLNEED`) call on a file of this device reads
/// at most: the kernel clamps each call to max(`read_ahead_kb`, `max_sectors_kb`) of the
/// block device (`force_page_cache_ra`). A longer range must be advised in pieces, or its
/// tail is left to demand faults, one page at a time under `MADV_RANDOM`. (Checked on this
/// machine's 6.18 kernel: with both at 128 KiB, one call over a 3 MiB range read 128 KiB.)
/// `None` when the file is not on a block device sysfs describes (tmpfs, overlayfs, btrfs).
pub fn readahead_window(meta: &std::fs::Metadata) -> Option<u64> {
    let dev = meta.dev();
    let node = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ))
    .canonicalize()
    .ok()?;
    // A partition's queue limits are its disk's.
    let queue = [node.join("queue"), node.parent()?.join("queue")]
        .into_iter()
        .find(|q| q.is_dir())?;
    let kib = |name: &str| -> Option<u64> {
        std::fs::read_to_string(queue.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let window = kib("read_ahead_kb")?.max(kib("max_sectors_kb")?) * 1024;
    (window > 0).then_some(window)
}

/// Used when the device's limits are unknown: the kernel's default readahead window, which
/// `force_page_cache_ra` never clamps below.
const FALLBACK_WILLNEED_CHUNK: u64 = 128 * 1024;

impl FileMapping {
    /// Locate `path`'s mapping in this process. llama.cpp unmaps the unused head and tail of
    /// the file, so the mapping may be several VMAs starting at a nonzero file offset.
    pub fn find(path: &Path) -> Result<FileMapping, OsError> {
        let io_err = |source| OsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io_err)?;
        let fd = File::open(path).map_err(io_err)?;
        let maps = File::open("/proc/self/maps").map_err(io_err)?;
        let mut base: Option<usize> = None;
        let mut vmas = Vec::new();
        for line in BufReader::new(maps).lines() {
            let line = line.map_err(io_err)?;
            // start-end perms offset dev inode path
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms), Some(off), Some(_dev), Some(inode)) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            if inode.parse::<u64>().ok() != Some(meta.ino()) {
                continue;
            }
            let mapped_path: String = f.collect::<Vec<_>>().join(" ");
            if Path::new(&mapped_path).canonicalize().ok() != path.canonicalize().ok() {
                continue;
            }
            let (s, e) = range.split_once('-').unwrap_or(("0", "0"));
            let start = usize::from_str_radix(s, 16).unwrap_or(0);
            let end = usize::from_str_radix(e, 16).unwrap_or(0);
            let offset = usize::from_str_radix(off, 16).unwrap_or(0);
            if perms != "r--s" {
                return Err(OsError::UnexpectedMapping {
                    path: path.to_path_buf(),
                    start,
                    end,
                    perms: perms.to_string(),
                });
            }
            let b = start - offset;
            match base {
                None => base = Some(b),
                Some(first) if first != b => {
                    return Err(OsError::MappedTwice {
                        path: path.to_path_buf(),
                        first,
                        second: b,
                    })
                }
                _ => {}
            }
            vmas.push((start, end));
        }
        let base = base.ok_or_else(|| OsError::NotMapped {
            path: path.to_path_buf(),
        })?;
        let page = page_size() as u64;
        Ok(FileMapping {
            path: path.to_path_buf(),
            fd,
            base,
            vmas,
            page,
            willneed_chunk: readahead_window(&meta)
                .unwrap_or(FALLBACK_WILLNEED_CHUNK)
                .next_multiple_of(page),
        })
    }

    /// The longest range one `MADV_WILLNEED` call on this file reads in full.
    pub fn willneed_chunk(&self) -> u64 {
        self.willneed_chunk
    }

    /// Address of file offset `offset` in the mapping.
    pub fn addr_of(&self, offset: u64) -> usize {
        self.base + offset as usize
    }

    /// Whether `[addr, addr+len)` lies inside one of this file's VMAs.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        self.vmas
            .iter()
            .any(|&(s, e)| addr >= s && addr.saturating_add(len) <= e)
    }

    /// The parts of file range `[start, end)` that are mapped, one per VMA: llama.cpp unmaps
    /// the parts of the file that hold no tensor, so a range may be only partly mapped.
    fn mapped(
        &self,
        start: u64,
        end: u64,
    ) -> impl Iterator<Item = (*mut libc::c_void, usize)> + '_ {
        let (lo, hi) = (self.addr_of(start), self.addr_of(end.max(start)));
        self.vmas
            .iter()
            .map(move |&(s, e)| (s.max(lo), e.min(hi)))
            .filter(|&(s, e)| s < e)
            .map(|(s, e)| (s as *mut libc::c_void, e - s))
    }

    /// Returns whether every mapped part took the advice (and at least one part was mapped).
    fn madvise(&self, start: u64, end: u64, advice: libc::c_int) -> bool {
        let mut any = false;
        let mut all = true;
        for (addr, len) in self.mapped(start, end) {
            any = true;
            // SAFETY: `[addr, addr+len)` is page-aligned (callers round to pages; VMA bounds are
            // page-aligned) and lies inside a shared read-only file mapping (invariant 1). The
            // advice is RANDOM, WILLNEED or DONTNEED; on such a mapping none of them can change
            // the bytes a reader sees: dropped pages fault back in from the file.
            all &= unsafe { libc::madvise(addr, len, advice) } == 0;
        }
        any && all
    }

    /// `MADV_RANDOM` on the pages covering a file range, so a fault reads only its own page.
    pub fn set_random(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        self.madvise(s, e, libc::MADV_RANDOM)
    }

    /// `MADV_WILLNEED` on the pages covering a file range: asynchronous readahead of exactly
    /// it, one call per readahead window (invariant 4) so the kernel reads all of it.
    pub fn will_need(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        let mut all = true;
        for (start, end) in chunks(s, e, self.willneed_chunk) {
            all &= self.madvise(start, end, libc::MADV_WILLNEED);
        }
        all
    }

    /// Drop the pages that lie wholly inside a file range: first unmap them from this process
    /// (`MADV_DONTNEED`), then drop them from the page cache (`POSIX_FADV_DONTNEED`); the kernel
    /// keeps cached pages that are still mapped, so the order matters. Returns the bytes advised.
    pub fn evict(&self, offset: u64, len: u64) -> u64 {
        let (s, e) = inward(offset, len, self.page);
        if e <= s || !self.madvise(s, e, libc::MADV_DONTNEED) {
            return 0;
        }
        // SAFETY: fadvise only takes an fd and a range; `self.fd` is open for the struct's life.
        unsafe {
            libc::posix_fadvise(
                self.fd.as_raw_fd(),
                s as libc::off_t,
                (e - s) as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
        e - s
    }

    /// Whether [`FileMapping::any_cached`] sees pages whose read is still in flight: the
    /// kernel has `cachestat` (Linux 6.5) and lets this process call it.
    pub fn sees_reads_in_flight(&self) -> bool {
        cachestat_pages(&self.fd, 0, self.page).is_some()
    }

    /// Whether any page of a file range is in the page cache, counting pages whose read is
    /// still in flight where the kernel can tell (`cachestat`, Linux 6.5); allocation-free.
    /// Without cachestat, only pages already read count (mincore).
    pub fn any_cached(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        match cachestat_pages(&self.fd, s, e - s) {
            Some(pages) => pages > 0,
            None => self.mapped(s, e).any(|(addr, len)| mincore_any(addr, len)),
        }
    }

    /// Bytes of a file range whose pages are in the page cache (mincore over the mapping).
    pub fn resident_bytes(&self, offset: u64, len: u64) -> u64 {
        let (s, e) = outward(offset, len, self.page);
        self.mapped(s, e)
            .map(|(addr, len)| mincore_count(addr, len) * self.page)
            .sum()
    }
}

/// The `cachestat` system call's number: 451 in the generic table and on x86_64.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const SYS_CACHESTAT: Option<libc::c_long> = Some(451);
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const SYS_CACHESTAT: Option<libc::c_long> = None;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `file`'s range `[off, off+len)` in the page cache, pages still being read
/// included (mincore reports only pages whose read completed). `None` where the kernel
/// lacks cachestat (before 6.5) or a sandbox refuses it.
fn cachestat_pages(file: &File, off: u64, len: u64) -> Option<u64> {
    let nr = SYS_CACHESTAT?;
    if len == 0 {
        return Some(0);
    }
    let range = CachestatRange { off, len };
    let mut out = Cachestat::default();
    // SAFETY: `range` and `out` are live, properly laid out `repr(C)` copies of the kernel's
    // structs for the call's duration; flags must be 0; `file` is an open descriptor.
    let rc = unsafe {
        libc::syscall(
            nr,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut out as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(out.nr_cache)
}

/// Whether any page of `[addr, addr+len)` is resident per mincore, without allocating.
/// `addr` must be page-aligned and mapped.
fn mincore_any(addr: *mut libc::c_void, len: usize) -> bool {
    let page = page_size();
    let mut vec = [0u8; 512];
    let mut done = 0;
    while done < len {
        let part = (len - done).min(vec.len() * page);
        // SAFETY: `addr + done` is page-aligned (`done` advances in whole pages) and
        // `[addr+done, addr+done+part)` lies in the mapped range (checked by callers); `vec`
        // has one byte for each of its at most 512 pages, as mincore requires.
        let rc = unsafe { libc::mincore(addr.wrapping_byte_add(done), part, vec.as_mut_ptr()) };
        if rc == 0 && vec[..part.div_ceil(page)].iter().any(|&b| b & 1 != 0) {
            return true;
        }
        done += part;
    }
    false
}

/// Pages of `[addr, addr+len)` resident per mincore. `addr` must be page-aligned and mapped.
fn mincore_count(addr: *mut libc::c_void, len: usize) -> u64 {
    let page = page_size();
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `addr` is page-aligned and `[addr, addr+len)` is mapped (checked by callers);
    // `vec` has one byte per page of the range, as mincore requires.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    vec.iter().filter(|&&b| b & 1 != 0).count() as u64
}

/// A fresh `PROT_READ`, `MAP_SHARED` mapping of the first `len` bytes of `file`. The caller
/// unmaps it.
fn map_read_shared(file: &File, len: usize) -> io::Result<*mut libc::c_void> {
    // SAFETY: a new read-only mapping of an open file chosen by the kernel: it overlaps no
    // existing memory, and nothing can write through it.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(addr)
}

/// Bytes of `path` in the page cache, measured by mapping it afresh and asking mincore.
pub fn file_cache_resident_bytes(path: &Path) -> io::Result<u64> {
    let file = File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0);
    }
    let addr = map_read_shared(&file, len)?;
    let pages = mincore_count(addr, len);
    // SAFETY: `addr`/`len` are exactly the mapping created above.
    unsafe { libc::munmap(addr, len) };
    Ok(pages * page_size() as u64)
}

/// Whether the kernel shows this process the pages of `path` still being read (`cachestat`,
/// Linux 6.5): the condition for cross-layer prediction by default.
pub fn file_sees_reads_in_flight(path: &Path) -> bool {
    File::open(path).is_ok_and(|f| cachestat_pages(&f, 0, page_size() as u64).is_some())
}

/// Drop a whole file from the page cache (`POSIX_FADV_DONTNEED`); pages mapped elsewhere stay.
pub fn drop_file_cache(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    // SAFETY: fadvise only takes an fd and a range; `file` is open.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// How missing experts are brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// `MADV_WILLNEED`: asynchronous readahead of the exact ranges; compute then takes a
    /// (minor, or waiting) fault per page.
    WillNeed,
    /// `MADV_WILLNEED`, then `MADV_POPULATE_READ` on a pool of I/O threads, waited for before
    /// the layer computes: the pages arrive by readahead and are mapped by the pool, so
    /// compute takes no faults.
    PopulateRead { threads: usize },
}

/// Wall time the [`OsAdvisor`] spends in its system calls, on whichever thread made them, and
/// how often an eviction had to be repeated.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// `MADV_WILLNEED` calls: page-cache allocation and read submission (not the reads).
    pub will_need_ns: AtomicU64,
    /// `MADV_DONTNEED` + `POSIX_FADV_DONTNEED` calls.
    pub evict_ns: AtomicU64,
    /// Waiting for the `MADV_POPULATE_READ` pool (`--prefetch populate`).
    pub populate_wait_ns: AtomicU64,
    /// Evictions after which the page cache still held part of the range (pages under read
    /// I/O, which the kernel skips), and the drops repeated until it held none.
    pub late_evictions: AtomicU64,
    pub redrops: AtomicU64,
    /// Late evictions that found the re-drop list full and were left cached.
    pub redrop_overflows: AtomicU64,
    /// Speculative reads advised by the readahead thread, its time in `MADV_WILLNEED`, and
    /// queued reads cancelled before it got to them (evicted or read on demand first).
    pub ahead_reads: AtomicU64,
    pub ahead_will_need_ns: AtomicU64,
    pub ahead_cancelled: AtomicU64,
}

fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// The real [`Advisor`]: pager decisions become madvise/fadvise calls on llama.cpp's mapping.
///
/// Invariants:
/// 1. every range in `redrop` is page-aligned, was evicted, and has not been advised in
///    since: `will_need` trims any part of it that a later read covers, so a re-drop can
///    only drop pages the pager counts as evicted;
/// 2. `redrop` and `batch` never grow past the capacity reserved in `new`, so the hook's
///    calls never allocate;
/// 3. with a readahead thread, every `evict` and `will_need` first cancels the queued
///    speculative reads of its range, so the thread never reads in evicted pages.
pub struct OsAdvisor {
    pub files: Arc<Vec<FileMapping>>,
    counters: Arc<IoCounters>,
    pool: Option<populate::PopulatePool>,
    /// Speculative reads go to this thread when present (`with_ahead_thread`).
    ahead: Option<ahead::AheadThread>,
    /// Ranges were queued for `ahead` since the last `flush`.
    ahead_queued: bool,
    /// Page ranges collected for the pool until `flush`; capacity reserved up front.
    batch: Vec<(usize, usize)>,
    /// Evicted ranges the page cache still held right after the drop: a wrong speculative
    /// read can be evicted while its I/O is in flight, and the kernel skips pages under I/O.
    /// Dropped again at every `flush` until clean.
    redrop: Vec<FileRange>,
}

impl OsAdvisor {
    pub fn new(
        files: Vec<FileMapping>,
        prefetch: Prefetch,
        counters: Arc<IoCounters>,
    ) -> OsAdvisor {
        let pool = match prefetch {
            Prefetch::WillNeed => None,
            Prefetch::PopulateRead { threads } => Some(populate::PopulatePool::new(threads.max(1))),
        };
        OsAdvisor {
            files: Arc::new(files),
            counters,
            pool,
            ahead: None,
            ahead_queued: false,
            batch: Vec::with_capacity(1 << 14),
            redrop: Vec::with_capacity(REDROP_CAPACITY),
        }
    }

    /// Advise speculative reads (`Advisor::will_need_ahead`) from a thread of their own, so
    /// their page allocation and read submission leave the compute thread. Only with
    /// `Prefetch::WillNeed`: the populate pool already reads on its own threads.
    pub fn with_ahead_thread(mut self) -> OsAdvisor {
        if self.pool.is_none() {
            self.ahead = Some(ahead::AheadThread::new(
                self.files.clone(),
                self.counters.clone(),
            ));
        }
        self
    }

    /// Cancel the readahead thread's queued reads of `[start, end)` (invariant 3).
    fn cancel_ahead(&self, file: u32, start: u64, end: u64) {
        if let Some(a) = &self.ahead {
            let n = a.cancel(file, start, end);
            self.counters
                .ahead_cancelled
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `r` is about to be read in: its pages leave the re-drop list (invariant 1). Returns
    /// them, rounded outward.
    fn forget_redrops(&mut self, r: FileRange) -> (u64, u64) {
        let (s, e) = outward(r.offset, r.len, self.files[r.file as usize].page);
        if !self.redrop.is_empty() {
            remove_span(&mut self.redrop, r.file, s, e);
        }
        (s, e)
    }

    /// Ranges still waiting to be dropped again (see `redrop`).
    pub fn pending_redrops(&self) -> usize {
        self.redrop.len()
    }

    /// Drop every range of `redrop` again; keep those the page cache still holds.
    fn retry_redrops(&mut self) {
        if self.redrop.is_empty() {
            return;
        }
        let t = Instant::now();
        let mut i = 0;
        while i < self.redrop.len() {
            let r = self.redrop[i];
            let m = &self.files[r.file as usize];
            m.evict(r.offset, r.len);
            self.counters.redrops.fetch_add(1, Ordering::Relaxed);
            if m.any_cached(r.offset, r.len) {
                i += 1;
            } else {
                self.redrop.swap_remove(i);
            }
        }
        add_elapsed(&self.counters.evict_ns, t);
    }
}

/// Remove `[start, end)` of `file` from every range of `list`, never growing `list` past its
/// capacity: a range cut in two keeps only its larger side when the list is full.
fn remove_span(list: &mut Vec<FileRange>, file: u32, start: u64, end: u64) {
    let mut i = 0;
    while i < list.len() {
        let r = list[i];
        let (rs, re) = (r.offset, r.offset + r.len);
        if r.file != file || re <= start || end <= rs {
            i += 1;
            continue;
        }
        let before = (rs < start).then_some((rs, start));
        let after = (end < re).then_some((end, re));
        let piece = |(s, e): (u64, u64)| FileRange {
            file,
            offset: s,
            len: e - s,
        };
        match (before, after) {
            (None, None) => {
                list.swap_remove(i);
                continue;
            }
            (Some(b), None) => list[i] = piece(b),
            (None, Some(a)) => list[i] = piece(a),
            (Some(b), Some(a)) => {
                if list.len() < list.capacity() {
                    list[i] = piece(b);
                    list.push(piece(a));
                } else {
                    let larger = if b.1 - b.0 >= a.1 - a.0 { b } else { a };
                    list[i] = piece(larger);
                }
            }
        }
        i += 1;
    }
}

/// Evicted ranges that may wait for a re-drop at once. Each is one expert slice; more than
/// this many late evictions between two routing steps is far beyond what was measured.
const REDROP_CAPACITY: usize = 4096;

impl Advisor for OsAdvisor {
    fn will_need(&mut self, r: FileRange) {
        let (s, e) = self.forget_redrops(r);
        self.cancel_ahead(r.file, r.offset, r.offset + r.len);
        let m = &self.files[r.file as usize];
        // Readahead of the exact range first, in large requests: with MADV_RANDOM on the
        // mapping, POPULATE_READ alone would fault and read one page at a time.
        let t = Instant::now();
        m.will_need(r.offset, r.len);
        add_elapsed(&self.counters.will_need_ns, t);
        if self.pool.is_none() {
            return;
        }
        for (addr, len) in m.mapped(s, e) {
            self.batch.push((addr as usize, len));
        }
    }

    fn will_need_ahead(&mut self, r: FileRange) {
        if self.ahead.is_some() {
            self.forget_redrops(r);
        }
        if let Some(a) = &self.ahead {
            if a.push(r) {
                self.ahead_queued = true;
                return;
            }
        }
        self.will_need(r);
    }

    fn evict(&mut self, r: FileRange) -> u64 {
        let t = Instant::now();
        // Only a queued read of these very bytes is cancelled: a neighbour's range may share
        // a page with this one, and its read must go on.
        self.cancel_ahead(r.file, r.offset, r.offset + r.len);
        let m = &self.files[r.file as usize];
        let dropped = m.evict(r.offset, r.len);
        let (s, e) = inward(r.offset, r.len, m.page);
        if dropped > 0 && m.any_cached(s, e - s) {
            self.counters.late_evictions.fetch_add(1, Ordering::Relaxed);
            if self.redrop.len() < self.redrop.capacity() {
                self.redrop.push(FileRange {
                    file: r.file,
                    offset: s,
                    len: e - s,
                });
            } else {
                self.counters
                    .redrop_overflows
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        add_elapsed(&self.counters.evict_ns, t);
        dropped
    }

    fn flush(&mut self) {
        if let Some(a) = self.ahead.as_ref().filter(|_| self.ahead_queued) {
            a.wake();
            self.ahead_queued = false;
        }
        if let Some(pool) = &self.pool {
            let t = Instant::now();
            pool.populate_all(&self.batch);
            add_elapsed(&self.counters.populate_wait_ns, t);
            self.batch.clear();
        }
        self.retry_redrops();
    }

    fn finish(&mut self) {
        // The reads still in flight complete within milliseconds; give them a second at most.
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        if let Some(a) = &self.ahead {
            a.clear();
        }
        self.retry_redrops();
        while !self.redrop.is_empty() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
            self.retry_redrops();
        }
    }
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

pub fn proc_memory(pid: Option<u32>) -> io::Result<ProcMemory> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    let text = std::fs::read_to_string(path)?;
    let mut m = ProcMemory::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let kb = v.trim().trim_end_matches(" kB").parse::<u64>().unwrap_or(0) * 1024;
        match k {
            "VmRSS" => m.rss = kb,
            "RssAnon" => m.rss_anon = kb,
            "RssFile" => m.rss_file += kb,
            "RssShmem" => m.rss_file += kb,
            "VmSwap" => m.swap = kb,
            "VmHWM" => m.hwm = kb,
            "VmData" => m.data = kb,
            _ => {}
        }
    }
    Ok(m)
}

/// `read_bytes` from `/proc/self/io`: bytes this process caused to be read from storage.
pub fn proc_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("read_bytes:").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
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
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let p = line.split_whitespace().nth(5);
            inside =
                p.is_some() && p.map(|p| Path::new(p).canonicalize().ok()) == Some(want.clone());
        } else if inside {
            if let Some(v) = line.strip_prefix("Rss:") {
                total += v
                    .trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 1024;
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
        let resident = fields.next().unwrap_or(b"0");
        let mut pages = 0u64;
        for &d in resident {
            if d.is_ascii_digit() {
                pages = pages * 10 + u64::from(d - b'0');
            }
        }
        pages * self.page
    }
}

/// A zeroed, page-aligned heap buffer, as `O_DIRECT` reads require.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is uniquely owned heap memory with no thread affinity.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), page_size()).expect("valid layout");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `layout.size()` initialized (zeroed) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `as_mut_slice`; shared access only.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

/// Bytes an unprivileged writer may still use on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; `st` is a valid out-pointer the call fills on
    // success, and it is only read after a 0 return.
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        st.assume_init()
    };
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Create (truncate) `path` for writing, bypassing the page cache with `O_DIRECT` where the
/// filesystem allows it. Returns the file and whether it is direct: direct writes must come
/// from page-aligned buffers in multiples of the page size.
pub fn create_for_streaming(path: &Path) -> io::Result<(std::fs::File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok((f, true)),
        // tmpfs and some network filesystems refuse O_DIRECT.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((opts.open(path)?, false)),
        Err(e) => Err(e),
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range_without_overlap() {
        let pieces: Vec<_> = chunks(4096, 4096 + 300_000, 131_072).collect();
        assert_eq!(pieces.first().map(|p| p.0), Some(4096));
        assert_eq!(pieces.last().map(|p| p.1), Some(4096 + 300_000));
        assert!(pieces.windows(2).all(|w| w[0].1 == w[1].0));
        assert!(pieces.iter().all(|&(s, e)| s < e && e - s <= 131_072));
        assert_eq!(pieces.len(), 3);
        assert_eq!(chunks(10, 10, 4096).count(), 0);
    }

    /// A shared read-only mapping of a fresh on-disk file, as llama.cpp makes one.
    struct TestMap {
        addr: *mut libc::c_void,
        len: usize,
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl TestMap {
        fn new(len: usize) -> TestMap {
            // On disk (the build directory), not /tmp, which may be tmpfs.
            let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
            let path = dir.path().join("model.bin");
            std::fs::write(&path, vec![7u8; len]).unwrap();
            let f = File::open(&path).unwrap();
            f.sync_all().unwrap();
            // Unmapped in Drop.
            let addr = map_read_shared(&f, len).unwrap();
            TestMap {
                addr,
                len,
                _dir: dir,
                path,
            }
        }
    }

    impl Drop for TestMap {
        fn drop(&mut self) {
            // SAFETY: exactly the mapping made in `new`.
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }

    /// Evict `[0, len)` until mincore finds none of it cached (earlier reads may be in flight).
    fn drop_all_pages(m: &FileMapping, len: u64) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        loop {
            m.evict(0, len);
            if m.resident_bytes(0, len) == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "pages stayed cached");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A fresh on-disk file of `len` bytes, mapped as llama.cpp maps a model, `MADV_RANDOM`,
    /// with none of it in the page cache. Keep the `TestMap` alive while using the mapping.
    fn clean_mapping(len: u64) -> (TestMap, FileMapping) {
        let map = TestMap::new(len as usize);
        let m = FileMapping::find(&map.path).unwrap();
        m.set_random(0, len);
        drop_all_pages(&m, len);
        (map, m)
    }

    #[test]
    fn an_eviction_racing_its_read_is_completed_by_finish() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        let sees_reads = m.sees_reads_in_flight();
        let counters = Arc::new(IoCounters::default());
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone());
        // A wrong guess evicted at once: its read is still in flight, the kernel skips those
        // pages, and they land in the page cache after the drop.
        let guess = FileRange {
            file: 0,
            offset: 1 << 20,
            len: 4 << 20,
        };
        advisor.will_need(guess);
        assert!(advisor.evict(guess) > 0);
        advisor.finish();
        if !sees_reads {
            eprintln!("note: no cachestat here; reads in flight are invisible to the pager");
            return;
        }
        assert_eq!(advisor.pending_redrops(), 0);
        // Any read still running would have finished by now; none of the range is cached.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!advisor.files[0].any_cached(0, len));
        assert_eq!(advisor.files[0].resident_bytes(0, len), 0);
        eprintln!(
            "late evictions {}, re-drops {}",
            counters.late_evictions.load(Ordering::Relaxed),
            counters.redrops.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn a_read_cancels_the_redrop_of_its_pages() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, Arc::default());
        let expert = FileRange {
            file: 0,
            offset: 1 << 20,
            len: 2 << 20,
        };
        advisor.will_need(expert);
        advisor.evict(expert);
        // Selected again right away: the pages are the pager's again and must stay cached.
        advisor.will_need(expert);
        assert_eq!(advisor.pending_redrops(), 0);
        advisor.finish();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while advisor.files[0].resident_bytes(expert.offset, expert.len) < expert.len {
            assert!(Instant::now() < deadline, "the re-read expert was dropped");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn the_readahead_thread_reads_guesses_and_never_an_evicted_one() {
        let len = 16u64 << 20;
        let (_map, m) = clean_mapping(len);
        let counters = Arc::new(IoCounters::default());
        let mut advisor =
            OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone()).with_ahead_thread();
        let range = |i: u64| FileRange {
            file: 0,
            offset: i * (2 << 20),
            len: 2 << 20,
        };
        // Eight guesses; the odd ones are evicted at once, before or while they are read.
        for i in 0..8 {
            advisor.will_need_ahead(range(i));
        }
        advisor.flush();
        for i in (1..8).step_by(2) {
            advisor.evict(range(i));
        }
        advisor.flush();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        for i in (0..8).step_by(2) {
            let r = range(i);
            while advisor.files[0].resident_bytes(r.offset, r.len) < r.len {
                assert!(Instant::now() < deadline, "guess {i} was not read in");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        advisor.finish();
        std::thread::sleep(std::time::Duration::from_millis(200));
        if advisor.files[0].sees_reads_in_flight() {
            for i in (1..8).step_by(2) {
                let r = range(i);
                assert_eq!(
                    advisor.files[0].resident_bytes(r.offset, r.len),
                    0,
                    "evicted guess {i} is cached"
                );
            }
        }
        let read = counters.ahead_reads.load(Ordering::Relaxed);
        let cancelled = counters.ahead_cancelled.load(Ordering::Relaxed);
        assert!(read >= 4, "{read} reads on the thread");
        assert_eq!(read + cancelled, 8, "{read} read, {cancelled} cancelled");
    }

    #[test]
    fn remove_span_trims_splits_and_keeps_its_capacity() {
        let r = |file, offset, end| FileRange {
            file,
            offset,
            len: end - offset,
        };
        let mut list = Vec::with_capacity(4);
        list.extend([r(0, 0, 100), r(0, 200, 300), r(1, 0, 100), r(0, 400, 500)]);
        // Covers all of [200, 300), the end of [0, 100) and nothing of file 1.
        remove_span(&mut list, 0, 50, 300);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(list, vec![r(0, 0, 50), r(0, 400, 500), r(1, 0, 100)]);
        // The middle of a range splits it in two while there is room.
        remove_span(&mut list, 0, 420, 440);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(
            list,
            vec![r(0, 0, 50), r(0, 400, 420), r(0, 440, 500), r(1, 0, 100)]
        );
        // Full: the larger side stays, the list does not grow.
        remove_span(&mut list, 0, 10, 20);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(list.len(), 4);
        assert_eq!(list.capacity(), 4);
        assert_eq!(list[0], r(0, 20, 50));
        // Disjoint spans change nothing.
        let before = list.clone();
        remove_span(&mut list, 0, 50, 400);
        remove_span(&mut list, 2, 0, 1000);
        assert_eq!(list, before);
    }

    #[test]
    fn will_need_reads_all_of_a_range_longer_than_the_window() {
        let map = TestMap::new(8 << 20);
        let mut m = FileMapping::find(&map.path).unwrap();
        assert!(m.willneed_chunk() >= m.page);
        // Pretend the device's window is 128 KiB: the range must still be read in full.
        m.willneed_chunk = 128 << 10;
        m.set_random(0, 8 << 20);
        let (offset, len) = (1 << 20, 3 << 20);
        drop_all_pages(&m, 8 << 20);
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        assert!(m.will_need(offset, len));
        while m.resident_bytes(offset, len) < len {
            assert!(Instant::now() < deadline, "the range was not read in full");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Exact: nothing outside the range was read.
        assert_eq!(m.resident_bytes(0, 8 << 20), len);
    }

    #[test]
    fn readahead_window_matches_sysfs_when_the_device_is_known() {
        let meta = std::fs::metadata(env!("CARGO_MANIFEST_DIR")).unwrap();
        if let Some(w) = readahead_window(&meta) {
            assert!(w >= 4096, "window {w}");
            assert_eq!(w % 1024, 0);
        }
    }
}
