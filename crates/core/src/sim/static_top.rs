//! The trace's most selected experts, fixed with hindsight.
use std::collections::HashMap;

use super::sets::Scored;
use super::{Clock, Costs, Key, Policy, Step};
use crate::pager::Phase;

/// The experts selected most often over the trace's decode steps, chosen once with
/// hindsight: they stay once read; any other expert stays only while pinned. When routing
/// draws from fixed popularities independently (the skew model), keeping the most popular
/// experts is the best any online policy can do (Aho, Denning and Ullman's A0), so this
/// is the online policies' ceiling there, below Belady's; routing with locality is not
/// bounded by it.
pub struct StaticTop {
    top: std::collections::HashSet<Key>,
    set: Scored,
}

impl StaticTop {
    /// `capacity` bytes, less the largest decode routing's (pinned beside them).
    pub fn new(steps: &[Step], capacity: u64, costs: &Costs) -> StaticTop {
        let cost = |k: Key| costs.cost(k);
        let mut counts: HashMap<Key, u64> = HashMap::new();
        for s in steps.iter().filter(|s| s.phase == Phase::Decode) {
            for &e in &s.experts {
                *counts.entry((s.layer, e)).or_default() += 1;
            }
        }
        // Prompt ubatches pin most of a layer while they run, over capacity as with every
        // policy; a decode routing's experts must fit beside the fixed set.
        let largest_routing = steps
            .iter()
            .filter(|s| s.phase == Phase::Decode)
            .map(|s| s.experts.iter().map(|&e| cost((s.layer, e))).sum::<u64>())
            .max()
            .unwrap_or(0);
        let mut ranked: Vec<(Key, u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut room = capacity.saturating_sub(largest_routing);
        let mut top = std::collections::HashSet::new();
        for (key, _) in ranked {
            let c = cost(key);
            if c <= room {
                room -= c;
                top.insert(key);
            }
        }
        StaticTop {
            top,
            set: Scored::new(),
        }
    }
}

impl Policy for StaticTop {
    fn name(&self) -> String {
        "static-top".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.set.resident.contains_key(&key)
    }
    fn access(&mut self, key: Key, cost: u64, _now: Clock) {
        self.set.insert(key, cost);
    }
    fn settle(&mut self, _capacity: u64, pinned: &[Key]) {
        let top = &self.top;
        let gone: Vec<Key> = self
            .set
            .resident
            .keys()
            .filter(|k| !top.contains(k) && !pinned.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(c) = self.set.resident.remove(&k) {
                self.set.bytes -= c;
            }
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.set.bytes
    }
}
