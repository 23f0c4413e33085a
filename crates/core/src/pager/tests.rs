//! Policy tests through a fake advisor that records every call.

use super::*;

#[derive(Default)]
struct Recorder {
    will_need: Vec<FileRange>,
    /// `read_whole` calls (not also listed in `will_need`).
    whole: Vec<FileRange>,
    evicted: Vec<FileRange>,
    /// Calls since the last flush.
    unflushed: usize,
}

impl Advisor for Recorder {
    fn will_need(&mut self, r: FileRange) {
        self.will_need.push(r);
        self.unflushed += 1;
    }
    fn read_whole(&mut self, r: FileRange) {
        self.whole.push(r);
        self.unflushed += 1;
    }
    fn evict(&mut self, r: FileRange) -> u64 {
        self.evicted.push(r);
        self.unflushed += 1;
        r.len
    }
    fn flush(&mut self) {
        self.unflushed = 0;
    }
}

const PAGE: u64 = 4096;
/// Each expert is one page-aligned 8 KiB slice: expert e of layer l at (l*16 + e) * 8 KiB.
const EXPERT: u64 = 2 * PAGE;
const N_EXPERT: u32 = 16;

fn pager(budget_experts: u64, window: u64, n_layers: u32) -> Pager<Recorder> {
    pager_with(CachePolicy::Lru, budget_experts, window, n_layers)
}

fn pager_with(
    policy: CachePolicy,
    budget_experts: u64,
    window: u64,
    n_layers: u32,
) -> Pager<Recorder> {
    let layers = (0..n_layers)
        .map(|l| LayerSpec {
            layer: l,
            slices: vec![ExpertSlice {
                file: 0,
                offset: u64::from(l) * u64::from(N_EXPERT) * EXPERT,
                bytes_per_expert: EXPERT,
            }],
        })
        .collect();
    Pager::new(
        Recorder::default(),
        PagerConfig {
            expert_budget_bytes: budget_experts * EXPERT,
            hot_window_tokens: window,
            page_size: PAGE,
            policy,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads: PromptReads::default(),
        },
        N_EXPERT,
        layers,
        Arc::new(PagerCounters::new(0..n_layers, N_EXPERT)),
    )
}

/// One layer of 4 experts in one slice at `offset`, with a 1 MiB budget.
fn one_layer(offset: u64, bytes_per_expert: u64) -> Pager<Recorder> {
    let layers = vec![LayerSpec {
        layer: 0,
        slices: vec![ExpertSlice {
            file: 0,
            offset,
            bytes_per_expert,
        }],
    }];
    Pager::new(
        Recorder::default(),
        PagerConfig {
            expert_budget_bytes: 1 << 20,
            hot_window_tokens: 0,
            page_size: PAGE,
            policy: CachePolicy::Lru,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads: PromptReads::default(),
        },
        4,
        layers,
        Arc::new(PagerCounters::new([0], 4)),
    )
}

fn expert_of(r: &FileRange, layer: u32) -> u32 {
    ((r.offset - u64::from(layer) * u64::from(N_EXPERT) * EXPERT) / EXPERT) as u32
}

/// The experts of `layer` evicted so far, in eviction order.
fn evicted_experts(p: &Pager<Recorder>, layer: u32) -> Vec<u32> {
    p.advisor()
        .evicted
        .iter()
        .map(|r| expert_of(r, layer))
        .collect()
}

#[test]
fn misses_are_advised_in_and_hits_are_not() {
    let mut p = pager(8, 0, 1);
    p.route(0, Phase::Decode, 1, [1, 2, 2].into_iter());
    assert_eq!(p.advisor().will_need.len(), 2);
    p.route(0, Phase::Decode, 1, [2, 3].into_iter());
    assert_eq!(p.advisor().will_need.len(), 3);
    assert_eq!(p.counters.decode.cache_hits.get(), 1);
    assert_eq!(p.counters.decode.misses.get(), 3);
    assert_eq!(p.resident_bytes(), 3 * EXPERT);
}

/// Decode steps evict in the policy's order (here LRU), whatever the prompt eviction.
#[test]
fn evicts_least_recently_used_first() {
    let mut p = pager(3, 0, 1);
    for e in [0, 1, 2] {
        p.route(0, Phase::Decode, 1, [e].into_iter());
    }
    p.route(0, Phase::Decode, 1, [0].into_iter()); // 0 becomes most recent; LRU order now 1, 2, 0
    p.route(0, Phase::Decode, 1, [3].into_iter());
    p.route(0, Phase::Decode, 1, [4].into_iter());
    let evicted = evicted_experts(&p, 0);
    assert_eq!(evicted, vec![1, 2]);
    assert!(p.is_resident(0, 0) && p.is_resident(0, 3) && p.is_resident(0, 4));
    assert_eq!(p.resident_bytes(), 3 * EXPERT);
}

#[test]
fn pinned_experts_are_never_evicted_even_over_budget() {
    let mut p = pager(2, 0, 1);
    p.route(0, Phase::Prompt, 4, [0, 1, 2, 3].into_iter());
    assert!(
        p.advisor().evicted.is_empty(),
        "the current layer's experts are pinned"
    );
    assert_eq!(p.counters.overruns.get(), 1);
    // The next call unpins them; the new selection forces the old ones out.
    p.route(0, Phase::Decode, 1, [5].into_iter());
    let evicted = evicted_experts(&p, 0);
    assert_eq!(evicted, vec![0, 1, 2]);
    assert!(p.is_resident(0, 3) && p.is_resident(0, 5));
}

#[test]
fn a_range_is_never_evicted_while_pinned() {
    let mut p = pager(3, 0, 2);
    for step in 0..200u32 {
        let layer = step % 2;
        let sel = [(step * 7) % N_EXPERT, (step * 3 + 1) % N_EXPERT];
        p.route(layer, Phase::Decode, 1, sel.iter().map(|&e| e as i32));
        let evicted_now: Vec<FileRange> = p.advisor().evicted.clone();
        for r in evicted_now.iter().rev().take(4) {
            let l = (r.offset / (u64::from(N_EXPERT) * EXPERT)) as u32;
            if l == layer {
                assert!(
                    !sel.contains(&expert_of(r, l)),
                    "pinned expert evicted at step {step}"
                );
            }
        }
        for &e in &sel {
            assert!(p.is_resident(layer, e));
        }
        assert!(p.resident_bytes() <= 3 * EXPERT);
    }
}

