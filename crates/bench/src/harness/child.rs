//! Running one child process under a cap while sampling its memory from `/proc/<pid>` at
//! 50 Hz, timing its first output byte, and stopping it on interrupt or (for the sampler
//! cap) when its RSS passes the budget.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cap::Cap;
use epm_sys::proc::{self, Pid};

const SAMPLE_PERIOD: Duration = Duration::from_millis(20);

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ChildReport {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed by the sampler cap for passing the budget.
    pub killed_by_sampler: bool,
    pub interrupted: bool,
    pub wall_s: f64,
    /// Spawn to the first byte on stdout (load included).
    pub time_to_first_output_s: Option<f64>,
    pub peak_rss_bytes: u64,
    pub peak_rss_anon_bytes: u64,
    pub peak_rss_file_bytes: u64,
    pub peak_swap_bytes: u64,
    pub vm_hwm_bytes: u64,
    pub read_bytes: u64,
    pub samples: u64,
    pub stdout: String,
    pub stderr_tail: String,
}

/// Run `cmd` (already wrapped by `cap`) to completion.
pub fn run_child(
    mut cmd: std::process::Command,
    cap: Option<&Cap>,
    interrupted: &AtomicBool,
) -> std::io::Result<ChildReport> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let first_output_us = Arc::new(AtomicU64::new(0));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let first = first_output_us.clone();
    let out_thread = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            if all.is_empty() {
                first.store(start.elapsed().as_micros().max(1) as u64, Ordering::Relaxed);
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let err_thread = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        all
    });

    let mut r = ChildReport::default();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Ok(m) = proc::memory(Pid::Other(pid)) {
            r.samples += 1;
            r.peak_rss_bytes = r.peak_rss_bytes.max(m.rss);
            r.peak_rss_anon_bytes = r.peak_rss_anon_bytes.max(m.rss_anon);
            r.peak_rss_file_bytes = r.peak_rss_file_bytes.max(m.rss_file);
            r.peak_swap_bytes = r.peak_swap_bytes.max(m.swap);
            r.vm_hwm_bytes = r.vm_hwm_bytes.max(m.hwm);
            if let Some(cap) = cap.filter(|c| c.needs_sampler_kill()) {
                if m.rss > cap.limit && !r.killed_by_sampler {
                    r.killed_by_sampler = true;
                    let _ = child.kill();
                }
            }
        }
        if let Some(b) = proc::read_bytes(Pid::Other(pid)) {
            r.read_bytes = b;
        }
        if interrupted.load(Ordering::Relaxed) && !r.interrupted {
            r.interrupted = true;
            let _ = child.kill();
        }
        std::thread::sleep(SAMPLE_PERIOD);
    };
    r.wall_s = start.elapsed().as_secs_f64();
    r.exit_code = status.code();
    r.signal = status.signal();
    let first = first_output_us.load(Ordering::Relaxed);
    r.time_to_first_output_s = (first > 0).then(|| first as f64 / 1e6);
    r.stdout = String::from_utf8_lossy(&out_thread.join().unwrap_or_default()).into_owned();
    let err = err_thread.join().unwrap_or_default();
    let tail = &err[err.len().saturating_sub(2000)..];
    r.stderr_tail = String::from_utf8_lossy(tail).into_owned();
    Ok(r)
}
