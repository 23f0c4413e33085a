//! The pager: which experts are resident, which are pinned, what to evict, and how many
//! bytes that all costs against the expert budget. Pure policy: it knows nothing of
//! llama.cpp and makes no system call itself; it tells an [`Advisor`] what to do.

use std::sync::Arc;

use crate::stats::{PagerCounters, PhaseCounters};

mod order;
#[cfg(test)]
mod tests;

pub(crate) use order::ln_add;
pub use order::CachePolicy;
use order::Order;

/// What [`Pager::warm`] or [`Pager::adopt`] did with an expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmed {
    /// Counted resident: advised in ([`Pager::warm`]), or found cached ([`Pager::adopt`]).
    Taken,
    /// Already resident.
    Resident,
    /// The expert cache has no free room for it (nothing was evicted).
    NoRoom,
    /// No such expert in this model.
    NotAnExpert,
}

/// A byte range of one model file (shard `file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileRange {
    pub file: u32,
    pub offset: u64,
    pub len: u64,
}

/// Carries out the pager's decisions. The real one (`epm_sys::OsAdvisor`) calls
/// madvise/fadvise; tests plug in a fake that records the calls.
pub trait Advisor {
    /// Start reading this range in (asynchronously); it is about to be used.
    fn will_need(&mut self, range: FileRange);
    /// Start reading this range in on a guess; by default the same as `will_need`. An
    /// advisor may do it later, off the caller's thread, until `flush`.
    fn will_need_ahead(&mut self, range: FileRange) {
        self.will_need(range);
    }
    /// Read all of this range in: a prompt's whole layer of expert tensors
    /// ([`PromptReads::WholeLayers`]), which an advisor may read in large folios. By
    /// default the same as `will_need`.
    fn read_whole(&mut self, range: FileRange) {
        self.will_need(range);
    }
    /// Drop this range from memory and page cache. Returns the bytes actually dropped.
    fn evict(&mut self, range: FileRange) -> u64;
    /// The calls of one step (a routing, a prediction, a shrink) are complete; an advisor
    /// that batches or queues them acts now. The pager flushes after every step that made
    /// a call, so no eviction it has counted waits for a later step.
    fn flush(&mut self) {}
    /// The run is over: complete whatever drops are still outstanding.
    fn finish(&mut self) {}
}

/// One expert tensor of a layer, as the pager sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertSlice {
    pub file: u32,
    /// File offset of expert 0.
    pub offset: u64,
    pub bytes_per_expert: u64,
}

impl ExpertSlice {
    /// The bytes of expert `e` in this tensor.
    pub fn range(&self, e: u64) -> FileRange {
        FileRange {
            file: self.file,
            offset: self.offset + e * self.bytes_per_expert,
            len: self.bytes_per_expert,
        }
    }
}

/// Which phase a routed ubatch belongs to: the prompt's prefill, or decode steps (one new
/// token per active sequence). The session knows; the pager keeps the two apart in its
/// counters, and the predictor predicts further ahead in decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Prompt,
    Decode,
}

/// The expert tensors of one MoE layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSpec {
    pub layer: u32,
    pub slices: Vec<ExpertSlice>,
}

impl LayerSpec {
    /// Every MoE layer of `index`, as the pager sees it.
    pub fn from_index(index: &crate::model::ModelIndex) -> Vec<LayerSpec> {
        index
            .layers
            .iter()
            .map(|l| LayerSpec {
                layer: l.layer,
                slices: l
                    .tensors
                    .iter()
                    .map(|t| ExpertSlice {
                        file: t.file as u32,
                        offset: t.offset,
                        bytes_per_expert: t.bytes_per_expert,
                    })
                    .collect(),
            })
            .collect()
    }

    /// The layer's expert tensors whole, one range per run of tensors that lie back to back
    /// in one file, in the slices' order, each handed to `f`.
    pub fn whole_runs(&self, n_expert: u32, mut f: impl FnMut(FileRange)) {
        let mut run: Option<FileRange> = None;
        for sl in &self.slices {
            let r = FileRange {
                file: sl.file,
                offset: sl.offset,
                len: sl.bytes_per_expert * u64::from(n_expert),
            };
            run = match run {
                Some(mut p) if p.file == r.file && p.offset + p.len == r.offset => {
                    p.len += r.len;
                    Some(p)
                }
                Some(p) => {
                    f(p);
                    Some(r)
                }
                None => Some(r),
            };
        }
        if let Some(p) = run {
            f(p);
        }
    }

