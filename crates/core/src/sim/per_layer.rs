//! Per-layer quotas: each layer gets an equal share of the capacity and a policy of its own.

use std::collections::HashMap;

use super::{Clock, Costs, Key, Policy, Step};

pub struct PerLayer {
    layers: HashMap<u32, Box<dyn Policy>>,
    n_layers: u64,
    name: &'static str,
}

impl PerLayer {
    /// One policy per layer of `costs`, each made by `make` for that layer's costs and its
    /// quota of `capacity`.
    pub fn new(
        costs: &Costs,
        name: &'static str,
        capacity: u64,
        make: impl Fn(Costs, u64) -> Box<dyn Policy>,
    ) -> PerLayer {
        let n_layers = costs.layers.len().max(1) as u64;
        let layers = costs
            .layers
            .iter()
            .map(|l| {
                let own = Costs::model(vec![l.clone()], costs.page);
                (l.layer, make(own, capacity / n_layers))
            })
            .collect();
        PerLayer {
            layers,
            n_layers,
            name,
        }
    }
}

impl Policy for PerLayer {
    fn name(&self) -> String {
        self.name.into()
    }
    fn contains(&self, key: Key) -> bool {
        self.layers.get(&key.0).is_some_and(|l| l.contains(key))
    }
    fn begin(&mut self, step: &Step) {
        if let Some(l) = self.layers.get_mut(&step.layer) {
            l.begin(step);
        }
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        if let Some(l) = self.layers.get_mut(&key.0) {
            l.access(key, cost, now);
        }
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        let quota = capacity / self.n_layers;
        for l in self.layers.values_mut() {
            l.settle(quota, pinned);
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.layers.values().map(|l| l.resident_bytes()).sum()
    }
}
