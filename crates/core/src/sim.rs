//! Offline cache simulation: replay routing traces through expert-cache policies at a
//! given capacity and count what each keeps resident. The policies see the accesses in the
//! order the pager sees them (per routed layer and ubatch, the distinct experts selected,
//! pinned until the next routing), with each expert's real cost in bytes. Belady's offline
//! optimum is the bound; the online policies are the candidates for the pager.
//!
//! Hits are counted as the pager's `experts.decode.cache_hits` counts them: per distinct
//! expert per routed decode layer, resident before the routing. The prompt warms the cache.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::pager::{CachePolicy, Phase};
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
}

/// One access of a replay: a routed layer of one ubatch.
#[derive(Debug, Clone)]
pub struct Step {
    pub layer: u32,
    pub phase: Phase,
    /// Distinct experts selected, ascending.
    pub experts: Vec<u16>,
}

/// The steps of a trace, in order.
pub fn steps(trace: &Trace) -> Vec<Step> {
    trace
        .records
        .iter()
        .map(|r| Step {
            layer: r.layer,
            phase: r.phase,
            experts: r.distinct(),
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

/// Replay `steps` through `policy` with `capacity` bytes; `cost` gives each expert's bytes.
/// `guesses`, when given, is called before each routing with that routing's step and
/// returns the experts a predictor would have named for it.
pub fn replay(
    steps: &[Step],
    policy: &mut dyn Policy,
    capacity: u64,
    cost: &dyn Fn(Key) -> u64,
    mut guesses: Option<Guesses<'_>>,
) -> Outcome {
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
    }
    out
}

/// Least recently used, on the `lru` crate's list (what the pager does today).
pub struct Lru {
    list: lru::LruCache<Key, u64>,
    bytes: u64,
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
struct Scored {
    resident: HashMap<Key, u64>,
    bytes: u64,
}

impl Scored {
    fn new() -> Scored {
        Scored {
            resident: HashMap::new(),
            bytes: 0,
        }
    }

    fn insert(&mut self, key: Key, cost: u64) {
        if self.resident.insert(key, cost).is_none() {
            self.bytes += cost;
        }
    }

    fn evict_by(&mut self, capacity: u64, pinned: &[Key], score: impl Fn(Key) -> f64) {
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

/// Least frequently used with decay (LRFU): each use adds a weight that grows by
/// `1 / decay` per token, so a use `n` tokens ago counts `decay^n` of one now. `decay` 1
/// is plain LFU; towards 0 it becomes LRU. Weights are kept in log space.
pub struct LfuDecay {
    set: Scored,
    /// Per key: its score, as ln(sum of weights).
    scores: HashMap<Key, f64>,
    /// ln(1 / decay).
    ln_growth: f64,
    decay: f64,
}

impl LfuDecay {
    pub fn new(decay: f64) -> LfuDecay {
        LfuDecay {
            set: Scored::new(),
            scores: HashMap::new(),
            ln_growth: -decay.ln(),
            decay,
        }
    }
}

/// ln(e^a + e^b), stably.
fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

impl Policy for LfuDecay {
    fn name(&self) -> String {
        if self.decay >= 1.0 {
            "lfu".into()
        } else {
            format!("lfu-decay-{}", self.decay)
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.set.resident.contains_key(&key)
    }
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        // Plain LFU counts 1 per use, with recency (the access clock) breaking ties.
        let w = if self.decay >= 1.0 {
            0.0
        } else {
            now.token as f64 * self.ln_growth
        };
        let old = self.scores.get(&key).copied().unwrap_or(f64::NEG_INFINITY);
        let s = ln_add(old, w);
        let tie = if self.decay >= 1.0 {
            now.access as f64 * 1e-12
        } else {
            0.0
        };
        self.scores.insert(key, s + tie);
        self.set.insert(key, cost);
    }
    fn settle(&mut self, capacity: u64, pinned: &[Key]) {
        let scores = &self.scores;
        self.set.evict_by(capacity, pinned, |k| {
            scores.get(&k).copied().unwrap_or(f64::NEG_INFINITY)
        });
    }
    fn resident_bytes(&self) -> u64 {
        self.set.bytes
    }
}

/// Per-layer quotas: each layer gets an equal share of the capacity, and its own policy.
pub struct PerLayer {
    layers: HashMap<u32, Box<dyn Policy>>,
    n_layers: u64,
    inner: fn() -> Box<dyn Policy>,
    name: &'static str,
}

impl PerLayer {
    pub fn new(n_layers: usize, name: &'static str, inner: fn() -> Box<dyn Policy>) -> PerLayer {
        PerLayer {
            layers: HashMap::new(),
            n_layers: n_layers.max(1) as u64,
            inner,
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
    fn access(&mut self, key: Key, cost: u64, now: Clock) {
        let make = self.inner;
        self.layers
            .entry(key.0)
            .or_insert_with(make)
            .access(key, cost, now);
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
    pub fn new(steps: &[Step], capacity: u64, cost: &dyn Fn(Key) -> u64) -> StaticTop {
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

/// The policies `epm-run sim` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Lru,
    Lfu,
    /// LFU whose counts decay by the pager's default factor per token (`CachePolicy::DEFAULT`).
    LfuDecay,
    /// LFU whose counts decay by this many thousandths per token (`lfu-decay-0.95`).
    LfuDecayAt(u16),
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
    pub const ALL: [PolicyKind; 12] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::LfuDecay,
        PolicyKind::LfuDecayAt(990),
        PolicyKind::LfuDecayAt(900),
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

    /// The policy, for `steps` (the offline ones read them) with `n_layers` routed layers
    /// and `capacity` bytes, about `capacity_experts` experts (2Q sizes its ghost queue
    /// from it); `cost` gives each expert's bytes.
    pub fn build(
        self,
        steps: &[Step],
        n_layers: usize,
        capacity: u64,
        capacity_experts: usize,
        cost: &dyn Fn(Key) -> u64,
    ) -> Box<dyn Policy> {
        let pager_decay = match CachePolicy::DEFAULT {
            CachePolicy::LfuDecay { decay } => decay,
            CachePolicy::Lru => 0.99,
        };
        match self {
            PolicyKind::Lru => Box::new(Lru::new()),
            PolicyKind::Lfu => Box::new(LfuDecay::new(1.0)),
            PolicyKind::LfuDecay => Box::new(LfuDecay::new(pager_decay)),
            PolicyKind::LfuDecayAt(permille) => {
                Box::new(LfuDecay::new(f64::from(permille) / 1000.0))
            }
            PolicyKind::Arc => Box::new(Arc::new()),
            PolicyKind::TwoQ => Box::new(TwoQ::new(capacity_experts / 2)),
            PolicyKind::PerLayerLru => Box::new(PerLayer::new(n_layers, "per-layer-lru", || {
                Box::new(Lru::new())
            })),
            PolicyKind::PerLayerLfu => Box::new(PerLayer::new(n_layers, "per-layer-lfu", || {
                Box::new(LfuDecay::new(1.0))
            })),
            PolicyKind::PredictedLru => Box::new(PredictedLru::new()),
            PolicyKind::Belady => Box::new(Belady::new(steps)),
            PolicyKind::StaticTop => Box::new(StaticTop::new(steps, capacity, cost)),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One layer, decode steps of one expert each: the classic page-reference string.
    fn single(refs: &[u16]) -> Vec<Step> {
        refs.iter()
            .map(|&e| Step {
                layer: 0,
                phase: Phase::Decode,
                experts: vec![e],
            })
            .collect()
    }

    fn run(kind: PolicyKind, steps: &[Step], capacity: u64) -> Outcome {
        let mut p = kind.build(steps, 1, capacity, capacity as usize, &|_| 1);
        replay(steps, p.as_mut(), capacity, &|_| 1, None)
    }

    #[test]
    fn policy_names_round_trip_and_lfu_decay_is_the_pagers() {
        for k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        }
        assert_eq!("lfu-decay-0.95".parse(), Ok(PolicyKind::LfuDecayAt(950)));
        assert_eq!(PolicyKind::LfuDecayAt(950).name(), "lfu-decay-0.95");
        for bad in [
            "lfu-decay-1",
            "lfu-decay-0",
            "lfu-decay-0.9999",
            "lfu-decay-x",
        ] {
            assert!(bad.parse::<PolicyKind>().is_err(), "{bad}");
        }
        assert!("mru"
            .parse::<PolicyKind>()
            .unwrap_err()
            .contains("lfu-decay"));
        let CachePolicy::LfuDecay { decay } = CachePolicy::DEFAULT else {
            panic!("the pager's default is not LFU with decay");
        };
        // Same decay, same evictions: replay a string where the decay decides.
        let s = single(&[1, 1, 1, 2, 3, 2, 3, 2, 3, 4, 1, 2, 3]);
        let a = run(PolicyKind::LfuDecay, &s, 3);
        let mut p = LfuDecay::new(decay);
        let b = replay(&s, &mut p, 3, &|_| 1, None);
        assert_eq!((a.hits, a.miss_bytes), (b.hits, b.miss_bytes));
    }

    #[test]
    fn lru_and_belady_on_the_textbook_string() {
        // 7 0 1 2 0 3 0 4 2 3 0 3 2 1 2 0 1 7 0 1 with 3 frames: LRU has 12 faults, the
        // optimum 9 (Silberschatz's example).
        let s = single(&[7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]);
        let lru = run(PolicyKind::Lru, &s, 3);
        let opt = run(PolicyKind::Belady, &s, 3);
        assert_eq!(lru.selected, 20);
        assert_eq!(lru.selected - lru.hits, 12);
        assert_eq!(opt.selected - opt.hits, 9);
        assert_eq!(opt.miss_bytes, 9);
    }

    #[test]
    fn static_top_keeps_the_most_selected_experts_and_passes_the_rest_through() {
        // Counts 1:4, 2:3, 3:2, 4:1. With 3 frames, one kept for the routing in flight,
        // the fixed set is {1, 2}: both miss once, 3 and 4 miss every time.
        let s = single(&[1, 2, 1, 3, 1, 2, 4, 1, 2, 3]);
        let mut p = StaticTop::new(&s, 3, &|_| 1);
        let o = replay(&s, &mut p, 3, &|_| 1, None);
        assert_eq!((o.selected, o.hits), (10, 5));
        assert!(p.contains((0, 1)) && p.contains((0, 2)));
        // The last routing's 3 is pinned until the next one; nothing else stays.
        assert_eq!(p.resident_bytes(), 3);
        assert!(p.contains((0, 3)) && !p.contains((0, 4)));
    }

    #[test]
    fn a_loop_one_larger_than_the_cache_defeats_lru_not_belady() {
        // 0 1 2 3 repeated with 3 frames: LRU always misses; Belady keeps 2 of 3 at each turn.
        let refs: Vec<u16> = (0..40).map(|i| i % 4).collect();
        let s = single(&refs);
        assert_eq!(run(PolicyKind::Lru, &s, 3).hits, 0);
        let opt = run(PolicyKind::Belady, &s, 3);
        // After the 4 cold misses, Belady misses once every 3 references.
        assert_eq!(opt.selected - opt.hits, 4 + 12);
    }

    #[test]
    fn pinned_experts_stay_even_over_capacity_and_prompts_only_warm() {
        let s = vec![
            Step {
                layer: 0,
                phase: Phase::Prompt,
                experts: vec![1, 2, 3],
            },
            Step {
                layer: 0,
                phase: Phase::Decode,
                experts: vec![1, 2, 3],
            },
        ];
        for name in PolicyKind::ALL {
            let mut p = name.build(&s, 1, 2, 2, &|_| 1);
            let o = replay(&s, p.as_mut(), 2, &|_| 1, None);
            // The prompt's 3 experts are pinned while it computes, so they stay over the
            // capacity (as the pager's overrun does); the decode step finds all 3, and only
            // decode selections count.
            assert_eq!(o.selected, 3, "{name}");
            assert_eq!(o.hits, 3, "{name}");
            assert!(
                p.resident_bytes() >= 3,
                "{name}: pinned experts were evicted"
            );
        }
    }

    #[test]
    fn every_online_policy_stays_within_capacity_and_under_belady() {
        // A skewed, drifting reference string over two layers.
        let mut refs = Vec::new();
        let mut x = 12345u64;
        for i in 0..2000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let hot = (i / 200) as u16 * 3;
            let e = if (x >> 33) % 4 == 0 {
                ((x >> 40) % 64) as u16
            } else {
                hot + ((x >> 50) % 5) as u16
            };
            refs.push(Step {
                layer: (i % 2) as u32,
                phase: Phase::Decode,
                experts: vec![e],
            });
        }
        let opt = run(PolicyKind::Belady, &refs, 16);
        for name in PolicyKind::ALL {
            let mut p = name.build(&refs, 2, 16, 16, &|_| 1);
            let mut guesses = simulated_guesses(&refs, 0.9, 64);
            let o = replay(&refs, p.as_mut(), 16, &|_| 1, Some(&mut guesses));
            assert!(p.resident_bytes() <= 16, "{name}");
            assert!(
                o.hits <= opt.hits,
                "{name} beat Belady: {} > {}",
                o.hits,
                opt.hits
            );
            assert!(o.hits > 0, "{name}");
        }
    }

    #[test]
    fn top_k_truncation_keeps_each_tokens_best() {
        let mut t = Trace {
            n_expert: 8,
            n_used: 3,
            records: Vec::new(),
        };
        t.records.push(crate::trace::Record {
            layer: 0,
            phase: Phase::Decode,
            n_tokens: 2,
            ids: vec![5, 1, 2, 7, 3, 0],
        });
        let t2 = truncate_top_k(&t, 2);
        assert_eq!(t2.n_used, 2);
        assert_eq!(t2.records[0].ids, vec![5, 1, 7, 3]);
    }
}