#[test]
fn hot_window_protects_recent_tokens() {
    // Window of 2 tokens: experts used by the last 2 tokens stay even when the budget is tight.
    let mut p = pager(2, 2, 1);
    p.route(0, Phase::Decode, 1, [0].into_iter()); // token 1
    p.route(0, Phase::Decode, 1, [1].into_iter()); // token 2
    p.route(0, Phase::Decode, 1, [2].into_iter()); // token 3: 1 is within the window, 0 is not
    let evicted = evicted_experts(&p, 0);
    assert_eq!(evicted, vec![0]);
    p.route(0, Phase::Decode, 1, [3].into_iter()); // token 4: 2 in window, 1 is now 2 tokens old
    let evicted = evicted_experts(&p, 0);
    assert_eq!(evicted, vec![0, 1]);
}

#[test]
fn token_clock_advances_per_ubatch_not_per_layer() {
    let mut p = pager(64, 3, 3);
    for _ in 0..2 {
        for l in 0..3 {
            p.route(l, Phase::Prompt, 5, [0].into_iter());
        }
    }
    assert_eq!(p.clock, 10);
}

#[test]
fn a_decode_step_of_k_sequences_is_one_tick() {
    // Four sequences decode together: each step is one token of each, so the hot window
    // (and the LFU decay) spans as many of a sequence's tokens as with one sequence.
    let mut p = pager(3, 3, 1);
    for step in 0..3u64 {
        p.route(0, Phase::Decode, 4, [step as i32].into_iter());
        assert_eq!(p.clock, step + 1);
    }
    // Two more experts at step 4: experts 1 and 2 were used 2 and 1 steps ago, inside the
    // window of 3; only 0 (3 steps ago) may go, and the budget is overrun by one. Counted
    // in tokens of all four sequences, 1 and 2 would be 8 and 4 tokens old and evicted.
    p.route(0, Phase::Decode, 4, [3, 4].into_iter());
    let evicted = evicted_experts(&p, 0);
    assert_eq!(evicted, vec![0]);
    assert_eq!(p.counters.overruns.get(), 1);
    // A prompt ubatch still advances it by its tokens.
    p.route(0, Phase::Prompt, 5, [0].into_iter());
    assert_eq!(p.clock, 9);
}

#[test]
fn cost_rounds_unaligned_experts_outward_to_pages() {
    let p = one_layer(100, 5000);
    // Expert 0 spans [100, 5100): pages 0 and 1. Expert 1 spans [5100, 10100): pages 1 and 2.
    assert_eq!(p.expert_cost(0, 0), Some(2 * PAGE));
    assert_eq!(p.expert_cost(0, 1), Some(2 * PAGE));
    assert_eq!(p.expert_cost(1, 0), None);
}

#[test]
fn shrink_to_evicts_until_target_but_keeps_pins() {
    let mut p = pager(8, 0, 1);
    p.route(0, Phase::Decode, 1, [0, 1, 2, 3].into_iter());
    p.route(0, Phase::Decode, 1, [4].into_iter());
    p.shrink_to(2 * EXPERT);
    assert!(p.is_resident(0, 4), "pinned");
    assert_eq!(p.resident_bytes(), 2 * EXPERT);
    assert_eq!(p.advisor().evicted.len(), 3);
}

#[test]
fn every_step_that_makes_a_call_ends_with_a_flush() {
    // An advisor may hold calls until the flush (the assisting thread does): an eviction
    // the pager has counted must not wait for a later step, least of all the RSS guard's.
    let mut p = pager(4, 0, 3);
    let mut rng = 7u64;
    for step in 0..300u64 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let layer = (step % 3) as u32;
        let ids = [(rng >> 33) % 16, (rng >> 40) % 16].map(|x| x as i32);
        match (rng >> 50) % 3 {
            0 => p.route(layer, Phase::Decode, 1, ids.into_iter()),
            1 => p.speculate(layer, ids.into_iter()),
            _ => p.shrink_to(EXPERT * ((rng >> 55) % 4)),
        }
        assert_eq!(p.advisor().unflushed, 0, "step {step}");
    }
    assert!(p.advisor().evicted.len() > 50);
}

#[test]
fn out_of_range_ids_and_unknown_layers_are_ignored() {
    let mut p = pager(4, 0, 1);
    p.route(0, Phase::Decode, 1, [-1, 16, 99].into_iter());
    p.route(7, Phase::Decode, 1, [0].into_iter());
    assert!(p.advisor().will_need.is_empty());
    assert_eq!(p.resident_bytes(), 0);
}

#[test]
fn eviction_widens_to_pages_only_beside_non_resident_neighbours() {
    // Experts of 6000 bytes at offset 1000: every expert shares pages with its neighbours.
    let mut p = one_layer(1000, 6000);
    p.route(0, Phase::Decode, 1, [1, 2].into_iter());
    p.route(0, Phase::Decode, 1, [3].into_iter());
    p.shrink_to(p.resident_bytes() - 1); // evicts 1 (least recent); 0 is absent, 2 resident
    let r = p.advisor().evicted[0];
    // Expert 1 is [7000, 13000): widened down to 4096 (expert 0 absent), not up (2 resident).
    assert_eq!((r.offset, r.offset + r.len), (4096, 13000));
}

