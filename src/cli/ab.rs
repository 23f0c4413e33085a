//! `epm-run ab`: A/B runs against upstream llama.cpp's loading under the same hard cap.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_bench::harness::{self, cap::CapKind, RunConfig};
use epm_core::plan::Threads;

use super::exit::UsageError;
use super::{create_parent, open_index, self_exe, signals};

#[derive(Args, Debug)]
pub struct AbArgs {
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// A budget (and cap) in MiB; repeat for several.
    #[arg(long = "budget-mb", required = true)]
    budgets_mb: Vec<u64>,
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    #[arg(short = 'n', long = "n-predict", default_value_t = 32)]
    n_predict: usize,
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx: u32,
    /// Compute threads for every configuration, or `auto`: each picks its own (the
    /// unpaged ones all cores; epm leaves one to its helper threads when I/O bound).
    #[arg(short = 't', long, default_value = "auto")]
    threads: Threads,
    #[arg(long = "ubatch-size", default_value_t = 128)]
    ubatch: u32,
    /// Repeat the whole set this many times, alternating configurations.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[arg(long, default_value = "validate/ab-test.json")]
    out: PathBuf,
    /// Also write the budget curve as a PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run the kernel-paging configuration at this read_ahead_kb (restored afterwards).
    #[arg(long)]
    kernel_readahead_kb: Option<u64>,
    /// Configurations to run, comma-separated, from reference, kernel, epm.
    #[arg(long, value_delimiter = ',', default_values = ["reference", "kernel", "epm"])]
    configs: Vec<RunConfig>,
    /// An extra `generate` flag for the epm runs (repeat for several), e.g. --epm-arg=--no-predict.
    #[arg(long = "epm-arg", allow_hyphen_values = true)]
    epm_args: Vec<String>,
    /// Keep the page cache between runs (default: every run starts cold).
    #[arg(long)]
    warm: bool,
}

pub fn run(a: AbArgs) -> Result<()> {
    open_index(&a.model)?;
    if a.budgets_mb.contains(&0) || a.runs == 0 || a.n_predict == 0 {
        bail!(UsageError(
            "--budget-mb, --runs and -n must be greater than 0".into()
        ));
    }
    let prompt_args = match (&a.prompt, &a.file) {
        (Some(p), _) => vec!["-p".to_string(), p.clone()],
        (None, Some(f)) => vec!["-f".to_string(), f.display().to_string()],
        (None, None) => vec!["-p".to_string(), "The quick brown fox jumps over the lazy dog. Experts are paged in as routing asks for them.".to_string()],
    };
    let interrupted = signals::interrupt_flag()?;
    create_parent(&a.out)?;
    let work_dir = std::env::temp_dir().join(format!("epm-ab-{}", std::process::id()));
    let mut configs: Vec<RunConfig> = Vec::new();
    for c in &a.configs {
        if !configs.contains(c) {
            configs.push(*c);
        }
    }
    // The reference runs first: the others are compared with it.
    configs.sort_by_key(|c| RunConfig::ALL.iter().position(|x| x == c));
    let (exe, spawn_exe) = self_exe()?;
    let cfg = harness::AbConfig {
        exe,
        spawn_exe,
        model: a.model.clone(),
        budgets_mb: a.budgets_mb.clone(),
        prompt_args,
        n_predict: a.n_predict,
        n_ctx: a.ctx,
        n_threads: a.threads,
        n_ubatch: a.ubatch,
        runs: a.runs,
        kernel_readahead_kb: a.kernel_readahead_kb,
        configs,
        epm_args: a.epm_args.clone(),
        warm: a.warm,
        work_dir: work_dir.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    if let Some(kb) = a.kernel_readahead_kb {
        eprintln!("note: kernel-paging runs set read_ahead_kb of the model's disk to {kb} for their duration (restored after each)");
    }
    let result = harness::run_ab(&cfg, &interrupted, |row| {
        eprintln!(
            "rep {} budget {} MiB {:<9} {} ({:.1} s)",
            row.rep,
            row.budget_mb,
            row.config.name(),
            row.outcome,
            row.child.wall_s
        );
    });
    let _ = std::fs::remove_dir_all(&work_dir);
    let report = result?;
    if !matches!(report.cap, CapKind::CgroupV1 | CapKind::CgroupV2) {
        eprintln!("WARNING: no writable cgroup: the cap was RLIMIT_DATA plus a sampler that kills at the budget, which does not bound page cache");
    }
    let json = serde_json::to_vec_pretty(&report)?;
    epm_sys::fs::write_atomic(&a.out, &json)
        .with_context(|| format!("writing {}", a.out.display()))?;
    print!("{}", harness::render_table(&report));
    println!("wrote {}", a.out.display());
    if let Some(png) = &a.plot {
        harness::plot::write_png(&report, png).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        println!("wrote {}", png.display());
    }
    if !report.all_passed {
        bail!("A/B check failed: {}", report.failures.join("; "));
    }
    Ok(())
}
