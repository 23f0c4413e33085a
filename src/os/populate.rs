//! The `MADV_POPULATE_READ` pool of `--prefetch populate`: I/O threads that map the pages of
//! the missing experts in parallel while the hook waits, so compute takes no faults.

struct PoolState {
    jobs: Vec<(usize, usize)>,
    next: usize,
    pending: usize,
    shutdown: bool,
}

struct PoolShared {
    state: std::sync::Mutex<PoolState>,
    work: std::sync::Condvar,
    done: std::sync::Condvar,
}

/// I/O threads that run `MADV_POPULATE_READ` on page ranges of the file mappings.
pub(super) struct PopulatePool {
    shared: std::sync::Arc<PoolShared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl PopulatePool {
    pub(super) fn new(n: usize) -> PopulatePool {
        let shared = std::sync::Arc::new(PoolShared {
            state: std::sync::Mutex::new(PoolState {
                jobs: Vec::with_capacity(1 << 14),
                next: 0,
                pending: 0,
                shutdown: false,
            }),
            work: std::sync::Condvar::new(),
            done: std::sync::Condvar::new(),
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
    pub(super) fn populate_all(&self, ranges: &[(usize, usize)]) {
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
        let (addr, len) = st.jobs[st.next];
        st.next += 1;
        drop(st);
        // SAFETY: the range was produced by `FileMapping::mapped`: page-aligned and inside a
        // shared read-only file mapping that lives as long as the session. POPULATE_READ only
        // faults pages in (reading the file); it cannot change what the memory holds.
        let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_READ) };
        if rc != 0 {
            // Older kernels (< 5.14) lack POPULATE_READ: fall back to readahead.
            // SAFETY: as above.
            unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_WILLNEED) };
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
