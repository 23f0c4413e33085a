//! Resident sets the sim-only policies are built from: an LRU list over keys, and a set
//! that evicts by a score the policy keeps.
use std::collections::HashMap;

use super::{Clock, Key, Policy};

/// Least recently used over keys, on the `lru` crate's list: the building block of the
/// sim-only policies (ARC, 2Q, LRU with guesses). The `lru` policy itself is the pager's.
pub struct Lru {
    pub(super) list: lru::LruCache<Key, u64>,
    pub(super) bytes: u64,
}

impl Lru {
    pub fn new() -> Lru {
        Lru {
            list: lru::LruCache::unbounded(),
            bytes: 0,
        }
    }
}

impl Default for Lru {
    fn default() -> Lru {
        Lru::new()
    }
}

impl Policy for Lru {
    fn name(&self) -> String {
        "lru".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.list.contains(&key)
    }
    fn access(&mut self, key: Key, cost: u64, _now: Clock) {
        if self.list.get(&key).is_none() {
            self.list.put(key, cost);
            self.bytes += cost;
        }
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        // Pinned keys were just used: they sit at the most recent end.
        while self.bytes > capacity {
            let Some((&k, _)) = self.list.peek_lru() else {
                break;
            };
            if pinned.contains(&k) {
                break;
            }
            if let Some((_, c)) = self.list.pop_lru() {
                self.bytes -= c;
            }
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.bytes
    }
}

/// Evicts the resident key with the lowest score first; scores are kept by the policy.
pub(super) struct Scored {
    pub(super) resident: HashMap<Key, u64>,
    pub(super) bytes: u64,
}

impl Scored {
    pub(super) fn new() -> Scored {
        Scored {
            resident: HashMap::new(),
            bytes: 0,
        }
    }

    pub(super) fn insert(&mut self, key: Key, cost: u64) {
        if self.resident.insert(key, cost).is_none() {
            self.bytes += cost;
        }
    }

    pub(super) fn evict_by(&mut self, capacity: u64, pinned: &[Key], score: impl Fn(Key) -> f64) {
        while self.bytes > capacity {
            let victim = self
                .resident
                .keys()
                .filter(|k| !pinned.contains(k))
                .min_by(|a, b| score(**a).total_cmp(&score(**b)).then(a.cmp(b)))
                .copied();
            let Some(v) = victim else { break };
            if let Some(c) = self.resident.remove(&v) {
                self.bytes -= c;
            }
        }
    }
}
