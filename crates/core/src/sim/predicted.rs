//! LRU that spares the predictor's guesses.
use std::collections::BTreeSet;

use super::sets::Lru;
use super::{Clock, Key, Policy};

/// LRU that first evicts experts the predictor did not name for the next routing: its
/// guesses are protected while another expert can go.
pub struct PredictedLru {
    lru: Lru,
    guessed: BTreeSet<Key>,
}

impl PredictedLru {
    pub fn new() -> PredictedLru {
        PredictedLru {
            lru: Lru::new(),
            guessed: BTreeSet::new(),
        }
    }
}

impl Default for PredictedLru {
    fn default() -> PredictedLru {
        PredictedLru::new()
    }
}

impl Policy for PredictedLru {
    fn name(&self) -> String {
        "lru+predicted".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.lru.contains(key)
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        self.lru.access(key, cost, now);
    }
    fn hint(&mut self, guesses: &[Key]) {
        self.guessed = guesses.iter().copied().collect();
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        while self.lru.bytes > capacity {
            let victim = self
                .lru
                .list
                .iter()
                .rev()
                .find(|(k, _)| !pinned.contains(k) && !self.guessed.contains(k))
                .or_else(|| {
                    self.lru
                        .list
                        .iter()
                        .rev()
                        .find(|(k, _)| !pinned.contains(k))
                })
                .map(|(k, c)| (*k, *c));
            let Some((k, c)) = victim else { break };
            self.lru.list.pop(&k);
            self.lru.bytes -= c;
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.lru.bytes
    }
}