#[test]
fn misses_are_advised_tensor_by_tensor_in_expert_order_then_flushed() {
    #[derive(Default)]
    struct Order {
        calls: Vec<(u32, u64)>,
        flushes: usize,
    }
    impl Advisor for Order {
        fn will_need(&mut self, r: FileRange) {
            self.calls.push((r.file, r.offset));
        }
        fn evict(&mut self, r: FileRange) -> u64 {
            r.len
        }
        fn flush(&mut self) {
            self.flushes += 1;
        }
    }
    let slice = |offset| ExpertSlice {
        file: 0,
        offset,
        bytes_per_expert: 100,
    };
    let layers = vec![LayerSpec {
        layer: 0,
        slices: vec![slice(0), slice(10_000), slice(20_000)],
    }];
    let mut p = Pager::new(
        Order::default(),
        PagerConfig {
            expert_budget_bytes: 1 << 20,
            hot_window_tokens: 0,
            page_size: PAGE,
            policy: CachePolicy::Lru,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads: PromptReads::default(),
        },
        8,
        layers,
        Arc::new(PagerCounters::new([0], 8)),
    );
    p.route(0, Phase::Prompt, 2, [5, 2, 5, 7].into_iter());
    let offsets: Vec<u64> = p.advisor().calls.iter().map(|c| c.1).collect();
    assert_eq!(
        offsets,
        vec![200, 500, 700, 10_200, 10_500, 10_700, 20_200, 20_500, 20_700]
    );
    assert_eq!(p.advisor().flushes, 1);
}

#[test]
fn wrong_speculation_is_evicted_first_and_right_one_counts_as_useful() {
    let mut p = pager(4, 0, 2);
    p.route(0, Phase::Decode, 1, [0].into_iter());
    p.speculate(1, [1, 2].into_iter()); // layer 1 predicted: experts 1 and 2
    assert!(p.is_resident(1, 1) && p.is_resident(1, 2));
    assert_eq!(p.counters.decode.prefetch_issued.get(), 2);
    assert_eq!(p.counters.decode.prefetch_issued_bytes.get(), 2 * EXPERT);
    p.route(1, Phase::Decode, 1, [1].into_iter()); // 1 was right, 2 was wrong
    assert_eq!(p.counters.decode.prefetch_useful.get(), 1);
    assert_eq!(p.counters.decode.prefetch_useful_bytes.get(), EXPERT);
    assert_eq!(p.counters.decode.prefetch_wasted_bytes.get(), EXPERT);
    assert_eq!(
        p.counters.decode.prefetch_hits.get(),
        1,
        "the prefetched expert is a prefetch hit"
    );
    assert_eq!(p.counters.decode.cache_hits.get(), 0, "and not a cache hit");
    // Decode steps: the prompt's speculative counters saw nothing.
    assert_eq!(p.counters.prompt.prefetch_issued_bytes.get(), 0);
    assert_eq!(
        (
            p.counters.decode.predicted.get(),
            p.counters.decode.predicted_selected.get()
        ),
        (2, 1)
    );
    // Budget 4: resident are (0,0), (1,1), (1,2). Two new experts need one eviction: the
    // wrong speculation goes first even though (0,0) is older.
    p.route(0, Phase::Decode, 1, [5, 6].into_iter());
    let evicted: Vec<(u64, u64)> = p
        .advisor()
        .evicted
        .iter()
        .map(|r| (r.offset, r.len))
        .collect();
    assert_eq!(evicted.len(), 1);
    assert!(!p.is_resident(1, 2) && p.is_resident(1, 1));
    let l1 = &p.counters.layers[1];
    assert_eq!((l1.predicted_selected.get(), l1.predicted_of.get()), (1, 1));
}

#[test]
fn prefill_guesses_are_not_counted_as_decode() {
    let mut p = pager(8, 0, 2);
    p.route(0, Phase::Prompt, 4, [0, 1].into_iter()); // a 4-token ubatch
    p.speculate(1, [2, 3].into_iter());
    p.route(1, Phase::Prompt, 4, [2].into_iter());
    assert_eq!(p.counters.prompt.prefetch_issued_bytes.get(), 2 * EXPERT);
    assert_eq!(p.counters.prompt.prefetch_useful_bytes.get(), EXPERT);
    assert_eq!(p.counters.prompt.prefetch_hits.get(), 1);
    assert_eq!(p.counters.decode.prefetch_issued_bytes.get(), 0);
    assert_eq!(p.counters.decode.prefetch_useful_bytes.get(), 0);
    assert_eq!(p.counters.decode.selected.get(), 0);
}

#[test]
fn a_multi_token_decode_step_counts_as_decode() {
    // Parallel sequences: one decode step of 3 sequences is a 3-token ubatch.
    let mut p = pager(8, 0, 1);
    p.route(0, Phase::Decode, 3, [0, 1, 1].into_iter());
    p.route(0, Phase::Decode, 3, [1, 2, 3].into_iter());
    assert_eq!(p.counters.decode.selected.get(), 5);
    assert_eq!(p.counters.decode.cache_hits.get(), 1);
    assert_eq!(p.counters.decode.misses.get(), 4);
    assert_eq!(p.counters.prompt.selected.get(), 0);
    assert_eq!(p.counters.layers[0].decode_cache_hits.get(), 1);
}

#[test]
fn guesses_of_one_step_never_evict_each_other() {
    let mut p = pager(3, 0, 2);
    p.route(0, Phase::Decode, 1, [0].into_iter());
    // Room for two guesses. The third would have to evict past the pinned expert of
    // layer 0, which sits between the cold end and every guess of this step.
    p.speculate(1, [1, 2, 3].into_iter());
    assert!(p.is_resident(1, 1) && p.is_resident(1, 2) && !p.is_resident(1, 3));
    assert_eq!(p.counters.decode.prefetch_issued.get(), 2);
    assert!(p.advisor().evicted.is_empty());
    // The next routing settles them: a wrong guess is evictable again.
    p.route(1, Phase::Decode, 1, [1].into_iter());
    p.route(0, Phase::Decode, 1, [4, 5].into_iter());
    assert!(!p.is_resident(1, 2), "the wrong guess goes first");
    assert!(p.resident_bytes() <= 3 * EXPERT);
}

#[test]
fn speculation_never_evicts_the_current_layers_experts() {
    let mut p = pager(2, 0, 2);
    p.route(0, Phase::Decode, 1, [3, 4].into_iter()); // fills the budget with pinned experts
    p.speculate(1, [0, 1].into_iter());
    assert!(p.is_resident(0, 3) && p.is_resident(0, 4));
    assert_eq!(
        p.counters.decode.prefetch_issued.get(),
        0,
        "no room without evicting pinned experts"
    );
    assert!(p.resident_bytes() <= 2 * EXPERT);
}

