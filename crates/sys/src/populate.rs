//! The `MADV_POPULATE_READ` pool of `--prefetch populate`: I/O threads that map the pages of
//! the missing experts in parallel while the hook waits, so compute takes no faults.

use std::sync::Arc;

use crate::mapping::FileMapping;

/// Jobs of one routing step: (file, page-aligned start, end). Capacity reserved up front.
const JOBS_CAPACITY: usize = 1 << 14;

struct PoolState {
    jobs: Vec<(u32, u64, u64)>,
    next: usize,
    pending: usize,
    shutdown: bool,
}

struct PoolShared {
    state: std::sync::Mutex<PoolState>,
    work: std::sync::Condvar,
    done: std::sync::Condvar,
    files: Arc<Vec<FileMapping>>,
}

/// I/O threads that run `MADV_POPULATE_READ` on page ranges of the file mappings.
pub(crate) struct PopulatePool {
    shared: std::sync::Arc<PoolShared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl PopulatePool {
    pub(crate) fn new(n: usize, files: Arc<Vec<FileMapping>>) -> PopulatePool {
        let shared = std::sync::Arc::new(PoolShared {
            state: std::sync::Mutex::new(PoolState {
                jobs: Vec::with_capacity(JOBS_CAPACITY),
                next: 0,
                pending: 0,
                shutdown: false,
            }),
            work: std::sync::Condvar::new(),
            done: std::sync::Condvar::new(),
            files,
        });
        let threads = (0..n)
            .map(|i| {
                let sh = shared.clone();
                std::thread::Builder::new()
                    .name(format!("epm-io-{i}"))
                    .spawn(move || populate_worker(&sh))
                    .expect("spawn I/O thread")
            })
            .collect();
        PopulatePool { shared, threads }
    }

    /// Populate every range (in parallel, taken in order) and return when all are mapped.
    pub(crate) fn populate_all(&self, ranges: &[(u32, u64, u64)]) {
        if ranges.is_empty() {
            return;
        }
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.jobs.clear();
        st.jobs.extend_from_slice(ranges);
        st.next = 0;
        st.pending = ranges.len();
        self.shared.work.notify_all();
        while st.pending > 0 {
            st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

fn populate_worker(sh: &PoolShared) {
    let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if st.shutdown {
            return;
        }
        if st.next >= st.jobs.len() {
            st = sh.work.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let (file, start, end) = st.jobs[st.next];
        st.next += 1;
        drop(st);
        let m = &sh.files[file as usize];
        for (addr, len) in m.mapped(start, end) {
            m.populate(addr, len);
        }
        st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending -= 1;
        if st.pending == 0 {
            sh.done.notify_all();
        }
    }
}

impl Drop for PopulatePool {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.shutdown = true;
        }
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
