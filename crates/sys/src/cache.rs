//! What the page cache holds of a file: `cachestat` (which, unlike mincore, counts pages
//! whose read is still in flight), mincore over a fresh mapping, and whole-file drops.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

use crate::page_size;

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
/// lacks cachestat (before 6.5) or a sandbox refuses it. Allocation-free.
pub(crate) fn cachestat_pages(file: &File, off: u64, len: u64) -> Option<u64> {
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

/// Bytes of `path` in the page cache, measured by mapping it afresh and asking mincore.
pub fn file_cache_resident_bytes(path: &Path) -> io::Result<u64> {
    let file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(0);
    }
    // SAFETY: a private read-only mapping, used only for mincore (its bytes are never read),
    // and dropped before this function returns; a concurrent truncation cannot fault it.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let page = page_size();
    let mut vec = vec![0u8; map.len().div_ceil(page)];
    // SAFETY: `map` is a live, page-aligned mapping of `map.len()` bytes and `vec` has one
    // byte per page of it, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
}

/// Whether the kernel shows this process the pages of `path` still being read (`cachestat`,
/// Linux 6.5): the condition for cross-layer prediction by default.
pub fn file_sees_reads_in_flight(path: &Path) -> bool {
    File::open(path).is_ok_and(|f| cachestat_pages(&f, 0, page_size() as u64).is_some())
}

/// Drop a whole file from the page cache (`POSIX_FADV_DONTNEED`); pages mapped elsewhere stay.
pub fn drop_file_cache(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    posix_fadvise(file.as_fd(), 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::test_support::*;

    #[test]
    fn a_dropped_file_is_not_cached_and_a_read_one_is() {
        let (map, m) = clean_mapping(2 << 20);
        assert_eq!(file_cache_resident_bytes(&map.path).unwrap(), 0);
        read_in(&m, 0, 1 << 20);
        assert!(file_cache_resident_bytes(&map.path).unwrap() >= 1 << 20);
        if file_sees_reads_in_flight(&map.path) {
            assert!(m.any_cached(0, 1 << 20));
        }
        drop(m);
        drop_file_cache(&map.path).unwrap();
        wait_for("the file dropped", || {
            file_cache_resident_bytes(&map.path).unwrap() == 0
        });
    }
}