#[test]
fn the_span_bound_covers_every_offset() {
    for len in [1, 100, 4095, 4096, 4097, 12_288, 1_290_240] {
        for offset in (0..3 * PAGE).step_by(97) {
            let span = expert_span(offset, len, PAGE);
            assert!(
                span >= len && span <= expert_span_bound(len, PAGE),
                "{offset} {len}"
            );
            assert_eq!(span % PAGE, 0);
        }
    }
}

const POLICIES: [CachePolicy; 3] = [
    CachePolicy::Lru,
    CachePolicy::DEFAULT,
    CachePolicy::LfuDecay { decay: 1.0 },
];

#[test]
fn lfu_decay_keeps_a_popular_expert_that_lru_would_drop() {
    // Expert 0 is selected every other token; experts 1, 2, 3... come once each. With room
    // for 2, LRU drops 0 whenever two newcomers arrive in a row; LFU-decay keeps it.
    let run = |policy| {
        let mut p = pager_with(policy, 2, 0, 1);
        for t in 0..40u32 {
            let e = if t % 3 == 0 { 0 } else { 1 + (t % 15) as i32 };
            p.route(0, Phase::Decode, 1, [e].into_iter());
        }
        p.counters.decode.cache_hits.get()
    };
    let (lru, lfu) = (run(CachePolicy::Lru), run(CachePolicy::DEFAULT));
    assert_eq!(lru, 0, "LRU keeps nothing of this string");
    assert!(lfu >= 12, "LFU-decay kept expert 0: {lfu} hits");
}

#[test]
fn every_policy_keeps_the_pager_invariants_on_a_random_workload() {
    // Routings, guesses and shrinks in a random order; `check_invariants` runs after each
    // operation (test builds), and the budget holds unless pinned experts exceed it.
    for policy in POLICIES {
        let mut p = pager_with(policy, 6, 0, 3);
        let mut x = 0x2545F4914F6CDD1Du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..3000u64 {
            let layer = (step % 3) as u32;
            let k = 1 + next(4) as usize;
            let sel: Vec<i32> = (0..k).map(|_| next(u64::from(N_EXPERT)) as i32).collect();
            p.route(layer, Phase::Decode, 1, sel.iter().copied());
            for &e in &sel {
                assert!(
                    p.is_resident(layer, e as u32),
                    "{policy:?}: selected expert not resident"
                );
            }
            if next(2) == 0 {
                let guess: Vec<i32> = (0..3).map(|_| next(u64::from(N_EXPERT)) as i32).collect();
                p.speculate((layer + 1) % 3, guess.into_iter());
            }
            if next(50) == 0 {
                p.shrink_to(2 * EXPERT);
            }
            let distinct = sel.iter().collect::<std::collections::HashSet<_>>().len() as u64;
            assert!(
                p.resident_bytes() <= 6 * EXPERT || distinct * EXPERT > 6 * EXPERT - 3 * EXPERT,
                "{policy:?}: over budget without a reason"
            );
        }
        assert!(p.counters.decode.cache_hits.get() > 0, "{policy:?}");
    }
}

#[test]
fn guesses_of_one_step_never_evict_each_other_in_any_policy() {
    for policy in POLICIES {
        let mut p = pager_with(policy, 3, 0, 2);
        p.route(0, Phase::Decode, 1, [0].into_iter());
        p.speculate(1, [1, 2, 3].into_iter());
        assert!(
            p.is_resident(1, 1) && p.is_resident(1, 2) && !p.is_resident(1, 3),
            "{policy:?}"
        );
        assert!(p.advisor().evicted.is_empty(), "{policy:?}");
        // Settled by its routing, the wrong guess goes first.
        p.route(1, Phase::Decode, 1, [1].into_iter());
        p.route(0, Phase::Decode, 1, [4, 5].into_iter());
        assert!(!p.is_resident(1, 2), "{policy:?}: the wrong guess stayed");
    }
}

#[test]
fn the_audit_counts_every_non_resident_expert_or_only_the_evicted() {
    let mut p = pager(2, 0, 1);
    for e in [0, 1, 2] {
        p.route(0, Phase::Decode, 1, [e].into_iter());
    }
    // Expert 0 was evicted; 1 and 2 are resident; 3..16 were never read.
    let experts = |only_evicted| -> Vec<u32> {
        p.non_resident_ranges(only_evicted)
            .map(|r| expert_of(&r, 0))
            .collect()
    };
    assert_eq!(experts(true), vec![0]);
    assert_eq!(experts(false).len(), N_EXPERT as usize - 2);
    assert_eq!(experts(false)[..2], [0, 3]);
}

/// A prompt's ubatches each select every expert of every layer, layer after layer. With
/// room for 24 of 64 experts, the policy's coldest first (least recently used) evicts each
/// layer's experts just before the next ubatch needs them and keeps nothing; cyclic
/// eviction drops the layers that ran last and keeps at least 24 - 16 = 8 across every
/// ubatch.
#[test]
fn cyclic_prompt_eviction_keeps_experts_across_ubatches_where_lru_keeps_none() {
    let hits_over_4_ubatches = |prompt_eviction: PromptEviction, policy: CachePolicy| {
        let mut p = pager_with(policy, 24, 0, 4);
        p.config.prompt_eviction = prompt_eviction;
        p.config.evict_by = EvictBy::Coldest;
        for _ubatch in 0..4 {
            for layer in 0..4 {
                p.route(layer, Phase::Prompt, 128, 0..N_EXPERT as i32);
                assert!(p.resident_bytes() <= 24 * EXPERT);
                p.order.check(&p.resident);
            }
        }
        p.counters.prompt.cache_hits.get()
    };
    for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
        assert_eq!(hits_over_4_ubatches(PromptEviction::Policy, policy), 0);
        let cyclic = hits_over_4_ubatches(PromptEviction::Cyclic, policy);
        assert!(cyclic >= 3 * 8, "{policy:?}: {cyclic} hits");
    }
}

