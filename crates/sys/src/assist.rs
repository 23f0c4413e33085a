//! A second pair of hands for the hook's system calls, busy only while the hook waits for
//! them.
//!
//! The hook runs between two graph splits: ggml's other compute threads sleep (the thread
//! pool kept for a hooked context does not poll), so while the hook makes its calls every
//! other core is idle. The calls of one routing step (`MADV_WILLNEED` of the missing experts,
//! `MADV_DONTNEED` + `POSIX_FADV_DONTNEED` of the evicted ones) are independent of each
//! other, and their cost is the kernel's per-page work. The advisor collects them, and at
//! the step's flush the hook and the assisting thread take them one at a time from the same
//! list until it is empty; the hook returns when both are done. Unlike the eviction and
//! readahead workers, the assistant never runs beside compute, so it takes no core from it,
//! and nothing it does outlives the step: no slack in the budget, no cancellation.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use epm_core::assist::StepWay;
use epm_core::pager::FileRange;

/// Calls collected in one step at most; a fuller step makes its calls inline.
pub(crate) const STEP_CAPACITY: usize = 4096;

/// Whether a step of `calls` calls is worth sharing: a single call is made on the hook's
/// thread at once, since waking the assisting thread would cost more than it saves (and
/// such a step says nothing about either way's cost).
pub(crate) fn worth_sharing(calls: usize) -> bool {
    calls >= 2
}

/// One system call of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `MADV_WILLNEED` of the pages covering the range.
    Read(FileRange),
    /// `MADV_DONTNEED` + `POSIX_FADV_DONTNEED` of the pages wholly inside the range.
    Evict(FileRange),
}

impl Call {
    pub fn range(self) -> FileRange {
        match self {
            Call::Read(r) | Call::Evict(r) => r,
        }
    }
}

/// A call and what came of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Op {
    pub call: Call,
    /// Whether the call was made by the assisting thread.
    pub assisted: bool,
    /// For an eviction: part of the range was still cached afterwards (a read in flight).
    pub late: bool,
}

impl Op {
    pub fn new(call: Call) -> Op {
        Op {
            call,
            assisted: false,
            late: false,
        }
    }
}

/// What makes the calls: the file mappings (or a fake in tests). Returns whether an
/// eviction left part of its range cached.
pub(crate) trait MakeCall: Send + Sync + 'static {
    fn make(&self, call: Call) -> bool;
}

/// Invariants:
/// 1. `ops[..next]` have been claimed by a thread, `ops[next..]` by none; each op is made
///    exactly once;
/// 2. `busy` counts ops claimed and not yet made; `run` returns only when `next ==
///    ops.len()` and `busy == 0`, so no call of a step outlives it;
/// 3. `ops` never grows past [`STEP_CAPACITY`]: `run` swaps the caller's list in and out,
///    and neither thread allocates.
struct State {
    ops: Vec<Op>,
    next: usize,
    busy: usize,
    stop: bool,
}

struct Shared<M> {
    state: Mutex<State>,
    /// Signalled when a step's ops are handed over, or the thread must stop.
    work: Condvar,
    /// Signalled when the assistant finishes an op.
    done: Condvar,
    calls: M,
}

impl<M: MakeCall> Shared<M> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claim the next op (invariant 1), or `None` when none is left.
    fn claim(&self, st: &mut State) -> Option<usize> {
        (st.next < st.ops.len()).then(|| {
            st.next += 1;
            st.busy += 1;
            st.next - 1
        })
    }

    /// Make op `i`, outside the lock, and record what came of it.
    fn make<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        i: usize,
        assisted: bool,
    ) -> MutexGuard<'a, State> {
        let call = st.ops[i].call;
        drop(st);
        let late = self.calls.make(call);
        st = self.lock();
        st.ops[i].late = late;
        st.ops[i].assisted = assisted;
        st.busy -= 1;
        st
    }
}

pub(crate) struct Assist<M: MakeCall> {
    shared: Arc<Shared<M>>,
    thread: Option<JoinHandle<()>>,
}

impl<M: MakeCall> Assist<M> {
    pub fn new(calls: M) -> Assist<M> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ops: Vec::with_capacity(STEP_CAPACITY),
                next: 0,
                busy: 0,
                stop: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            calls,
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("epm-assist".into())
            .spawn(move || assist(&sh))
            .expect("spawn the hook's assisting thread");
        Assist {
            shared,
            thread: Some(thread),
        }
    }

    /// Make every call of `ops`, on this thread and, when `way` is shared, the assisting
    /// one, and return when all are made (invariant 2). `ops` comes back with each op's
    /// outcome, in the same order.
    pub fn run(&self, ops: &mut Vec<Op>, way: StepWay) {
        if ops.is_empty() {
            return;
        }
        let sh = &*self.shared;
        if way == StepWay::Alone || !worth_sharing(ops.len()) {
            for op in ops.iter_mut() {
                op.late = sh.calls.make(op.call);
                op.assisted = false;
            }
            return;
        }
        let mut st = sh.lock();
        debug_assert!(st.ops.is_empty() && st.busy == 0);
        std::mem::swap(&mut st.ops, ops);
        st.next = 0;
        sh.work.notify_one();
        while let Some(i) = sh.claim(&mut st) {
            st = sh.make(st, i, false);
        }
        let mut st = sh
            .done
            .wait_while(st, |s| s.busy > 0)
            .unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut st.ops, ops);
        st.next = 0;
    }
}

