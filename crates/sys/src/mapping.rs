//! Advice on a file mapping that llama.cpp made and owns.
//!
//! [`FileMapping`] owns nothing of the mapping: it is a view that finds llama.cpp's VMAs in
//! `/proc/self/maps`. Its constructor is `unsafe` and states the one contract that makes
//! every method safe: the mapping stays mapped, unchanged, for as long as the view lives.
//! Given that, advice that cannot change what memory holds (`MADV_RANDOM`,
//! `MADV_WILLNEED`, `MADV_COLD`) is always sound, and dropping pages
//! ([`FileMapping::evict`]) is sound because the constructor proves each VMA is a shared,
//! read-only mapping of a regular file, where dropped pages fault back in from the file
//! with the same bytes.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use nix::sys::mman::{madvise, MmapAdvise};

use crate::{cache, chunks, inward, outward, page_size, proc, OsError};

/// Used when the device's limits are unknown: the kernel's default readahead window, which
/// `force_page_cache_ra` never clamps below.
const FALLBACK_WILLNEED_CHUNK: u64 = 128 * 1024;

/// One file as llama.cpp mapped it. Invariants, established by [`FileMapping::find`]:
/// 1. every `[start, end)` in `vmas` is a `r--s` mapping of this file's inode;
/// 2. all of them map file offset `o` at address `base + o`;
/// 3. `fd` is an open descriptor of the same file (for `posix_fadvise` and `cachestat`);
/// 4. `willneed_chunk` is the longest range one `MADV_WILLNEED` call reads in full (see
///    [`proc::readahead_window`]), a multiple of the page size.
#[derive(Debug)]
pub struct FileMapping {
    pub path: PathBuf,
    fd: File,
    base: usize,
    vmas: Vec<(usize, usize)>,
    page: u64,
    willneed_chunk: u64,
}

