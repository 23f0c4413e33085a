//! Files: atomic replacement (a temporary name, fsync, rename), `O_DIRECT` streaming writes
//! on threads of their own, whole files written and read past the page cache, outputs that
//! leave nothing in the page cache, page-aligned buffers, free space, and an exclusive lock
//! one process at a time holds.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::page_size;

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A hidden temporary name next to `path`, unique to this process and call.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.partial-{}-{seq}", std::process::id()))
}

/// Create or replace `path` atomically: `write` fills a temporary file next to it (and
/// syncs it, if it wants durability), which is renamed over `path` only when `write`
/// succeeds; on failure the temporary file is removed. Readers see the old file or the new
/// one, never a part.
pub fn replace_atomically<T, E: From<io::Error>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<T, E> {
    let tmp = temp_path(path);
    match write(&tmp) {
        Ok(v) => match std::fs::rename(&tmp, path) {
            Ok(()) => Ok(v),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e.into())
            }
        },
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Write `bytes` to `path` atomically and durably (see [`replace_atomically`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_atomically(path, |tmp| {
        let mut f = File::create(tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })
}

/// A zeroed buffer of anonymous memory for `O_DIRECT` I/O, mapped in whole pages
/// (so page-aligned, with the last page's tail as padding): its pages go back to the kernel
/// when it drops, where a large heap block freed may stay in the process's RSS, outside the
/// budget's accounting.
pub struct PageBuf {
    map: memmap2::MmapMut,
    len: usize,
}

impl PageBuf {
    pub fn new(len: usize) -> io::Result<PageBuf> {
        let mapped = len.next_multiple_of(page_size()).max(page_size());
        // Neither huge pages (`MADV_HUGEPAGE`) nor `MAP_POPULATE` filled a 197 MB buffer
        // faster here under a cgroup cap: 410 and 226 ms against 130-180 ms faulted in.
        let map = memmap2::MmapMut::map_anon(mapped)?;
        Ok(PageBuf { map, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.map[..self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }

    /// The bytes rounded up to whole pages, as direct I/O moves them.
    fn pages(&self) -> &[u8] {
        &self.map[..self.len.next_multiple_of(page_size())]
    }

    fn pages_mut(&mut self) -> &mut [u8] {
        let end = self.len.next_multiple_of(page_size());
        &mut self.map[..end]
    }
}

/// Whole-file I/O moves pieces of a [`DirectWriter`]'s chunk size, as many in flight as it
/// has writers (the disk's figures are there).
const WHOLE_FILE_PIECE: usize = DirectWriter::CHUNK;
const WHOLE_FILE_IN_FLIGHT: usize = DirectWriter::WRITERS;

/// Run `each` on every item, from a few threads at once; the first error is returned.
fn on_io_threads<T: Send>(
    items: impl Iterator<Item = T> + Send,
    each: impl Fn(T) -> io::Result<()> + Sync,
) -> io::Result<()> {
    let items = Mutex::new(items);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..WHOLE_FILE_IN_FLIGHT)
            .map(|_| {
                scope.spawn(|| loop {
                    let next = items
                        .lock()
                        .map_err(|_| io::Error::other("poisoned"))?
                        .next();
                    let Some(item) = next else {
                        return Ok(());
                    };
                    each(item)?;
                })
            })
            .collect();
        // Every thread is joined; the first error is kept.
        let mut first = Ok(());
        for t in threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("an I/O thread panicked")));
            first = first.and(r);
        }
        first
    })
}

/// Create (truncate) `path` and write all of `buf` to it, past the page cache where the
/// filesystem allows `O_DIRECT` (whole pages, the file then cut to size), else written and
/// then dropped from the cache; synced either way. Several writes are in flight.
pub fn write_whole_uncached(path: &Path, buf: &PageBuf) -> io::Result<()> {
    let (file, direct) = create_for_streaming(path)?;
    let bytes = if direct { buf.pages() } else { buf.as_slice() };
    on_io_threads(bytes.chunks(WHOLE_FILE_PIECE).enumerate(), |(i, piece)| {
        file.write_all_at(piece, (i * WHOLE_FILE_PIECE) as u64)
    })?;
    if direct {
        file.set_len(buf.len() as u64)?;
    }
    file.sync_all()?;
    if !direct {
        drop_pages(&file)?;
    }
    Ok(())
}

