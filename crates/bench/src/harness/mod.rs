//! The A/B harness: runs `epm-run generate` as a black-box child process in three
//! configurations per budget (reference: unpaged, no cap; kernel: upstream mmap under a hard
//! cap; epm: paged under the same cap), from a cold page cache, and compares every run's
//! tokens and logits with the reference. It never imports the pager.

pub mod cap;
pub mod child;
pub mod plot;
mod table;

pub use table::render_table;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use cap::{Cap, CapFacts, CapKind};
use child::ChildReport;
use epm_core::stats::Snapshot;
use epm_core::threads::Threads;
use epm_core::units::MIB;
use epm_gguf::GgufModel;
use epm_sys::cache::{drop_file_cache, file_cache_resident_bytes};
pub use epm_sys::proc::{machine, Machine};
use epm_sys::proc::{read_ahead_kb, QueueGuard, QueueSetting};

#[derive(Debug, Clone)]
pub struct AbConfig {
    /// The `epm-run` binary to test, as reports name it.
    pub exe: PathBuf,
    /// The path children are started from: `/proc/<pid>/exe` when `exe` is this process,
    /// which stays runnable if the file is replaced (rebuilt) during a long run.
    pub spawn_exe: PathBuf,
    pub model: PathBuf,
    pub budgets_mb: Vec<u64>,
    /// `-p TEXT` or `-f FILE`, passed through.
    pub prompt_args: Vec<String>,
    pub n_predict: usize,
    pub n_ctx: u32,
    pub n_threads: Threads,
    pub n_ubatch: u32,
    pub runs: usize,
    pub kernel_readahead_kb: Option<u64>,
    /// The configurations to run, in this order for every budget and repetition.
    pub configs: Vec<RunConfig>,
    /// Extra `generate` flags for the epm configuration and every variant (`--predict`,
    /// `--prefetch populate`).
    pub epm_args: Vec<String>,
    /// Further epm runs, each with flags of its own (and perhaps another build), after the
    /// configurations in every repetition and budget.
    pub variants: Vec<Variant>,
    /// Block-device queue settings of the model's disk held for the whole set (restored
    /// afterwards, on error and interruption too).
    pub queue_settings: Vec<(QueueSetting, u64)>,
    /// Throttle the capped runs' reads of the model's disk to this many MB/s (a slow disk).
    pub disk_limit_mbps: Option<u64>,
    /// Keep the page cache between runs instead of starting each one cold.
    pub warm: bool,
    pub work_dir: PathBuf,
    pub command_line: String,
}

/// An epm run with flags of its own: `--variant LABEL=FLAGS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub label: String,
    /// `generate` flags, after the epm configuration's.
    pub args: Vec<String>,
    /// Another `epm-run` build to run it with (`--variant-exe LABEL=PATH`).
    pub exe: Option<PathBuf>,
}

