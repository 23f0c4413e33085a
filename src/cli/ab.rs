//! `epm-run ab`: A/B runs against upstream llama.cpp's loading under the same hard cap.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_bench::harness::{self, cap::CapKind, RunConfig, Variant};
use epm_core::threads::Threads;
use epm_sys::proc::QueueSetting;

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
    /// Compute threads for every configuration, or `auto`: each picks its own (one per
    /// physical core).
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
    /// A further epm run with flags of its own, LABEL=FLAGS (repeat for several), e.g.
    /// --variant 'populate-4=--no-predict --prefetch populate --io-threads 4'. Variants run
    /// after the configurations in every repetition, alternating; their output must equal
    /// the reference's (or, without one, the first run's).
    #[arg(long = "variant", allow_hyphen_values = true)]
    variants: Vec<Variant>,
    /// Run a variant with another epm-run build: LABEL=PATH (its label must be a --variant).
    #[arg(long = "variant-exe")]
    variant_exes: Vec<String>,
    /// Hold a queue setting of the model's disk for the whole set, SETTING=VALUE (repeat):
    /// read_ahead_kb or max_sectors_kb. Restored afterwards.
    #[arg(long = "device-queue")]
    device_queue: Vec<String>,
    /// Throttle the capped runs' (kernel, epm, variants) reads of the model's disk to this
    /// many MB/s with the cgroup blkio controller (v1 `blkio.throttle.read_bps_device`, v2
    /// `io.max`): a slow disk (USB, SD card, network). The reference runs unthrottled.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    disk_limit_mbps: Option<u64>,
}

/// `SETTING=VALUE` of `--device-queue`.
fn queue_setting(s: &str) -> Result<(QueueSetting, u64)> {
    let (k, v) = s.split_once('=').ok_or_else(|| {
        UsageError(format!(
            "--device-queue {s:?}: give SETTING=VALUE, e.g. read_ahead_kb=128"
        ))
    })?;
    let setting: QueueSetting = k.parse().map_err(UsageError)?;
    let value = v
        .parse::<u64>()
        .map_err(|_| UsageError(format!("--device-queue {s:?}: {v:?} is not a number")))?;
    Ok((setting, value))
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
    let mut variants = a.variants.clone();
    for v in &a.variant_exes {
        let (label, path) = v
            .split_once('=')
            .ok_or_else(|| UsageError(format!("--variant-exe {v:?}: give LABEL=PATH")))?;
        let Some(var) = variants.iter_mut().find(|x| x.label == label) else {
            bail!(UsageError(format!(
                "--variant-exe {label}: no --variant has that label"
            )));
        };
        if !std::path::Path::new(path).is_file() {
            bail!(UsageError(format!(
                "--variant-exe {label}: {path} is not a file"
            )));
        }
        var.exe = Some(PathBuf::from(path));
    }
    let queue_settings = a
        .device_queue
        .iter()
        .map(|s| queue_setting(s))
        .collect::<Result<Vec<_>>>()?;
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
        variants,
        queue_settings,
        disk_limit_mbps: a.disk_limit_mbps,
        warm: a.warm,
        work_dir: work_dir.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    if let Some(kb) = a.kernel_readahead_kb {
        eprintln!("note: kernel-paging runs set read_ahead_kb of the model's disk to {kb} for their duration (restored after each)");
    }
    let result = harness::run_ab(&cfg, &interrupted, |row| {
        eprintln!(
            "rep {} budget {} MiB {:<14} {} ({:.1} s)",
            row.rep, row.budget_mb, row.label, row.outcome, row.child.wall_s
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
