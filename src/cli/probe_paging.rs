//! `epm-run probe-paging`: what paging a model's experts in and out costs the kernel.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use epm_sys::page_cost::{self, EvictPath, PageCost, ReadPath};

use super::exit::UsageError;
use super::{create_parent, open_index};

#[derive(Args, Debug)]
pub struct ProbePagingArgs {
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Experts to read in and drop, spread over the layers and ids (each with its gate, up
    /// and down slices, as the pager advises them).
    #[arg(long, default_value_t = 512)]
    experts: usize,
    /// Read and drop whole expert tensors instead (every expert of a layer's gate, up and
    /// down, each tensor one range, as a prompt's ubatch selects them): this many layers,
    /// spread over the model.
    #[arg(long)]
    whole_layers: Option<usize>,
    /// Repetitions of each way of reading, alternating.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Seconds to wait before each measurement, so that the memory the one before freed
    /// stays free long enough for a VM's free page reporting to hand it back (the kernel
    /// reports after about 2 s): 0 measures memory taken again at once, as a run that
    /// pages continually does.
    #[arg(long, default_value_t = 0)]
    idle_s: u64,
    #[arg(long, default_value = "validate/page-cost-kernel.json")]
    out: PathBuf,
}

#[derive(Serialize)]
struct Report {
    command: String,
    machine: epm_sys::proc::Machine,
    model: PathBuf,
    experts: usize,
    whole_layers: Option<usize>,
    idle_s: u64,
    runs: Vec<PageCost>,
}

pub fn run(a: ProbePagingArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    if index.layers.is_empty() {
        bail!(UsageError(format!(
            "{} has no routed experts to page",
            a.model.display()
        )));
    }
    if a.experts == 0 || a.runs == 0 {
        bail!(UsageError("--experts and --runs must be at least 1".into()));
    }
    if a.whole_layers == Some(0) {
        bail!(UsageError("--whole-layers must be at least 1".into()));
    }
    if index.files.len() > 1 {
        bail!(UsageError(
            "probe-paging measures single-file models; give one shard's worth with a single-file model".into()
        ));
    }
    create_parent(&a.out)?;
    // Experts spread evenly over (layer, id) pairs: the pager's ranges, slice by slice.
    let n_layer = index.layers.len();
    let n_expert = index.n_expert as usize;
    let total = n_layer * n_expert;
    let step = (total / a.experts.min(total)).max(1);
    let mut ranges = Vec::new();
    match a.whole_layers {
        Some(layers) => {
            let step = (n_layer / layers.min(n_layer)).max(1);
            for layer in index.layers.iter().step_by(step).take(layers) {
                for t in &layer.tensors {
                    ranges.push((t.offset, n_expert as u64 * t.bytes_per_expert));
                }
            }
        }
        None => {
            for k in (0..total).step_by(step).take(a.experts) {
                let (layer, e) = (&index.layers[k % n_layer], (k / n_layer) % n_expert);
                for t in &layer.tensors {
                    ranges.push((t.offset + e as u64 * t.bytes_per_expert, t.bytes_per_expert));
                }
            }
        }
    }
    let machine = epm_sys::proc::machine();
    if let Some(order) = machine.free_page_reporting_order {
        println!(
            "free page reporting at order {order}: free blocks of 2^{order} pages and up go back to the hypervisor, and large folios made of them pay a host fault at their first touch (none go back when the order is above the kernel's largest, 10 on x86-64)"
        );
    }
    let mut runs = Vec::new();
    for _ in 0..a.runs {
        for (path, evict) in [
            (ReadPath::WillNeed, EvictPath::UnmapThenDrop),
            (ReadPath::WillNeed, EvictPath::Pageout),
            (ReadPath::HugePopulate, EvictPath::UnmapThenDrop),
            (ReadPath::Populate, EvictPath::UnmapThenDrop),
            (ReadPath::PopulateSequential, EvictPath::UnmapThenDrop),
            (ReadPath::BufferedRead, EvictPath::UnmapThenDrop),
        ] {
            std::thread::sleep(Duration::from_secs(a.idle_s));
            let cost = page_cost::measure(&a.model, &ranges, path, evict, Duration::from_secs(300))
                .with_context(|| format!("measuring {}", a.model.display()))?;
            println!(
                "{:<18} {:<14} {:>6} MiB  read {:.3} ms/MiB (sys {:.3}), map {:.3} ms/MiB (populate {:.3} + touch {:.3}), drop {:.3} ms/MiB (sys {:.3}), PMD folios {} MiB, pages in large folios {}, cached outside the ranges {} MiB, cached after drop {} MiB",
                format!("{path:?}"),
                format!("{evict:?}"),
                cost.bytes >> 20,
                cost.read_cpu_ms_per_mib,
                cost.read_sys_ms_per_mib,
                cost.map_cpu_ms_per_mib,
                cost.populate_map_cpu_ms_per_mib,
                cost.touch_after_populate_cpu_ms_per_mib,
                cost.evict_cpu_ms_per_mib,
                cost.evict_sys_ms_per_mib,
                cost.file_huge_pages_bytes >> 20,
                cost.large_folio_bytes
                    .map_or("unknown (frames need root)".to_string(), |b| format!("{} MiB", b >> 20)),
                cost.cached_outside_ranges_bytes >> 20,
                cost.cached_after_evict_bytes >> 20
            );
            runs.push(cost);
        }
    }
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        model: a.model.clone(),
        experts: a.experts,
        whole_layers: a.whole_layers,
        idle_s: a.idle_s,
        runs,
    };
    epm_sys::fs::write_atomic(&a.out, &serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!("wrote {}", a.out.display());
    Ok(())
}