impl std::str::FromStr for Variant {
    type Err = String;
    /// `LABEL=FLAGS`, the flags separated by spaces (`populate-4=--prefetch populate --io-threads 4`).
    fn from_str(s: &str) -> Result<Variant, String> {
        let (label, flags) = s
            .split_once('=')
            .filter(|(l, _)| !l.is_empty())
            .ok_or_else(|| {
                format!("{s:?}: give a variant as LABEL=FLAGS, e.g. no-predict=--no-predict")
            })?;
        if RunConfig::ALL.iter().any(|c| c.name() == label) {
            return Err(format!(
                "{label:?} names a configuration: give the variant another label"
            ));
        }
        Ok(Variant {
            label: label.to_string(),
            args: flags.split_whitespace().map(String::from).collect(),
            exe: None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunConfig {
    Reference,
    Kernel,
    Epm,
}

impl RunConfig {
    pub const ALL: [RunConfig; 3] = [RunConfig::Reference, RunConfig::Kernel, RunConfig::Epm];

    pub fn name(self) -> &'static str {
        match self {
            RunConfig::Reference => "reference",
            RunConfig::Kernel => "kernel",
            RunConfig::Epm => "epm",
        }
    }
}

impl std::str::FromStr for RunConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<RunConfig, String> {
        RunConfig::ALL
            .into_iter()
            .find(|c| c.name() == s.trim())
            .ok_or_else(|| format!("unknown configuration {s:?}: use reference, kernel and/or epm"))
    }
}

/// How one child run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Outcome {
    Ok,
    /// Killed by the cap (the cgroup's OOM killer, or the sampler at the budget).
    OomKilled,
    /// Exited with an error or a signal: the code, the signal and the end of its stderr.
    Failed {
        exit_code: Option<i32>,
        signal: Option<i32>,
        stderr_tail: String,
    },
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        *self == Outcome::Ok
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => write!(f, "ok"),
            Outcome::OomKilled => write!(f, "oom-killed"),
            Outcome::Failed {
                exit_code,
                signal,
                stderr_tail,
            } => write!(
                f,
                "failed ({exit_code:?} / signal {signal:?}): {}",
                stderr_tail.trim()
            ),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub rep: usize,
    pub budget_mb: u64,
    pub config: RunConfig,
    /// The configuration's name, or the variant's label.
    pub label: String,
    /// "none" for the uncapped reference.
    pub cap: String,
    pub read_ahead_kb: Option<u64>,
    pub outcome: Outcome,
    pub oom_killed: bool,
    pub cap_facts: CapFacts,
    pub cold_cache_resident_bytes: u64,
    pub page_cache_after_bytes: u64,
    pub child: ChildReport,
    pub prefill_tok_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    /// Decode selections the cache kept resident (prediction's reads not counted).
    pub decode_cache_hit_rate: Option<f64>,
    pub evictions: Option<u64>,
    pub read_bytes_per_token: Option<f64>,
    pub tokens_match: Option<bool>,
    pub logits_match: Option<bool>,
    pub within_budget: Option<bool>,
    pub command: String,
    /// The child's stats JSON (`generate --stats-file`), for figures the row does not lift.
    pub stats: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BudgetSummary {
    pub budget_mb: u64,
    pub decode_tok_s: Vec<(RunConfig, Option<Spread>)>,
    pub prefill_tok_s: Vec<(RunConfig, Option<Spread>)>,
    /// Per-repetition ratios of decode tok/s.
    pub decode_epm_over_kernel: Option<Spread>,
    pub decode_epm_over_reference: Option<Spread>,
    pub epm_decode_cache_hit_rate: Option<Spread>,
    /// One per variant, when there are any.
    pub variants: Vec<VariantSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantSummary {
    pub label: String,
    pub decode_tok_s: Option<Spread>,
    pub prefill_tok_s: Option<Spread>,
    pub decode_cache_hit_rate: Option<Spread>,
    /// Per-repetition ratio of decode tok/s against the first run of the set (the first
    /// configuration, or the first variant).
    pub decode_over_first: Option<Spread>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AbReport {
    pub schema_version: u32,
    pub command: String,
    pub machine: Machine,
    pub model: String,
    pub cap: CapKind,
    pub read_ahead_kb: Option<u64>,
    pub kernel_readahead_kb: Option<u64>,
    /// The queue settings held for the whole set.
    pub queue_settings: Vec<(String, u64)>,
    /// The capped runs' reads were throttled to this many MB/s.
    pub disk_limit_mbps: Option<u64>,
    pub all_passed: bool,
    pub failures: Vec<String>,
    pub summary: Vec<BudgetSummary>,
    pub rows: Vec<Row>,
}

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("interrupted: cgroups removed, read_ahead_kb restored")]
    Interrupted,
    #[error(transparent)]
    Gguf(#[from] epm_gguf::GgufError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Throttle(#[from] cap::ThrottleError),
    #[error("--disk-limit-mbps: {0} is not on a block device whose queue sysfs describes")]
    NoDisk(PathBuf),
}

fn generate_args(
    cfg: &AbConfig,
    config: RunConfig,
    extra: &[String],
    budget_mb: u64,
    stats: &Path,
    logits: &Path,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "generate".into(),
        "-m".into(),
        cfg.model.display().to_string(),
    ];
    a.extend(cfg.prompt_args.iter().cloned());
    for (flag, v) in [
        ("-n", cfg.n_predict.to_string()),
        ("-c", cfg.n_ctx.to_string()),
        ("-t", cfg.n_threads.to_string()),
        ("--ubatch-size", cfg.n_ubatch.to_string()),
    ] {
        a.push(flag.into());
        a.push(v);
    }
    a.push("--stats-file".into());
    a.push(stats.display().to_string());
    a.push("--dump-logits".into());
    a.push(logits.display().to_string());
    match config {
        RunConfig::Reference => a.push("--no-pager".into()),
        RunConfig::Kernel => a.push("--upstream-mmap".into()),
        RunConfig::Epm => {
            a.push("--ram-budget-mb".into());
            a.push(budget_mb.to_string());
            a.extend(cfg.epm_args.iter().cloned());
            a.extend(extra.iter().cloned());
        }
    }
    a
}

/// One run of a repetition and budget: a configuration, or a variant of epm.
struct Planned<'a> {
    config: RunConfig,
    label: &'a str,
    extra: &'a [String],
    exe: Option<&'a Path>,
}

fn planned(cfg: &AbConfig) -> Vec<Planned<'_>> {
    let configs = cfg.configs.iter().map(|&c| Planned {
        config: c,
        label: c.name(),
        extra: &[],
        exe: None,
    });
    let variants = cfg.variants.iter().map(|v| Planned {
        config: RunConfig::Epm,
        label: &v.label,
        extra: &v.args,
        exe: v.exe.as_deref(),
    });
    configs.chain(variants).collect()
}

