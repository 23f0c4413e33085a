//! Advice on a thread of its own, so its system calls leave the compute thread: the
//! predictor's guesses (`MADV_WILLNEED` allocates and submits every page of a range on the
//! calling thread) and evictions (`MADV_DONTNEED` then `POSIX_FADV_DONTNEED` remove every
//! folio). The hook queues ranges and goes back to compute; the worker makes the calls
//! while the layer runs.
//!
//! Queued evictions still hold their pages until the worker drops them, so their bytes are
//! bounded (`byte_limit`): the engine takes that slack out of the pager's budget.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use epm_core::pager::FileRange;
use epm_core::stats::IoCounters;

use crate::advisor::{add_elapsed, evict_again, overlaps, remove_span};
use crate::mapping::FileMapping;

/// Ranges queued at once; a full queue makes the caller act inline.
const QUEUE_CAPACITY: usize = 1024;

/// What a worker does with its ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// `MADV_WILLNEED` (speculative reads).
    ReadAhead,
    /// `MADV_DONTNEED` + `POSIX_FADV_DONTNEED`, repeated while pages are still being read.
    Evict,
    /// `MADV_POPULATE_READ` over a range its caller put under `MADV_NORMAL` (a prompt's
    /// whole layer, read around each fault into large folios), then `MADV_RANDOM` again.
    ReadWhole,
}

