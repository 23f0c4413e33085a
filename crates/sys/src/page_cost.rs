//! What paging costs the kernel: the CPU time, on the thread that asks, to read file ranges
//! into the page cache through a read-only shared mapping of the file, to map them into
//! the process as compute's first touches do (minor faults), and to drop them again; with
//! the pager's way of reading (`MADV_WILLNEED`, 4 KiB folios) or with large folios
//! (`MADV_HUGEPAGE` on the mapping, then `MADV_POPULATE_READ` through the fault path), and
//! the fault path's and the read path's own readahead (`MADV_POPULATE_READ` with the
//! default advice, `pread`), which grow folios along what they find sequential; and
//! the pager's way of dropping (`MADV_DONTNEED`, then `POSIX_FADV_DONTNEED`) or reclaim in
//! one call (`MADV_PAGEOUT`). Also what stays cached after the drop: a folio that reaches
//! past a range cannot be dropped by advice on the range alone.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{cache, outward, page_size, proc, FileMapping, OsError};

/// How ranges are read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPath {
    /// `MADV_WILLNEED` per range, as the pager reads: asynchronous, 4 KiB folios.
    WillNeed,
    /// `MADV_HUGEPAGE` on the whole mapping, then `MADV_POPULATE_READ` per range: the fault
    /// path, which may allocate large (up to PMD-sized) page-cache folios.
    HugePopulate,
    /// `MADV_POPULATE_READ` per range on a mapping left with the kernel's default advice: the
    /// fault path and the readahead it does around each fault (which may read past a range).
    Populate,
    /// The same with `MADV_SEQUENTIAL` on the mapping: the fault path reads ahead of each
    /// fault rather than around it.
    PopulateSequential,
    /// `pread` of each range into a buffer, in 4 MiB reads: the read path, whose readahead
    /// makes larger folios along a stream it finds sequential.
    BufferedRead,
}

/// The size of one `pread` of [`ReadPath::BufferedRead`].
const BUFFERED_READ_BYTES: usize = 4 << 20;

/// How ranges are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvictPath {
    /// `MADV_DONTNEED`, then `POSIX_FADV_DONTNEED`, as the pager drops ([`FileMapping::evict`]).
    UnmapThenDrop,
    /// `MADV_PAGEOUT` alone: the kernel unmaps and reclaims the range's clean pages.
    Pageout,
}

/// One measurement over a set of ranges.
#[derive(Debug, Clone, Serialize)]
pub struct PageCost {
    pub read_path: ReadPath,
    pub evict_path: EvictPath,
    pub ranges: usize,
    pub bytes: u64,
    /// CPU (user + system) of the asking thread per MiB: reading in, and dropping.
    pub read_cpu_ms_per_mib: f64,
    pub read_sys_ms_per_mib: f64,
    /// CPU per MiB of touching each cached page once through the mapping, as compute's
    /// first reads of a layer's experts do (minor faults that map the cached pages);
    /// measured on the even-numbered ranges.
    pub map_cpu_ms_per_mib: f64,
    /// CPU per MiB of mapping the same cached pages in one `MADV_POPULATE_READ` per range
    /// instead (the fault path driven by the kernel, no user-space fault per page): measured
    /// on the odd-numbered ranges, while `map_cpu_ms_per_mib` is measured on the even ones.
    pub populate_map_cpu_ms_per_mib: f64,
    /// CPU per MiB of then touching each of those pages once, as compute's first reads do.
    pub touch_after_populate_cpu_ms_per_mib: f64,
    pub evict_cpu_ms_per_mib: f64,
    pub evict_sys_ms_per_mib: f64,
    /// Wall time until every range was cached.
    pub read_wall_s: f64,
    /// Ranges the read left partly uncached (then faulted in, uncounted).
    pub incomplete_ranges: usize,
    /// `FileHugePages` of `/proc/meminfo` grown while reading (large file folios made).
    pub file_huge_pages_bytes: u64,
    /// Bytes of the ranges' pages in a folio larger than one page, of any size, once the
    /// ranges were read and mapped (`proc::pages_in_large_folios`); `None` where frames
    /// cannot be read (not root).
    pub large_folio_bytes: Option<u64>,
    /// Bytes of the file cached outside the ranges once they were read: what the read path
    /// brought in that nobody asked for (the file is dropped from the cache before).
    pub cached_outside_ranges_bytes: u64,
    /// Bytes of the asked ranges (rounded out to pages) still in the page cache after every
    /// range was dropped. Only the ranges: the rest of the file may hold pages of reads this
    /// measurement did not make (the model's header, parsed before, read ahead late).
    pub cached_after_evict_bytes: u64,
}

