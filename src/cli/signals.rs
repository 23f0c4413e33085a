//! Signals the commands react to: SIGUSR2 writes the stats file (for commands that have
//! one); Ctrl-C and SIGTERM set a flag the long-running commands poll (`generate` tells
//! them apart: a chat's Ctrl-C stops the reply, SIGTERM the chat). A second one while the
//! first is still unhandled ends the process at once, with [`super::exit::INTERRUPTED`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Ctrl-C and SIGTERM, each a flag of its own.
#[derive(Clone)]
pub struct StopSignals {
    ctrl_c: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
}

impl StopSignals {
    /// Catch Ctrl-C and SIGTERM from now on. Each sets its flag; one that comes while its
    /// flag is still set (the first not yet handled, or not handled in time) ends the
    /// process at once with [`super::exit::INTERRUPTED`].
    pub fn install() -> Result<StopSignals> {
        let stop = StopSignals {
            ctrl_c: Arc::new(AtomicBool::new(false)),
            terminate: Arc::new(AtomicBool::new(false)),
        };
        for (sig, flag) in [(SIGINT, &stop.ctrl_c), (SIGTERM, &stop.terminate)] {
            // Handlers run in the order they were registered: the exit reads the flag
            // before the second handler sets it, so the first signal only sets it.
            signal_hook::flag::register_conditional_shutdown(
                sig,
                super::exit::INTERRUPTED,
                flag.clone(),
            )
            .and_then(|_| signal_hook::flag::register(sig, flag.clone()))
            .context("installing a signal handler")?;
        }
        Ok(stop)
    }

    /// Whether either signal has come (and was not taken back by [`Self::take_ctrl_c`]).
    pub fn any(&self) -> bool {
        self.ctrl_c.load(Ordering::Relaxed) || self.terminate.load(Ordering::Relaxed)
    }

    /// Whether SIGTERM has come.
    pub fn terminated(&self) -> bool {
        self.terminate.load(Ordering::Relaxed)
    }

    /// Whether Ctrl-C has come since the last call; the flag is cleared, so that the next
    /// Ctrl-C is handled as a first one again.
    pub fn take_ctrl_c(&self) -> bool {
        self.ctrl_c.swap(false, Ordering::Relaxed)
    }
}