/// Decode steps of several sessions whose selections outgrow the cache: each step selects
/// the same 8 experts in each of 4 layers (32), with room for 24. Evicting the policy's
/// coldest expert drops, at each layer, the experts of the layers just ahead, which the
/// step needs next: LRU then keeps nothing from one step to the next, and LFU-decay no
/// more than by chance. Evicting the expert whose next use is expected last drops those
/// of the layers just routed first, as Belady's rule would, and every step after the first
/// finds at least 24 - 8 = 16 of its experts resident.
#[test]
fn decode_steps_that_outgrow_the_cache_keep_experts_when_the_next_use_decides() {
    let hits_after_the_first_step = |policy: CachePolicy, evict_by: EvictBy| {
        let mut p = pager_with(policy, 24, 0, 4);
        p.config.evict_by = evict_by;
        let mut hits = Vec::new();
        for _step in 0..6 {
            let before = p.counters.decode.cache_hits.get();
            for layer in 0..4 {
                p.route(layer, Phase::Decode, 4, 0..8);
                assert!(p.resident_bytes() <= 24 * EXPERT);
            }
            hits.push(p.counters.decode.cache_hits.get() - before);
        }
        hits[1..].to_vec()
    };
    assert!(
        hits_after_the_first_step(CachePolicy::Lru, EvictBy::Coldest)
            .iter()
            .all(|&h| h == 0)
    );
    for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
        let hits = hits_after_the_first_step(policy, EvictBy::NextUse);
        assert!(hits.iter().all(|&h| h >= 16), "{policy:?}: {hits:?}");
    }
}

/// Where the cache holds a step's selections, the next use and the policy's coldest agree
/// with the policy: a rarely selected expert goes before a frequent one of any layer.
#[test]
fn the_next_use_still_evicts_the_rarely_selected_first() {
    for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
        let mut p = pager_with(policy, 9, 0, 2);
        // Layer 1's expert 5 is selected once; every other step selects experts 0-3 of
        // both layers, so expert 5 is the only one not selected since.
        p.route(0, Phase::Decode, 1, 0..4);
        p.route(1, Phase::Decode, 1, [0, 1, 2, 3, 5].into_iter());
        for _step in 0..4 {
            p.route(0, Phase::Decode, 1, 0..4);
            p.route(1, Phase::Decode, 1, 0..4);
        }
        // Layer 0 needs room for one more, and only layer 1's experts are not pinned:
        // expert 5 goes, not one of those that layer 1's next routing will select.
        p.route(0, Phase::Decode, 1, 0..5);
        assert!(!p.is_resident(1, 5), "{policy:?}");
        assert_eq!(evicted_experts(&p, 1), vec![5], "{policy:?}");
    }
}

/// The token table's loan grows the budget and takes it back: a larger budget keeps more,
/// and a smaller one evicts the coldest unprotected experts at once, in the policy's order,
/// and never the experts of the routing in progress.
#[test]
fn a_new_budget_is_kept_at_once_and_never_takes_pinned_experts() {
    let mut p = pager(2, 0, 1);
    p.set_budget(4 * EXPERT);
    for e in [0, 1, 2, 3] {
        p.route(0, Phase::Decode, 1, [e].into_iter());
    }
    assert!(
        evicted_experts(&p, 0).is_empty(),
        "4 experts fit the larger budget"
    );
    assert_eq!(p.resident_bytes(), 4 * EXPERT);
    p.set_budget(2 * EXPERT);
    assert_eq!(p.budget(), 2 * EXPERT);
    assert_eq!(
        evicted_experts(&p, 0),
        vec![0, 1],
        "the two least recently used"
    );
    assert_eq!(p.resident_bytes(), 2 * EXPERT);
    assert_eq!(p.advisor().unflushed, 0, "the evictions are flushed");
    // Expert 3 is pinned (the latest routing): a budget of none evicts only expert 2.
    p.set_budget(0);
    assert_eq!(evicted_experts(&p, 0), vec![0, 1, 2]);
    assert!(p.is_resident(0, 3));
}

/// A warm start fills free room only, never evicts, and its experts go before every expert
/// the run used (after demoted guesses); a selected one counts as a warm hit once.
#[test]
fn a_warm_start_fills_free_room_only_and_goes_first_when_room_is_needed() {
    for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
        let mut p = pager_with(policy, 4, 0, 2);
        p.route(0, Phase::Decode, 1, [0].into_iter());
        let mut read = Vec::new();
        assert_eq!(p.warm(1, 5, |r| read.push(r)), Warmed::Taken);
        assert_eq!(
            read,
            [FileRange {
                file: 0,
                offset: (16 + 5) * EXPERT,
                len: EXPERT
            }]
        );
        assert_eq!(p.advisor().unflushed, 0, "advice is flushed");
        assert_eq!(p.warm(1, 5, |_| {}), Warmed::Resident);
        assert_eq!(p.warm(0, 0, |_| {}), Warmed::Resident);
        assert_eq!(p.warm(7, 0, |_| {}), Warmed::NotAnExpert);
        assert_eq!(p.warm(0, 99, |_| {}), Warmed::NotAnExpert);
        assert_eq!(p.warm(1, 6, |_| {}), Warmed::Taken);
        assert_eq!(p.warm(1, 7, |_| {}), Warmed::Taken);
        // Full: nothing is evicted to make room.
        assert_eq!(p.warm(1, 8, |_| {}), Warmed::NoRoom);
        assert!(p.advisor().evicted.is_empty());
        assert_eq!(p.resident_bytes(), 4 * EXPERT);
        assert_eq!(
            (p.counters.warmed.get(), p.counters.warmed_bytes.get()),
            (3, 3 * EXPERT)
        );
        // Layer 1's expert 6 is selected: a cache hit and a warm hit, and now the run's.
        p.route(1, Phase::Decode, 1, [6].into_iter());
        assert_eq!(p.counters.decode.cache_hits.get(), 1);
        assert_eq!(p.counters.warm_hits.get(), 1);
        p.route(1, Phase::Decode, 1, [6].into_iter());
        assert_eq!(p.counters.warm_hits.get(), 1, "a warm hit counts once");
        // Room for two more: the two warm guesses not selected go, the run's stay.
        p.route(0, Phase::Decode, 1, [1, 2].into_iter());
        let mut gone: Vec<FileRange> = p.advisor().evicted.clone();
        gone.sort_by_key(|r| r.offset);
        assert_eq!(
            gone.iter().map(|r| expert_of(r, 1)).collect::<Vec<_>>(),
            [5, 7],
            "{policy:?}"
        );
        assert!(p.is_resident(0, 0) && p.is_resident(1, 6));
        p.check_invariants();
    }
}