/// Drop every shard from the page cache; returns the bytes still cached (mincore).
fn cold_cache(shards: &[PathBuf]) -> std::io::Result<u64> {
    let mut left = 0;
    for s in shards {
        drop_file_cache(s)?;
        left += file_cache_resident_bytes(s)?;
    }
    Ok(left)
}

struct Reference {
    ids: Vec<i32>,
    logits: Vec<u8>,
}

/// Run the whole A/B set. `interrupted` is polled; when it is set, the current child is
/// killed and every cgroup and readahead change is undone before returning.
pub fn run_ab(
    cfg: &AbConfig,
    interrupted: &AtomicBool,
    mut progress: impl FnMut(&Row),
) -> Result<AbReport, HarnessError> {
    let shards: Vec<PathBuf> = GgufModel::open(&cfg.model)?
        .shards
        .iter()
        .map(|s| s.path.clone())
        .collect();
    std::fs::create_dir_all(&cfg.work_dir)?;
    let mut held = Vec::new();
    for &(setting, value) in &cfg.queue_settings {
        held.push(QueueGuard::set(&cfg.model, setting, value)?);
    }
    let base_readahead = read_ahead_kb(&cfg.model);
    let runs = planned(cfg);
    let mut rows: Vec<Row> = Vec::new();
    let mut cap_kind = CapKind::RlimitSampler;
    for rep in 0..cfg.runs {
        for &budget_mb in &cfg.budgets_mb {
            let mut reference: Option<Reference> = None;
            for (i, run) in runs.iter().enumerate() {
                let config = run.config;
                if interrupted.load(Ordering::Relaxed) {
                    return Err(HarnessError::Interrupted);
                }
                let tag = format!("r{rep}-b{budget_mb}-{i}");
                let stats_path = cfg.work_dir.join(format!("{tag}.json"));
                let logits_path = cfg.work_dir.join(format!("{tag}.logits"));
                let _ = std::fs::remove_file(&stats_path);
                let _ = std::fs::remove_file(&logits_path);
                let args =
                    generate_args(cfg, config, run.extra, budget_mb, &stats_path, &logits_path);
                let exe = run.exe.unwrap_or(&cfg.spawn_exe);
                let cold = if cfg.warm {
                    shards
                        .iter()
                        .map(|s| file_cache_resident_bytes(s).unwrap_or(0))
                        .sum()
                } else {
                    cold_cache(&shards)?
                };
                let cap = (config != RunConfig::Reference).then(|| Cap::new(budget_mb * MIB));
                let cap = match (cap, cfg.disk_limit_mbps) {
                    (Some(c), Some(mbps)) => {
                        let disk = epm_sys::proc::disk_device(&cfg.model)
                            .ok_or_else(|| HarnessError::NoDisk(cfg.model.clone()))?;
                        Some(c.with_read_limit(&disk, mbps * 1_000_000)?)
                    }
                    (cap, _) => cap,
                };
                if let Some(c) = &cap {
                    cap_kind = c.kind;
                }
                let _readahead = match (config, cfg.kernel_readahead_kb) {
                    (RunConfig::Kernel, Some(kb)) => {
                        Some(QueueGuard::set(&cfg.model, QueueSetting::ReadAheadKb, kb)?)
                    }
                    _ => None,
                };
                let read_ahead_kb = read_ahead_kb(&cfg.model);
                let cmd = match &cap {
                    Some(c) => c.command(exe, &args),
                    None => {
                        let mut c = std::process::Command::new(exe);
                        c.args(&args);
                        c
                    }
                };
                let child = child::run_child(cmd, cap.as_ref(), interrupted)?;
                drop(_readahead);
                let cap_facts = cap.as_ref().map(Cap::facts).unwrap_or_default();
                drop(cap);
                if child.interrupted {
                    return Err(HarnessError::Interrupted);
                }
                let page_cache_after_bytes = shards
                    .iter()
                    .map(|s| file_cache_resident_bytes(s).unwrap_or(0))
                    .sum();
                let oom_killed =
                    child.signal == Some(9) && (cap_facts.oom_kills > 0 || child.killed_by_sampler);
                let outcome = if child.exit_code == Some(0) {
                    Outcome::Ok
                } else if oom_killed {
                    Outcome::OomKilled
                } else {
                    Outcome::Failed {
                        exit_code: child.exit_code,
                        signal: child.signal,
                        stderr_tail: child.stderr_tail.clone(),
                    }
                };
                let stats_json: Option<serde_json::Value> = std::fs::read(&stats_path)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .filter(|_| child.exit_code == Some(0));
                let snapshot: Option<Snapshot> = stats_json
                    .as_ref()
                    .and_then(|v| serde_json::from_value(v.clone()).ok());
                let logits = std::fs::read(&logits_path)
                    .ok()
                    .filter(|_| child.exit_code == Some(0));
                let (mut tokens_match, mut logits_match) = (None, None);
                if let (Some(s), Some(l)) = (&snapshot, &logits) {
                    // Outputs are compared with the reference, or without one with the
                    // first run of the set.
                    let first = i == 0;
                    match &reference {
                        None if config == RunConfig::Reference || first => {
                            reference = Some(Reference {
                                ids: s.tokens.generated_ids.clone(),
                                logits: l.clone(),
                            });
                        }
                        Some(r) => {
                            tokens_match = Some(r.ids == s.tokens.generated_ids);
                            logits_match = Some(&r.logits == l);
                        }
                        None => {}
                    }
                }
                let budget = budget_mb * MIB;
                let within_budget =
                    (config == RunConfig::Epm && child.exit_code == Some(0)).then(|| {
                        let peak = child.peak_rss_bytes.max(child.vm_hwm_bytes);
                        peak <= budget && cap_facts.max_usage_bytes.is_none_or(|u| u <= budget)
                    });
                let paged = snapshot.as_ref().filter(|s| s.pager_enabled);
                let row = Row {
                    rep,
                    budget_mb,
                    config,
                    label: run.label.to_string(),
                    cap: match config {
                        RunConfig::Reference => "none".into(),
                        _ => serde_json::to_value(cap_kind)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default(),
                    },
                    read_ahead_kb,
                    outcome,
                    oom_killed,
                    cap_facts,
                    cold_cache_resident_bytes: cold,
                    page_cache_after_bytes,
                    prefill_tok_s: snapshot.as_ref().map(|s| s.tok_per_s.prefill),
                    decode_tok_s: snapshot.as_ref().map(|s| s.tok_per_s.decode),
                    decode_cache_hit_rate: paged.map(|s| s.experts.decode.cache_hit_rate),
                    evictions: paged.map(|s| s.experts.evictions),
                    read_bytes_per_token: snapshot.as_ref().map(|s| s.io.read_bytes_per_token),
                    tokens_match,
                    logits_match,
                    within_budget,
                    command: format!(
                        "{} {}",
                        run.exe.unwrap_or(&cfg.exe).display(),
                        args.join(" ")
                    ),
                    child,
                    stats: stats_json,
                };
                progress(&row);
                rows.push(row);
            }
        }
    }
    drop(held);
    let failures = failures(&rows);
    Ok(AbReport {
        schema_version: 1,
        command: cfg.command_line.clone(),
        machine: machine(),
        model: cfg.model.display().to_string(),
        cap: cap_kind,
        read_ahead_kb: base_readahead,
        kernel_readahead_kb: cfg.kernel_readahead_kb,
        disk_limit_mbps: cfg.disk_limit_mbps,
        queue_settings: cfg
            .queue_settings
            .iter()
            .map(|(q, v)| (q.name().to_string(), *v))
            .collect(),
        all_passed: failures.is_empty(),
        failures,
        summary: summarize(cfg, &rows),
        rows,
    })
}

