//! Telemetry glue: readings of this process for the stats snapshot, the 50 Hz memory
//! sampler that keeps the peaks honest, and atomic writes of the stats file.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use epm_core::stats::{ProcReading, RunStats, Snapshot};
use epm_sys::proc::{self, Pid};

/// A reading of this process now.
pub fn reading() -> ProcReading {
    let m = proc::memory(Pid::This).unwrap_or_default();
    ProcReading {
        rss: m.rss,
        rss_anon: m.rss_anon,
        rss_file: m.rss_file,
        swap: m.swap,
        hwm: m.hwm,
        read_bytes: proc::read_bytes(Pid::This).unwrap_or(0),
    }
}

/// The stats as of now.
pub fn snapshot(stats: &RunStats) -> Snapshot {
    stats.snapshot(reading())
}

/// Write the stats file atomically (temporary file, fsync, rename); one writer at a time,
/// so a SIGUSR2 storm never interleaves two writers.
pub fn write_stats(stats: &RunStats, path: &Path) -> std::io::Result<()> {
    static WRITER: Mutex<()> = Mutex::new(());
    let _guard = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    epm_sys::fs::write_atomic(path, &stats.to_json(reading()))
}

/// [`write_stats`] for a run that goes on whatever happens to its stats file (a full disk,
/// a folder gone, a read-only file system): a failure is counted in
/// `stats.stats_write_failures` and logged with the path the first time. Whether it was
/// written.
pub fn write_stats_or_count(stats: &RunStats, path: &Path) -> bool {
    match write_stats(stats, path) {
        Ok(()) => true,
        Err(e) => {
            if stats.stats_write_failures.get() == 0 {
                tracing::error!(
                    "cannot write the stats file {}: {e} (counted in /metrics from now on; the run goes on)",
                    path.display()
                );
            }
            stats.stats_write_failures.add(1);
            false
        }
    }
}

/// Samples this process's memory into `stats`' peaks every `period` until dropped.
pub struct MemorySampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MemorySampler {
    pub fn start(stats: Arc<RunStats>, period: Duration) -> std::io::Result<MemorySampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("epm-mem-sampler".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    stats.fold_memory(&reading());
                    std::thread::sleep(period);
                }
            })?;
        Ok(MemorySampler {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Send llama.cpp's own log to `tracing` (shown with `-vv`), or silence it.
pub fn route_llama_logs(enabled: bool) {
    llama_cpp_2::send_logs_to_tracing(
        llama_cpp_2::LogOptions::default().with_logs_enabled(enabled),
    );
}
