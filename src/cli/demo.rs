//! `epm-run demo`: synthesize a demo model, run it unpaged and paged from a cold page
//! cache, and compare outputs and memory side by side.

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_core::plan::{make_plan, RunShape};
use epm_core::stats::Snapshot;
use epm_core::units::{mib_ceil, MIB};
use epm_gguf::GgufModel;

use super::{open_index, self_exe, synth};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Tokens to generate in each run.
    #[arg(short = 'n', long, default_value_t = 48)]
    n_predict: usize,
}

pub fn run(a: DemoArgs) -> Result<()> {
    let dir = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("epm");
    let model = dir.join(format!("demo-v{}.gguf", env!("CARGO_PKG_VERSION")));
    let preset = epm_synth::Preset::named("demo").expect("demo preset exists");
    if GgufModel::open(&model).is_err() {
        println!(
            "Synthesizing the demo model (synthetic random weights, not a trained model) at {}",
            model.display()
        );
        synth::write(&preset, &model, 7, None)?;
    }
    let index = open_index(&model)?;
    let shape = RunShape::new(1024, 128);
    let base = make_plan(&index, shape, u64::MAX, epm_sys::page_size() as u64);
    let budget = (base.reserve_bytes + index.expert_bytes * 3 / 10).max(base.min_budget_bytes);
    let budget_mb = mib_ceil(budget);
    println!(
        "Demo model: {} experts x {} MoE layers, {:.0} MiB of experts, {:.0} MiB file. The weights are synthetic: the text is not meant to read well.",
        index.n_expert,
        index.layers.len(),
        index.expert_bytes as f64 / MIB as f64,
        index.model_bytes() as f64 / MIB as f64
    );
    let (_, exe) = self_exe()?;
    let work = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a work folder in {}", dir.display()))?;
    let prompt = "The quick brown fox jumps over the lazy dog. The pager reads each expert";
    let mut rows = Vec::new();
    for (label, flags) in [
        ("unpaged", vec!["--no-pager".to_string()]),
        (
            "paged",
            vec!["--ram-budget-mb".to_string(), budget_mb.to_string()],
        ),
    ] {
        let stats_path = work.path().join(format!("{label}.json"));
        let logits = work.path().join(format!("{label}.logits"));
        // Both runs start from a cold page cache, as after a reboot.
        epm_sys::cache::drop_file_cache(&model)
            .with_context(|| format!("dropping {} from the page cache", model.display()))?;
        let out = std::process::Command::new(&exe)
            .args(["generate", "-m"])
            .arg(&model)
            .args([
                "-p",
                prompt,
                "-n",
                &a.n_predict.to_string(),
                "-c",
                "1024",
                "-ub",
                "128",
            ])
            .args(&flags)
            .arg("--stats-file")
            .arg(&stats_path)
            .arg("--dump-logits")
            .arg(&logits)
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("starting a child epm-run")?;
        if !out.status.success() {
            bail!("demo run '{label}' failed ({})", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let s: Snapshot = serde_json::from_slice(
            &std::fs::read(&stats_path)
                .with_context(|| format!("reading {}", stats_path.display()))?,
        )
        .with_context(|| format!("parsing {}", stats_path.display()))?;
        println!("\n[{label}] {text}");
        let l = std::fs::read(&logits).with_context(|| format!("reading {}", logits.display()))?;
        rows.push((label, s, l));
    }
    let identical =
        rows[0].2 == rows[1].2 && rows[0].1.tokens.generated_ids == rows[1].1.tokens.generated_ids;
    println!(
        "\nbit-identical tokens and logits: {}",
        if identical { "yes" } else { "NO" }
    );
    println!("\nBoth runs started from a cold page cache. Decode hit: selections the expert cache kept resident.");
    println!(
        "{:<8} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10}",
        "run", "peak RSS", "budget", "decode hit", "SSD/token", "prefill", "decode"
    );
    for (label, s, _) in &rows {
        let budget = if s.pager_enabled {
            format!("{} MiB", s.budget_bytes / MIB)
        } else {
            "-".into()
        };
        println!(
            "{:<8} {:>6} MiB {:>10} {:>11} {:>6} KiB {:>6.1} t/s {:>6.1} t/s",
            label,
            s.memory.peak_rss_bytes / MIB,
            budget,
            if s.pager_enabled {
                format!("{:.2}", s.experts.decode.cache_hit_rate)
            } else {
                "-".into()
            },
            (s.io.read_bytes_per_token / 1024.0) as u64,
            s.tok_per_s.prefill,
            s.tok_per_s.decode
        );
    }
    if !identical {
        bail!("paged output differs from unpaged output");
    }
    Ok(())
}