/// Experts an earlier run left in the page cache are counted resident with no read, apart
/// from a warm start's, and go first when room is needed until routing selects them.
#[test]
fn adopted_experts_are_held_with_no_read_and_go_first_until_selected() {
    for policy in [CachePolicy::Lru, CachePolicy::DEFAULT] {
        let mut p = pager_with(policy, 3, 0, 2);
        p.route(0, Phase::Decode, 1, [0].into_iter());
        let read_before = p.advisor().will_need.len();
        assert_eq!(p.adopt(1, 5), Warmed::Taken);
        assert_eq!(p.adopt(1, 5), Warmed::Resident);
        assert_eq!(p.adopt(9, 0), Warmed::NotAnExpert);
        assert_eq!(p.adopt(1, 6), Warmed::Taken);
        assert_eq!(p.adopt(1, 7), Warmed::NoRoom, "never evicts");
        assert_eq!(p.advisor().will_need.len(), read_before, "nothing is read");
        assert!(p.advisor().evicted.is_empty());
        assert_eq!(p.resident_bytes(), 3 * EXPERT);
        let c = &p.counters;
        assert_eq!((c.adopted.get(), c.adopted_bytes.get()), (2, 2 * EXPERT));
        assert_eq!(c.warmed.get(), 0);
        // Expert 6 is selected (a hit, the run's now); room for one more takes expert 5.
        p.route(1, Phase::Decode, 1, [6].into_iter());
        assert_eq!(p.counters.warm_hits.get(), 1);
        p.route(0, Phase::Decode, 1, [1].into_iter());
        let gone: Vec<u32> = p
            .advisor()
            .evicted
            .iter()
            .map(|r| expert_of(r, 1))
            .collect();
        assert_eq!(gone, [5], "{policy:?}");
        p.check_invariants();
    }
}

/// Only experts whose every slice is wholly cached are adopted, the given hottest first, then
/// an expert number at a time across the layers, while they fit in the budget.
#[test]
fn cached_experts_are_taken_across_layers_within_the_budget() {
    let layers: Vec<LayerSpec> = (0..3)
        .map(|l| LayerSpec {
            layer: l * 2,
            slices: (0..2)
                .map(|k| ExpertSlice {
                    file: k,
                    offset: u64::from(l) * u64::from(N_EXPERT) * EXPERT,
                    bytes_per_expert: EXPERT,
                })
                .collect(),
        })
        .collect();
    // Cached: every expert but expert 1's slice in file 1 of layer 2.
    let cached = |r: FileRange| !(r.file == 1 && r.offset == u64::from(N_EXPERT) * EXPERT + EXPERT);
    let all = cached_experts(&layers, N_EXPERT, PAGE, u64::MAX, &[], cached);
    assert_eq!(all.len(), 3 * N_EXPERT as usize - 1);
    assert!(!all.contains(&(2, 1)));
    // Two slices per expert: a budget of 5 slices holds two experts.
    let some = cached_experts(&layers, N_EXPERT, PAGE, 5 * EXPERT, &[], cached);
    assert_eq!(some, [(0, 0), (2, 0)]);
    let some = cached_experts(&layers, N_EXPERT, PAGE, 8 * EXPERT, &[], cached);
    assert_eq!(
        some,
        [(0, 0), (2, 0), (4, 0), (0, 1)],
        "layer 2's expert 1 is skipped"
    );
    assert!(cached_experts(&layers, N_EXPERT, PAGE, EXPERT, &[], cached).is_empty());
    // The hottest of past runs first, in their order; then by number. Layer 2's expert 1 is
    // not wholly cached, (1, 0) names no MoE layer, (0, N_EXPERT) no expert, and a repeat is
    // taken once.
    let hot = [(4, 3), (2, 1), (1, 0), (0, N_EXPERT), (0, 2), (4, 3)];
    let some = cached_experts(&layers, N_EXPERT, PAGE, 8 * EXPERT, &hot, cached);
    assert_eq!(some, [(4, 3), (0, 2), (0, 0), (2, 0)]);
    let all_first = cached_experts(&layers, N_EXPERT, PAGE, u64::MAX, &hot, cached);
    assert_eq!(all_first.len(), all.len(), "each expert is taken once");
}

/// Experts per layer, and the gap between one layer's expert tensors and the next's, of
/// [`three_tensor_pager`].
const WHOLE_N: u32 = 8;
const LAYER_GAP: u64 = 4 * PAGE;

/// Where layer `l`'s gate tensor starts in [`three_tensor_pager`]'s file: each layer's
/// gate, up and down tensors lie back to back, `LAYER_GAP` before the next layer's.
fn layer_offset(l: u32) -> u64 {
    layer_offset_of(WHOLE_N, l)
}

/// [`layer_offset`] in [`tensor_pager`]'s file of `n` experts a layer.
fn layer_offset_of(n: u32, l: u32) -> u64 {
    u64::from(l) * (3 * u64::from(n) * EXPERT + LAYER_GAP)
}

/// Layer `l`'s three expert tensors in [`tensor_pager`]'s file of `n` experts a layer,
/// each a range of its own.
fn layer_tensors(n: u32, l: u32) -> Vec<FileRange> {
    let tensor = u64::from(n) * EXPERT;
    (0..3)
        .map(|k| FileRange {
            file: 0,
            offset: layer_offset_of(n, l) + k * tensor,
            len: tensor,
        })
        .collect()
}

/// Four layers of three adjacent expert tensors each (as qwen3moe's GGUFs lay them out),
/// a budget of `budget_layers` whole layers, whole-layer reads allowed on every layer.
fn three_tensor_pager(budget_layers: u64, prompt_reads: PromptReads) -> Pager<Recorder> {
    tensor_pager(WHOLE_N, budget_layers, prompt_reads)
}

