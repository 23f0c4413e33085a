//! The operating-system side of EPM, and the only crate with libc `unsafe` code.
//!
//! - [`mapping`]: advice on llama.cpp's file mapping (`MADV_RANDOM`, `MADV_WILLNEED`,
//!   eviction by `MADV_DONTNEED` then `POSIX_FADV_DONTNEED`), behind a type whose
//!   constructor states that the mapping must outlive it.
//! - [`cache`]: what the page cache holds (`cachestat`, `mincore`), whole-file drops.
//! - [`advisor`]: the pager's [`Advisor`](epm_core::pager::Advisor) made real, with the
//!   re-drop list; `worker` (guesses, evictions) and `populate` run advice on threads of
//!   their own, and `assist` shares a routing step's calls with a second thread while the
//!   hook waits for them.
//! - [`cgroup`]: the memory cgroup whose limit binds the process, and the kernel memory
//!   charged to it.
//! - [`proc`]: one reader for `/proc` and sysfs (memory, I/O, machine, readahead window).
//! - [`fs`]: `O_DIRECT` streaming writes, whole files written and read past the page cache,
//!   atomic file writes, free space.
//! - [`sigbus`]: a clear message instead of a bare "Bus error" when a mapped model file
//!   shrinks under the process.

// `unsafe` is allowed only in the modules that make the raw calls.
#![deny(unsafe_code)]

pub mod advisor;
mod assist;
#[allow(unsafe_code)]
pub mod cache;
pub mod cgroup;
pub mod fs;
#[allow(unsafe_code)]
pub mod mapping;
#[allow(unsafe_code)]
pub mod page_cost;
mod populate;
pub mod proc;
#[allow(unsafe_code)]
pub mod sigbus;
mod worker;

use std::path::PathBuf;

pub use advisor::{OsAdvisor, Prefetch};
pub use mapping::FileMapping;
pub use proc::RssProbe;

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
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Let a closed pipe end the process quietly, as it does other Unix tools (`epm-run sim |
/// head`): Rust ignores SIGPIPE, so a write to a closed pipe would be an error (and
/// `println!` a panic).
#[allow(unsafe_code)]
pub fn default_sigpipe() {
    // SAFETY: resetting a signal's disposition to SIG_DFL has no memory-safety
    // preconditions; it is done once, at start-up, before other threads exist.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The system page size.
pub fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
        .unwrap_or(4096)
}

/// The most pages the kernel puts in one page-cache folio of a file: PMD-sized (2 MiB at 4
/// KiB pages). A folio lies at a file offset aligned to its size.
pub const FOLIO_MAX_PAGES: u64 = 512;

/// Rounds `[offset, offset+len)` inward to whole pages: only pages that lie entirely in the
/// range (and so belong to no neighbour) are returned.
pub fn inward(offset: u64, len: u64, page: u64) -> (u64, u64) {
    let start = offset.next_multiple_of(page);
    let end = (offset + len) / page * page;
    (start, end.max(start))
}

/// Rounds `[offset, offset+len)` outward to whole pages.
pub fn outward(offset: u64, len: u64, page: u64) -> (u64, u64) {
    (offset / page * page, (offset + len).next_multiple_of(page))
}

/// `[start, end)` cut into consecutive pieces of at most `chunk` bytes (`chunk` > 0).
pub fn chunks(start: u64, end: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let chunk = chunk.max(1);
    (start..end)
        .step_by(chunk as usize)
        .map(move |s| (s, (s + chunk).min(end)))
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

    #[test]
    fn inward_and_outward_round_to_pages() {
        assert_eq!(inward(100, 10_000, 4096), (4096, 8192));
        assert_eq!(inward(100, 200, 4096), (4096, 4096));
        assert_eq!(outward(100, 10_000, 4096), (0, 12_288));
        assert!(page_size() >= 4096);
    }
}
