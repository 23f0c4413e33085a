//! The pager itself as a replayed policy: every routing of the trace goes through a real
//! [`Pager`] (its residency table, pins, token clock and eviction order) whose advisor does
//! nothing, so a hit rate `sim` reports for `lru` or `lfu-decay` is the one the pager's own
//! code reaches on that trace.

use std::sync::Arc;

use super::{Clock, Costs, Key, Policy, Step};
use crate::pager::{
    Advisor, CachePolicy, EvictBy, FileRange, Pager, PagerConfig, PromptEviction, PromptReads,
};
use crate::stats::PagerCounters;

/// An advisor that only answers: evictions drop what they are asked to.
struct Replayed;

impl Advisor for Replayed {
    fn will_need(&mut self, _range: FileRange) {}
    fn evict(&mut self, range: FileRange) -> u64 {
        range.len
    }
}

pub struct PagerReplay {
    pager: Pager<Replayed>,
    policy: CachePolicy,
    evict_by: EvictBy,
    /// The routing `begin` announced, routed at `settle`.
    pending: Option<Step>,
}

impl PagerReplay {
    /// A pager over `costs`' layers holding at most `capacity` bytes.
    pub fn new(
        policy: CachePolicy,
        evict_by: EvictBy,
        costs: Costs,
        n_expert: u32,
        capacity: u64,
    ) -> PagerReplay {
        let counters = Arc::new(PagerCounters::new(
            costs.layers.iter().map(|l| l.layer),
            n_expert,
        ));
        let config = PagerConfig {
            expert_budget_bytes: capacity,
            hot_window_tokens: 0,
            page_size: costs.page,
            policy,
            prompt_eviction: PromptEviction::default(),
            evict_by,
            prompt_reads: PromptReads::default(),
        };
        PagerReplay {
            pager: Pager::new(Replayed, config, n_expert, costs.layers, counters),
            policy,
            evict_by,
            pending: None,
        }
    }
}

impl Policy for PagerReplay {
    fn name(&self) -> String {
        let name = match self.policy {
            CachePolicy::Lru => "lru".into(),
            CachePolicy::LfuDecay { decay } if decay >= 1.0 => "lfu".into(),
            CachePolicy::LfuDecay { decay } => format!("lfu-decay-{decay}"),
        };
        match self.evict_by {
            EvictBy::NextUse => name,
            EvictBy::Coldest => format!("{name}-coldest"),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.pager.is_resident(key.0, u32::from(key.1))
    }
    fn begin(&mut self, step: &Step) {
        self.pending = Some(step.clone());
    }
    fn access(&mut self, _key: Key, _cost: u64, _now: Clock) {}
    fn settle(&mut self, capacity: u64, _pinned: &[Key]) {
        if let Some(s) = self.pending.take() {
            self.pager.route(
                s.layer,
                s.phase,
                s.n_tokens,
                s.ids.iter().map(|&e| i32::from(e)),
            );
        }
        // The pager was built for this capacity; a smaller one (a quota) shrinks it.
        if self.pager.resident_bytes() > capacity {
            self.pager.shrink_to(capacity);
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.pager.resident_bytes()
    }
}
