//! A clear message instead of a bare "Bus error": when a mapped model file is truncated
//! under a running process, a read of the vanished pages raises SIGBUS. The handler names
//! the file and exits with the code the binary chose, using only async-signal-safe calls
//! (`write`, `_exit`) and data prepared before the signal (fixed slots of atomics).
//! A SIGBUS outside every watched mapping gets the default action, as before.
//!
//! A run may leave last words ([`on_fault`]: the stats file): the handler then wakes a
//! thread of their own through a pipe (`write` is async-signal-safe) and parks the faulting
//! thread; that thread runs them, outside the signal handler, and exits with the code.
//! Another thread's fault meanwhile (the compute threads read the same tensors) parks that
//! thread too, so the last words are not cut short; last words that take longer than
//! [`LAST_WORDS_TIMEOUT_MS`] end the process without them.

use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Once;

/// Mapped ranges watched at once (one per VMA of each model shard).
const SLOTS: usize = 64;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    message: AtomicPtr<u8>,
    message_len: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    message: AtomicPtr::new(std::ptr::null_mut()),
    message_len: AtomicUsize::new(0),
};

static SLOT_TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// The write end of the last-words pipe (-1: none).
static LAST_WORDS_FD: AtomicI32 = AtomicI32::new(-1);
/// Set by the first fault in a watched mapping.
static FAULTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Faults in watched mappings so far (each parks its thread, or ends the process).
static FAULTS: AtomicUsize = AtomicUsize::new(0);
/// How long the faulting thread waits for the last words before it ends the process.
pub const LAST_WORDS_TIMEOUT_MS: u64 = 5000;
static USED: AtomicUsize = AtomicUsize::new(0);
static EXIT_CODE: AtomicI32 = AtomicI32::new(1);
static INSTALL: Once = Once::new();

