//! Offline cache simulation: replay routing traces through expert-cache policies at a
//! given capacity and count what each keeps resident. The policies see the accesses in the
//! order the pager sees them (per routed layer and ubatch, the distinct experts selected,
//! pinned until the next routing), with each expert's real cost in bytes. Belady's offline
//! optimum is the bound; the online policies are the candidates for the pager.
//!
//! Hits are counted as the pager's `experts.decode.cache_hits` counts them: per distinct
//! expert per routed decode layer, resident before the routing. The prompt warms the cache.
//!
//! The policies the pager runs (`lru`, `lfu`, `lfu-decay`, `lfu-decay-D`, and the per-layer
//! quotas over them) are replayed through the pager itself ([`pager::PagerReplay`]): `sim`
//! measures the pager's code, not a model of it. The policies the pager does not run live
//! in a file each: [`arc`], [`two_q`], [`predicted`], and the offline bounds [`belady`] and
//! [`static_top`]. [`report`] is the typed result `epm-run sim` prints and writes.

pub mod arc;
pub mod belady;
pub mod pager;
pub mod per_layer;
pub mod predicted;
pub mod report;
mod sets;
pub mod static_top;
#[cfg(test)]
mod tests;
pub mod two_q;

use crate::pager::{CachePolicy, EvictBy, LayerSpec, Phase};
use crate::trace::Trace;

/// An expert of a layer: (layer, expert).
pub type Key = (u32, u16);

/// When an access happens: its place in the replay, and the token (ubatch) it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Clock {
    pub access: u64,
    pub token: u64,
}

/// A cache policy. `access` is told every selected expert of a routing, then `settle`
/// makes the room the resident set needs; `pinned` must not be evicted.
pub trait Policy {
    fn name(&self) -> String;
    /// Whether `key` is resident.
    fn contains(&self, key: Key) -> bool;
    /// `key` is used now: make it resident and most recent.
    fn access(&mut self, key: Key, cost: u64, now: Clock);
    /// Evict until at most `capacity` bytes are resident, never a key in `pinned`.
    fn settle(&mut self, capacity: u64, pinned: &[Key]);
    fn resident_bytes(&self) -> u64;
    /// Guesses of the next routing's experts (policies that use them protect them).
    fn hint(&mut self, _guesses: &[Key]) {}
    /// A routing begins: its `access`es and `settle` follow. Policies that route a whole
    /// step at once (the pager) take it from here.
    fn begin(&mut self, _step: &Step) {}
}

/// What each expert costs in a replay: its page-rounded bytes in a model
/// ([`LayerSpec::expert_cost`], as the pager costs it), or one unit each.
#[derive(Debug, Clone)]
pub struct Costs {
    pub layers: Vec<LayerSpec>,
    pub page: u64,
}

impl Costs {
    /// The model's own costs.
    pub fn model(layers: Vec<LayerSpec>, page: u64) -> Costs {
        Costs { layers, page }
    }

    /// One unit per expert in each of `layers` (a one-byte slice at page size 1).
    pub fn units(layers: impl IntoIterator<Item = u32>) -> Costs {
        let layers = layers
            .into_iter()
            .map(|layer| LayerSpec {
                layer,
                slices: vec![crate::pager::ExpertSlice {
                    file: 0,
                    offset: 0,
                    bytes_per_expert: 1,
                }],
            })
            .collect();
        Costs { layers, page: 1 }
    }

    /// What keeping `key` resident costs (1 for a layer it does not know).
    pub fn cost(&self, key: Key) -> u64 {
        self.layers
            .iter()
            .find(|l| l.layer == key.0)
            .map_or(1, |l| l.expert_cost(u64::from(key.1), self.page))
    }

    /// The mean cost over `n_expert` experts of every layer.
    pub fn mean(&self, n_expert: u32) -> u64 {
        let n = self.layers.len() as u64 * u64::from(n_expert);
        let total: u64 = self
            .layers
            .iter()
            .flat_map(|l| (0..n_expert).map(move |e| l.expert_cost(u64::from(e), self.page)))
            .sum();
        (total / n.max(1)).max(1)
    }
}

/// One access of a replay: a routed layer of one ubatch.
#[derive(Debug, Clone)]
pub struct Step {
    pub layer: u32,
    pub phase: Phase,
    /// Tokens of the ubatch (the pager's token clock advances by them).
    pub n_tokens: u64,
    /// Distinct experts selected, ascending.
    pub experts: Vec<u16>,
    /// Every selection, token-major, as routing made them (what the pager is given).
    pub ids: Vec<u16>,
}

impl Step {
    /// A step of one token selecting `experts` (tests and hand-made traces).
    pub fn token(layer: u32, phase: Phase, experts: &[u16]) -> Step {
        let mut distinct = experts.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        Step {
            layer,
            phase,
            n_tokens: 1,
            experts: distinct,
            ids: experts.to_vec(),
        }
    }
}