/// Read all of `path`, which must be `expected` bytes long, into a new buffer, past the page
/// cache where the filesystem allows `O_DIRECT`, else through it and then dropped from it.
/// Several reads are in flight. A file of another length is an `InvalidData` error before
/// anything is allocated; one that shrinks meanwhile is an `UnexpectedEof` error.
pub fn read_whole_uncached(path: &Path, expected: u64) -> io::Result<PageBuf> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let (file, direct) = match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => (f, true),
        // tmpfs and some network filesystems refuse O_DIRECT.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (opts.open(path)?, false),
        Err(e) => return Err(e),
    };
    let on_disk = file.metadata()?.len();
    if on_disk != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it has {on_disk} bytes, not the {expected} expected"),
        ));
    }
    let len = usize::try_from(on_disk)
        .map_err(|_| io::Error::other("the file is larger than this machine's address space"))?;
    let mut buf = PageBuf::new(len)?;
    let bytes = if direct {
        buf.pages_mut()
    } else {
        buf.as_mut_slice()
    };
    on_io_threads(
        bytes.chunks_mut(WHOLE_FILE_PIECE).enumerate(),
        |(i, piece)| {
            let offset = i * WHOLE_FILE_PIECE;
            // Direct reads ask for whole pages; the file's part of them is what must come.
            let expected = piece.len().min(len.saturating_sub(offset));
            let mut got = 0;
            while got < expected {
                match file.read_at(&mut piece[got..], (offset + got) as u64) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        },
    )?;
    if direct {
        // Past the file's end the pages hold zeros again, whatever the last read left.
        buf.pages_mut()[len..].fill(0);
    } else {
        drop_pages(&file)?;
    }
    Ok(buf)
}

