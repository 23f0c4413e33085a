//! Belady's offline optimum: the bound every policy is measured against.
use std::collections::HashMap;

use super::sets::Scored;
use super::{Clock, Key, Policy, Step};

/// Belady's offline optimum (for equal costs; with unequal costs, the classic
/// farthest-next-use rule): evict the resident expert used again furthest in the future.
pub struct Belady {
    set: Scored,
    /// For each key, the access times at which it is used, ascending, and a cursor.
    future: HashMap<Key, (Vec<u64>, usize)>,
    now: u64,
}

impl Belady {
    /// `steps` must be the same the replay will see.
    pub fn new(steps: &[Step]) -> Belady {
        let mut future: HashMap<Key, (Vec<u64>, usize)> = HashMap::new();
        let mut t = 0u64;
        for s in steps {
            for &e in &s.experts {
                t += 1;
                future.entry((s.layer, e)).or_default().0.push(t);
            }
        }
        Belady {
            set: Scored::new(),
            future,
            now: 0,
        }
    }

    fn next_use(&self, key: Key) -> u64 {
        self.future
            .get(&key)
            .and_then(|(times, i)| times.get(*i).copied())
            .unwrap_or(u64::MAX)
    }
}

impl Policy for Belady {
    fn name(&self) -> String {
        "belady".into()
    }
    fn contains(&self, key: Key) -> bool {
        self.set.resident.contains_key(&key)
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        let t = now.access;
        self.now = t;
        if let Some((times, i)) = self.future.get_mut(&key) {
            while *i < times.len() && times[*i] <= t {
                *i += 1;
            }
        }
        self.set.insert(key, cost);
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        let next: HashMap<Key, u64> = self
            .set
            .resident
            .keys()
            .map(|&k| (k, self.next_use(k)))
            .collect();
        // The lowest score goes first: the furthest next use.
        self.set
            .evict_by(capacity, pinned, |k| -(next[&k].min(u64::MAX / 2) as f64));
    }
    fn resident_bytes(&self) -> u64 {
        self.set.bytes
    }
}
