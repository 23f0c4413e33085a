//! `epm-run sim`: replay routing traces (`generate --trace-file`) through expert-cache
//! policies at several capacities; a table, JSON and a PNG of hit rate against capacity.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use epm_core::pager::LayerSpec;
use epm_core::plan::{make_plan, RunShape};
use epm_core::sim::report::{evaluate, Grid, Report};
use epm_core::sim::{self, Costs, PolicyKind, Step};
use epm_core::trace::Trace;
use epm_core::units::MIB;

use super::exit::UsageError;
use super::{create_parent, open_index};

#[derive(Args, Debug)]
pub struct SimArgs {
    /// A routing trace; repeat for several (each replays from an empty cache).
    #[arg(long = "trace", required = true)]
    traces: Vec<PathBuf>,
    /// The model the traces came from: experts then cost their real (page-rounded) bytes.
    /// Without it every expert costs one unit and capacities are in experts.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Capacities in MiB of expert cache, comma-separated (needs -m).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["budget_mb", "capacity_experts"])]
    capacity_mb: Vec<u64>,
    /// RAM budgets in MiB, comma-separated: the expert cache is the budget less the plan's
    /// reserve at -c (needs -m).
    #[arg(long, value_delimiter = ',', conflicts_with = "capacity_experts")]
    budget_mb: Vec<u64>,
    /// Capacities in experts, comma-separated (any expert counts one).
    #[arg(long, value_delimiter = ',')]
    capacity_experts: Vec<u64>,
    /// Context size for --budget-mb's reserve.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx: u32,
    /// Replay only each token's best K experts (top-K of the routing).
    #[arg(long)]
    top_k: Option<u32>,
    /// Policies, comma-separated (default: all of these, with lfu-decay-0.99 and
    /// lfu-decay-0.9): lru, lfu, lfu-decay (the pager's default), lfu-decay-D (any decay D
    /// per token, e.g. lfu-decay-0.97), all evicting by next use as the pager does;
    /// lru-coldest, lfu-decay-coldest (`--evict-by coldest`); arc, 2q, per-layer-lru,
    /// per-layer-lfu, lru+predicted, belady, static-top.
    #[arg(long, value_delimiter = ',')]
    policies: Vec<PolicyKind>,
    /// Accuracy of the simulated predictor that `lru+predicted` uses.
    #[arg(long, default_value_t = 0.9)]
    predict_accuracy: f64,
    #[arg(long, default_value = "validate/sim.json")]
    out: PathBuf,
    /// Also write hit rate against capacity as a PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: SimArgs) -> Result<()> {
    let policies: Vec<PolicyKind> = if a.policies.is_empty() {
        PolicyKind::ALL.to_vec()
    } else {
        a.policies.clone()
    };
    let mut traces = Vec::new();
    for path in &a.traces {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let t = Trace::parse(&bytes).with_context(|| format!("{}", path.display()))?;
        traces.push(match a.top_k {
            Some(k) => sim::truncate_top_k(&t, k),
            None => t,
        });
    }
    let n_expert = traces[0].n_expert;
    if traces.iter().any(|t| t.n_expert != n_expert) {
        bail!(UsageError(
            "the traces come from models with different expert counts".into()
        ));
    }
    // Each expert's cost, and the capacities in the same unit.
    let index = a.model.as_deref().map(open_index).transpose()?;
    let page = epm_sys::page_size() as u64;
    let costs = match &index {
        Some(ix) => {
            if ix.n_expert != n_expert {
                bail!(UsageError(format!(
                    "the model has {} experts per layer but the traces {n_expert}",
                    ix.n_expert
                )));
            }
            Costs::model(LayerSpec::from_index(ix), page)
        }
        None => Costs::units(traces[0].layers()),
    };
    let mean_cost = costs.mean(n_expert);
    let capacities: Vec<u64> = if !a.capacity_experts.is_empty() {
        a.capacity_experts.iter().map(|&n| n * mean_cost).collect()
    } else if let (Some(ix), false) = (&index, a.budget_mb.is_empty()) {
        a.budget_mb
            .iter()
            .map(|&mb| {
                let p = make_plan(ix, RunShape::new(a.ctx, 128), mb * MIB, page);
                (mb * MIB).saturating_sub(p.reserve_bytes)
            })
            .collect()
    } else if index.is_some() && !a.capacity_mb.is_empty() {
        a.capacity_mb.iter().map(|&mb| mb * MIB).collect()
    } else {
        bail!(UsageError(
            "give --capacity-experts, or -m MODEL with --capacity-mb or --budget-mb".into()
        ));
    };
    let per_trace_steps: Vec<Vec<Step>> = traces.iter().map(sim::steps).collect();
    let rows = evaluate(&Grid {
        traces: &per_trace_steps,
        costs: &costs,
        n_expert,
        capacities: &capacities,
        policies: &policies,
        predict_accuracy: a.predict_accuracy,
    });
    // The table.
    print!("{:>10} {:>8}", "MiB", "experts");
    for p in &policies {
        print!(" {:>14}", p.name());
    }
    println!();
    let mut over = false;
    for r in &rows {
        print!("{:>10.0} {:>8}", r.capacity_mib, r.capacity_experts);
        for p in &policies {
            let result = &r.policies[&p.name()];
            let mark = if result.peak_decode_resident_bytes > r.capacity_bytes {
                over = true;
                "*"
            } else {
                " "
            };
            print!(" {:>13.3}{mark}", result.hit_rate);
        }
        println!();
    }
    if over {
        println!(
            "* held more than the capacity after some decode routing (a layer selecting more \
             than its quota): not comparable with the others"
        );
    }
    let report = Report {
        what: "decode cache hit rates of expert-cache policies, replaying routing traces".into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        traces: a.traces.clone(),
        model: a.model.clone(),
        top_k: a.top_k,
        n_expert,
        n_layers: costs.layers.len(),
        predict_accuracy: a.predict_accuracy,
        mean_expert_bytes: mean_cost,
        rows,
    };
    create_parent(&a.out)?;
    epm_sys::fs::write_atomic(&a.out, &serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!("wrote {}", a.out.display());
    if let Some(png) = &a.plot {
        let by_mib = index.is_some();
        let series: Vec<epm_bench::plot::Series> = policies
            .iter()
            .map(|p| epm_bench::plot::Series {
                label: p.name(),
                points: report
                    .rows
                    .iter()
                    .map(|r| {
                        let x = if by_mib {
                            r.capacity_mib
                        } else {
                            r.capacity_experts as f64
                        };
                        (x, r.policies[&p.name()].hit_rate)
                    })
                    .collect(),
            })
            .collect();
        let x_desc = if by_mib {
            "expert cache (MiB)"
        } else {
            "expert cache (experts)"
        };
        epm_bench::plot::lines(
            png,
            "decode cache hit rate by policy",
            x_desc,
            "decode cache hit rate",
            0.0..1.0,
            &series,
        )
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        println!("wrote {}", png.display());
    }
    Ok(())
}