    /// What keeping expert `e` of this layer resident costs: the pages its slices touch.
    pub fn expert_cost(&self, e: u64, page: u64) -> u64 {
        self.slices
            .iter()
            .map(|s| {
                let r = s.range(e);
                expert_span(r.offset, r.len, page)
            })
            .sum()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PagerConfig {
    /// Bytes of expert pages that may be resident at once.
    pub expert_budget_bytes: u64,
    /// Experts used within this many most recent tokens (of a sequence: decode steps) are
    /// never evicted (0: only the experts of the layer being computed are protected).
    pub hot_window_tokens: u64,
    /// Page size used to cost an expert (its ranges rounded outward to pages).
    pub page_size: u64,
    /// What goes first when room is needed.
    pub policy: CachePolicy,
    /// What goes first when room is needed while a prompt is evaluated.
    pub prompt_eviction: PromptEviction,
    /// How the policy's order picks what to evict (outside a prompt's cyclic order).
    pub evict_by: EvictBy,
    /// How a prompt's ubatches read the experts they miss.
    pub prompt_reads: PromptReads,
}

/// How a prompt's ubatches read the experts they miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptReads {
    /// Each selected expert's slices, as in decode.
    #[default]
    Experts,
    /// A layer whose routing misses at least half of its experts is read whole,
    /// one range per run of adjacent expert tensors, when the whole layer fits the budget
    /// and the engine allowed it for that layer ([`Pager::allow_whole_layer_reads`]); the
    /// experts not selected count resident, coldest. A prompt's evictions then drop runs of
    /// adjacent experts with one call per tensor. The OS advisor reads such a range through
    /// the kernel's read-around, into large page-cache folios that cost the kernel a
    /// fraction of 4 KiB pages' work (`epm-run probe-paging --whole-layers`).
    WholeLayers,
}

/// Routing misses at least this share of a layer's experts (numerator, denominator) before
/// [`PromptReads::WholeLayers`] reads the layer whole: below it, the unselected rest would
/// cost more reads than large folios save.
const WHOLE_LAYER_MISS_SHARE: (u64, u64) = (1, 2);

/// A prompt's drop inside a layer that may be read whole takes at least this share of the
/// layer's experts (numerator, denominator): such a layer's pages lie in large folios that
/// span neighbouring experts, and a drop that ends inside one makes the kernel split it.
/// The cyclic walk takes such runs first, and falls back to shorter ones only when no run
/// is left: with prediction, a layer's whole read is asked while the layer before computes,
/// and the walk starts at that layer, whose unselected experts lie scattered between its
/// selected ones (measured on W1: 5,400 drops of one expert a prompt, each splitting a
/// folio, often while the layer's read was still in flight, against 150 without
/// prediction). A drop also extends to this share where it can (the experts the walk
/// would take next), so room made an expert at a time does not drop an expert at a time.
const WHOLE_LAYER_MIN_DROP: (usize, usize) = (1, 8);

/// How the pager picks what to evict from the cache policy's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictBy {
    /// The expert whose next selection is expected last: the steps until its layer routes
    /// again (a step runs the layers in a cycle, so the layer just routed comes round
    /// last) plus the steps without a selection that its policy expects after that (from
    /// LFU-decay's decayed selection rate, or LRU's time since the last use). The policy's
    /// coldest expert alone ignores the cycle: where one step's selections outgrow the
    /// cache (several sessions at a small budget) it evicts the layers just ahead, the
    /// next needed, and keeps little from one step to the next, as LRU does over a loop.
    /// `epm-run sim` on both W1 routing models, 1 and 4 sessions, 4 and 8 GiB: 0 to 1.1
    /// points of hit rate above `Coldest` with LFU-decay, 0.1 to 45 with LRU (STATUS.md).
    #[default]
    NextUse,
    /// The policy's coldest expert of any layer.
    Coldest,
}

/// What a prompt's ubatches evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptEviction {
    /// The layers in the order of their next use, farthest first: the layer being computed
    /// (its unselected experts), then the one before it, and so on back round to the next.
    /// Every prompt ubatch selects nearly all of a layer's experts, layer after layer, so
    /// its accesses are a cycle over the layers; for a cycle, the expert used most recently
    /// is the one needed last (Belady's choice), and evicting it keeps the same experts
    /// resident from one ubatch to the next. The policy's order evicts the least recently
    /// used first, which in a cycle is the next needed: it keeps nothing across ubatches.
    #[default]
    Cyclic,
    /// The cache policy's order, as in decode.
    Policy,
}

const NIL: u32 = u32::MAX;

/// How far a ubatch of `n_tokens` advances the pager's clock: a prompt's tokens follow one
/// another in one sequence, a decode step's tokens are one of each active sequence.
fn clock_ticks(phase: Phase, n_tokens: u64) -> u64 {
    match phase {
        Phase::Prompt => n_tokens,
        Phase::Decode => n_tokens.min(1),
    }
}

/// The layers a prompt may read whole ([`PromptReads::WholeLayers`]): those whose every
/// run of expert tensors ([`LayerSpec::whole_runs`]) is at least `min_run` bytes long. The
/// OS advisor reads a run's ends exactly and only its middle through the kernel's
/// read-around (which reaches past what it faults), so a run must be long enough to have
/// a middle worth reading that way.
pub fn layers_readable_whole(layers: &[LayerSpec], n_expert: u32, min_run: u64) -> Vec<u32> {
    layers
        .iter()
        .filter(|l| {
            let mut long = true;
            l.whole_runs(n_expert, |r| long &= r.len >= min_run);
            long
        })
        .map(|l| l.layer)
        .collect()
}

/// Bytes of the pages `[offset, offset+len)` touches: what holding it resident costs.
pub fn expert_span(offset: u64, len: u64, page: u64) -> u64 {
    (offset + len).next_multiple_of(page) - offset / page * page
}

