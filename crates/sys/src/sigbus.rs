//! A clear message instead of a bare "Bus error": when a mapped model file is truncated
//! under a running process, a read of the vanished pages raises SIGBUS. The handler names
//! the file and exits with the code the binary chose, using only async-signal-safe calls
//! (`write`, `_exit`) and data prepared before the signal (fixed slots of atomics).
//! A SIGBUS outside every watched mapping gets the default action, as before.

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
        // SAFETY: `write` and `_exit` are async-signal-safe; `msg` points to `len` leaked
        // bytes that live for the rest of the process.
        unsafe {
            libc::write(2, msg as *const libc::c_void, len);
            libc::_exit(EXIT_CODE.load(Ordering::Relaxed));
        }
    }
    // Not a watched mapping: restore the default action; returning re-runs the faulting
    // access, which then ends the process as a SIGBUS would have.
    // SAFETY: resetting a signal's disposition to SIG_DFL is async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}
