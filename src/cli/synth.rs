//! `epm-run synth`: write a synthetic GGUF model.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use epm_synth::{Preset, SynthError};

use super::{create_parent, progress};

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// A preset name (the README lists them; an unknown name prints them all).
    #[arg(long)]
    preset: String,
    #[arg(short = 'o', long)]
    output: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Override the preset's layer count (keeps per-layer shapes).
    #[arg(long)]
    layers: Option<u32>,
    /// Override the preset's expert count (keeps per-expert shapes).
    #[arg(long)]
    experts: Option<u32>,
    /// Zipf-like exponent of expert popularity: 0 routes uniformly, higher is more skewed.
    #[arg(long, default_value_t = 0.0)]
    routing_skew: f64,
    /// Temporal locality of routing, 0 to 0.85: the weight of a topic direction that drifts
    /// slowly along generated text, so consecutive tokens share experts (0: none).
    #[arg(long, default_value_t = 0.0)]
    routing_locality: f64,
    /// Generated tokens over which the topic drifts from one anchor to the next.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    topic_span: u32,
    /// Split into shards of at most this size (e.g. 500M, 8G), named -0000k-of-0000N.gguf.
    #[arg(long, value_parser = parse_size)]
    split_max_size: Option<u64>,
    /// Print the files and sizes that would be written, and write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// `123`, `500K`, `500M`, `8G` (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    match num.trim().parse::<u64>() {
        Ok(n) if n > 0 => n
            .checked_mul(mult)
            .ok_or_else(|| format!("{s} is too large")),
        _ => Err(format!("{s:?} is not a size like 500M or 8G")),
    }
}

/// The preset the arguments describe.
fn preset(a: &SynthArgs) -> Result<Preset, SynthError> {
    let mut preset = Preset::named(&a.preset).ok_or_else(|| SynthError::UnknownPreset {
        name: a.preset.clone(),
    })?;
    if let Some(l) = a.layers {
        preset = preset.with_layers(l).map_err(SynthError::BadShape)?;
    }
    if let Some(x) = a.experts {
        preset = preset.with_experts(x).map_err(SynthError::BadShape)?;
    }
    if !(0.0..=8.0).contains(&a.routing_skew) {
        return Err(SynthError::BadSkew(a.routing_skew));
    }
    preset.routing_skew = a.routing_skew;
    // The skew's shared direction takes 0.25 of each embedding's variance.
    if !(0.0..=0.85).contains(&a.routing_locality) {
        return Err(SynthError::BadLocality(a.routing_locality));
    }
    preset.routing_locality = a.routing_locality;
    preset.topic_span = a.topic_span;
    Ok(preset)
}

pub fn run(a: SynthArgs) -> Result<()> {
    let preset = preset(&a)?;
    if a.dry_run {
        let files = epm_synth::model_sizes(&preset, &a.output, a.split_max_size);
        for (path, size) in &files {
            println!("would write {} ({size} bytes)", path.display());
        }
        println!(
            "{} bytes in {} file(s), {} of them routed experts",
            files.iter().map(|(_, s)| s).sum::<u64>(),
            files.len(),
            preset.expert_bytes()
        );
        return Ok(());
    }
    let start = std::time::Instant::now();
    let files = write(&preset, &a.output, a.seed, a.split_max_size)?;
    let secs = start.elapsed().as_secs_f64();
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    for f in &files {
        println!("wrote {}", f.display());
    }
    println!(
        "{} bytes in {secs:.1} s ({:.0} MB/s)",
        bytes,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}

/// Write `preset` to `path` with a progress bar; returns the files written.
pub fn write(preset: &Preset, path: &Path, seed: u64, split: Option<u64>) -> Result<Vec<PathBuf>> {
    create_parent(path)?;
    let bar = progress::bytes("synth");
    let files = epm_synth::write_model(preset, path, seed, split, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    Ok(files)
}
