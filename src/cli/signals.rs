//! Signals the commands react to: SIGUSR2 writes the stats file (for commands that have
//! one); Ctrl-C and SIGTERM set a flag the long-running commands poll.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR2};

use epm_core::stats::RunStats;
use epm_engine::telemetry;

/// A thread that writes `stats` to `path` on every SIGUSR2.
pub fn write_stats_on_sigusr2(stats: Arc<RunStats>, path: PathBuf) -> Result<()> {
    let mut signals =
        signal_hook::iterator::Signals::new([SIGUSR2]).context("installing the SIGUSR2 handler")?;
    std::thread::Builder::new()
        .name("epm-stats-signal".into())
        .spawn(move || {
            for _ in signals.forever() {
                telemetry::write_stats_or_count(&stats, &path);
            }
        })
        .context("starting the SIGUSR2 thread")?;
    Ok(())
}

/// A flag set by Ctrl-C or SIGTERM.
pub fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).context("installing a signal handler")?;
    }
    Ok(flag)
}