fn assist<M: MakeCall>(sh: &Shared<M>) {
    let mut st = sh.lock();
    loop {
        if st.stop {
            return;
        }
        match sh.claim(&mut st) {
            Some(i) => {
                st = sh.make(st, i, true);
                sh.done.notify_one();
            }
            None => st = sh.work.wait(st).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl<M: MakeCall> Drop for Assist<M> {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    fn range(i: u64) -> FileRange {
        FileRange {
            file: 0,
            offset: i << 20,
            len: 1 << 20,
        }
    }

    /// A step of 64 calls on 1 MiB ranges: every third a read, the others evictions.
    fn mixed_step() -> Vec<Op> {
        let mut ops = Vec::with_capacity(STEP_CAPACITY);
        ops.extend((0..64).map(|i| {
            Op::new(if i % 3 == 0 {
                Call::Read(range(i))
            } else {
                Call::Evict(range(i))
            })
        }));
        ops
    }

    /// Counts calls by range; evictions of odd ranges report a late drop. The first two
    /// calls of a step meet at a barrier: neither returns until the other has started, so
    /// a step of two or more calls is made by both threads, whatever the scheduler does.
    struct Fake {
        made: Vec<AtomicUsize>,
        meet: Barrier,
        met: AtomicUsize,
    }

    impl MakeCall for Arc<Fake> {
        fn make(&self, call: Call) -> bool {
            if self.met.fetch_add(1, Ordering::SeqCst) < 2 {
                self.meet.wait();
            }
            match call {
                Call::Read(r) => {
                    self.made[(r.offset >> 20) as usize].fetch_add(1, Ordering::SeqCst);
                    false
                }
                Call::Evict(r) => {
                    self.made[(r.offset >> 20) as usize].fetch_add(1, Ordering::SeqCst);
                    (r.offset >> 20) % 2 == 1
                }
            }
        }
    }

    #[test]
    fn a_step_is_shared_made_once_each_and_done_on_return() {
        let fake = Arc::new(Fake {
            made: (0..64).map(|_| AtomicUsize::new(0)).collect(),
            meet: Barrier::new(2),
            met: AtomicUsize::new(0),
        });
        let assist = Assist::new(fake.clone());
        for step in 0..3 {
            fake.met.store(0, Ordering::SeqCst);
            let mut ops = mixed_step();
            assist.run(&mut ops, StepWay::Shared);
            // Invariant 1: every call made exactly once per step; invariant 2: all of them
            // by the time `run` returned.
            for (i, n) in fake.made.iter().enumerate() {
                assert_eq!(n.load(Ordering::SeqCst), step + 1, "range {i}");
            }
            // Same order back, with each outcome.
            assert_eq!(ops.len(), 64);
            for (i, op) in ops.iter().enumerate() {
                let i = i as u64;
                match op.call {
                    Call::Read(r) => {
                        assert_eq!((r, i % 3), (range(i), 0));
                        assert!(!op.late);
                    }
                    Call::Evict(r) => {
                        assert_eq!(r, range(i));
                        assert_eq!(op.late, i % 2 == 1, "op {i}");
                    }
                }
            }
            // The barrier made both threads take part.
            assert!(ops.iter().any(|o| o.assisted) && ops.iter().any(|o| !o.assisted));
            // Invariant 3: the list came back with its capacity.
            assert_eq!(ops.capacity(), STEP_CAPACITY);
        }
    }

    /// Counts calls, and those made on the assisting thread; evictions of odd ranges
    /// report a late drop.
    struct Count(AtomicUsize, AtomicUsize);

    impl MakeCall for Arc<Count> {
        fn make(&self, call: Call) -> bool {
            self.0.fetch_add(1, Ordering::SeqCst);
            if std::thread::current().name() == Some("epm-assist") {
                self.1.fetch_add(1, Ordering::SeqCst);
            }
            matches!(call, Call::Evict(r) if (r.offset >> 20) % 2 == 1)
        }
    }

    fn count() -> Arc<Count> {
        Arc::new(Count(AtomicUsize::new(0), AtomicUsize::new(0)))
    }

    #[test]
    fn a_step_made_alone_never_wakes_the_assistant() {
        let count = count();
        let assist = Assist::new(count.clone());
        let mut ops = mixed_step();
        assist.run(&mut ops, StepWay::Alone);
        assert_eq!(count.0.load(Ordering::SeqCst), 64);
        for (i, op) in ops.iter().enumerate() {
            assert!(!op.assisted, "op {i}");
            assert_eq!(op.late, i % 3 != 0 && i % 2 == 1, "op {i}");
        }
        assert_eq!(
            count.1.load(Ordering::SeqCst),
            0,
            "calls made by the assistant"
        );
    }

    #[test]
    fn one_call_is_made_inline_and_an_empty_step_is_free() {
        let count = count();
        let assist = Assist::new(count.clone());
        let mut ops = Vec::with_capacity(STEP_CAPACITY);
        assist.run(&mut ops, StepWay::Shared);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        ops.push(Op::new(Call::Read(range(0))));
        assist.run(&mut ops, StepWay::Shared);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(!ops[0].assisted);
    }
}