/// The steps of a trace, in order.
pub fn steps(trace: &Trace) -> Vec<Step> {
    trace
        .records
        .iter()
        .map(|r| Step {
            layer: r.layer,
            phase: r.phase,
            n_tokens: u64::from(r.n_tokens),
            experts: r.distinct(),
            ids: r.ids.clone(),
        })
        .collect()
}

/// Keep only the first `k` experts of each token (a top-k routing's best `k`): the
/// published replays at top-6 were made this way from top-8 routing.
pub fn truncate_top_k(trace: &Trace, k: u32) -> Trace {
    let n = trace.n_used as usize;
    let k = (k as usize).min(n).max(1);
    let mut t = trace.clone();
    t.n_used = k as u32;
    for r in &mut t.records {
        r.ids = r.ids.chunks(n).flat_map(|tok| tok[..k].to_vec()).collect();
    }
    t
}

/// What a policy kept over the decode steps of a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub selected: u64,
    pub hits: u64,
    pub miss_bytes: u64,
    pub decode_routings: u64,
    /// The most the policy held after a decode routing: above the capacity where its
    /// pins outgrow a quota (per-layer quotas whose layer selects more than its share).
    pub peak_decode_resident_bytes: u64,
}

impl Outcome {
    pub fn hit_rate(&self) -> f64 {
        if self.selected == 0 {
            0.0
        } else {
            self.hits as f64 / self.selected as f64
        }
    }
}

/// Names the experts a predictor would guess for routing `i` (its step given).
pub type Guesses<'a> = &'a mut dyn FnMut(usize, &Step) -> Vec<Key>;

/// Replay `steps` through `policy` with `capacity` bytes at `costs`. `guesses`, when given,
/// is called before each routing with that routing's step and returns the experts a
/// predictor would have named for it.
pub fn replay(
    steps: &[Step],
    policy: &mut dyn Policy,
    capacity: u64,
    costs: &Costs,
    mut guesses: Option<Guesses<'_>>,
) -> Outcome {
    let cost = |k: Key| costs.cost(k);
    let mut out = Outcome::default();
    let mut now = Clock::default();
    let mut last_layer = None;
    let mut pinned: Vec<Key> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        // A layer not above the previous one starts a new ubatch: the token clock ticks.
        if last_layer.is_some_and(|l| step.layer <= l) {
            now.token += 1;
        }
        last_layer = Some(step.layer);
        if let Some(g) = guesses.as_mut() {
            let hint = g(i, step);
            policy.hint(&hint);
        }
        pinned.clear();
        policy.begin(step);
        let decode = step.phase == Phase::Decode;
        if decode {
            out.decode_routings += 1;
        }
        for &e in &step.experts {
            let key = (step.layer, e);
            if decode {
                out.selected += 1;
                if policy.contains(key) {
                    out.hits += 1;
                } else {
                    out.miss_bytes += cost(key);
                }
            }
            now.access += 1;
            policy.access(key, cost(key), now);
            pinned.push(key);
        }
        policy.settle(capacity, &pinned);
        if decode {
            out.peak_decode_resident_bytes =
                out.peak_decode_resident_bytes.max(policy.resident_bytes());
        }
    }
    out
}