/// [`three_tensor_pager`] with `n` experts a layer.
fn tensor_pager(n: u32, budget_layers: u64, prompt_reads: PromptReads) -> Pager<Recorder> {
    let tensor = u64::from(n) * EXPERT;
    let layers = (0..4)
        .map(|l| LayerSpec {
            layer: l,
            slices: (0..3)
                .map(|k| ExpertSlice {
                    file: 0,
                    offset: layer_offset_of(n, l) + k * tensor,
                    bytes_per_expert: EXPERT,
                })
                .collect(),
        })
        .collect();
    let mut p = Pager::new(
        Recorder::default(),
        PagerConfig {
            expert_budget_bytes: budget_layers * 3 * tensor,
            hot_window_tokens: 0,
            page_size: PAGE,
            policy: CachePolicy::Lru,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads,
        },
        n,
        layers,
        Arc::new(PagerCounters::new(0..4, n)),
    );
    for l in 0..4 {
        p.allow_whole_layer_reads(l);
    }
    p
}

#[test]
fn a_prompt_reads_a_mostly_missed_layer_whole_in_one_range() {
    let mut p = three_tensor_pager(2, PromptReads::WholeLayers);
    let layer_bytes = 3 * u64::from(WHOLE_N) * EXPERT;
    // Six of eight experts missed: at least half.
    p.route(0, Phase::Prompt, 6, [0, 1, 2, 3, 4, 5].into_iter());
    assert_eq!(
        p.advisor().whole,
        vec![FileRange {
            file: 0,
            offset: 0,
            len: layer_bytes
        }],
        "one range over the three adjacent tensors"
    );
    assert!(p.advisor().will_need.is_empty());
    assert!((0..WHOLE_N).all(|e| p.is_resident(0, e)));
    assert_eq!(p.resident_bytes(), layer_bytes);
    assert_eq!(p.counters.whole_layer_reads.get(), 1);
    assert_eq!(
        p.counters.whole_layer_unselected_bytes.get(),
        2 * 3 * EXPERT
    );
    // Three of eight missed: below half, so the selected experts alone are read.
    p.route(2, Phase::Prompt, 3, [0, 1, 2].into_iter());
    assert_eq!(p.advisor().whole.len(), 1);
    assert_eq!(p.advisor().will_need.len(), 3 * 3);
    // Decode never reads whole layers.
    p.route(3, Phase::Decode, 8, 0..8);
    assert_eq!(p.advisor().whole.len(), 1);
}

#[test]
fn whole_layer_reads_need_the_option_the_engine_s_leave_and_the_room() {
    // The option off: allowing a layer changes nothing (invariant 12).
    let mut p = three_tensor_pager(2, PromptReads::Experts);
    p.route(0, Phase::Prompt, 8, 0..8);
    assert!(p.advisor().whole.is_empty());
    assert_eq!(p.advisor().will_need.len(), 8 * 3);
    assert!(p.counters.evicted_bytes.get() == 0);
    // A layer the engine did not allow.
    let mut p = three_tensor_pager(2, PromptReads::WholeLayers);
    p.whole_reads[0] = false;
    p.route(0, Phase::Prompt, 8, 0..8);
    assert!(p.advisor().whole.is_empty());
    // A budget below one layer: the selected experts are read, as before.
    let mut p = three_tensor_pager(2, PromptReads::WholeLayers);
    p.config.expert_budget_bytes = 7 * 3 * EXPERT;
    p.route(0, Phase::Prompt, 6, 0..6);
    assert!(p.advisor().whole.is_empty());
    assert_eq!(p.advisor().will_need.len(), 6 * 3);
    assert_eq!(p.resident_bytes(), 6 * 3 * EXPERT);
}

#[test]
fn a_prompt_evicts_a_layer_read_whole_with_one_drop_per_tensor_and_keeps_the_one_it_reads() {
    for prompt_reads in [PromptReads::Experts, PromptReads::WholeLayers] {
        let mut p = three_tensor_pager(2, prompt_reads);
        p.route(0, Phase::Prompt, 8, 0..8);
        p.route(1, Phase::Prompt, 8, 0..8);
        p.route(2, Phase::Prompt, 8, 0..8);
        // The cycle evicted layer 1 (the latest before layer 2): the same experts either way.
        assert!((0..WHOLE_N).all(|e| p.is_resident(0, e) && !p.is_resident(1, e)));
        assert_eq!(p.counters.evictions.get(), u64::from(WHOLE_N));
        let evicted = &p.advisor().evicted;
        match prompt_reads {
            PromptReads::Experts => assert_eq!(evicted.len(), 3 * WHOLE_N as usize),
            PromptReads::WholeLayers => {
                // One drop per tensor, each the tensor's whole bytes.
                assert_eq!(evicted, &layer_tensors(WHOLE_N, 1));
            }
        }
        // A layer partly resident: the room made for the rest of it never takes its own
        // experts (they would be dropped and read again).
        let mut p = three_tensor_pager(2, prompt_reads);
        p.config.expert_budget_bytes = 12 * 3 * EXPERT;
        p.route(0, Phase::Prompt, 8, 0..8);
        p.route(1, Phase::Decode, 2, [6, 7].into_iter());
        // Six missed, two resident and unselected: the cycle's first victims, the layer
        // being routed, unless it is read whole.
        p.route(1, Phase::Prompt, 6, 0..6);
        let kept = (0..WHOLE_N).filter(|&e| p.is_resident(1, e)).count() as u32;
        let dropped_layer_1 = p
            .advisor()
            .evicted
            .iter()
            .any(|r| r.offset >= layer_offset(1) && r.offset < layer_offset(2));
        match prompt_reads {
            PromptReads::Experts => assert!(dropped_layer_1 && kept == 6),
            PromptReads::WholeLayers => {
                assert!(!dropped_layer_1, "dropped part of the layer it reads whole");
                assert_eq!(kept, WHOLE_N);
                assert_eq!(p.advisor().whole.len(), 2);
            }
        }
    }
}

