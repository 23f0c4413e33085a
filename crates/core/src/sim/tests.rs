use super::*;

use crate::pager::{EvictBy, Phase, PromptEviction, PromptReads};

/// One layer, decode steps of one expert each: the classic page-reference string.
fn single(refs: &[u16]) -> Vec<Step> {
    refs.iter()
        .map(|&e| Step::token(0, Phase::Decode, &[e]))
        .collect()
}

fn units(n_layers: u32) -> Costs {
    Costs::units(0..n_layers)
}

fn run(kind: PolicyKind, steps: &[Step], capacity: u64) -> Outcome {
    let c = units(1);
    let mut p = kind.build(steps, &c, 64, capacity, capacity as usize);
    replay(steps, p.as_mut(), capacity, &c, None)
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
    // `lfu-decay` is the pager's default, replayed through the pager: the same as
    // naming its decay.
    let s = single(&[1, 1, 1, 2, 3, 2, 3, 2, 3, 4, 1, 2, 3]);
    let a = run(PolicyKind::LfuDecay, &s, 3);
    let b = run(
        PolicyKind::LfuDecayAt((decay * 1000.0).round() as u16),
        &s,
        3,
    );
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
    let c = units(1);
    let mut p = static_top::StaticTop::new(&s, 3, &c);
    let o = replay(&s, &mut p, 3, &c, None);
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
        Step::token(0, Phase::Prompt, &[1, 2, 3]),
        Step::token(0, Phase::Decode, &[1, 2, 3]),
    ];
    let c = units(1);
    for name in PolicyKind::ALL {
        let mut p = name.build(&s, &c, 64, 2, 2);
        let o = replay(&s, p.as_mut(), 2, &c, None);
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
        refs.push(Step::token((i % 2) as u32, Phase::Decode, &[e]));
    }
    let c = units(2);
    let opt = {
        let mut p = PolicyKind::Belady.build(&refs, &c, 64, 16, 16);
        replay(&refs, p.as_mut(), 16, &c, None)
    };
    for name in PolicyKind::ALL {
        let mut p = name.build(&refs, &c, 64, 16, 16);
        let mut guesses = simulated_guesses(&refs, 0.9, 64);
        let o = replay(&refs, p.as_mut(), 16, &c, Some(&mut guesses));
        assert!(p.resident_bytes() <= 16, "{name}");
        assert!(o.peak_decode_resident_bytes <= 16, "{name}");
        assert!(
            o.hits <= opt.hits,
            "{name} beat Belady: {} > {}",
            o.hits,
            opt.hits
        );
        assert!(o.hits > 0, "{name}");
    }
}

/// Per-layer quotas cannot hold a routing that selects more than a layer's share: each
/// layer keeps its pins until it routes again, past the capacity, and the replay says so.
/// The pager's policies evict other layers' experts instead and stay within it.
#[test]
fn a_quota_outgrown_by_its_routing_is_reported_over_capacity() {
    // Two layers, capacity 4 (a quota of 2 each), every step selecting 3 of each.
    let steps: Vec<Step> = (0..20u16)
        .flat_map(|i| {
            let e = i % 2;
            [
                Step::token(0, Phase::Decode, &[e, e + 2, e + 4]),
                Step::token(1, Phase::Decode, &[e, e + 2, e + 4]),
            ]
        })
        .collect();
    let c = units(2);
    let peak = |kind: PolicyKind| {
        let mut p = kind.build(&steps, &c, 64, 4, 4);
        replay(&steps, p.as_mut(), 4, &c, None).peak_decode_resident_bytes
    };
    for kind in [PolicyKind::PerLayerLru, PolicyKind::PerLayerLfu] {
        assert_eq!(peak(kind), 6, "{}", kind.name());
    }
    for kind in [
        PolicyKind::Lru,
        PolicyKind::LfuDecay,
        PolicyKind::LfuDecayColdest,
    ] {
        assert!(peak(kind) <= 4, "{}", kind.name());
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

/// A trace of two layers: a prompt ubatch of 16 tokens, then decode steps whose
/// routing drifts.
fn drifting_trace() -> Vec<Step> {
    let mut x = 99u64;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let mut steps = Vec::new();
    for layer in 0..2 {
        let ids: Vec<u16> = (0..16 * 4).map(|_| next(32) as u16).collect();
        let mut s = Step::token(layer, Phase::Prompt, &ids);
        s.n_tokens = 16;
        steps.push(s);
    }
    for t in 0..300u64 {
        for layer in 0..2 {
            let base = (t / 50) * 3;
            let ids: Vec<u16> = (0..4).map(|_| ((base + next(8)) % 32) as u16).collect();
            steps.push(Step::token(layer, Phase::Decode, &ids));
        }
    }
    steps
}

#[test]
fn the_pagers_policies_replay_exactly_what_the_pager_counts() {
    use crate::pager::{Advisor, FileRange, Pager, PagerConfig};
    use crate::stats::PagerCounters;
    struct Nothing;
    impl Advisor for Nothing {
        fn will_need(&mut self, _: FileRange) {}
        fn evict(&mut self, r: FileRange) -> u64 {
            r.len
        }
    }
    let steps = drifting_trace();
    let c = units(2);
    for (kind, policy) in [
        (PolicyKind::Lru, CachePolicy::Lru),
        (PolicyKind::LfuDecay, CachePolicy::DEFAULT),
        (PolicyKind::Lfu, CachePolicy::LfuDecay { decay: 1.0 }),
    ] {
        let counters = std::sync::Arc::new(PagerCounters::new([0, 1], 32));
        let config = PagerConfig {
            expert_budget_bytes: 20,
            hot_window_tokens: 0,
            page_size: 1,
            policy,
            prompt_eviction: PromptEviction::default(),
            evict_by: EvictBy::default(),
            prompt_reads: PromptReads::default(),
        };
        let mut pager = Pager::new(Nothing, config, 32, c.layers.clone(), counters.clone());
        for s in &steps {
            pager.route(
                s.layer,
                s.phase,
                s.n_tokens,
                s.ids.iter().map(|&e| i32::from(e)),
            );
        }
        let mut p = kind.build(&steps, &c, 32, 20, 20);
        let o = replay(&steps, p.as_mut(), 20, &c, None);
        assert_eq!(o.hits, counters.decode.cache_hits.get(), "{kind}");
        assert_eq!(o.selected, counters.decode.selected.get(), "{kind}");
        assert!(o.hits > 0 && o.hits < o.selected, "{kind}: {o:?}");
    }
}
