//! Speculative readahead on its own thread. `MADV_WILLNEED` allocates and submits every page
//! of a range on the calling thread; for the experts the predictor guesses, that work would
//! sit on the compute thread between two layers. The hook queues the guesses here instead
//! and goes back to compute; this thread makes the calls while the layer runs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use epm_core::pager::FileRange;
use epm_core::stats::IoCounters;

use crate::advisor::add_elapsed;
use crate::mapping::FileMapping;

/// Queue capacity: the guesses of one routing step are `predict-depth x experts used x
/// tensors` ranges (at most 8 x 32 x 3 for the models we know); a full queue makes the
/// caller advise inline.
const QUEUE_CAPACITY: usize = 1024;

/// Invariants:
/// 1. a range is in `queue[next..]` or `in_progress` from `push` until it is advised, or
///    removed by `cancel` or `clear`;
/// 2. once `cancel(file, start, end)` returns, no byte of `[start, end)` is queued or being
///    advised, so an eviction that follows cannot be undone by a late speculative read;
/// 3. `queue` never grows past `QUEUE_CAPACITY`: `push` refuses instead, and the hook's
///    calls never allocate.
struct State {
    queue: Vec<FileRange>,
    /// Index of the next range to advise; the queue is emptied whenever it reaches the end.
    next: usize,
    in_progress: Option<FileRange>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when ranges are queued or the thread must stop.
    work: Condvar,
    /// Signalled when the thread finishes a range.
    advised: Condvar,
    files: Arc<Vec<FileMapping>>,
    counters: Arc<IoCounters>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct AheadThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn overlaps(r: &FileRange, file: u32, start: u64, end: u64) -> bool {
    r.file == file && r.offset < end && start < r.offset + r.len
}

impl AheadThread {
    pub(crate) fn new(files: Arc<Vec<FileMapping>>, counters: Arc<IoCounters>) -> AheadThread {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Vec::with_capacity(QUEUE_CAPACITY),
                next: 0,
                in_progress: None,
                stop: false,
            }),
            work: Condvar::new(),
            advised: Condvar::new(),
            files,
            counters,
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("epm-ahead".into())
            .spawn(move || run(&sh))
            .expect("spawn the readahead thread");
        AheadThread {
            shared,
            thread: Some(thread),
        }
    }

    /// Queue a range; `false` when the queue is full (the caller advises it itself).
    /// The thread starts on it at the next `wake`.
    pub(crate) fn push(&self, r: FileRange) -> bool {
        let mut st = self.shared.lock();
        if st.queue.len() == st.queue.capacity() {
            return false;
        }
        st.queue.push(r);
        true
    }

    pub(crate) fn wake(&self) {
        self.shared.work.notify_one();
    }

    /// Remove every queued range that overlaps `[start, end)` of `file`, and wait while the
    /// thread is advising one (invariant 2). Returns how many queued ranges were removed.
    pub(crate) fn cancel(&self, file: u32, start: u64, end: u64) -> u64 {
        let mut st = self.shared.lock();
        let next = st.next;
        let before = st.queue.len();
        let mut i = 0;
        st.queue.retain(|r| {
            i += 1;
            i <= next || !overlaps(r, file, start, end)
        });
        let removed = (before - st.queue.len()) as u64;
        self.wait_while(st, |r| overlaps(r, file, start, end));
        removed
    }

    /// Drop everything queued and wait for the range in progress.
    pub(crate) fn clear(&self) {
        let mut st = self.shared.lock();
        st.queue.clear();
        st.next = 0;
        self.wait_while(st, |_| true);
    }

    /// Wait while the thread is advising a range that `busy` selects.
    fn wait_while(&self, st: MutexGuard<'_, State>, busy: impl Fn(&FileRange) -> bool) {
        let _idle = self
            .shared
            .advised
            .wait_while(st, |s| s.in_progress.as_ref().is_some_and(&busy))
            .unwrap_or_else(|e| e.into_inner());
    }
}

fn run(sh: &Shared) {
    let mut st = sh.lock();
    loop {
        if st.stop {
            return;
        }
        if st.next >= st.queue.len() {
            st.queue.clear();
            st.next = 0;
            st = sh.work.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let r = st.queue[st.next];
        st.next += 1;
        st.in_progress = Some(r);
        drop(st);
        let t = Instant::now();
        sh.files[r.file as usize].will_need(r.offset, r.len);
        add_elapsed(&sh.counters.ahead_will_need_ns, t);
        sh.counters.ahead_reads.fetch_add(1, Ordering::Relaxed);
        st = sh.lock();
        st.in_progress = None;
        sh.advised.notify_all();
    }
}

impl Drop for AheadThread {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