/// Install the handler (once per process); a SIGBUS inside a watched mapping exits with
/// `exit_code` after printing which file changed.
pub fn install(exit_code: i32) {
    EXIT_CODE.store(exit_code, Ordering::Relaxed);
    INSTALL.call_once(|| {
        // SAFETY: `sigaction` is given a fully initialised struct whose handler is an
        // `extern "C"` function that only performs async-signal-safe operations.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// Watch `[start, end)` address ranges that map `path`: a SIGBUS there means the file
/// shrank. Returns false when every slot is taken (the default action then applies).
pub fn watch(path: &Path, ranges: &[(usize, usize)]) -> bool {
    let text = format!(
        "error: {} changed while epm-run was using it (it is now shorter than when it was loaded): a read of its mapped data failed (SIGBUS). Keep model files unchanged while they run; re-create or re-download a truncated one.\n",
        path.display()
    );
    // Leaked on purpose: the handler may read it at any time for the rest of the process.
    let message: &'static mut [u8] = Box::leak(text.into_bytes().into_boxed_slice());
    let mut all = true;
    for &(start, end) in ranges {
        let i = USED.fetch_add(1, Ordering::AcqRel);
        let Some(slot) = SLOT_TABLE.get(i) else {
            all = false;
            continue;
        };
        slot.message_len.store(message.len(), Ordering::Relaxed);
        slot.message.store(message.as_mut_ptr(), Ordering::Relaxed);
        slot.start.store(start, Ordering::Relaxed);
        // Published last: a slot is live once its end is set.
        slot.end.store(end, Ordering::Release);
    }
    all
}

/// What to do, outside the signal handler, before a fault in a watched mapping ends the
/// process (write the stats file). Once per process; later calls are ignored. Returns
/// whether they were installed.
pub fn on_fault(last_words: Box<dyn FnOnce() + Send>) -> bool {
    if LAST_WORDS_FD.load(Ordering::Acquire) >= 0 {
        return false;
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    let [read_fd, write_fd] = fds;
    let started = std::thread::Builder::new()
        .name("epm-last-words".into())
        .spawn(move || {
            let mut byte = 0u8;
            // SAFETY: `read_fd` is this thread's open read end; `byte` has room for one.
            let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                last_words();
                // SAFETY: `_exit` ends the process without running destructors, which
                // other threads (one parked in the handler) may still be using.
                unsafe { libc::_exit(EXIT_CODE.load(Ordering::Relaxed)) };
            }
        });
    if started.is_err() {
        return false;
    }
    LAST_WORDS_FD.store(write_fd, Ordering::Release);
    true
}

/// Faults in watched mappings so far in this process (for the last words, and tests).
pub fn faults() -> usize {
    FAULTS.load(Ordering::Acquire)
}

/// Stop watching every range (the mappings are gone).
pub fn forget_all() {
    for slot in &SLOT_TABLE {
        slot.end.store(0, Ordering::Release);
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &SLOT_TABLE {
        let end = slot.end.load(Ordering::Acquire);
        if end == 0 || addr < slot.start.load(Ordering::Relaxed) || addr >= end {
            continue;
        }
        let msg = slot.message.load(Ordering::Relaxed);
        let len = slot.message_len.load(Ordering::Relaxed);
        let code = EXIT_CODE.load(Ordering::Relaxed);
        let first = !FAULTED.swap(true, Ordering::AcqRel);
        FAULTS.fetch_add(1, Ordering::AcqRel);
        let fd = LAST_WORDS_FD.load(Ordering::Acquire);
        // SAFETY: `write`, `nanosleep` and `_exit` are async-signal-safe; `msg` points to
        // `len` leaked bytes that live for the rest of the process, and `fd` is the pipe's
        // write end, open for the rest of the process.
        unsafe {
            if first {
                libc::write(2, msg as *const libc::c_void, len);
            }
            if fd >= 0 {
                // The first fault wakes the last words; every faulting thread parks until
                // they end the process (an `_exit` here would cut them short).
                if first {
                    libc::write(fd, b"!".as_ptr().cast(), 1);
                }
                let tick = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 10_000_000,
                };
                for _ in 0..LAST_WORDS_TIMEOUT_MS / 10 {
                    libc::nanosleep(&tick, std::ptr::null_mut());
                }
            }
            libc::_exit(code);
        }
    }
    // Not a watched mapping: restore the default action; returning re-runs the faulting
    // access, which then ends the process as a SIGBUS would have.
    // SAFETY: resetting a signal's disposition to SIG_DFL is async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    const CHILD: &str = "EPM_SIGBUS_TEST_CHILD";

    /// In a child process (the handler ends it): two threads read a truncated mapping one
    /// after the other, the second while the first's last words are still running; the
    /// last words wait for the second fault, then write their file.
    fn child(dir: &Path) -> ! {
        let path = dir.join("model");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        let map = map_file(&path);
        install(7);
        let (start, len) = (map.as_ptr() as usize, map.len());
        assert!(watch(&path, &[(start, start + len)]));
        let words = dir.join("last-words");
        assert!(on_fault(Box::new(move || {
            let deadline = Instant::now() + Duration::from_secs(2);
            while faults() < 2 && Instant::now() < deadline {
                std::thread::yield_now();
            }
            std::fs::write(&words, faults().to_string()).unwrap();
        })));
        f.set_len(0).unwrap();
        let map = std::sync::Arc::new(map);
        let second = {
            let map = map.clone();
            std::thread::spawn(move || {
                while faults() < 1 {
                    std::thread::yield_now();
                }
                std::hint::black_box(map[4096]);
            })
        };
        std::hint::black_box(map[0]);
        second.join().unwrap();
        unreachable!("both reads fault");
    }

    /// A read-only mapping of `path`.
    fn map_file(path: &Path) -> memmap2::Mmap {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: the test truncates the file under the mapping on purpose: the reads of
        // the vanished pages raise SIGBUS, which the handler under test catches.
        unsafe { memmap2::Mmap::map(&f).unwrap() }
    }

    #[test]
    fn a_second_fault_waits_for_the_first_faults_last_words() {
        if let Some(dir) = std::env::var_os(CHILD) {
            child(Path::new(&dir));
        }
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigbus::tests::a_second_fault_waits_for_the_first_faults_last_words",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "{stderr}");
        assert!(
            stderr.contains("changed while epm-run was using it"),
            "{stderr}"
        );
        let words = std::fs::read_to_string(dir.path().join("last-words"))
            .unwrap_or_else(|e| panic!("no last words ({e}): {stderr}"));
        assert_eq!(words, "2");
    }
}