fn failures(rows: &[Row]) -> Vec<String> {
    let mut f = Vec::new();
    for r in rows {
        let what = format!("rep {} budget {} MiB {}", r.rep, r.budget_mb, r.label);
        if r.tokens_match == Some(false) || r.logits_match == Some(false) {
            f.push(format!("{what}: output differs from the reference"));
        }
        if r.config == RunConfig::Epm && !r.outcome.is_ok() {
            f.push(format!("{what}: {}", r.outcome));
        }
        if r.config == RunConfig::Reference && !r.outcome.is_ok() {
            f.push(format!("{what}: reference failed: {}", r.outcome));
        }
        if r.within_budget == Some(false) {
            f.push(format!("{what}: over budget"));
        }
    }
    f
}

fn summarize(cfg: &AbConfig, rows: &[Row]) -> Vec<BudgetSummary> {
    cfg.budgets_mb
        .iter()
        .map(|&b| {
            let of_label = |label: &str, f: fn(&Row) -> Option<f64>| {
                Spread::of(
                    rows.iter()
                        .filter(|r| r.budget_mb == b && r.label == label)
                        .filter_map(f)
                        .collect(),
                )
            };
            let of = |c: RunConfig, f: fn(&Row) -> Option<f64>| of_label(c.name(), f);
            let decode_of = |rep: usize, label: &str| {
                rows.iter()
                    .find(|r| r.rep == rep && r.budget_mb == b && r.label == label)
                    .and_then(|r| r.decode_tok_s)
            };
            let first = planned(cfg).first().map(|p| p.label.to_string());
            let variants = cfg
                .variants
                .iter()
                .map(|v| VariantSummary {
                    label: v.label.clone(),
                    decode_tok_s: of_label(&v.label, |r| r.decode_tok_s),
                    prefill_tok_s: of_label(&v.label, |r| r.prefill_tok_s),
                    decode_cache_hit_rate: of_label(&v.label, |r| r.decode_cache_hit_rate),
                    decode_over_first: first.as_deref().and_then(|f| {
                        Spread::of(
                            (0..cfg.runs)
                                .filter_map(|rep| {
                                    Some(
                                        decode_of(rep, &v.label)?
                                            / decode_of(rep, f)?.max(f64::MIN_POSITIVE),
                                    )
                                })
                                .collect(),
                        )
                    }),
                })
                .collect();
            let ratio = |num: RunConfig, den: RunConfig| {
                let v = (0..cfg.runs)
                    .filter_map(|rep| {
                        Some(
                            decode_of(rep, num.name())?
                                / decode_of(rep, den.name())?.max(f64::MIN_POSITIVE),
                        )
                    })
                    .collect();
                Spread::of(v)
            };
            BudgetSummary {
                budget_mb: b,
                decode_tok_s: RunConfig::ALL
                    .iter()
                    .map(|&c| (c, of(c, |r| r.decode_tok_s)))
                    .collect(),
                prefill_tok_s: RunConfig::ALL
                    .iter()
                    .map(|&c| (c, of(c, |r| r.prefill_tok_s)))
                    .collect(),
                decode_epm_over_kernel: ratio(RunConfig::Epm, RunConfig::Kernel),
                decode_epm_over_reference: ratio(RunConfig::Epm, RunConfig::Reference),
                epm_decode_cache_hit_rate: of(RunConfig::Epm, |r| r.decode_cache_hit_rate),
                variants,
            }
        })
        .collect()
}
