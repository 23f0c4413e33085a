//! ARC (Megiddo and Modha, 2003).
use std::collections::VecDeque;

use super::sets::Lru;
use super::{Clock, Key, Policy};

/// ARC (Megiddo and Modha): recency list `t1` and frequency list `t2` of resident keys,
/// ghost lists `b1`, `b2` of recently evicted ones, and a target size `p` for `t1` that
/// hits in the ghosts move. Sizes are in bytes.
pub struct Arc {
    t1: Lru,
    t2: Lru,
    b1: VecDeque<(Key, u64)>,
    b2: VecDeque<(Key, u64)>,
    p: f64,
    capacity: u64,
}

impl Arc {
    pub fn new() -> Arc {
        Arc {
            t1: Lru::new(),
            t2: Lru::new(),
            b1: VecDeque::new(),
            b2: VecDeque::new(),
            p: 0.0,
            capacity: 0,
        }
    }

    fn ghost_bytes(q: &VecDeque<(Key, u64)>) -> u64 {
        q.iter().map(|(_, c)| c).sum()
    }

    fn trim_ghosts(&mut self) {
        while Self::ghost_bytes(&self.b1) + Self::ghost_bytes(&self.b2) > self.capacity {
            if self.b1.len() >= self.b2.len() {
                self.b1.pop_front();
            } else {
                self.b2.pop_front();
            }
        }
    }
}

impl Default for Arc {
    fn default() -> Arc {
        Arc::new()
    }
}

impl Policy for Arc {
    fn name(&self) -> String {
        "arc".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.t1.contains(key) || self.t2.contains(key)
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        if self.t1.contains(key) {
            self.t1.list.pop(&key);
            self.t1.bytes -= cost;
            self.t2.access(key, cost, now);
        } else if self.t2.contains(key) {
            self.t2.access(key, cost, now);
        } else if let Some(i) = self.b1.iter().position(|(k, _)| *k == key) {
            let delta = (Self::ghost_bytes(&self.b2) as f64
                / Self::ghost_bytes(&self.b1).max(1) as f64)
                .max(1.0);
            self.p = (self.p + delta * cost as f64).min(self.capacity as f64);
            self.b1.remove(i);
            self.t2.access(key, cost, now);
        } else if let Some(i) = self.b2.iter().position(|(k, _)| *k == key) {
            let delta = (Self::ghost_bytes(&self.b1) as f64
                / Self::ghost_bytes(&self.b2).max(1) as f64)
                .max(1.0);
            self.p = (self.p - delta * cost as f64).max(0.0);
            self.b2.remove(i);
            self.t2.access(key, cost, now);
        } else {
            self.t1.access(key, cost, now);
        }
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        self.capacity = capacity;
        while self.t1.bytes + self.t2.bytes > capacity {
            let take_t1 =
                self.t1.bytes > 0 && (self.t1.bytes as f64 > self.p || self.t2.bytes == 0);
            let (from, ghost) = if take_t1 {
                (&mut self.t1, &mut self.b1)
            } else {
                (&mut self.t2, &mut self.b2)
            };
            let victim = from
                .list
                .iter()
                .rev()
                .find(|(k, _)| !pinned.contains(k))
                .map(|(k, c)| (*k, *c));
            match victim {
                Some((k, c)) => {
                    from.list.pop(&k);
                    from.bytes -= c;
                    ghost.push_back((k, c));
                }
                None => {
                    // Everything in this list is pinned: try the other one once.
                    let other = if take_t1 { &mut self.t2 } else { &mut self.t1 };
                    let ghost = if take_t1 { &mut self.b2 } else { &mut self.b1 };
                    let Some((k, c)) = other
                        .list
                        .iter()
                        .rev()
                        .find(|(k, _)| !pinned.contains(k))
                        .map(|(k, c)| (*k, *c))
                    else {
                        break;
                    };
                    other.list.pop(&k);
                    other.bytes -= c;
                    ghost.push_back((k, c));
                }
            }
        }
        self.trim_ghosts();
    }
    fn resident_bytes(&self) -> u64 {
        self.t1.bytes + self.t2.bytes
    }
}
