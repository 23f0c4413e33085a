//! `epm-run plan`: what a model needs at a budget, from its metadata alone.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use epm_core::plan::{choose_ubatch, make_plan, reuse_auto_ubatch_max, AUTO_UBATCHES};
use epm_core::prefix::PromptCuts;
use epm_core::units::mib_f;

use super::{budget_bytes, open_index, ShapeArgs};

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Total RSS budget in MiB (default: 80% of available memory).
    #[arg(long = "ram-budget-mb")]
    ram_budget_mb: Option<u64>,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Sequences served at once (`serve --parallel`): one recurrent state each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: PlanArgs) -> Result<()> {
    let index = open_index(&a.model)?;
    let budget = budget_bytes(a.ram_budget_mb)?;
    let shape = a
        .shape
        .resolve(&index, Some(budget), a.parallel, u32::MAX)?;
    let page = epm_sys::page_size() as u64;
    let mut p = make_plan(&index, shape, budget, page);
    if a.shape.ubatch.is_auto() {
        // `auto` falls back to the smallest ubatch at budgets too small for larger ones, so
        // the minimum budget is the smallest ubatch's.
        let smallest = epm_core::plan::RunShape {
            n_ubatch: *AUTO_UBATCHES.last().expect("non-empty"),
            ..shape
        };
        p.min_budget_bytes = make_plan(&index, smallest, budget, page).min_budget_bytes;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let m = |b: u64| format!("{:.1} MiB", mib_f(b));
    println!("model            {} ({})", p.model, p.arch);
    println!("model bytes      {}", m(p.model_bytes));
    println!(
        "expert bytes     {}  in {} MoE layers, {} experts, {} used",
        m(p.expert_bytes),
        p.n_moe_layers,
        p.n_expert,
        p.n_expert_used
    );
    println!("non-expert bytes {}", m(p.non_expert_bytes));
    for l in &p.bytes_per_expert {
        println!(
            "  layer {:>3}: {} bytes per expert",
            l.layer, l.bytes_per_expert
        );
    }
    println!(
        "experts per token {} (every MoE layer); must be resident at once: {} (one layer's experts for a ubatch of {})",
        m(p.working_set_bytes_per_token),
        m(p.ubatch_working_set_bytes),
        p.n_ubatch
    );
    println!(
        "reserve          {}  (KV {}, compute {}, runtime {}, margin {})",
        m(p.reserve_bytes),
        m(p.kv_bytes),
        m(p.compute_bytes),
        m(p.runtime_bytes),
        m(p.margin_bytes)
    );
    println!("min budget       {}", m(p.min_budget_bytes));
    let reuse_auto = |cuts| choose_ubatch(&index, shape, budget, page, reuse_auto_ubatch_max(cuts));
    println!(
        "ubatch auto      {} at this budget for one prompt, {} for serve and --chat ({} with --prompt-split grid) (largest of {:?} costing at most 1/8 of the expert cache; serve and --chat at most {}, or {} on the grid)",
        p.auto_ubatch,
        reuse_auto(PromptCuts::Turns),
        reuse_auto(PromptCuts::Grid),
        AUTO_UBATCHES,
        reuse_auto_ubatch_max(PromptCuts::Turns),
        reuse_auto_ubatch_max(PromptCuts::Grid)
    );
    if p.fits {
        println!(
            "budget           {}  -> expert budget {} ({:.0}% of experts)",
            m(p.budget_bytes),
            m(p.expert_budget_bytes),
            100.0 * (p.expert_budget_bytes.min(p.expert_bytes)) as f64
                / p.expert_bytes.max(1) as f64
        );
        if let Some(t) = index
            .token_table
            .filter(|_| p.expert_budget_bytes < p.expert_bytes)
        {
            println!(
                "token table      {}  lent to the expert cache, page by page until a token reads a row on it",
                m(t.bytes())
            );
        }
    } else {
        println!(
            "budget           {}  is below the minimum",
            m(p.budget_bytes)
        );
    }
    Ok(())
}