impl FileMapping {
    /// Locate `path`'s mapping in this process. llama.cpp unmaps the unused head and tail of
    /// the file, so the mapping may be several VMAs starting at a nonzero file offset.
    ///
    /// # Safety
    /// The caller keeps the mapping it finds mapped, and never remaps it, for as long as the
    /// returned value lives: every method advises addresses inside it. (The engine drops
    /// its `FileMapping`s with the llama.cpp context, before the model that owns the
    /// mapping.)
    pub unsafe fn find(path: &Path) -> Result<FileMapping, OsError> {
        let io_err = |source| OsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io_err)?;
        let fd = File::open(path).map_err(io_err)?;
        let maps = File::open("/proc/self/maps").map_err(io_err)?;
        let want = path.canonicalize().ok();
        let mut base: Option<usize> = None;
        let mut vmas = Vec::new();
        for line in BufReader::new(maps).lines() {
            let line = line.map_err(io_err)?;
            let Some(vma) = proc::MapsLine::parse(&line) else {
                continue;
            };
            if vma.inode != meta.ino() || Path::new(vma.path).canonicalize().ok() != want {
                continue;
            }
            if vma.perms != "r--s" {
                return Err(OsError::UnexpectedMapping {
                    path: path.to_path_buf(),
                    start: vma.start,
                    end: vma.end,
                    perms: vma.perms.to_string(),
                });
            }
            let b = vma.start - vma.offset;
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
            vmas.push((vma.start, vma.end));
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
            willneed_chunk: proc::readahead_window(&meta)
                .unwrap_or(FALLBACK_WILLNEED_CHUNK)
                .next_multiple_of(page),
        })
    }

    /// The longest range one `MADV_WILLNEED` call on this file reads in full.
    pub fn willneed_chunk(&self) -> u64 {
        self.willneed_chunk
    }

    /// Pretend the device reads at most `bytes` per call (tests of the piecewise advice).
    #[doc(hidden)]
    pub fn set_willneed_chunk(&mut self, bytes: u64) {
        self.willneed_chunk = bytes.max(1).next_multiple_of(self.page);
    }

    pub fn page(&self) -> u64 {
        self.page
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

    /// The VMAs, as address ranges (for the SIGBUS handler's table).
    pub fn vmas(&self) -> &[(usize, usize)] {
        &self.vmas
    }

    /// The parts of file range `[start, end)` that are mapped, one per VMA: llama.cpp unmaps
    /// the parts of the file that hold no tensor, so a range may be only partly mapped.
    /// Page-aligned when `start` and `end` are.
    pub(crate) fn mapped(&self, start: u64, end: u64) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (lo, hi) = (self.addr_of(start), self.addr_of(end.max(start)));
        self.vmas
            .iter()
            .map(move |&(s, e)| (s.max(lo), e.min(hi)))
            .filter(|&(s, e)| s < e)
            .map(|(s, e)| (s, e - s))
    }

    /// Returns whether every mapped part took the advice (and at least one part was mapped).
    fn advise(&self, start: u64, end: u64, advice: MmapAdvise) -> bool {
        let mut any = false;
        let mut all = true;
        for (addr, len) in self.mapped(start, end) {
            any = true;
            all &= advise_mapped(addr, len, advice);
        }
        any && all
    }

    /// `MADV_HUGEPAGE` on the pages covering a file range: faults may then read the file into
    /// large page-cache folios (`probe-paging` measures what that costs and frees).
    pub(crate) fn set_hugepage(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        self.advise(s, e, MmapAdvise::MADV_HUGEPAGE)
    }

    /// `MADV_SEQUENTIAL` on the pages covering a file range: a fault reads ahead of itself
    /// (not around), in windows that grow, into folios that grow with them
    /// (`probe-paging` measures what that costs and what it reads past a range).
    pub(crate) fn set_sequential(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        self.advise(s, e, MmapAdvise::MADV_SEQUENTIAL)
    }

    /// `MADV_NORMAL` on the pages covering a file range: a fault reads around itself, in
    /// the device's readahead window, into large folios where the kernel can make them.
    pub(crate) fn set_normal(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        self.advise(s, e, MmapAdvise::MADV_NORMAL)
    }

    /// `MADV_RANDOM` on the pages covering a file range, so a fault reads only its own page.
    pub fn set_random(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        self.advise(s, e, MmapAdvise::MADV_RANDOM)
    }

    /// `MADV_WILLNEED` on the pages covering a file range: asynchronous readahead of exactly
    /// it, one call per readahead window (invariant 4) so the kernel reads all of it.
    pub fn will_need(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        let mut all = true;
        for (start, end) in chunks(s, e, self.willneed_chunk) {
            all &= self.advise(start, end, MmapAdvise::MADV_WILLNEED);
        }
        all
    }

    /// `MADV_POPULATE_READ` over the mapped part of a page range: fault every page in now
    /// (falling back to `MADV_WILLNEED` on kernels before 5.14).
    pub(crate) fn populate(&self, addr: usize, len: usize) {
        if !advise_mapped(addr, len, MmapAdvise::MADV_POPULATE_READ) {
            advise_mapped(addr, len, MmapAdvise::MADV_WILLNEED);
        }
    }

    /// Drop the pages that lie wholly inside a file range: first unmap them from this process
    /// (`MADV_DONTNEED`), then drop them from the page cache (`POSIX_FADV_DONTNEED`); the kernel
    /// keeps cached pages that are still mapped, so the order matters. Returns the bytes advised.
    pub fn evict(&self, offset: u64, len: u64) -> u64 {
        let (s, e) = inward(offset, len, self.page);
        if e <= s || !self.advise(s, e, MmapAdvise::MADV_DONTNEED) {
            return 0;
        }
        let _ = posix_fadvise(
            self.fd.as_fd(),
            s as i64,
            (e - s) as i64,
            PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        e - s
    }

    /// Write the file's dirty pages back and wait for it (`fdatasync`): the kernel drops
    /// neither dirty pages nor pages under writeback, so a file just written (a download
    /// that has not synced) keeps them cached until then. Whether it worked.
    pub fn write_back(&self) -> bool {
        self.fd.sync_data().is_ok()
    }

    /// `MADV_PAGEOUT` on the pages that lie wholly inside a file range: the kernel unmaps
    /// them and reclaims the clean ones in one call (`probe-paging` compares it with
    /// [`FileMapping::evict`]). Returns whether the kernel took the advice.
    pub(crate) fn page_out(&self, offset: u64, len: u64) -> bool {
        let (s, e) = inward(offset, len, self.page);
        e > s && self.advise(s, e, MmapAdvise::MADV_PAGEOUT)
    }

    /// Split the page-cache folio that holds the page at `offset`, if that page is cached,
    /// into single pages, all still cached: a large folio (a sequential read or a write of
    /// the file leaves them, up to 2 MiB) is only dropped whole, so one that straddles two
    /// experts' slices keeps either cached when the other is evicted. The kernel splits a
    /// large folio that `MADV_COLD` covers in part, when this process alone maps it; so
    /// the page is mapped (`MADV_POPULATE_READ`, no read: it is cached), advised, and
    /// unmapped again with the pages that fault-around mapped beside it (`MADV_DONTNEED`
    /// on the largest folio's aligned block, which keeps them cached). The kernel reports
    /// no failure to split (another process maps the folio): a drop shows it. Returns
    /// whether the page was cached and the kernel took the advice (both exist since Linux
    /// 5.14; ext4 caches files in large folios since 6.16).
    pub fn split_folio(&self, offset: u64) -> bool {
        let p = offset - offset % self.page;
        if self.resident_bytes(p, self.page) == 0 {
            return false;
        }
        let Some((addr, len)) = self.mapped(p, p + self.page).next() else {
            return false;
        };
        let split = advise_mapped(addr, len, MmapAdvise::MADV_POPULATE_READ)
            && advise_mapped(addr, len, MmapAdvise::MADV_COLD);
        let block = self.page * crate::FOLIO_MAX_PAGES;
        let start = p - p % block;
        self.advise(start, start + block, MmapAdvise::MADV_DONTNEED);
        split
    }

    /// Whether [`FileMapping::any_cached`] sees pages whose read is still in flight: the
    /// kernel has `cachestat` (Linux 6.5) and lets this process call it.
    pub fn sees_reads_in_flight(&self) -> bool {
        cache::cachestat_pages(&self.fd, 0, self.page).is_some()
    }

    /// Whether any page of a file range is in the page cache, counting pages whose read is
    /// still in flight where the kernel can tell (`cachestat`, Linux 6.5); allocation-free.
    /// Without cachestat, only pages already read count (mincore).
    pub fn any_cached(&self, offset: u64, len: u64) -> bool {
        let (s, e) = outward(offset, len, self.page);
        match cache::cachestat_pages(&self.fd, s, e - s) {
            Some(pages) => pages > 0,
            None => self
                .mapped(s, e)
                .any(|(addr, len)| mincore_pages(addr, len, true) > 0),
        }
    }

    /// Bytes of a file range whose pages are in the page cache (mincore over the mapping).
    pub fn resident_bytes(&self, offset: u64, len: u64) -> u64 {
        let (s, e) = outward(offset, len, self.page);
        self.mapped(s, e)
            .map(|(addr, len)| mincore_pages(addr, len, false) * self.page)
            .sum()
    }
}

