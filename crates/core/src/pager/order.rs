//! Eviction order over the resident slots: which expert goes first when room is needed.
//!
//! - [`CachePolicy::Lru`]: least recently used (an intrusive doubly linked list).
//! - [`CachePolicy::LfuDecay`]: least frequently used with decay (LRFU): every selection
//!   adds a weight that grows by `1 / decay` per tick of the pager's clock (a token of a
//!   sequence: a decode step of K sequences is one), so a selection `n` tokens ago
//!   counts `decay^n` of one now; the slot with the least total goes first. Scores are kept
//!   as logarithms (no overflow, however long the run) in a binary min-heap. The history of
//!   a slot survives its eviction, so an expert that comes back is recognised.
//!
//! Both are allocation-free after construction: every array is sized for all slots.
//! Wrong speculative reads ("demoted") go before anything else in both.

const NIL: u32 = u32::MAX;

/// How the pager chooses what to evict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CachePolicy {
    Lru,
    /// Per-token decay of a selection's weight, in (0, 1]; 1 is plain LFU.
    LfuDecay {
        decay: f64,
    },
}

impl CachePolicy {
    /// The default: LFU with a per-token decay of 0.95 (a selection's weight halves in
    /// 13.5 tokens). On `epm-run sim` replays of both synthetic routing models it beats
    /// LRU everywhere and stays within 2.2 points of the best online policy; slower
    /// decays win on fixed popularity but lose to LRU on routing with locality, as real
    /// traces have (STATUS.md, issue 13).
    pub const DEFAULT: CachePolicy = CachePolicy::LfuDecay { decay: 0.95 };
}

/// ln(e^a + e^b), stably; `-inf` is the log of 0.
pub(crate) fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// The two intrusive lists over `prev`/`next`: a slot is on at most one.
const MAIN: usize = 0;
const DEMOTED: usize = 1;

/// Invariants:
/// 1. LRU: list `MAIN` links exactly the resident slots that are not demoted, most recently
///    used at its head.
/// 2. LFU-decay: `heap` holds exactly the resident slots that are not demoted, set aside
///    ones excepted during `coldest`, with `heap_pos[s]` their index, and
///    `score[heap[parent(i)]] <= score[heap[i]]`; list `MAIN` is empty.
/// 3. List `DEMOTED` links exactly the demoted resident slots (`is_demoted`), the most
///    recently demoted at its head; they go before all others, the most recent first (as
///    the cold end of an LRU list would have them).
/// 4. No vector grows past the capacity reserved in `new`.
pub(crate) struct Order {
    policy: CachePolicy,
    ln_growth: f64,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: [u32; 2],
    tail: [u32; 2],
    score: Vec<f64>,
    heap: Vec<u32>,
    heap_pos: Vec<u32>,
    aside: Vec<u32>,
    is_demoted: Vec<bool>,
}

impl Order {
    pub fn new(policy: CachePolicy, n_slots: usize) -> Order {
        let ln_growth = match policy {
            CachePolicy::LfuDecay { decay } if decay > 0.0 && decay < 1.0 => -decay.ln(),
            _ => 0.0,
        };
        Order {
            policy,
            ln_growth,
            prev: vec![NIL; n_slots],
            next: vec![NIL; n_slots],
            head: [NIL; 2],
            tail: [NIL; 2],
            score: vec![f64::NEG_INFINITY; n_slots],
            heap: Vec::with_capacity(n_slots),
            heap_pos: vec![NIL; n_slots],
            aside: Vec::with_capacity(n_slots),
            is_demoted: vec![false; n_slots],
        }
    }

    fn lru(&self) -> bool {
        self.policy == CachePolicy::Lru
    }

    // --- the lists ---

    fn unlink(&mut self, list: usize, s: usize) {
        let (p, n) = (self.prev[s], self.next[s]);
        if p == NIL {
            self.head[list] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[list] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[s] = NIL;
        self.next[s] = NIL;
    }

    fn push_head(&mut self, list: usize, s: usize) {
        self.prev[s] = NIL;
        self.next[s] = self.head[list];
        if self.head[list] != NIL {
            self.prev[self.head[list] as usize] = s as u32;
        }
        self.head[list] = s as u32;
        if self.tail[list] == NIL {
            self.tail[list] = s as u32;
        }
    }

    fn push_tail(&mut self, list: usize, s: usize) {
        self.next[s] = NIL;
        self.prev[s] = self.tail[list];
        if self.tail[list] != NIL {
            self.next[self.tail[list] as usize] = s as u32;
        }
        self.tail[list] = s as u32;
        if self.head[list] == NIL {
            self.head[list] = s as u32;
        }
    }

    // --- the heap ---

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.heap_pos[self.heap[i] as usize] = i as u32;
        self.heap_pos[self.heap[j] as usize] = j as u32;
    }