/// The first `len` bytes of `path` (fewer if it is shorter), read without readahead
/// (`POSIX_FADV_RANDOM` on the descriptor): only the pages asked for enter the page cache.
/// A plain read pulls in a readahead window past them, which in a small model file is
/// its first tensor (the token table), cached outside the budget's accounting.
pub fn read_head(path: &Path, len: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    nix::fcntl::posix_fadvise(
        &file,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM,
    )
    .map_err(io::Error::from)?;
    let size = file.metadata()?.len().min(len);
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Drop a file's clean pages from the page cache.
fn drop_pages(file: &File) -> io::Result<()> {
    nix::fcntl::posix_fadvise(
        file,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .map_err(io::Error::from)
}

/// Bytes an unprivileged writer may still use on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir)?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// Whether `dir` is on a file system held in memory (tmpfs, ramfs): files there take RAM
/// that the budget does not count.
pub fn in_memory(dir: &Path) -> io::Result<bool> {
    use nix::sys::statfs::{statfs, TMPFS_MAGIC};
    /// `linux/magic.h`; nix names tmpfs's only.
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    let kind = statfs(dir)?.filesystem_type();
    Ok(kind == TMPFS_MAGIC || kind.0 as u64 == RAMFS_MAGIC)
}

/// Create (truncate) `path` for writing, bypassing the page cache with `O_DIRECT` where the
/// filesystem allows it. Returns the file and whether it is direct: direct writes must come
/// from page-aligned buffers in multiples of the page size.
pub fn create_for_streaming(path: &Path) -> io::Result<(File, bool)> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok((f, true)),
        // tmpfs and some network filesystems refuse O_DIRECT.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((opts.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// An exclusive advisory lock (`flock`) on a file, held until dropped, and by the kernel
/// until the process ends however it ends: one process at a time uses what it guards.
#[derive(Debug)]
pub struct ExclusiveLock {
    _held: nix::fcntl::Flock<File>,
}

/// Take the exclusive lock on `path` (created if absent) without waiting: `Ok(None)` when
/// another open file holds it.
pub fn try_lock_exclusive(path: &Path) -> io::Result<Option<ExclusiveLock>> {
    match nix::fcntl::Flock::lock(
        lock_file(path)?,
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    ) {
        Ok(held) => Ok(Some(ExclusiveLock { _held: held })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

/// Take the exclusive lock on `path` (created if absent), waiting while another open file
/// holds it: for what is held only for a moment, such as a read and a rewrite of a file.
pub fn lock_exclusive(path: &Path) -> io::Result<ExclusiveLock> {
    nix::fcntl::Flock::lock(lock_file(path)?, nix::fcntl::FlockArg::LockExclusive)
        .map(|held| ExclusiveLock { _held: held })
        .map_err(|(_, e)| io::Error::from(e))
}

fn lock_file(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// A buffered file writer that drops what it wrote from the page cache as it goes: every
/// [`UncachedWriter::DROP_EVERY`] bytes, and on `flush`, the written bytes are made durable
/// (`fdatasync`) and advised out (`POSIX_FADV_DONTNEED`; dirty pages would be kept).
///
/// A run's own outputs (a logits dump writes 600 KB per token on a 152k vocabulary) are
/// page cache the budget does not count; under a memory cap that charges page cache
/// (cgroups) they would take the room of the experts and make the kernel reclaim them.
pub struct UncachedWriter {
    inner: io::BufWriter<File>,
    /// Bytes handed to the file, and of those the prefix already dropped from the cache.
    written: u64,
    dropped: u64,
}

impl UncachedWriter {
    pub const DROP_EVERY: u64 = 4 << 20;

    pub fn new(file: File) -> UncachedWriter {
        UncachedWriter {
            inner: io::BufWriter::new(file),
            written: 0,
            dropped: 0,
        }
    }

    fn drop_written(&mut self) -> io::Result<()> {
        self.inner.flush()?;
        if self.written == self.dropped {
            return Ok(());
        }
        let file = self.inner.get_ref();
        file.sync_data()?;
        // The kernel drops whole pages only, so the range starts at the page the previous
        // drop ended in (its tail was still being written); it ends at the end of the
        // file, whose last partial page the kernel includes.
        let start = self.dropped / page_size() as u64 * page_size() as u64;
        nix::fcntl::posix_fadvise(
            file,
            start as i64,
            (self.written - start) as i64,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .map_err(io::Error::from)?;
        self.dropped = self.written;
        Ok(())
    }
}

impl Write for UncachedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        if self.written - self.dropped >= Self::DROP_EVERY {
            self.drop_written()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drop_written()
    }
}

/// A `Write` that hands full page-aligned chunks to writer threads, so that producing data
/// and writing it run on different cores, with a few writes in flight (a cloud disk here
/// wrote 1.16 GB/s at queue depth 1 and 2.05 GB/s at 4); with `O_DIRECT` the writes skip the
/// page-cache copy entirely. Chunks circulate between the threads; nothing is allocated
/// after start-up. The last chunk is written padded to a page and the file then cut to size.
pub struct DirectWriter {
    chunk: PageBuf,
    len: usize,
    written: u64,
    to_writers: Option<SyncSender<(u64, PageBuf)>>,
    free: Receiver<PageBuf>,
    /// Shared with the writer threads until `finish` takes it back.
    file: Option<Arc<File>>,
    writers: Vec<JoinHandle<io::Result<()>>>,
}

impl DirectWriter {
    const CHUNK: usize = 8 << 20;
    const WRITERS: usize = 3;
    const CHUNKS: usize = 2 * Self::WRITERS;

    /// Stream into `file` (from [`create_for_streaming`]), from offset 0.
    pub fn new(file: File) -> io::Result<DirectWriter> {
        let (to_writers, full) = sync_channel::<(u64, PageBuf)>(Self::CHUNKS);
        let full = Arc::new(Mutex::new(full));
        let (give_back, free) = channel();
        for _ in 0..Self::CHUNKS {
            give_back
                .send(PageBuf::new(Self::CHUNK)?)
                .expect("receiver alive");
        }
        let file = Arc::new(file);
        let mut writers = Vec::new();
        for i in 0..Self::WRITERS {
            let (full, give_back, file) = (full.clone(), give_back.clone(), file.clone());
            writers.push(
                std::thread::Builder::new()
                    .name(format!("epm-writer-{i}"))
                    .spawn(move || loop {
                        let next = full
                            .lock()
                            .map_err(|_| io::Error::other("poisoned"))?
                            .recv();
                        let Ok((offset, chunk)) = next else {
                            return Ok(());
                        };
                        file.write_all_at(chunk.as_slice(), offset)?;
                        // The producer may have finished and gone: then it needs no chunk.
                        let _ = give_back.send(chunk);
                    })?,
            );
        }
        Ok(DirectWriter {
            chunk: PageBuf::new(Self::CHUNK)?,
            len: 0,
            written: 0,
            to_writers: Some(to_writers),
            free,
            file: Some(file),
            writers,
        })
    }

    /// Stop the writer threads and return the first error any of them met.
    fn join(&mut self) -> io::Result<()> {
        self.to_writers = None;
        let mut first = Ok(());
        for w in self.writers.drain(..) {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a writer thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn send_full(&mut self) -> io::Result<()> {
        // No free chunk means every writer stopped: on an error, which `join` returns.
        let Ok(next) = self.free.recv() else {
            return self
                .join()
                .and(Err(io::Error::other("the writer threads stopped")));
        };
        let full = std::mem::replace(&mut self.chunk, next);
        let offset = self.written;
        self.written += self.len as u64;
        self.len = 0;
        let sent = self.to_writers.as_ref().map(|tx| tx.send((offset, full)));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => self
                .join()
                .and(Err(io::Error::other("the writer threads stopped"))),
        }
    }

    /// Write what is buffered (a zero-padded whole chunk), wait for the writer threads, cut
    /// the file to the bytes actually produced, and return it.
    pub fn finish(mut self) -> io::Result<File> {
        let total = self.written + self.len as u64;
        if self.len > 0 {
            self.chunk.as_mut_slice()[self.len..].fill(0);
            self.send_full()?;
        }
        self.join()?;
        let file = self
            .file
            .take()
            .and_then(|f| Arc::try_unwrap(f).ok())
            .ok_or_else(|| io::Error::other("the writer threads still hold the file"))?;
        file.set_len(total)?;
        Ok(file)
    }
}

impl Write for DirectWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let k = (Self::CHUNK - self.len).min(data.len());
        self.chunk.as_mut_slice()[self.len..self.len + k].copy_from_slice(&data[..k]);
        self.len += k;
        if self.len == Self::CHUNK {
            self.send_full()?;
        }
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_exclusive_lock_is_held_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = try_lock_exclusive(&path).unwrap().expect("free");
        // A second open file description is refused while the first holds it.
        assert!(try_lock_exclusive(&path).unwrap().is_none());
        drop(held);
        assert!(try_lock_exclusive(&path).unwrap().is_some());
        // A folder that is not there is an error, not a lock.
        assert!(try_lock_exclusive(&dir.path().join("no/lock")).is_err());
        assert!(lock_exclusive(&dir.path().join("no/lock")).is_err());
    }

    #[test]
    fn a_waiting_lock_is_taken_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = lock_exclusive(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let lock = lock_exclusive(&path).unwrap();
                tx.send(()).unwrap();
                lock
            })
        };
        // Not taken while held (the waiter would have said so within this time).
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("taken once let go");
        let taken = waiter.join().unwrap();
        assert!(try_lock_exclusive(&path).unwrap().is_none());
        drop(taken);
    }

    use super::*;

    /// The head is read whole, and nothing past it enters the page cache.
    #[test]
    fn a_head_is_read_without_readahead() {
        let map = crate::mapping::test_support::TestMap::new(8 << 20);
        let m = map.find();
        crate::mapping::test_support::drop_all_pages(&m, 8 << 20);
        let head = read_head(&map.path, 64 << 10).unwrap();
        assert_eq!(head, vec![7u8; 64 << 10]);
        assert_eq!(m.resident_bytes(64 << 10, (8 << 20) - (64 << 10)), 0);
        assert_eq!(m.resident_bytes(0, 64 << 10), 64 << 10);
        // Longer than the file: the whole file.
        assert_eq!(read_head(&map.path, 16 << 20).unwrap().len(), 8 << 20);
        assert!(read_head(&map.path.with_extension("missing"), 1).is_err());
    }

    #[test]
    fn page_buffers_start_on_a_page() {
        for len in [1, 4096, 12_345] {
            let mut b = PageBuf::new(len).unwrap();
            assert_eq!(b.as_slice().as_ptr() as usize % page_size(), 0);
            assert_eq!(b.as_mut_slice().len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn direct_writes_round_trip_on_disk_and_on_tmpfs() {
        // On disk (O_DIRECT) and in /dev/shm where it exists (the buffered fallback); more
        // than a chunk, and not a multiple of a page.
        let on_disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").ok();
        let data: Vec<u8> = (0..DirectWriter::CHUNK * 2 + 1234)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        for dir in std::iter::once(on_disk.path()).chain(shm.as_ref().map(|d| d.path())) {
            let path = dir.join("out.bin");
            replace_atomically(&path, |tmp| -> io::Result<()> {
                let (file, _direct) = create_for_streaming(tmp)?;
                let mut w = DirectWriter::new(file)?;
                w.write_all(&data)?;
                w.finish()?.sync_all()
            })
            .unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), data, "{}", dir.display());
        }
    }

    #[test]
    fn whole_files_round_trip_past_the_page_cache() {
        // On disk (O_DIRECT, where nothing may stay cached) and in /dev/shm where it exists
        // (the buffered fallback); empty, under a page, a page, and more than two pieces
        // but not a multiple of a page.
        let on_disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").ok();
        for dir in std::iter::once(on_disk.path()).chain(shm.as_ref().map(|d| d.path())) {
            for len in [0, 1, page_size(), WHOLE_FILE_PIECE * 2 + 1234] {
                let mut buf = PageBuf::new(len).unwrap();
                assert_eq!(buf.as_slice().as_ptr() as usize % page_size(), 0);
                for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
                    *b = (i * 31 % 251) as u8;
                }
                let path = dir.join(format!("whole-{len}.bin"));
                // Over a longer file: the new one replaces it whole.
                std::fs::write(&path, vec![7u8; len + 5000]).unwrap();
                write_whole_uncached(&path, &buf).unwrap();
                assert_eq!(std::fs::metadata(&path).unwrap().len(), len as u64);
                let back = read_whole_uncached(&path, len as u64).unwrap();
                assert_eq!(back.len(), len);
                assert!(
                    back.as_slice() == buf.as_slice(),
                    "{len} bytes in {}",
                    dir.display()
                );
                assert!(back.pages()[len..].iter().all(|&b| b == 0));
                if dir == on_disk.path() {
                    let cached = crate::cache::file_cache_resident_bytes(&path).unwrap();
                    assert_eq!(cached, 0, "{len} bytes: left in the page cache");
                }
            }
        }
        let missing = read_whole_uncached(&on_disk.path().join("nothing.bin"), 0);
        assert_eq!(
            missing.err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
        // A file of another length than expected is refused before its size is allocated.
        let path = on_disk.path().join(format!("whole-{}.bin", page_size()));
        for expected in [0, page_size() as u64 - 1, u64::MAX] {
            let e = read_whole_uncached(&path, expected).err().unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(
                e.to_string()
                    .contains(&format!("not the {expected} expected")),
                "{e}"
            );
        }
    }

    #[test]
    fn an_uncached_writer_leaves_its_bytes_on_disk_and_not_in_the_page_cache() {
        // On disk, where the page cache can drop clean pages (tmpfs cannot).
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("logits.bin");
        let data: Vec<u8> = (0..3 * UncachedWriter::DROP_EVERY as usize + 12_345)
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        let mut w = UncachedWriter::new(File::create(&path).unwrap());
        for piece in data.chunks(600_000) {
            w.write_all(piece).unwrap();
        }
        let before_flush = crate::cache::file_cache_resident_bytes(&path).unwrap();
        assert!(
            before_flush <= UncachedWriter::DROP_EVERY + (64 << 10),
            "{before_flush} bytes cached before the flush: more than one drop interval"
        );
        w.flush().unwrap();
        let cached = crate::cache::file_cache_resident_bytes(&path).unwrap();
        assert_eq!(cached, 0, "bytes left in the page cache after flush");
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn a_failed_replacement_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stats.json");
        write_atomic(&path, b"old").unwrap();
        let r: io::Result<()> = replace_atomically(&path, |tmp| {
            std::fs::write(tmp, b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(free_bytes(dir.path()).unwrap() > 0);
    }
}