/// CPU time of the calling thread so far: (user + system, system), in microseconds.
fn thread_cpu_us() -> (u64, u64) {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes one `rusage` into the pointer it is given, which points at
    // zeroed storage of that type owned by this frame.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
    if rc != 0 {
        return (0, 0);
    }
    // SAFETY: `getrusage` succeeded and filled the struct (and it was zeroed before).
    let u = unsafe { u.assume_init() };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(u.ru_utime) + us(u.ru_stime), us(u.ru_stime))
}

/// Read `ranges` (file offset, length) of `path` in by `read`, wait until all are cached,
/// touch every page once through the mapping, then drop them by `evict`, measuring the
/// three. The file is dropped from the page cache before and after. Fails when the file
/// cannot be mapped, or the reads do not all land within `timeout`.
pub fn measure(
    path: &Path,
    ranges: &[(u64, u64)],
    read: ReadPath,
    evict: EvictPath,
    timeout: Duration,
) -> Result<PageCost, OsError> {
    let io_err = |source| OsError::Io {
        path: path.to_path_buf(),
        source,
    };
    cache::drop_file_cache(path).map_err(io_err)?;
    let file = File::open(path).map_err(io_err)?;
    // SAFETY: a read-only shared mapping private to this function, unmapped before it
    // returns; its bytes are never read (only advised), so a concurrent change to the file
    // cannot be observed through it.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
    let page = page_size() as u64;
    // SAFETY: `map` stays mapped, unchanged, until the end of this function, after the last
    // use of `view`.
    let view = unsafe { FileMapping::find(path) }?;
    match read {
        ReadPath::WillNeed => {
            view.set_random(0, map.len() as u64);
        }
        ReadPath::HugePopulate => {
            view.set_random(0, map.len() as u64);
            view.set_hugepage(0, map.len() as u64);
        }
        // The kernel's own readahead is what these paths measure.
        ReadPath::Populate | ReadPath::BufferedRead => {}
        ReadPath::PopulateSequential => {
            view.set_sequential(0, map.len() as u64);
        }
    }
    let mut buffer = match read {
        ReadPath::BufferedRead => vec![0u8; BUFFERED_READ_BYTES],
        _ => Vec::new(),
    };
    // Fault a file range in now, through the mapping.
    let populate = |offset: u64, len: u64| {
        let (s, e) = outward(offset, len, page);
        view.populate(view.addr_of(s), (e - s) as usize);
    };
    let bytes: u64 = ranges.iter().map(|r| r.1).sum();
    let huge_before = proc::meminfo("FileHugePages").unwrap_or(0);
    let started = Instant::now();
    let (cpu0, sys0) = thread_cpu_us();
    for &(offset, len) in ranges {
        match read {
            ReadPath::WillNeed => {
                view.will_need(offset, len);
            }
            ReadPath::HugePopulate | ReadPath::Populate | ReadPath::PopulateSequential => {
                populate(offset, len)
            }
            ReadPath::BufferedRead => {
                let end = offset + len;
                let mut at = offset;
                while at < end {
                    let want = ((end - at) as usize).min(buffer.len());
                    match std::os::unix::fs::FileExt::read_at(&file, &mut buffer[..want], at) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => at += n as u64,
                    }
                }
            }
        }
    }
    let (cpu1, sys1) = thread_cpu_us();
    // Asynchronous reads land later: wait (sleeping, not counted) until all are cached.
    // Readahead may leave pages of a range unread (the kernel gives up on a busy page);
    // once nothing has landed for a second, the rest is faulted in (not counted either),
    // and how many ranges needed it is reported.
    let deadline = Instant::now() + timeout;
    let missing = |pending: &mut Vec<(u64, u64)>| {
        pending.retain(|&(o, l)| {
            let (s, e) = outward(o, l, page);
            view.resident_bytes(o, l) < e - s
        });
    };
    let mut pending: Vec<(u64, u64)> = ranges.to_vec();
    let (mut last_left, mut still_since) = (usize::MAX, Instant::now());
    loop {
        missing(&mut pending);
        if pending.is_empty() {
            break;
        }
        if pending.len() < last_left {
            (last_left, still_since) = (pending.len(), Instant::now());
        } else if still_since.elapsed() > Duration::from_secs(1) {
            break;
        }
        if Instant::now() > deadline {
            return Err(io_err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "{} ranges were not cached within {timeout:?}",
                    pending.len()
                ),
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let incomplete_ranges = pending.len();
    for &(o, l) in &pending {
        populate(o, l);
    }
    let read_wall_s = started.elapsed().as_secs_f64();
    let huge_after = proc::meminfo("FileHugePages").unwrap_or(0);
    let resident_in_ranges: u64 = ranges.iter().map(|&(o, l)| view.resident_bytes(o, l)).sum();
    let cached_outside_ranges_bytes = cache::file_cache_resident_bytes(path)
        .map_err(io_err)?
        .saturating_sub(resident_in_ranges);
    // Half the ranges mapped by compute's way (a read of each page), half by the kernel's
    // (`MADV_POPULATE_READ`) and then read: the two ways of mapping side by side.
    let (even, odd): (Vec<_>, Vec<_>) = ranges.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let touch_each_page = |half: &[(usize, &(u64, u64))]| {
        let mut touched = 0u8;
        for &(_, &(offset, len)) in half {
            let (s, e) = outward(offset, len, page);
            for at in (s..e.min(map.len() as u64)).step_by(page as usize) {
                touched ^= map[at as usize];
            }
        }
        std::hint::black_box(touched);
    };
    let half_bytes = |half: &[(usize, &(u64, u64))]| half.iter().map(|(_, r)| r.1).sum::<u64>();
    let (touch0, _) = thread_cpu_us();
    touch_each_page(&even);
    let (touch1, _) = thread_cpu_us();
    for &(_, &(offset, len)) in &odd {
        populate(offset, len);
    }
    let (populate1, _) = thread_cpu_us();
    touch_each_page(&odd);
    let (touched, _) = thread_cpu_us();
    // Every page of the ranges is mapped now: count those in large folios (not timed).
    let large_folio_bytes = ranges
        .iter()
        .map(|&(offset, len)| {
            let (s, e) = outward(offset, len, page);
            let e = e.min(map.len() as u64);
            let addr = map.as_ptr() as usize + s as usize;
            proc::pages_in_large_folios(addr, ((e - s) / page) as usize)
        })
        .sum::<Option<u64>>()
        .map(|pages| pages * page);
    let (cpu2, sys2) = thread_cpu_us();
    for &(offset, len) in ranges {
        match evict {
            EvictPath::UnmapThenDrop => {
                view.evict(offset, len);
            }
            EvictPath::Pageout => {
                view.page_out(offset, len);
            }
        }
    }
    let (cpu3, sys3) = thread_cpu_us();
    let cached_after_evict_bytes = ranges.iter().map(|&(o, l)| view.resident_bytes(o, l)).sum();
    drop(view);
    drop(map);
    cache::drop_file_cache(path).map_err(io_err)?;
    let per_mib_of =
        |us: u64, bytes: u64| us as f64 / 1000.0 / (bytes as f64 / (1u64 << 20) as f64).max(1e-9);
    let per_mib = |us: u64| per_mib_of(us, bytes);
    Ok(PageCost {
        read_path: read,
        evict_path: evict,
        ranges: ranges.len(),
        bytes,
        read_cpu_ms_per_mib: per_mib(cpu1 - cpu0),
        read_sys_ms_per_mib: per_mib(sys1 - sys0),
        map_cpu_ms_per_mib: per_mib_of(touch1 - touch0, half_bytes(&even)),
        populate_map_cpu_ms_per_mib: per_mib_of(populate1 - touch1, half_bytes(&odd)),
        touch_after_populate_cpu_ms_per_mib: per_mib_of(touched - populate1, half_bytes(&odd)),
        evict_cpu_ms_per_mib: per_mib(cpu3 - cpu2),
        evict_sys_ms_per_mib: per_mib(sys3 - sys2),
        read_wall_s,
        incomplete_ranges,
        file_huge_pages_bytes: huge_after.saturating_sub(huge_before),
        large_folio_bytes,
        cached_outside_ranges_bytes,
        cached_after_evict_bytes,
    })
}
