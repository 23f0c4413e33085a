//! What `epm-run sim` reports: per capacity, each policy's decode hit rate over every trace
//! (each replayed from an empty cache), and its share of Belady's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{replay, simulated_guesses, Costs, Outcome, PolicyKind, Step};
use crate::units::mib_f;

/// One policy at one capacity, summed over the traces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    pub hit_rate: f64,
    pub hits: u64,
    pub selected: u64,
    pub miss_bytes: u64,
    pub decode_routings: u64,
    /// The most it held after a decode routing, over the traces: above the row's capacity,
    /// its hit rate was bought with memory the others did not have.
    pub peak_decode_resident_bytes: u64,
    /// `hit_rate` over Belady's, when Belady was replayed too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_belady: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub capacity_bytes: u64,
    pub capacity_mib: f64,
    /// About this many experts fit (the capacity over the mean expert cost).
    pub capacity_experts: u64,
    /// Of all the model's experts.
    pub capacity_share: f64,
    /// By policy name.
    pub policies: BTreeMap<String, PolicyResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub what: String,
    pub command: String,
    pub traces: Vec<PathBuf>,
    pub model: Option<PathBuf>,
    pub top_k: Option<u32>,
    pub n_expert: u32,
    pub n_layers: usize,
    pub predict_accuracy: f64,
    pub mean_expert_bytes: u64,
    pub rows: Vec<Row>,
}

/// What to replay, and how.
pub struct Grid<'a> {
    /// Each trace's steps; each trace starts from an empty cache.
    pub traces: &'a [Vec<Step>],
    pub costs: &'a Costs,
    pub n_expert: u32,
    pub capacities: &'a [u64],
    pub policies: &'a [PolicyKind],
    /// Of the simulated predictor that `lru+predicted` uses.
    pub predict_accuracy: f64,
}

/// Replay every policy at every capacity over every trace.
pub fn evaluate(g: &Grid<'_>) -> Vec<Row> {
    let mean = g.costs.mean(g.n_expert);
    let n_layers = g.costs.layers.len();
    g.capacities
        .iter()
        .map(|&cap| {
            let cap_experts = cap / mean;
            let mut policies = BTreeMap::new();
            for &kind in g.policies {
                let mut total = Outcome::default();
                for steps in g.traces {
                    let mut p = kind.build(steps, g.costs, g.n_expert, cap, cap_experts as usize);
                    let mut guesses = simulated_guesses(steps, g.predict_accuracy, g.n_expert);
                    let o = replay(steps, p.as_mut(), cap, g.costs, Some(&mut guesses));
                    total.selected += o.selected;
                    total.hits += o.hits;
                    total.miss_bytes += o.miss_bytes;
                    total.decode_routings += o.decode_routings;
                    total.peak_decode_resident_bytes = total
                        .peak_decode_resident_bytes
                        .max(o.peak_decode_resident_bytes);
                }
                policies.insert(
                    kind.name(),
                    PolicyResult {
                        hit_rate: total.hit_rate(),
                        hits: total.hits,
                        selected: total.selected,
                        miss_bytes: total.miss_bytes,
                        decode_routings: total.decode_routings,
                        peak_decode_resident_bytes: total.peak_decode_resident_bytes,
                        of_belady: None,
                    },
                );
            }
            let belady = policies
                .get(&PolicyKind::Belady.name())
                .map(|b| b.hit_rate)
                .filter(|&b| b > 0.0);
            if let Some(b) = belady {
                for r in policies.values_mut() {
                    r.of_belady = Some(r.hit_rate / b);
                }
            }
            Row {
                capacity_bytes: cap,
                capacity_mib: mib_f(cap),
                capacity_experts: cap_experts,
                capacity_share: cap_experts as f64 / (n_layers as f64 * f64::from(g.n_expert)),
                policies,
            }
        })
        .collect()
}