/// Room made an expert at a time (a prompt's guesses for the next layer, too few for a
/// whole read) drops the layer read whole an eighth of its experts at a time where it may
/// be read whole, so that a drop seldom ends inside one of its large folios; by expert
/// otherwise.
#[test]
fn a_prompt_s_guesses_one_by_one_drop_a_layer_read_whole_an_eighth_at_a_time() {
    let n = 32;
    for prompt_reads in [PromptReads::Experts, PromptReads::WholeLayers] {
        let mut p = tensor_pager(n, 2, prompt_reads);
        p.route(0, Phase::Prompt, 32, 0..32);
        p.route(1, Phase::Prompt, 32, 0..32);
        assert_eq!(p.counters.evictions.get(), 0);
        // Three guesses for layer 2, below the whole-layer share: read one by one, each
        // making room for itself.
        p.speculate(2, [3, 17, 29].into_iter());
        assert!([3, 17, 29].iter().all(|&e| p.is_resident(2, e)));
        let drops = &p.advisor().evicted;
        let lens: Vec<u64> = drops.iter().map(|r| r.len).collect();
        match prompt_reads {
            PromptReads::Experts => {
                assert_eq!(p.counters.evictions.get(), 3);
                assert!(lens.iter().all(|&l| l == EXPERT), "{lens:?}");
            }
            PromptReads::WholeLayers => {
                // A first drop of an eighth (4 experts) makes room for all three guesses.
                assert_eq!(p.counters.evictions.get(), 4);
                assert_eq!(lens, vec![4 * EXPERT; 3]);
            }
        }
        // Each drop is of one layer's adjacent experts, within one tensor.
        for r in drops {
            let layer = (0..4)
                .rfind(|&l| layer_offset_of(n, l) <= r.offset)
                .unwrap();
            let tensor = u64::from(n) * EXPERT;
            let k = (r.offset - layer_offset_of(n, layer)) / tensor;
            assert!(r.offset + r.len <= layer_offset_of(n, layer) + (k + 1) * tensor);
        }
    }
}

/// With prediction, a layer's whole read is asked while the layer before computes: the
/// cyclic walk starts at that layer, whose unselected experts lie scattered between the
/// selected ones. Where layers may be read whole it takes a run of an eighth of a layer
/// first, the older layer whole here, rather than the scattered experts one drop each.
#[test]
fn a_whole_read_asked_while_a_layer_computes_takes_room_from_runs_not_scattered_experts() {
    let n = 32;
    for prompt_reads in [PromptReads::Experts, PromptReads::WholeLayers] {
        let mut p = tensor_pager(n, 2, prompt_reads);
        p.route(0, Phase::Prompt, 32, 0..32);
        // Half of layer 1 selected, the even experts.
        p.route(1, Phase::Prompt, 16, (0..32).step_by(2));
        // Every expert of layer 2 guessed while layer 1 computes.
        p.speculate(2, 0..32);
        let drops = &p.advisor().evicted;
        match prompt_reads {
            PromptReads::Experts => {
                // By expert, the cycle's first victims: layer 1's unselected experts.
                assert!((1..32).step_by(2).all(|e| !p.is_resident(1, e)));
            }
            PromptReads::WholeLayers => {
                assert!((0..32).all(|e| p.is_resident(1, e) && p.is_resident(2, e)));
                assert!((0..32).all(|e| !p.is_resident(0, e)));
                // Layer 0 in one drop per tensor.
                assert_eq!(drops, &layer_tensors(n, 0));
                assert_eq!(p.counters.whole_layer_reads.get(), 3);
            }
        }
    }
}

#[test]
fn a_layer_is_read_whole_only_where_its_runs_of_tensors_are_long_enough() {
    let mut p = three_tensor_pager(2, PromptReads::WholeLayers);
    let run = 3 * u64::from(WHOLE_N) * EXPERT;
    assert_eq!(
        layers_readable_whole(&p.layers, WHOLE_N, run),
        vec![0, 1, 2, 3]
    );
    assert!(layers_readable_whole(&p.layers, WHOLE_N, run + 1).is_empty());
    // Layer 1's down tensor elsewhere: its runs are two and one tensors long.
    p.layers[1].slices[2].offset += PAGE;
    assert_eq!(
        layers_readable_whole(&p.layers, WHOLE_N, 2 * run / 3),
        vec![0, 2, 3]
    );
    assert_eq!(
        layers_readable_whole(&p.layers, WHOLE_N, run / 3),
        vec![0, 1, 2, 3]
    );
}

#[test]
fn a_prompt_s_guesses_for_most_of_the_next_layer_read_it_whole() {
    let mut p = three_tensor_pager(2, PromptReads::WholeLayers);
    p.route(0, Phase::Prompt, 8, 0..8);
    // Five of eight guessed: the layer is read whole, ahead of its routing.
    p.speculate(1, [3, 1, 0, 2, 4, 4].into_iter());
    assert_eq!(p.advisor().whole.len(), 2);
    assert_eq!(p.advisor().whole[1].offset, layer_offset(1));
    assert!((0..WHOLE_N).all(|e| p.is_resident(1, e)));
    assert_eq!(p.counters.prompt.prefetch_issued.get(), u64::from(WHOLE_N));
    assert_eq!(
        p.counters.whole_layer_unselected_bytes.get(),
        3 * 3 * EXPERT
    );
    // Its routing finds it resident, read by the guess: nothing more is read.
    p.route(1, Phase::Prompt, 8, 0..8);
    assert_eq!(p.advisor().whole.len(), 2);
    assert!(p.advisor().will_need.is_empty());
    assert_eq!(p.counters.prompt.prefetch_hits.get(), u64::from(WHOLE_N));
    // Three guessed: each guess read by expert, in expert order.
    p.speculate(2, [2, 0, 1].into_iter());
    assert_eq!(p.advisor().whole.len(), 2);
    assert_eq!(p.advisor().will_need.len(), 3 * 3);
    assert_eq!(p.advisor().will_need[0].offset, layer_offset(2));
    // Decode's guesses never read whole layers.
    p.route(2, Phase::Decode, 1, [0].into_iter());
    p.speculate(3, 0..8);
    assert_eq!(p.advisor().whole.len(), 2);
}