/// `madvise` on a range of a [`FileMapping`]'s VMAs; whether the kernel took it.
fn advise_mapped(addr: usize, len: usize, advice: MmapAdvise) -> bool {
    let Some(ptr) = NonNull::new(addr as *mut std::ffi::c_void) else {
        return false;
    };
    // SAFETY: `[addr, addr+len)` comes from `FileMapping::mapped`: page-aligned and inside
    // a shared read-only file mapping (invariant 1) that stays mapped while the
    // `FileMapping` lives (the contract of `FileMapping::find`). None of the advice used
    // (RANDOM, WILLNEED, POPULATE_READ, DONTNEED, PAGEOUT, HUGEPAGE, COLD) can change the
    // bytes a reader sees there: dropped pages fault back in from the file.
    unsafe { madvise(ptr, len, advice) }.is_ok()
}

/// Pages of `[addr, addr+len)` resident per mincore, counted in steps of at most 512 pages
/// without allocating; with `stop_at_first`, stops at the first resident page. `addr` is
/// page-aligned and inside a [`FileMapping`]'s VMAs.
fn mincore_pages(addr: usize, len: usize, stop_at_first: bool) -> u64 {
    let page = page_size();
    let mut vec = [0u8; 512];
    let mut done = 0;
    let mut count = 0u64;
    while done < len {
        let part = (len - done).min(vec.len() * page);
        // SAFETY: `addr + done` is page-aligned (`done` advances in whole pages) and lies in
        // a mapped range of a live `FileMapping` (see `advise_mapped`); `vec` has one byte
        // for each of the at most 512 pages of `part`, as mincore requires.
        let rc =
            unsafe { libc::mincore((addr + done) as *mut libc::c_void, part, vec.as_mut_ptr()) };
        if rc == 0 {
            count += vec[..part.div_ceil(page)]
                .iter()
                .filter(|&&b| b & 1 != 0)
                .count() as u64;
            if stop_at_first && count > 0 {
                return count;
            }
        }
        done += part;
    }
    count
}

#[cfg(test)]
pub(crate) mod test_support {
    //! A shared read-only mapping of a fresh on-disk file, as llama.cpp makes one.
    use super::*;
    use std::time::{Duration, Instant};

    pub struct TestMap {
        _map: memmap2::Mmap,
        _dir: tempfile::TempDir,
        pub path: PathBuf,
    }

    impl TestMap {
        pub fn new(len: usize) -> TestMap {
            // On disk (the build directory), not /tmp, which may be tmpfs.
            let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
            let path = dir.path().join("model.bin");
            std::fs::write(&path, vec![7u8; len]).unwrap();
            let f = File::open(&path).unwrap();
            f.sync_all().unwrap();
            // SAFETY: the file is private to this test and never written while mapped.
            let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
            TestMap {
                _map: map,
                _dir: dir,
                path,
            }
        }

