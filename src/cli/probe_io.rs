//! `epm-run probe-io`: what the disk under a model delivers.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::create_parent;

#[derive(Args, Debug)]
pub struct ProbeIoArgs {
    /// A file on the disk to measure (default: a scratch file in the current directory).
    path: Option<PathBuf>,
    /// MiB to read per measurement.
    #[arg(long, default_value_t = 256)]
    mb_per_test: u64,
    #[arg(long, default_value = "validate/io-probe.json")]
    out: PathBuf,
}

pub fn run(a: ProbeIoArgs) -> Result<()> {
    create_parent(&a.out)?;
    let report = epm_bench::probe::run(a.path.as_deref(), a.mb_per_test << 20)
        .context("measuring the disk")?;
    epm_sys::fs::write_atomic(&a.out, &serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    for r in &report.results {
        println!(
            "{:<10} block {:>8} KiB  qd {:>2}  {:>8.1} MB/s",
            r.pattern,
            r.block_bytes / 1024,
            r.queue_depth,
            r.mb_per_s
        );
    }
    println!("wrote {}", a.out.display());
    Ok(())
}