    fn less(&self, i: usize, j: usize) -> bool {
        let (a, b) = (self.heap[i] as usize, self.heap[j] as usize);
        // Equal scores: the lower slot first, so the order is deterministic.
        (self.score[a], a) < (self.score[b], b)
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if !self.less(i, p) {
                break;
            }
            self.swap(i, p);
            i = p;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.heap.len() && self.less(l, m) {
                m = l;
            }
            if r < self.heap.len() && self.less(r, m) {
                m = r;
            }
            if m == i {
                return;
            }
            self.swap(i, m);
            i = m;
        }
    }

    fn heap_push(&mut self, s: usize) {
        if self.heap_pos[s] != NIL || self.heap.len() == self.heap.capacity() {
            return;
        }
        self.heap.push(s as u32);
        let i = self.heap.len() - 1;
        self.heap_pos[s] = i as u32;
        self.sift_up(i);
    }

    fn heap_remove(&mut self, s: usize) {
        let i = self.heap_pos[s];
        if i == NIL {
            return;
        }
        let i = i as usize;
        let last = self.heap.len() - 1;
        self.swap(i, last);
        self.heap.pop();
        self.heap_pos[s] = NIL;
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn reheap(&mut self, s: usize) {
        let i = self.heap_pos[s];
        if i != NIL {
            self.sift_down(i as usize);
            self.sift_up(i as usize);
        }
    }

    // --- the policy ---

    /// Take slot `s` off the demoted list; whether it was on it.
    fn undemote(&mut self, s: usize) -> bool {
        if !self.is_demoted[s] {
            return false;
        }
        self.is_demoted[s] = false;
        self.unlink(DEMOTED, s);
        true
    }

    /// Slot `s` (resident) was selected at token `clock`: it is now the most valuable.
    pub fn touch(&mut self, s: usize, clock: u64) {
        let was_demoted = self.undemote(s);
        if self.lru() {
            if !was_demoted {
                self.unlink(MAIN, s);
            }
            self.push_head(MAIN, s);
        } else {
            self.score[s] = ln_add(self.score[s], clock as f64 * self.ln_growth);
            self.heap_push(s);
            self.reheap(s);
        }
    }

    /// Slot `s` (not resident) became resident without being selected (a guess).
    pub fn insert_guess(&mut self, s: usize) {
        if self.lru() {
            self.push_head(MAIN, s);
        } else {
            self.heap_push(s);
        }
    }

    /// Slot `s` (not resident) became resident on a guess from past runs (a warm start): it
    /// goes after the demoted guesses and before every expert this run used.
    pub fn insert_cold(&mut self, s: usize) {
        if self.lru() {
            self.push_tail(MAIN, s);
        } else {
            self.heap_push(s);
        }
    }

    /// Slot `s` (not resident) became resident and was selected at `clock`.
    pub fn insert_selected(&mut self, s: usize, clock: u64) {
        if self.lru() {
            self.push_head(MAIN, s);
        } else {
            self.touch(s, clock);
        }
    }

    /// Slot `s` (resident) was read in on a guess that routing did not confirm: it goes
    /// before every other.
    pub fn demote(&mut self, s: usize) {
        if self.is_demoted[s] {
            return;
        }
        if self.lru() {
            self.unlink(MAIN, s);
        } else {
            self.heap_remove(s);
        }
        self.is_demoted[s] = true;
        self.push_head(DEMOTED, s);
    }

    /// Slot `s` was evicted. Its score stays: the history of an expert that comes back.
    pub fn remove(&mut self, s: usize) {
        if self.undemote(s) {
            return;
        }
        if self.lru() {
            self.unlink(MAIN, s);
        } else {
            self.heap_remove(s);
        }
    }

    /// The next slot to evict that `protected` does not protect, or `None`. LRU looks at
    /// its coldest slot only: everything more recent was used later, so is protected too
    /// when it is. LFU-decay sets protected slots aside until [`Order::restore`].
    pub fn coldest(&mut self, protected: impl Fn(usize) -> bool) -> Option<usize> {
        // Demoted guesses are not pinned by the routing that demoted them.
        let d = self.head[DEMOTED];
        if d != NIL && !protected(d as usize) {
            return Some(d as usize);
        }
        if self.lru() {
            let t = self.tail[MAIN];
            return (t != NIL && !protected(t as usize)).then_some(t as usize);
        }
        while let Some(&top) = self.heap.first() {
            let top = top as usize;
            if !protected(top) {
                return Some(top);
            }
            self.heap_remove(top);
            self.aside.push(top as u32);
        }
        None
    }

    /// Steps of the clock that slot `s` is expected to go unselected once its layer
    /// routes, at `clock`: `(1 - r) / r` for a selection rate `r` per tick (a geometric
    /// wait), `r` from LFU-decay's score or, under LRU, the inverse of the ticks since its
    /// last use (`last_used`). Infinite for a slot never selected.
    fn expected_wait(&self, s: usize, clock: u64, last_used: &[u64]) -> f64 {
        let rate = if self.lru() {
            1.0 / (clock.saturating_sub(last_used[s]) + 1) as f64
        } else {
            // The log of the score of a selection at every tick up to `clock`:
            // growth^clock / (1 - decay), or clock + 1 undecayed.
            let ln_every_tick = if self.ln_growth > 0.0 {
                clock as f64 * self.ln_growth - (-(-self.ln_growth).exp_m1()).ln()
            } else {
                ((clock + 1) as f64).ln()
            };
            (self.score[s] - ln_every_tick).exp().min(1.0)
        };
        if rate > 0.0 {
            (1.0 - rate) / rate
        } else {
            f64::INFINITY
        }
    }

    /// The unprotected slot whose next selection is expected last, or `None`: a demoted
    /// guess first (as in [`Order::coldest`]), then the most of `to_routing(s)` (the steps,
    /// in (0, 1], until slot `s`'s layer routes again) plus its expected wait after that at
    /// `clock`. The wait never grows along the policy's order from its coldest end, so the
    /// walk stops at the first slot whose wait plus one step cannot beat the best found.
    /// Protected slots are set aside until [`Order::restore`], as `coldest` does.
    pub fn latest_next_use(
        &mut self,
        protected: impl Fn(usize) -> bool,
        to_routing: impl Fn(usize) -> f64,
        clock: u64,
        last_used: &[u64],
    ) -> Option<usize> {
        let d = self.head[DEMOTED];
        if d != NIL && !protected(d as usize) {
            return Some(d as usize);
        }
        let mut best: Option<(f64, usize)> = None;
        let consider = |best: &mut Option<(f64, usize)>, s: usize, wait: f64| {
            let t = to_routing(s) + wait;
            if best.is_none_or(|(bt, _)| t > bt) {
                *best = Some((t, s));
            }
        };
        // Past a slot of this wait, none can reach more than one step plus it.
        let beaten =
            |best: Option<(f64, usize)>, wait: f64| best.is_some_and(|(bt, _)| wait + 1.0 <= bt);
        if self.lru() {
            let mut s = self.tail[MAIN];
            while s != NIL {
                let i = s as usize;
                let wait = self.expected_wait(i, clock, last_used);
                if beaten(best, wait) {
                    break;
                }
                if !protected(i) {
                    consider(&mut best, i, wait);
                }
                s = self.prev[i];
            }
            return best.map(|(_, s)| s);
        }
        let start = self.aside.len();
        while let Some(&top) = self.heap.first() {
            let top = top as usize;
            let wait = self.expected_wait(top, clock, last_used);
            if beaten(best, wait) {
                break;
            }
            self.heap_remove(top);
            self.aside.push(top as u32);
            if !protected(top) {
                consider(&mut best, top, wait);
            }
        }
        // Back into the heap with the walked slots that are not protected.
        let mut i = start;
        while i < self.aside.len() {
            let s = self.aside[i] as usize;
            if protected(s) {
                i += 1;
            } else {
                self.aside.swap_remove(i);
                self.heap_push(s);
            }
        }
        best.map(|(_, s)| s)
    }

    /// Put back the slots `coldest` set aside.
    pub fn restore(&mut self) {
        while let Some(s) = self.aside.pop() {
            self.heap_push(s as usize);
        }
    }

    /// Check invariants 1-4 against the resident set (tests).
    #[cfg(test)]
    pub fn check(&self, resident: &[bool]) {
        let n = resident.len();
        let tracked: Vec<bool> = (0..n).map(|s| resident[s] && !self.is_demoted[s]).collect();
        let demoted: Vec<bool> = (0..n).map(|s| resident[s] && self.is_demoted[s]).collect();
        for (s, (&d, &r)) in self.is_demoted.iter().zip(resident).enumerate() {
            assert!(!d || r, "invariant 3: demoted slot {s} not resident");
        }
        let walk = |list: usize| {
            let mut seen = vec![false; n];
            let (mut s, mut prev) = (self.head[list], NIL);
            while s != NIL {
                let i = s as usize;
                assert!(!seen[i], "list {list}: slot {i} linked twice");
                seen[i] = true;
                assert_eq!(self.prev[i], prev, "list {list}: prev of slot {i}");
                prev = s;
                s = self.next[i];
            }
            assert_eq!(self.tail[list], prev, "list {list}: tail");
            seen
        };
        assert_eq!(walk(DEMOTED), demoted, "invariant 3: the demoted list");
        if self.lru() {
            assert_eq!(
                walk(MAIN),
                tracked,
                "invariant 1: the list is not the resident set"
            );
        } else {
            assert_eq!(self.head[MAIN], NIL, "invariant 2: list MAIN in use");
            assert!(self.aside.is_empty(), "invariant 2: slots left aside");
            let mut in_heap = vec![false; n];
            for (i, &s) in self.heap.iter().enumerate() {
                in_heap[s as usize] = true;
                assert_eq!(self.heap_pos[s as usize], i as u32, "invariant 2: heap_pos");
                if i > 0 {
                    assert!(!self.less(i, (i - 1) / 2), "invariant 2: heap order at {i}");
                }
            }
            assert_eq!(
                in_heap, tracked,
                "invariant 2: the heap is not the resident set"
            );
        }
        assert!(
            self.heap.capacity() >= n && self.aside.capacity() >= n,
            "invariant 4"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_decay_keeps_the_frequent_and_forgets_the_old() {
        let mut o = Order::new(CachePolicy::LfuDecay { decay: 0.5 }, 4);
        let mut resident = [false; 4];
        for (s, r) in resident.iter_mut().enumerate() {
            o.insert_selected(s, 0);
            *r = true;
        }
        // Slot 0 selected at tokens 0, 1, 2 (weights 1 + 2 + 4); slot 1 at 0 and 2 (1 + 4);
        // slots 2 and 3 at 0 (1).
        o.touch(0, 1);
        o.touch(0, 2);
        o.touch(1, 2);
        o.check(&resident);
        // Slots 2 and 3 are coldest; then 1, then 0.
        let first = o.coldest(|_| false).unwrap();
        assert!(first == 2 || first == 3);
        o.remove(first);
        resident[first] = false;
        let second = o.coldest(|_| false).unwrap();
        o.remove(second);
        resident[second] = false;
        assert_eq!(o.coldest(|_| false), Some(1));
        // Ten tokens later, one use of slot 1 outweighs slot 0's old three.
        o.touch(1, 12);
        assert_eq!(o.coldest(|_| false), Some(0));
        o.check(&resident);
    }

    #[test]
    fn protected_slots_are_set_aside_and_restored() {
        let mut o = Order::new(CachePolicy::LfuDecay { decay: 0.9 }, 3);
        for s in 0..3 {
            o.insert_selected(s, s as u64);
        }
        assert_eq!(o.coldest(|s| s == 0), Some(1));
        o.restore();
        assert_eq!(o.coldest(|s| s < 2), Some(2));
        o.restore();
        assert_eq!(o.coldest(|_| true), None);
        o.restore();
        o.check(&[true; 3]);
    }

    /// The walk from the coldest end that stops early picks what a scan of every slot
    /// would: the most of steps to its layer's routing plus expected wait, protected slots
    /// skipped, and leaves the order whole.
    #[test]
    fn the_latest_next_use_is_the_full_scan_s_choice() {
        let n = 64;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for policy in [
            CachePolicy::Lru,
            CachePolicy::DEFAULT,
            CachePolicy::LfuDecay { decay: 1.0 },
        ] {
            let mut o = Order::new(policy, n);
            let mut last_used = vec![0u64; n];
            for s in 0..n {
                o.insert_selected(s, 0);
            }
            for clock in 1..40u64 {
                for _ in 0..8 {
                    let s = (next() % n as u64) as usize;
                    last_used[s] = clock;
                    o.touch(s, clock);
                }
                let to_routing = |s: usize| ((s % 8) + 1) as f64 / 8.0;
                let shield = next() % n as u64;
                let protected = |s: usize| s as u64 % 7 == shield % 7;
                let scan = (0..n)
                    .filter(|&s| !protected(s))
                    .map(|s| (to_routing(s) + o.expected_wait(s, clock, &last_used), s))
                    .fold(None::<(f64, usize)>, |best, (t, s)| match best {
                        Some((bt, _)) if bt >= t => best,
                        _ => Some((t, s)),
                    });
                let walked = o.latest_next_use(protected, to_routing, clock, &last_used);
                o.restore();
                let scan_t = scan.map(|(t, _)| t);
                let walked_t =
                    walked.map(|s| to_routing(s) + o.expected_wait(s, clock, &last_used));
                assert_eq!(walked_t, scan_t, "{policy:?} at {clock}");
                o.check(&vec![true; n]);
            }
        }
    }

    #[test]
    fn demoted_guesses_go_first_in_both_orders() {
        for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
            let mut o = Order::new(policy, 3);
            o.insert_selected(0, 0);
            o.insert_selected(1, 1);
            o.insert_guess(2);
            o.demote(2);
            o.check(&[true; 3]);
            assert_eq!(o.coldest(|_| false), Some(2), "{policy:?}");
            o.remove(2);
            o.check(&[true, true, false]);
            assert_eq!(o.coldest(|_| false), Some(0), "{policy:?}");
        }
    }
}