/// The experts to adopt at start from a page cache that an earlier run of the model left
/// ([`Pager::adopt`]): those whose every slice's whole pages are cached (`cached` says, for
/// a range, whether the page cache holds every page wholly inside it), while their
/// page-rounded costs fit in `budget`. Taken first in the order of `first` (the experts past
/// runs selected most, hottest first: `heat::ExpertHeat::hottest`), then one expert number
/// at a time across the layers (expert 0 of every layer, then expert 1, ...) so that no
/// layer is favoured; each at most once, and an entry of `first` that names no expert of
/// `layers` is skipped.
pub fn cached_experts(
    layers: &[LayerSpec],
    n_expert: u32,
    page: u64,
    budget: u64,
    first: &[(u32, u32)],
    mut cached: impl FnMut(FileRange) -> bool,
) -> Vec<(u32, u32)> {
    let page = page.max(1);
    let by_number = (0..n_expert).flat_map(|e| layers.iter().map(move |l| (l.layer, e)));
    let mut seen = vec![false; layers.len() * n_expert as usize];
    let mut taken = Vec::new();
    let mut bytes = 0;
    for (layer, e) in first.iter().copied().chain(by_number) {
        let Some(li) = layers.iter().position(|l| l.layer == layer) else {
            continue;
        };
        if e >= n_expert || std::mem::replace(&mut seen[li * n_expert as usize + e as usize], true)
        {
            continue;
        }
        let l = &layers[li];
        if !l.slices.iter().all(|s| cached(s.range(u64::from(e)))) {
            continue;
        }
        let cost = l.expert_cost(u64::from(e), page);
        if bytes + cost > budget {
            return taken;
        }
        bytes += cost;
        taken.push((layer, e));
    }
    taken
}

/// The most [`expert_span`] can be for `len` bytes at any offset: the bound the plan uses
/// before it knows where each expert lies.
pub fn expert_span_bound(len: u64, page: u64) -> u64 {
    len.next_multiple_of(page) + page
}

/// Residency table and eviction order over every (layer, expert) slot.
///
/// Invariants:
/// 1. `resident[s]` is true iff slot `s` was advised in and not evicted since.
/// 2. `resident_bytes == Σ cost[s]` over resident slots.
/// 3. `order` orders exactly the resident slots (its own invariants, `order::Order`).
/// 4. `pin_epoch[s] == epoch` iff slot `s` was selected by the latest `route` call: those
///    experts are about to be computed and are never evicted.
/// 5. `pinned` holds exactly the slots of invariant 4; its capacity is fixed at construction,
///    so `route` never allocates.
/// 6. `resident_bytes <= budget` after `route`, unless pinned and hot-window slots alone
///    exceed the budget (then `counters.overruns` is incremented).
/// 10. `counters.residency` shows `resident`, `speculative` and the slots of invariant 4
///     after every public operation (its bitmaps are the pager's, published).
pub struct Pager<A: Advisor> {
    advisor: A,
    config: PagerConfig,
    n_expert: u32,
    /// Layer id -> position in `layers`, or NIL for a layer without experts.
    layer_pos: Vec<u32>,
    layers: Vec<LayerSpec>,
    cost: Vec<u64>,
    resident: Vec<bool>,
    last_used: Vec<u64>,
    pin_epoch: Vec<u64>,
    order: Order,
    pinned: Vec<u32>,
    /// 7. `speculative[s]` implies `resident[s]`: advised in on a prediction, not yet selected.
    speculative: Vec<bool>,
    /// 8. `predicted[s]`: slot `s` was predicted for its layer's next routing (cleared by it).
    predicted: Vec<bool>,
    /// 9. `evicted[s]`: slot `s` has been evicted at least once.
    evicted: Vec<bool>,
    /// 12. `whole_reads[pos]` is false for every layer position unless
    ///     `config.prompt_reads` is [`PromptReads::WholeLayers`].
    whole_reads: Vec<bool>,
    /// The layer position being read whole during a `make_room`: its slots are protected,
    /// so the room made is not taken from the very layer about to be read.
    reading_whole: Option<usize>,
    /// 11. `warm[s]` implies `resident[s]` and not `speculative[s]`: read in by a warm start
    ///     ([`Pager::warm`]) or adopted from the page cache ([`Pager::adopt`]), and not
    ///     selected since.
    warm: Vec<bool>,
    epoch: u64,
    /// The phase of the latest `route` call; predictions made after it count in it.
    phase: Phase,
    resident_bytes: u64,
    /// Sequence-token clock, advanced when routing restarts at a lower layer (a new ubatch):
    /// by the ubatch's token count in a prompt, and by one for a decode step, which carries
    /// one token of each of K sequences. A sequence's routing drifts over its own tokens,
    /// so the decay and the hot window span as many of its tokens at K = 4 as at K = 1.
    clock: u64,
    last_layer: Option<u32>,
    counters: Arc<PagerCounters>,
}

impl<A: Advisor> Pager<A> {
    pub fn new(
        advisor: A,
        config: PagerConfig,
        n_expert: u32,
        layers: Vec<LayerSpec>,
        counters: Arc<PagerCounters>,
    ) -> Pager<A> {
        let max_layer = layers.iter().map(|l| l.layer).max().map_or(0, |m| m + 1);
        let mut layer_pos = vec![NIL; max_layer as usize];
        for (i, l) in layers.iter().enumerate() {
            layer_pos[l.layer as usize] = i as u32;
        }
        let n_layers = layers.len();
        let n_slots = n_layers * n_expert as usize;
        let page = config.page_size.max(1);
        let mut cost = vec![0u64; n_slots];
        for (li, l) in layers.iter().enumerate() {
            for e in 0..u64::from(n_expert) {
                cost[li * n_expert as usize + e as usize] = l.expert_cost(e, page);
            }
        }
        Pager {
            advisor,
            config,
            n_expert,
            layer_pos,
            layers,
            cost,
            resident: vec![false; n_slots],
            speculative: vec![false; n_slots],
            predicted: vec![false; n_slots],
            evicted: vec![false; n_slots],
            warm: vec![false; n_slots],
            whole_reads: vec![false; n_layers],
            reading_whole: None,
            last_used: vec![0; n_slots],
            pin_epoch: vec![0; n_slots],
            order: Order::new(config.policy, n_slots),
            pinned: Vec::with_capacity(n_expert as usize),
            epoch: 0,
            phase: Phase::Prompt,
            resident_bytes: 0,
            clock: 0,
            last_layer: None,
            counters,
        }
    }