/// The policies `epm-run sim` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Lru,
    Lfu,
    /// LFU whose counts decay by the pager's default factor per token (`CachePolicy::DEFAULT`).
    LfuDecay,
    /// LFU whose counts decay by this many thousandths per token (`lfu-decay-0.95`).
    LfuDecayAt(u16),
    /// LRU evicting its coldest expert ([`EvictBy::Coldest`]); the pager's policies above
    /// evict the expert whose next use is expected last, as it does by default.
    LruColdest,
    /// The default LFU-decay evicting its coldest expert.
    LfuDecayColdest,
    Arc,
    TwoQ,
    PerLayerLru,
    PerLayerLfu,
    PredictedLru,
    Belady,
    /// Offline: the trace's most selected experts, fixed ([`StaticTop`]).
    StaticTop,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 14] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::LfuDecay,
        PolicyKind::LfuDecayAt(990),
        PolicyKind::LfuDecayAt(900),
        PolicyKind::LruColdest,
        PolicyKind::LfuDecayColdest,
        PolicyKind::Arc,
        PolicyKind::TwoQ,
        PolicyKind::PerLayerLru,
        PolicyKind::PerLayerLfu,
        PolicyKind::PredictedLru,
        PolicyKind::Belady,
        PolicyKind::StaticTop,
    ];

    pub fn name(self) -> String {
        let fixed = match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::LfuDecay => "lfu-decay",
            PolicyKind::LfuDecayAt(permille) => {
                return format!("lfu-decay-{}", f64::from(permille) / 1000.0)
            }
            PolicyKind::LruColdest => "lru-coldest",
            PolicyKind::LfuDecayColdest => "lfu-decay-coldest",
            PolicyKind::Arc => "arc",
            PolicyKind::TwoQ => "2q",
            PolicyKind::PerLayerLru => "per-layer-lru",
            PolicyKind::PerLayerLfu => "per-layer-lfu",
            PolicyKind::PredictedLru => "lru+predicted",
            PolicyKind::Belady => "belady",
            PolicyKind::StaticTop => "static-top",
        };
        fixed.to_string()
    }

    /// The policy, for `steps` (the offline ones read them) with `n_expert` experts per
    /// layer at `costs`, and `capacity` bytes, about `capacity_experts` experts (2Q sizes
    /// its ghost queue from it).
    pub fn build(
        self,
        steps: &[Step],
        costs: &Costs,
        n_expert: u32,
        capacity: u64,
        capacity_experts: usize,
    ) -> Box<dyn Policy> {
        let pager_in = |policy: CachePolicy, evict_by: EvictBy| -> Box<dyn Policy> {
            Box::new(pager::PagerReplay::new(
                policy,
                evict_by,
                costs.clone(),
                n_expert,
                capacity,
            ))
        };
        let pager = |policy: CachePolicy| pager_in(policy, EvictBy::default());
        let per_layer = |name: &'static str, policy: CachePolicy| -> Box<dyn Policy> {
            Box::new(per_layer::PerLayer::new(
                costs,
                name,
                capacity,
                |c, quota| {
                    Box::new(pager::PagerReplay::new(
                        policy,
                        EvictBy::Coldest,
                        c,
                        n_expert,
                        quota,
                    ))
                },
            ))
        };
        match self {
            PolicyKind::Lru => pager(CachePolicy::Lru),
            PolicyKind::LruColdest => pager_in(CachePolicy::Lru, EvictBy::Coldest),
            PolicyKind::LfuDecayColdest => pager_in(CachePolicy::DEFAULT, EvictBy::Coldest),
            PolicyKind::Lfu => pager(CachePolicy::LfuDecay { decay: 1.0 }),
            PolicyKind::LfuDecay => pager(CachePolicy::DEFAULT),
            PolicyKind::LfuDecayAt(permille) => pager(CachePolicy::LfuDecay {
                decay: f64::from(permille) / 1000.0,
            }),
            PolicyKind::Arc => Box::new(arc::Arc::new()),
            PolicyKind::TwoQ => Box::new(two_q::TwoQ::new(capacity_experts / 2)),
            PolicyKind::PerLayerLru => per_layer("per-layer-lru", CachePolicy::Lru),
            PolicyKind::PerLayerLfu => {
                per_layer("per-layer-lfu", CachePolicy::LfuDecay { decay: 1.0 })
            }
            PolicyKind::PredictedLru => Box::new(predicted::PredictedLru::new()),
            PolicyKind::Belady => Box::new(belady::Belady::new(steps)),
            PolicyKind::StaticTop => Box::new(static_top::StaticTop::new(steps, capacity, costs)),
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<PolicyKind, String> {
        if let Some(p) = PolicyKind::ALL.into_iter().find(|p| p.name() == s) {
            return Ok(p);
        }
        let decay = s
            .strip_prefix("lfu-decay-")
            .and_then(|d| d.parse::<f64>().ok())
            .filter(|d| *d > 0.0 && *d < 1.0);
        match decay {
            Some(d) if (d * 1000.0).fract() == 0.0 => {
                Ok(PolicyKind::LfuDecayAt((d * 1000.0) as u16))
            }
            _ => {
                let names: Vec<String> = PolicyKind::ALL.iter().map(|p| p.name()).collect();
                Err(format!(
                    "unknown policy {s:?}: choose from {}, or lfu-decay-D for a decay D per token between 0 and 1 (at most 3 decimals)",
                    names.join(", ")
                ))
            }
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// A predictor of given `accuracy` as a guess function: for each decode routing, the
/// experts of the *next* routing, each named right with probability `accuracy` and
/// replaced by a random expert otherwise (a deterministic hash stands in for the dice).
pub fn simulated_guesses(
    steps: &[Step],
    accuracy: f64,
    n_expert: u32,
) -> impl FnMut(usize, &Step) -> Vec<Key> + '_ {
    move |i, _step| {
        let Some(next) = steps.get(i + 1) else {
            return Vec::new();
        };
        next.experts
            .iter()
            .enumerate()
            .map(|(j, &e)| {
                let h = (i as u64 * 1_000_003 + j as u64 * 7919 + u64::from(e))
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let u = (h >> 11) as f64 / (1u64 << 53) as f64;
                if u < accuracy {
                    (next.layer, e)
                } else {
                    (next.layer, ((h >> 20) % u64::from(n_expert.max(1))) as u16)
                }
            })
            .collect()
    }
}
