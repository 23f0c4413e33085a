//! 2Q (Johnson and Shasha, 1994).
use std::collections::{BTreeSet, VecDeque};

use super::sets::Lru;
use super::{Clock, Key, Policy};

/// 2Q (Johnson and Shasha): first uses go to a FIFO `a1` (a quarter of the capacity);
/// keys used again while remembered in the ghost queue `a1out` go to the LRU `am`.
pub struct TwoQ {
    a1: VecDeque<(Key, u64)>,
    a1_bytes: u64,
    am: Lru,
    ghost: VecDeque<Key>,
    ghost_set: BTreeSet<Key>,
    ghost_max: usize,
}

impl TwoQ {
    pub fn new(ghost_max: usize) -> TwoQ {
        TwoQ {
            a1: VecDeque::new(),
            a1_bytes: 0,
            am: Lru::new(),
            ghost: VecDeque::new(),
            ghost_set: BTreeSet::new(),
            ghost_max,
        }
    }
}

impl Policy for TwoQ {
    fn name(&self) -> String {
        "2q".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.am.contains(key) || self.a1.iter().any(|(k, _)| *k == key)
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        if self.am.contains(key) {
            self.am.access(key, cost, now);
        } else if self.a1.iter().any(|(k, _)| *k == key) {
            // A hit in the FIFO changes nothing (2Q's correlated-reference rule).
        } else if self.ghost_set.remove(&key) {
            self.ghost.retain(|k| *k != key);
            self.am.access(key, cost, now);
        } else {
            self.a1.push_back((key, cost));
            self.a1_bytes += cost;
        }
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        let a1_cap = capacity / 4;
        while self.a1_bytes + self.am.resident_bytes() > capacity {
            let from_a1 = self.a1_bytes > a1_cap || self.am.resident_bytes() == 0;
            if from_a1 {
                let Some(pos) = self.a1.iter().position(|(k, _)| !pinned.contains(k)) else {
                    break;
                };
                let (k, c) = self.a1.remove(pos).expect("position exists");
                self.a1_bytes -= c;
                self.ghost.push_back(k);
                self.ghost_set.insert(k);
                if self.ghost.len() > self.ghost_max {
                    if let Some(old) = self.ghost.pop_front() {
                        self.ghost_set.remove(&old);
                    }
                }
            } else {
                let before = self.am.resident_bytes();
                let target = before.saturating_sub(1);
                self.am.settle(target, pinned);
                if self.am.resident_bytes() == before {
                    break;
                }
            }
        }
    }
    fn resident_bytes(&self) -> u64 {
        self.a1_bytes + self.am.resident_bytes()
    }
}