    pub fn advisor(&self) -> &A {
        &self.advisor
    }

    /// Let a prompt read `layer` whole ([`PromptReads::WholeLayers`]): the engine allows it
    /// where reading past the layer's expert tensors (the kernel's read-around) reaches
    /// no other layer's experts. Ignored under [`PromptReads::Experts`] (invariant 12).
    pub fn allow_whole_layer_reads(&mut self, layer: u32) {
        if self.config.prompt_reads != PromptReads::WholeLayers {
            return;
        }
        if let Some(&pos) = self.layer_pos.get(layer as usize).filter(|&&p| p != NIL) {
            self.whole_reads[pos as usize] = true;
        }
    }

    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes
    }

    pub fn is_resident(&self, layer: u32, expert: u32) -> bool {
        self.slot(layer, expert).is_some_and(|s| self.resident[s])
    }

    /// Bytes that selecting one expert of `layer` costs (page-rounded), if the layer has experts.
    pub fn expert_cost(&self, layer: u32, expert: u32) -> Option<u64> {
        self.slot(layer, expert).map(|s| self.cost[s])
    }

    fn slot(&self, layer: u32, expert: u32) -> Option<usize> {
        let pos = *self.layer_pos.get(layer as usize)?;
        (pos != NIL && expert < self.n_expert)
            .then(|| pos as usize * self.n_expert as usize + expert as usize)
    }

    /// The range to drop for expert `e` of one slice: the expert's own bytes, widened to
    /// the page boundary on a side whose neighbouring expert is not resident. Pages shared
    /// with a resident neighbour (or another tensor) are kept.
    fn eviction_range(&self, layer_base: usize, sl: &ExpertSlice, e: u64) -> FileRange {
        let page = self.config.page_size.max(1);
        let mut r = sl.range(e);
        if sl.bytes_per_expert < page {
            return r;
        }
        let mut start = r.offset;
        let mut end = r.offset + r.len;
        if e > 0 && !self.resident[layer_base + e as usize - 1] {
            start = start / page * page;
        }
        if e + 1 < u64::from(self.n_expert) && !self.resident[layer_base + e as usize + 1] {
            end = end.next_multiple_of(page);
        }
        r.offset = start;
        r.len = end - start;
        r
    }

    /// Evict the resident slots `first..=last` of one layer: one drop per expert tensor,
    /// from the first expert's range to the last's (each widened as `eviction_range` says).
    fn evict_run(&mut self, first: usize, last: usize) {
        let n = self.n_expert as usize;
        let (pos, layer_base) = (first / n, first / n * n);
        debug_assert!(first <= last && last / n == pos);
        let mut dropped = 0;
        for i in 0..self.layers[pos].slices.len() {
            let sl = self.layers[pos].slices[i];
            let from = self.eviction_range(layer_base, &sl, (first % n) as u64);
            let to = self.eviction_range(layer_base, &sl, (last % n) as u64);
            dropped += self.advisor.evict(FileRange {
                file: sl.file,
                offset: from.offset,
                len: to.offset + to.len - from.offset,
            });
        }
        for s in first..=last {
            self.order.remove(s);
            self.resident[s] = false;
            self.warm[s] = false;
            self.evicted[s] = true;
            self.counters.residency.set_resident(s, false);
            self.resident_bytes -= self.cost[s];
            self.counters.layers[pos].evictions.inc();
            self.counters.evictions.inc();
        }
        self.counters.evicted_bytes.add(dropped);
        self.counters.resident_bytes.set(self.resident_bytes);
    }

    /// The next unprotected resident slot in [`PromptEviction::Cyclic`] order, starting
    /// the walk at `*cursor` (a count of slots walked, kept between calls of one
    /// `make_room`, so the walk over all slots happens once): from the latest routed layer
    /// backwards, each layer's experts in id order.
    fn cyclic_victim(
        &self,
        cursor: &mut usize,
        protected: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let n = self.n_expert as usize;
        let n_layers = self.layers.len();
        let current = self
            .last_layer
            .and_then(|l| self.layer_pos.get(l as usize).copied())
            .filter(|&p| p != NIL)?;
        while *cursor < n_layers * n {
            let (back, e) = (*cursor / n, *cursor % n);
            let pos = (current as usize + n_layers - back % n_layers) % n_layers;
            let s = pos * n + e;
            if self.resident[s] && !protected(s) {
                return Some(s);
            }
            *cursor += 1;
        }
        None
    }

    /// The fewest slots a prompt's drop from slot `s` takes where it can
    /// (`WHOLE_LAYER_MIN_DROP`): a share of the layer where it may be read whole, else one.
    fn min_drop(&self, s: usize) -> usize {
        let n = self.n_expert as usize;
        let (share, of) = WHOLE_LAYER_MIN_DROP;
        if self.whole_reads[s / n] {
            (n * share / of).max(1)
        } else {
            1
        }
    }

    /// Whether the `len` slots from `s` on lie within its layer, resident and not
    /// `protected`.
    fn droppable_run(&self, s: usize, len: usize, protected: impl Fn(usize) -> bool) -> bool {
        let n = self.n_expert as usize;
        s % n + len <= n && (s..s + len).all(|t| self.resident[t] && !protected(t))
    }

    /// Steps of the pager's clock until each layer position routes again, after the
    /// latest routing, as a function of the position: a fraction of a step for the layers
    /// ahead, a whole one for the layer just routed. In (0, 1].
    fn steps_to_routing(&self) -> impl Fn(usize) -> f64 + Copy {
        let n_layers = self.layers.len().max(1);
        let current = self
            .last_layer
            .and_then(|l| self.layer_pos.get(l as usize).copied())
            .filter(|&p| p != NIL)
            .map_or(n_layers - 1, |p| p as usize);
        move |pos| ((pos + n_layers - current - 1) % n_layers + 1) as f64 / n_layers as f64
    }

    /// Evict unprotected slots until `resident_bytes + need <= target`: in the policy's
    /// order as [`EvictBy`] reads it, or while a prompt is evaluated in
    /// [`PromptEviction`]'s. Returns whether the target was reached.
    fn make_room(&mut self, need: u64, target: u64) -> bool {
        let cyclic =
            self.phase == Phase::Prompt && self.config.prompt_eviction == PromptEviction::Cyclic;
        let next_use = !cyclic && self.config.evict_by == EvictBy::NextUse;
        // Runs of adjacent experts go in one drop per tensor: whole layers read in large
        // folios then leave none that a drop covers in part.
        let runs = cyclic && self.config.prompt_reads == PromptReads::WholeLayers;
        let reading_whole = self.reading_whole;
        let n = self.n_expert as usize;
        let steps_to_routing = self.steps_to_routing();
        let (mut cursor, mut long_cursor) = (0, 0);
        let mut reached = true;
        while self.resident_bytes + need > target {
            let (epoch, clock, window) = (self.epoch, self.clock, self.config.hot_window_tokens);
            let (pin_epoch, last_used, guess) =
                (&self.pin_epoch, &self.last_used, &self.speculative);
            // Pinned and hot-window experts, and guesses their routing has not settled yet.
            let protected = |s: usize| {
                pin_epoch[s] == epoch
                    || guess[s]
                    || reading_whole == Some(s / n)
                    || (window > 0 && clock.saturating_sub(last_used[s]) < window)
            };
            let victim = if cyclic {
                // Runs long enough first (`WHOLE_LAYER_MIN_DROP`), then any victim.
                let long = |s: usize| self.droppable_run(s, self.min_drop(s), protected);
                runs.then(|| self.cyclic_victim(&mut long_cursor, |s| !long(s)))
                    .flatten()
                    .or_else(|| self.cyclic_victim(&mut cursor, protected))
            } else if next_use {
                let to_routing = |s: usize| steps_to_routing(s / n);
                self.order
                    .latest_next_use(protected, to_routing, clock, last_used)
            } else {
                self.order.coldest(protected)
            };
            match victim {
                Some(s) => {
                    // The cyclic walk would take the layer's next resident unprotected
                    // experts next, while room is still short: the same victims, fewer calls.
                    let mut last = s;
                    if runs {
                        let min_run = self.min_drop(s);
                        let mut freed = self.cost[s];
                        while (last + 1) % n != 0
                            && self.resident[last + 1]
                            && !protected(last + 1)
                            && (self.resident_bytes - freed + need > target
                                || last + 1 - s < min_run)
                        {
                            last += 1;
                            freed += self.cost[last];
                        }
                    }
                    self.evict_run(s, last);
                }
                None => {
                    reached = false;
                    break;
                }
            }
        }
        self.order.restore();
        reached
    }

    fn phase_counters(&self) -> &PhaseCounters {
        match self.phase {
            Phase::Prompt => &self.counters.prompt,
            Phase::Decode => &self.counters.decode,
        }
    }

    /// Routing for `layer` is known: `selected` are the expert ids chosen for the ubatch's
    /// `n_tokens` tokens (duplicates allowed). Marks them hot and pinned, evicts cold experts
    /// if the budget requires, and advises the missing ones in. Never allocates.
    pub fn route(
        &mut self,
        layer: u32,
        phase: Phase,
        n_tokens: u64,
        selected: impl Iterator<Item = i32>,
    ) {
        if self.last_layer.is_none_or(|last| layer <= last) {
            self.clock += clock_ticks(phase, n_tokens);
        }
        self.last_layer = Some(layer);
        self.phase = phase;
        let Some(pos) = self
            .layer_pos
            .get(layer as usize)
            .copied()
            .filter(|&p| p != NIL)
        else {
            return;
        };
        self.epoch += 1;
        let view = &self.counters.residency;
        for &s in &self.pinned {
            view.set_pinned(s as usize, false);
        }
        self.pinned.clear();
        let base = pos as usize * self.n_expert as usize;
        let mut need = 0u64;
        let (mut cache_hits, mut prefetch_hits, mut misses) = (0u64, 0u64, 0u64);
        for id in selected {
            if id < 0 || id as u32 >= self.n_expert {
                continue;
            }
            let s = base + id as usize;
            if let Some(c) = self.counters.layers[pos as usize]
                .selections
                .get(id as usize)
            {
                c.inc();
            }
            if self.pin_epoch[s] == self.epoch {
                continue;
            }
            self.pin_epoch[s] = self.epoch;
            self.last_used[s] = self.clock;
            self.counters.residency.selected(s, self.clock);
            self.counters.residency.set_pinned(s, true);
            if self.pinned.len() < self.pinned.capacity() {
                self.pinned.push(s as u32);
            }
            if self.resident[s] {
                if self.speculative[s] {
                    prefetch_hits += 1;
                } else {
                    cache_hits += 1;
                }
                if self.warm[s] {
                    self.warm[s] = false;
                    self.counters.warm_hits.inc();
                }
                self.order.touch(s, self.clock);
            } else {
                misses += 1;
                need += self.cost[s];
            }
        }
        self.settle_predictions(pos as usize);
        let n = self.n_expert as usize;
        let (share, of) = WHOLE_LAYER_MISS_SHARE;
        let whole = phase == Phase::Prompt
            && self.whole_reads[pos as usize]
            && misses * of >= u64::from(self.n_expert) * share
            && self.room_for_whole_layer(pos as usize, base, need);
        let fits = whole || self.make_room(need, self.config.expert_budget_bytes);
        if !fits {
            self.counters.overruns.inc();
        }
        if whole {
            self.read_whole_layer(pos as usize, base);
        }
        // Advise the missing experts in the order mul_mat_id reads them: tensor by tensor
        // (gate, up, down), experts in ascending id within each.
        self.pinned.sort_unstable();
        for k in 0..self.layers[pos as usize].slices.len() {
            let sl = self.layers[pos as usize].slices[k];
            for i in 0..self.pinned.len() {
                let s = self.pinned[i] as usize;
                if !self.resident[s] {
                    self.advisor.will_need(sl.range((s % n) as u64));
                }
            }
        }
        self.advisor.flush();
        for i in 0..self.pinned.len() {
            let s = self.pinned[i] as usize;
            if self.resident[s] {
                continue;
            }
            self.resident[s] = true;
            self.resident_bytes += self.cost[s];
            self.order.insert_selected(s, self.clock);
            self.counters.residency.set_resident(s, true);
        }
        self.counters.residency.routed(self.clock);
        let c = self.phase_counters();
        c.routings.inc();
        c.selected.add(cache_hits + prefetch_hits + misses);
        c.cache_hits.add(cache_hits);
        c.prefetch_hits.add(prefetch_hits);
        c.misses.add(misses);
        c.miss_bytes.add(need);
        let l = &self.counters.layers[pos as usize];
        match phase {
            Phase::Prompt => l.prompt_misses.add(misses),
            Phase::Decode => {
                l.decode_cache_hits.add(cache_hits);
                l.decode_prefetch_hits.add(prefetch_hits);
                l.decode_misses.add(misses);
            }
        }
        self.counters.resident_bytes.set(self.resident_bytes);
        self.counters.resident_peak_bytes.max(self.resident_bytes);
        #[cfg(test)]
        {
            self.check_invariants();
            // 6.
            assert!(
                fits || self.resident_bytes > self.config.expert_budget_bytes,
                "invariant 6"
            );
            assert!(
                !fits || self.resident_bytes <= self.config.expert_budget_bytes,
                "invariant 6: over budget without an overrun"
            );
        }
    }

    /// Make room for every expert of layer position `pos` that is not resident (`need` of
    /// them selected), without evicting the layer's own; whether it fits.
    fn room_for_whole_layer(&mut self, pos: usize, base: usize, need: u64) -> bool {
        let n = self.n_expert as usize;
        let unselected: u64 = (base..base + n)
            .filter(|&s| !self.resident[s] && self.pin_epoch[s] != self.epoch)
            .map(|s| self.cost[s])
            .sum();
        self.reading_whole = Some(pos);
        let fits = self.make_room(need + unselected, self.config.expert_budget_bytes);
        self.reading_whole = None;
        fits
    }

    /// Read layer position `pos` whole (room was made): one range per run of adjacent
    /// expert tensors, then every expert counted resident, those not selected coldest.
    fn read_whole_layer(&mut self, pos: usize, base: usize) {
        let n = self.n_expert as usize;
        let mut unselected = 0;
        for s in base..base + n {
            if self.resident[s] {
                continue;
            }
            self.resident[s] = true;
            self.resident_bytes += self.cost[s];
            if self.pin_epoch[s] == self.epoch {
                self.order.insert_selected(s, self.clock);
            } else {
                unselected += self.cost[s];
                self.order.insert_cold(s);
            }
            self.counters.residency.set_resident(s, true);
        }
        self.advise_whole_layer(pos, unselected);
    }

    /// Advise layer position `pos` in whole, one range per run of adjacent expert tensors,
    /// and count it with the `unselected` bytes it reads that routing (or the guess) did
    /// not ask for.
    fn advise_whole_layer(&mut self, pos: usize, unselected: u64) {
        self.layers[pos].whole_runs(self.n_expert, |r| self.advisor.read_whole(r));
        self.counters.whole_layer_reads.inc();
        self.counters.whole_layer_unselected_bytes.add(unselected);
    }

    /// Score this layer's predictions against the routing just pinned, and demote wrong
    /// speculative reads to the cold end of the LRU so they are the first evicted.
    fn settle_predictions(&mut self, pos: usize) {
        let n = self.n_expert as usize;
        let base = pos * n;
        let (mut predicted, mut predicted_selected) = (0u64, 0u64);
        let (mut useful, mut useful_bytes, mut wasted_bytes) = (0u64, 0u64, 0u64);
        for s in base..base + n {
            let selected = self.pin_epoch[s] == self.epoch;
            if self.predicted[s] {
                predicted += 1;
                self.predicted[s] = false;
                predicted_selected += u64::from(selected);
            }
            if self.speculative[s] {
                self.speculative[s] = false;
                self.counters.residency.set_speculative(s, false);
                if selected {
                    useful += 1;
                    useful_bytes += self.cost[s];
                } else {
                    wasted_bytes += self.cost[s];
                    self.order.demote(s);
                }
            }
        }
        let c = self.phase_counters();
        c.prefetch_useful.add(useful);
        c.prefetch_useful_bytes.add(useful_bytes);
        c.prefetch_wasted_bytes.add(wasted_bytes);
        if predicted > 0 {
            let selected = self.pinned.len() as u64;
            c.predicted.add(predicted);
            c.predicted_of.add(selected);
            c.predicted_selected.add(predicted_selected);
            let l = &self.counters.layers[pos];
            l.predicted_selected.add(predicted_selected);
            l.predicted_of.add(selected);
        }
    }

    /// A prediction of `layer`'s next routing: advise in the predicted experts that are not
    /// resident, as far as the budget allows without touching protected experts. They count
    /// against the budget; if routing does not select them they are evicted first.
    pub fn speculate(&mut self, layer: u32, predicted: impl Iterator<Item = i32>) {
        let Some(pos) = self
            .layer_pos
            .get(layer as usize)
            .copied()
            .filter(|&p| p != NIL)
        else {
            return;
        };
        let n = self.n_expert as usize;
        let base = pos as usize * n;
        let mut issued = false;
        let evictions = self.counters.evictions.get();
        if self.phase == Phase::Prompt && self.whole_reads[pos as usize] {
            // A prompt's guesses name most of a layer: read it whole if they miss enough.
            let mut missed = 0u64;
            for id in predicted {
                if id < 0 || id as usize >= n {
                    continue;
                }
                let s = base + id as usize;
                if !std::mem::replace(&mut self.predicted[s], true) && !self.resident[s] {
                    missed += 1;
                }
            }
            let (share, of) = WHOLE_LAYER_MISS_SHARE;
            if missed * of >= n as u64 * share && self.room_for_whole_layer(pos as usize, base, 0) {
                let mut unpredicted = 0;
                for s in base..base + n {
                    if !self.resident[s] {
                        if !self.predicted[s] {
                            unpredicted += self.cost[s];
                        }
                        self.hold_guess(s);
                    }
                }
                self.advise_whole_layer(pos as usize, unpredicted);
                issued = true;
            } else {
                for s in base..base + n {
                    if self.predicted[s] && !self.resident[s] {
                        issued |= self.guess(s);
                    }
                }
            }
        } else {
            for id in predicted {
                if id < 0 || id as usize >= n {
                    continue;
                }
                let s = base + id as usize;
                if !std::mem::replace(&mut self.predicted[s], true) && !self.resident[s] {
                    issued |= self.guess(s);
                }
            }
        }
        // A guess that found no room may still have evicted on the way.
        if issued || self.counters.evictions.get() != evictions {
            self.advisor.flush();
        }
        self.counters.resident_bytes.set(self.resident_bytes);
        self.counters.resident_peak_bytes.max(self.resident_bytes);
        #[cfg(test)]
        self.check_invariants();
    }

    /// Read slot `s` (not resident) in on a guess, if room can be made for it without
    /// touching protected experts; whether it was.
    fn guess(&mut self, s: usize) -> bool {
        if !self.make_room(self.cost[s], self.config.expert_budget_bytes) {
            return false;
        }
        let (pos, e) = (
            s / self.n_expert as usize,
            (s % self.n_expert as usize) as u64,
        );
        for k in 0..self.layers[pos].slices.len() {
            let sl = self.layers[pos].slices[k];
            self.advisor.will_need_ahead(sl.range(e));
        }
        self.hold_guess(s);
        true
    }

    /// Count slot `s` (not resident, its read advised) resident on a guess.
    fn hold_guess(&mut self, s: usize) {
        self.resident[s] = true;
        self.speculative[s] = true;
        self.counters.residency.set_resident(s, true);
        self.counters.residency.set_speculative(s, true);
        self.resident_bytes += self.cost[s];
        self.order.insert_guess(s);
        let c = self.phase_counters();
        c.prefetch_issued.inc();
        c.prefetch_issued_bytes.add(self.cost[s]);
    }

    /// A warm start: read expert `expert` of `layer` in on a guess from past runs, if the
    /// expert cache has free room for it. Never evicts: the expert goes after demoted
    /// guesses and before every expert this run used (`Order::insert_cold`). The ranges
    /// advised in go to `read`, for the caller to see when they have landed.
    pub fn warm(&mut self, layer: u32, expert: u32, mut read: impl FnMut(FileRange)) -> Warmed {
        let s = match self.room_unasked(layer, expert) {
            Ok(s) => s,
            Err(w) => return w,
        };
        let pos = s / self.n_expert as usize;
        for k in 0..self.layers[pos].slices.len() {
            let r = self.layers[pos].slices[k].range(u64::from(expert));
            self.advisor.will_need(r);
            read(r);
        }
        self.advisor.flush();
        self.counters.warmed.inc();
        self.counters.warmed_bytes.add(self.cost[s]);
        self.hold_unasked(s);
        Warmed::Taken
    }

    /// At start, count expert `expert` of `layer` resident with no read, because the page
    /// cache already holds its pages (an earlier run of the model left them), if the expert
    /// cache has free room for it; held as a warm start's expert is. The caller has
    /// checked the pages ([`cached_experts`]) and drops every expert's pages it does not
    /// adopt.
    pub fn adopt(&mut self, layer: u32, expert: u32) -> Warmed {
        let s = match self.room_unasked(layer, expert) {
            Ok(s) => s,
            Err(w) => return w,
        };
        self.counters.adopted.inc();
        self.counters.adopted_bytes.add(self.cost[s]);
        self.hold_unasked(s);
        Warmed::Taken
    }

    /// The slot of an expert taken in without a selection, if it is not resident and the
    /// expert cache has free room for it.
    fn room_unasked(&self, layer: u32, expert: u32) -> Result<usize, Warmed> {
        let s = self.slot(layer, expert).ok_or(Warmed::NotAnExpert)?;
        if self.resident[s] {
            return Err(Warmed::Resident);
        }
        if self.resident_bytes + self.cost[s] > self.config.expert_budget_bytes {
            return Err(Warmed::NoRoom);
        }
        Ok(s)
    }

    /// Count slot `s` resident, taken in without a selection (invariant 11).
    fn hold_unasked(&mut self, s: usize) {
        self.resident[s] = true;
        self.warm[s] = true;
        self.resident_bytes += self.cost[s];
        self.order.insert_cold(s);
        self.counters.residency.set_resident(s, true);
        self.counters.resident_bytes.set(self.resident_bytes);
        self.counters.resident_peak_bytes.max(self.resident_bytes);
        #[cfg(test)]
        self.check_invariants();
    }

    /// The run is over: let the advisor complete outstanding drops.
    pub fn finish(&mut self) {
        self.advisor.finish();
    }

    /// The ranges an eviction of each non-resident expert covers (see `eviction_range`):
    /// pages of the file the page cache should not hold, for an end-of-run audit. With
    /// `only_evicted`, just the experts this pager evicted: when the pager did not start
    /// from an empty page cache (every expert fits, so a warm file's pages were kept), the
    /// others were never its to drop.
    pub fn non_resident_ranges(&self, only_evicted: bool) -> impl Iterator<Item = FileRange> + '_ {
        let n = self.n_expert as usize;
        (0..self.resident.len())
            .filter(move |&s| !self.resident[s] && (self.evicted[s] || !only_evicted))
            .flat_map(move |s| {
                let layer_base = s / n * n;
                self.layers[s / n]
                    .slices
                    .iter()
                    .map(move |sl| self.eviction_range(layer_base, sl, (s % n) as u64))
            })
    }

    /// The expert budget now (it grows and shrinks with the token table's loan,
    /// `budget::TokenRowLoan`).
    pub fn budget(&self) -> u64 {
        self.config.expert_budget_bytes
    }

    /// A new expert budget: what the pager holds from now on. Evicts unprotected experts
    /// at once down to a smaller one, so that the pages it gave back are free before the
    /// memory they were lent from is used.
    pub fn set_budget(&mut self, bytes: u64) {
        self.config.expert_budget_bytes = bytes;
        if self.resident_bytes > bytes {
            self.shrink_to(bytes);
        }
    }

    /// Outside pressure (measured RSS above the budget): evict unprotected experts until the
    /// resident expert bytes are at most `target`.
    pub fn shrink_to(&mut self, target: u64) {
        let evictions = self.counters.evictions.get();
        self.make_room(0, target);
        if self.counters.evictions.get() != evictions {
            self.advisor.flush();
        }
        #[cfg(test)]
        self.check_invariants();
    }

    /// Check every numbered invariant of [`Pager`]; panics with the one that fails. Test
    /// builds run it after every public operation.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let n_slots = self.resident.len();
        // 2.
        let sum: u64 = (0..n_slots)
            .filter(|&s| self.resident[s])
            .map(|s| self.cost[s])
            .sum();
        assert_eq!(sum, self.resident_bytes, "invariant 2: resident_bytes");
        // 3.
        self.order.check(&self.resident);
        // 11.
        for s in 0..n_slots {
            if self.warm[s] {
                assert!(
                    self.resident[s] && !self.speculative[s],
                    "invariant 11: {s}"
                );
            }
        }
        // 4 and 5: `pinned` holds exactly this epoch's pins, without duplicates.
        let pinned_now = (0..n_slots)
            .filter(|&s| self.pin_epoch[s] == self.epoch && self.epoch > 0)
            .count();
        assert_eq!(pinned_now, self.pinned.len(), "invariants 4/5: pinned");
        assert!(
            self.pinned.capacity() >= self.n_expert as usize,
            "invariant 5"
        );
        // 10.
        let view = self.counters.residency.snapshot();
        for s in 0..n_slots {
            use crate::stats::ResidencySnapshot as R;
            assert_eq!(
                R::bit(&view.resident, s),
                self.resident[s],
                "invariant 10: resident {s}"
            );
            assert_eq!(
                R::bit(&view.speculative, s),
                self.speculative[s],
                "invariant 10: speculative {s}"
            );
            let pinned = self.pin_epoch[s] == self.epoch && self.epoch > 0;
            assert_eq!(R::bit(&view.pinned, s), pinned, "invariant 10: pinned {s}");
        }
        // 12.
        assert!(
            self.config.prompt_reads == PromptReads::WholeLayers
                || self.whole_reads.iter().all(|&w| !w),
            "invariant 12"
        );
        // 7.
        for (i, (&spec, &resident)) in self.speculative.iter().zip(&self.resident).enumerate() {
            assert!(
                !spec || resident,
                "invariant 7: slot {i} speculative but not resident"
            );
        }
    }
}