/// Invariants:
/// 1. a range is in `queue[next..]`, `in_progress` or (evictions) `retry` from `push` until
///    it is done, or removed (whole, or the part cancelled) by `cancel` or `clear`;
/// 2. once `cancel(file, start, end)` returns, no byte of `[start, end)` is queued, being
///    worked on or waiting for a retry: a read that follows cannot be undone by a late
///    eviction, and an eviction that follows cannot be undone by a late speculative read;
/// 3. `bytes` is the sum of the lengths in `queue[next..]`, `in_progress` and `retry`, and
///    stays at most `byte_limit`;
/// 4. `queue` and `retry` never grow past their capacity: `push` refuses instead, and the
///    hook's calls never allocate.
struct State {
    queue: Vec<FileRange>,
    /// Index of the next range to work on; the queue is emptied whenever it reaches the end.
    next: usize,
    in_progress: Option<FileRange>,
    /// Evicted ranges the page cache still held (their reads were in flight).
    retry: Vec<FileRange>,
    /// The worker is dropping `retry` again, outside the lock.
    retrying: bool,
    bytes: u64,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when ranges are queued or the worker must stop.
    work: Condvar,
    /// Signalled when the worker finishes a range.
    done: Condvar,
    files: Arc<Vec<FileMapping>>,
    counters: Arc<IoCounters>,
    kind: Work,
    byte_limit: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn sum(list: &[FileRange]) -> u64 {
    list.iter().map(|r| r.len).sum()
}

impl Worker {
    pub(crate) fn new(
        kind: Work,
        files: Arc<Vec<FileMapping>>,
        counters: Arc<IoCounters>,
        byte_limit: u64,
    ) -> Worker {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Vec::with_capacity(QUEUE_CAPACITY),
                next: 0,
                in_progress: None,
                retry: Vec::with_capacity(QUEUE_CAPACITY),
                retrying: false,
                bytes: 0,
                stop: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            files,
            counters,
            kind,
            byte_limit,
        });
        let sh = shared.clone();
        let name = match kind {
            Work::ReadAhead => "epm-ahead",
            Work::Evict => "epm-evict",
            Work::ReadWhole => "epm-whole",
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&sh))
            .expect("spawn an advice worker");
        Worker {
            shared,
            thread: Some(thread),
        }
    }

    /// Queue a range; `false` when the queue or its byte limit is full (the caller acts on
    /// it itself). The worker starts on it at the next `wake`.
    pub(crate) fn push(&self, r: FileRange) -> bool {
        let mut st = self.shared.lock();
        if st.queue.len() == st.queue.capacity() || st.bytes + r.len > self.shared.byte_limit {
            return false;
        }
        st.queue.push(r);
        st.bytes += r.len;
        true
    }

    pub(crate) fn wake(&self) {
        self.shared.work.notify_one();
    }

    /// Take `[start, end)` of `file` out of the worker's hands (invariant 2) and wait while
    /// it is working on a range that overlaps it. Read-ahead drops whole overlapping ranges;
    /// evictions keep the parts outside the span. Returns how many ranges were touched.
    pub(crate) fn cancel(&self, file: u32, start: u64, end: u64) -> u64 {
        // A retry pass works on `retry` outside the lock: let it finish first.
        let mut st = self
            .shared
            .done
            .wait_while(self.shared.lock(), |s| s.retrying)
            .unwrap_or_else(|e| e.into_inner());
        let next = st.next;
        let before = sum(&st.queue[next..]) + sum(&st.retry);
        let mut touched = 0u64;
        match self.shared.kind {
            Work::ReadAhead | Work::ReadWhole => {
                let mut i = 0;
                let len = st.queue.len();
                st.queue.retain(|r| {
                    i += 1;
                    let drop = i > next && overlaps(r, file, start, end);
                    touched += u64::from(drop);
                    !drop
                });
                debug_assert!(st.queue.len() <= len);
            }
            Work::Evict => {
                touched += st.queue[next..]
                    .iter()
                    .chain(&st.retry)
                    .filter(|r| overlaps(r, file, start, end))
                    .count() as u64;
                if touched > 0 {
                    // Drop the worked-off head of the queue (in place), then cut the span out
                    // of the rest; neither allocates.
                    st.queue.drain(..next);
                    st.next = 0;
                    remove_span(&mut st.queue, file, start, end);
                    remove_span(&mut st.retry, file, start, end);
                }
            }
        }
        let after = sum(&st.queue[st.next..]) + sum(&st.retry);
        st.bytes -= before - after;
        self.wait_while(st, |s| {
            s.in_progress
                .as_ref()
                .is_some_and(|r| overlaps(r, file, start, end))
        });
        touched
    }

    /// Drop everything queued (read-ahead) and wait for the range in progress.
    pub(crate) fn clear(&self) {
        let mut st = self.shared.lock();
        let next = st.next;
        let dropped = sum(&st.queue[next..]);
        st.bytes -= dropped;
        st.queue.clear();
        st.next = 0;
        self.wait_while(st, |s| s.in_progress.is_some());
    }

    /// Wait until every queued range is done (evictions: dropped for good), at most until
    /// `deadline`. Returns whether all were.
    pub(crate) fn drain(&self, deadline: Instant) -> bool {
        let mut st = self.shared.lock();
        self.shared.work.notify_one();
        while st.bytes > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .shared
                .done
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Whether nothing is queued, worked on or waiting for a retry.
    pub(crate) fn idle(&self) -> bool {
        self.shared.lock().bytes == 0
    }

    /// Bytes queued, worked on or waiting for a retry.
    #[cfg(test)]
    pub(crate) fn pending_bytes(&self) -> u64 {
        self.shared.lock().bytes
    }

    /// Wait while `busy` holds of the worker's state.
    fn wait_while(&self, st: MutexGuard<'_, State>, busy: impl Fn(&State) -> bool) {
        let _idle = self
            .shared
            .done
            .wait_while(st, |s| busy(s))
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
            if st.retry.is_empty() {
                st = sh.work.wait(st).unwrap_or_else(|e| e.into_inner());
            } else {
                // Pages still being read: try their drops again shortly.
                st = sh
                    .work
                    .wait_timeout(st, Duration::from_millis(1))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if st.next >= st.queue.len() {
                    st = retry_evictions(sh, st);
                }
            }
            continue;
        }
        let r = st.queue[st.next];
        st.next += 1;
        st.in_progress = Some(r);
        drop(st);
        let m = &sh.files[r.file as usize];
        let t = Instant::now();
        let clean = match sh.kind {
            Work::ReadAhead => {
                m.will_need(r.offset, r.len);
                add_elapsed(&sh.counters.ahead_will_need_ns, t);
                sh.counters.ahead_reads.fetch_add(1, Ordering::Relaxed);
                true
            }
            Work::ReadWhole => {
                for (addr, len) in m.mapped(r.offset, r.offset + r.len) {
                    m.populate(addr, len);
                }
                m.set_random(r.offset, r.len);
                add_elapsed(&sh.counters.whole_read_ns, t);
                true
            }
            Work::Evict => {
                m.evict(r.offset, r.len);
                let clean = !m.any_cached(r.offset, r.len);
                add_elapsed(&sh.counters.worker_evict_ns, t);
                sh.counters.worker_evictions.fetch_add(1, Ordering::Relaxed);
                if !clean {
                    sh.counters.late_evictions.fetch_add(1, Ordering::Relaxed);
                }
                clean
            }
        };
        st = sh.lock();
        st.in_progress = None;
        if clean || st.retry.len() == st.retry.capacity() {
            if !clean {
                sh.counters.redrop_overflows.fetch_add(1, Ordering::Relaxed);
            }
            st.bytes -= r.len;
        } else {
            st.retry.push(r);
        }
        sh.done.notify_all();
    }
}

/// Drop the ranges of `retry` again, outside the lock (cancels wait for the pass); keep
/// those the page cache still holds.
fn retry_evictions<'a>(sh: &'a Shared, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    st.retrying = true;
    let n = st.retry.len();
    let mut clean = [false; QUEUE_CAPACITY];
    let ranges: [FileRange; QUEUE_CAPACITY] = std::array::from_fn(|i| {
        st.retry.get(i).copied().unwrap_or(FileRange {
            file: 0,
            offset: 0,
            len: 0,
        })
    });
    drop(st);
    for (r, ok) in ranges[..n].iter().zip(clean.iter_mut()) {
        let m = &sh.files[r.file as usize];
        let t = Instant::now();
        *ok = evict_again(m, *r, &sh.counters);
        add_elapsed(&sh.counters.worker_evict_ns, t);
    }
    let mut st = sh.lock();
    // Nothing touched `retry` meanwhile (cancels waited): drop the clean ones, last first.
    for i in (0..n).rev() {
        if clean[i] {
            let r = st.retry.swap_remove(i);
            st.bytes -= r.len;
        }
    }
    st.retrying = false;
    sh.done.notify_all();
    st
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