        /// The mapping as the pager sees it. The `TestMap` must outlive the result.
        pub fn find(&self) -> FileMapping {
            // SAFETY: `self` keeps the mapping alive; tests drop the `FileMapping` first.
            unsafe { FileMapping::find(&self.path) }.unwrap()
        }
    }

    /// A mapping of a fresh file of `len` bytes, dropped from the page cache and then read
    /// whole as `cat` or a checksum reads it: readahead caches it in large folios (up to 2
    /// MiB, on ext4 since Linux 6.x) where the kernel makes them.
    pub fn read_whole(len: u64) -> (TestMap, FileMapping) {
        let map = TestMap::new(len as usize);
        let m = map.find();
        drop_all_pages(&m, len);
        let mut file = File::open(&map.path).unwrap();
        std::io::copy(&mut file, &mut std::io::sink()).unwrap();
        (map, m)
    }

    /// Evict `[0, len)` until mincore finds none of it cached (earlier reads may be in flight).
    pub fn drop_all_pages(m: &FileMapping, len: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            m.evict(0, len);
            if m.resident_bytes(0, len) == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "pages stayed cached");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Advise `[offset, offset + len)` read and poll until all of it is cached, advising
    /// again on every poll: readahead is best effort (the kernel skips a page it finds
    /// busy and never retries it), so one advice may leave a page unread for good.
    pub fn read_in(m: &FileMapping, offset: u64, len: u64) {
        wait_for("the range read in", || {
            m.will_need(offset, len);
            m.resident_bytes(offset, len) >= len
        });
    }

    /// Poll until `cond` holds, failing after 60 s with `what` (this host's disk has
    /// stalled for over 10 s under sustained reads).
    pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A fresh on-disk file of `len` bytes, mapped as llama.cpp maps a model, `MADV_RANDOM`,
    /// with none of it in the page cache. Keep the `TestMap` alive while using the mapping.
    pub fn clean_mapping(len: u64) -> (TestMap, FileMapping) {
        let map = TestMap::new(len as usize);
        let m = map.find();
        m.set_random(0, len);
        drop_all_pages(&m, len);
        (map, m)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;

    #[test]
    fn will_need_reads_all_of_a_range_longer_than_the_window() {
        let map = TestMap::new(8 << 20);
        let mut m = map.find();
        assert!(m.willneed_chunk() >= m.page());
        // Pretend the device's window is 128 KiB: the range must still be read in full.
        m.set_willneed_chunk(128 << 10);
        m.set_random(0, 8 << 20);
        let (offset, len) = (1 << 20, 3 << 20);
        drop_all_pages(&m, 8 << 20);
        assert!(m.will_need(offset, len));
        wait_for("the range is read in full", || {
            m.resident_bytes(offset, len) >= len
        });
        // Exact: nothing outside the range was read.
        assert_eq!(m.resident_bytes(0, 8 << 20), len);
    }

    #[test]
    fn split_folio_lets_a_drop_take_part_of_a_large_folio_and_keeps_the_rest() {
        let (map, m) = read_whole(32 << 20);
        let (at, mib) = (16u64 << 20, 1u64 << 20);
        assert_eq!(m.resident_bytes(at, 2 * mib), 2 * mib);
        m.evict(at, mib);
        let large = m.resident_bytes(at, mib) > 0;
        if !large {
            eprintln!(
                "no large page-cache folio here: split_folio is checked on single pages only"
            );
        }
        assert!(m.split_folio(at + mib));
        m.evict(at, mib);
        assert_eq!(
            m.resident_bytes(at, mib),
            0,
            "the split folio's first half stayed"
        );
        assert_eq!(
            m.resident_bytes(at + mib, mib),
            mib,
            "its second half was dropped"
        );
        // The page mapped to split a folio is unmapped again (the kernel unmaps a file folio
        // it splits, but not a single page): cached, not in the RSS.
        assert!(m.split_folio(at + mib));
        assert_eq!(crate::proc::mapping_rss(&map.path), 0);
        // An uncached page is left alone: mapping it would read it in.
        assert!(
            !m.split_folio(at),
            "an uncached page is not read in to be split"
        );
        assert_eq!(m.resident_bytes(at, mib), 0);
    }

    #[test]
    fn evict_drops_whole_pages_inside_the_range_only() {
        let (_map, m) = clean_mapping(1 << 20);
        read_in(&m, 0, 1 << 20);
        // 100 bytes into page 1 to 100 bytes into page 5: pages 2, 3, 4 are wholly inside.
        let page = m.page();
        assert_eq!(m.evict(page + 100, 4 * page), 3 * page);
        assert_eq!(m.resident_bytes(2 * page, 3 * page), 0);
        assert_eq!(m.resident_bytes(page, page), page);
        assert_eq!(m.resident_bytes(5 * page, page), page);
    }
}
