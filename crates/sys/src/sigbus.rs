//! A clear message instead of a bare "Bus error": when a mapped model file is truncated
//! under a running process, a read of the vanished pages raises SIGBUS. The handler names
//! the file and exits with the code the binary chose, using only async-signal-safe calls
//! (`write`, `_exit`) and data prepared before the signal (fixed slots of atomics).
//! A SIGBUS outside every watched mapping gets the default action, as before.
//!
//! A run may leave last words ([`on_fault`]: the stats file): the handler then wakes a
//! thread of their own through a pipe (`write` is async-signal-safe) and parks the faulting
//! thread; that thread runs them, outside the signal handler, and exits with the code. A
//! second fault, or last words that take longer than [`LAST_WORDS_TIMEOUT_MS`], end the
//! process at once.

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
        let fd = LAST_WORDS_FD.load(Ordering::Acquire);
        // SAFETY: `write`, `nanosleep` and `_exit` are async-signal-safe; `msg` points to
        // `len` leaked bytes that live for the rest of the process, and `fd` is the pipe's
        // write end, open for the rest of the process.
        unsafe {
            if first {
                libc::write(2, msg as *const libc::c_void, len);
            }
            if first && fd >= 0 {
                // Wake the last words and park this thread until they end the process.
                libc::write(fd, b"!".as_ptr().cast(), 1);
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
