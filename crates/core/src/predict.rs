//! The router math of cross-layer prediction: given a layer's router rows and a hidden
//! state, which experts would llama.cpp's `build_moe_ffn` select? Gating function,
//! selection bias and expert groups follow the model's metadata ([`RoutingRule`]).
//! Allocation-free after construction; the engine's hook feeds it slices it reads from
//! llama.cpp's tensors.

use crate::model::{GatingFunc, RoutingRule};

/// Router logits to the scores experts are selected by, as `build_moe_ffn` computes them.
/// Only needed when a bias is added or groups are ranked: every gating function is
/// monotonic, so plain top-k on the logits selects the same experts.
pub fn gate(scores: &mut [f32], gating: GatingFunc) {
    match gating {
        GatingFunc::Sigmoid => scores
            .iter_mut()
            .for_each(|s| *s = 1.0 / (1.0 + (-*s).exp())),
        // Softmax over the chosen experts' weights only: selection uses the logits.
        GatingFunc::SoftmaxWeight | GatingFunc::Unknown(_) => {}
        // sqrt(softplus(x)), softplus written so it cannot overflow.
        GatingFunc::SqrtSoftplus => scores
            .iter_mut()
            .for_each(|s| *s = (s.max(0.0) + (-s.abs()).exp().ln_1p()).sqrt()),
        GatingFunc::Softmax => {
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
    }
}

/// Keep the `used` best of `group_scores.len()` equal groups of experts, ranked by the sum of
/// each group's two best scores; every expert of the other groups gets -inf.
pub fn mask_groups(scores: &mut [f32], group_scores: &mut [f32], kept: &mut [bool], used: usize) {
    let groups = group_scores.len();
    let per = scores.len() / groups.max(1);
    if per < 2 || used >= groups {
        return;
    }
    for (g, chunk) in scores.chunks_exact(per).enumerate() {
        let (mut best, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &v in chunk {
            if v > best {
                second = best;
                best = v;
            } else if v > second {
                second = v;
            }
        }
        group_scores[g] = best + second;
        kept[g] = false;
    }
    for _ in 0..used {
        let pick = (0..groups)
            .filter(|&g| !kept[g])
            .fold(None, |m: Option<usize>, g| match m {
                Some(b) if group_scores[b] >= group_scores[g] => Some(b),
                _ => Some(g),
            });
        if let Some(g) = pick {
            kept[g] = true;
        }
    }
    for (g, chunk) in scores.chunks_exact_mut(per).enumerate() {
        if !kept[g] {
            chunk.fill(f32::NEG_INFINITY);
        }
    }
}

/// A dot product in eight independent lanes, which the compiler turns into SIMD; a single
/// running sum is one long dependency chain, about 8x slower. The sum order differs from a
/// sequential one only in rounding, and the result only chooses what to prefetch.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A layer's bias vectors (`n_expert` f32 each), where `build_moe_ffn` adds them.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouterBiases<'a> {
    /// The router's own bias (`ffn_gate_inp.bias`), added to the logits before gating.
    pub logit: Option<&'a [f32]>,
    /// The expert-selection bias (`exp_probs_b`), added to the gated scores; it chooses
    /// experts but does not weight them.
    pub selection: Option<&'a [f32]>,
}

/// How many of the experts a prediction names for each token of a decode step are read in
/// (a prefill ubatch's prediction, the union over its tokens, reads every pick).
///
/// The experts a stale gate ranks last are the ones a prediction gets wrong: they sit at the
/// edge of the top-k, where the next layer's own hidden state most often swaps them with
/// the first ones left out. On W1 (8 of 128 per token; `validate/predict-reads-w1-*.json`,
/// STATUS.md #22) the issued guesses of ranks 1-6 were right about 96% of the time and
/// those of ranks 7-8 about 65%; reading only the first six cut the bytes read per decode
/// step by 9-11% (at 4 and 8 GiB), 80% of the wasted reads, and decoded 1.10x as fast on a
/// disk throttled to 300 MB/s, where the bytes are the time, and at par on a fast disk,
/// where the later reads of the guesses left out cost about what the bytes saved. How
/// right each rank is depends on the model's routers, so by default the share is measured
/// as the run goes ([`RankScore`]) rather than fixed from W1's synthetic routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PredictReads {
    /// The best ranks whose guesses have been right at least [`READ_ABOVE`] of the time
    /// ([`RankScore::reads`]); `Confident`'s share until every rank has been scored.
    #[default]
    Measured,
    /// The best-scored three quarters of the `n_used` (rounded up).
    Confident,
    /// All `n_used`.
    All,
}

impl PredictReads {
    /// How many of a token's `n_used` predicted experts are read before any guess has been
    /// scored (for `Measured`), or always (the others).
    pub fn per_token(self, n_used: usize) -> usize {
        match self {
            PredictReads::Measured | PredictReads::Confident => (3 * n_used).div_ceil(4),
            PredictReads::All => n_used,
        }
    }
}

/// A rank's guesses are read while they are right at least this share of the time. A rank
/// right four times in five wastes at most a fifth of the bytes it reads; on W1 the ranks
/// worth reading were right 96% of the time and those not worth it 65% (above).
pub const READ_ABOVE: f64 = 0.8;
/// A rank's accuracy counts once it has been scored this many times.
pub const MIN_SCORED: u32 = 64;
/// Scores are halved when a rank reaches this many, so the latest guesses weigh most (a
/// conversation's topic moves the routing).
pub const SCORE_WINDOW: u32 = 4096;

/// How often each rank of a decode token's prediction named an expert that the layer's
/// routing then selected, over the latest guesses, and from it how many of the best ranks
/// are worth reading. Every rank is scored, read or not, so a rank left out can come back.
///
/// Invariants (checked by `rank_score_invariants_hold`):
/// 1. `right` and `scored` have one entry per rank (`n_used`), sized at construction, so
///    recording never allocates;
/// 2. `right[r] <= scored[r] < SCORE_WINDOW` for every rank, after every `record`.
#[derive(Debug, Clone)]
pub struct RankScore {
    right: Vec<u32>,
    scored: Vec<u32>,
}

impl RankScore {
    pub fn new(n_used: usize) -> RankScore {
        RankScore {
            right: vec![0; n_used],
            scored: vec![0; n_used],
        }
    }

    /// The guess of rank `rank` (0 the best-scored) was `right`. Ranks past `n_used` are
    /// ignored.
    pub fn record(&mut self, rank: usize, right: bool) {
        let (Some(r), Some(n)) = (self.right.get_mut(rank), self.scored.get_mut(rank)) else {
            return;
        };
        *n += 1;
        *r += u32::from(right);
        if *n >= SCORE_WINDOW {
            // Floors keep `right <= scored` (invariant 2).
            *n /= 2;
            *r /= 2;
        }
    }

    /// The share of rank `rank`'s guesses that were right, once it has been scored
    /// [`MIN_SCORED`] times.
    pub fn accuracy(&self, rank: usize) -> Option<f64> {
        let n = *self.scored.get(rank)?;
        (n >= MIN_SCORED).then(|| f64::from(self.right[rank]) / f64::from(n))
    }

    /// How many of the best ranks to read: up to the first rank right less than
    /// [`READ_ABOVE`] of the time (none when even the best is), or `unscored` while a rank
    /// before that has too few scores to tell.
    pub fn reads(&self, unscored: usize) -> usize {
        for rank in 0..self.scored.len() {
            match self.accuracy(rank) {
                None => return unscored,
                Some(a) if a < READ_ABOVE => return rank,
                Some(_) => {}
            }
        }
        self.scored.len()
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        assert_eq!(self.right.len(), self.scored.len(), "1");
        for (r, n) in self.right.iter().zip(&self.scored) {
            assert!(r <= n && *n < SCORE_WINDOW, "2: {r} right of {n}");
        }
    }
}

/// Applies one layer's router to tokens and collects the distinct experts it selects.
///
/// Invariants:
/// 1. `scores` and `picked` have `n_expert` entries, `group_scores` and `group_kept`
///    `rule.groups` (0 when groups do not apply), all sized at construction;
/// 2. `chosen` holds distinct experts, each marked in `picked`, so its capacity of
///    `n_expert` always suffices and pushing never allocates;
/// 3. `ranked.len() <= ranked_max`, its capacity from construction (`keep_ranks`), so
///    pushing never allocates.
#[derive(Debug, Clone)]
pub struct Selector {
    n_embd: usize,
    n_expert: usize,
    n_used: usize,
    /// How many of each token's `n_used` best-scored experts are collected
    /// (`PredictReads::per_token`, never more than `n_used`).
    picks: usize,
    rule: RoutingRule,
    scores: Vec<f32>,
    group_scores: Vec<f32>,
    group_kept: Vec<bool>,
    picked: Vec<bool>,
    chosen: Vec<i32>,
    /// With `keep_ranks`: each token's whole selection since `clear`, best-scored first,
    /// `n_used` a token, read or not (what [`RankScore`] scores).
    ranked: Vec<i32>,
    ranked_max: usize,
}

impl Selector {
    /// `None` when the gating function is unknown: selection could not be reproduced.
    pub fn new(
        n_embd: usize,
        n_expert: usize,
        n_used: usize,
        mut rule: RoutingRule,
    ) -> Option<Selector> {
        if matches!(rule.gating_func, GatingFunc::Unknown(_)) {
            return None;
        }
        if rule.groups < 2 || n_expert % rule.groups as usize != 0 {
            rule.groups = 0;
        }
        Some(Selector {
            n_embd,
            n_expert,
            n_used: n_used.min(n_expert),
            picks: n_used.min(n_expert),
            rule,
            scores: vec![0.0; n_expert],
            group_scores: vec![0.0; rule.groups as usize],
            group_kept: vec![false; rule.groups as usize],
            picked: vec![false; n_expert],
            chosen: Vec::with_capacity(n_expert),
            ranked: Vec::new(),
            ranked_max: 0,
        })
    }

    /// Keep the whole ranked selection of up to `tokens` tokens a prediction (`ranked`).
    pub fn keep_ranks(&mut self, tokens: usize) {
        self.ranked_max = tokens * self.n_used;
        self.ranked = Vec::with_capacity(self.ranked_max);
    }

    /// From now on collect only `reads`' share of each token's selection, the best-scored
    /// first.
    pub fn set_reads(&mut self, reads: PredictReads) {
        self.set_picks(reads.per_token(self.n_used));
    }

    /// From now on collect each token's `picks` best-scored experts (at most `n_used`).
    pub fn set_picks(&mut self, picks: usize) {
        self.picks = picks.min(self.n_used);
    }

    /// Experts the model routes each token to.
    pub fn n_used(&self) -> usize {
        self.n_used
    }

    /// How many experts each token adds at most.
    pub fn picks(&self) -> usize {
        self.picks
    }

    pub fn n_embd(&self) -> usize {
        self.n_embd
    }

    pub fn n_expert(&self) -> usize {
        self.n_expert
    }

    /// Start a new selection (a new layer's prediction).
    pub fn clear(&mut self) {
        self.chosen.clear();
        self.ranked.clear();
        self.picked.fill(false);
    }

    /// Add the experts selected for one token: `router` holds `n_expert` rows of `n_embd`
    /// f32, `hidden` the token's `n_embd` f32, `biases` the layer's optional bias vectors.
    pub fn add_token(&mut self, router: &[f32], hidden: &[f32], biases: RouterBiases<'_>) {
        let n = self.n_embd;
        for (e, score) in self.scores.iter_mut().enumerate() {
            *score = dot(&router[e * n..(e + 1) * n], hidden);
        }
        if let Some(b) = biases.logit {
            self.scores.iter_mut().zip(b).for_each(|(s, b)| *s += b);
        }
        let grouped = !self.group_scores.is_empty();
        if biases.selection.is_some() || grouped {
            gate(&mut self.scores, self.rule.gating_func);
        }
        if let Some(b) = biases.selection {
            self.scores.iter_mut().zip(b).for_each(|(s, b)| *s += b);
        }
        if grouped {
            mask_groups(
                &mut self.scores,
                &mut self.group_scores,
                &mut self.group_kept,
                self.rule.groups_used as usize,
            );
        }
        let ranking = self.ranked_max > 0 && self.ranked.len() + self.n_used <= self.ranked_max;
        let ranks = if ranking { self.n_used } else { self.picks };
        for rank in 0..ranks {
            let (best, _) =
                self.scores
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f32::NEG_INFINITY),
                        |m, (i, &v)| {
                            if v > m.1 {
                                (i, v)
                            } else {
                                m
                            }
                        },
                    );
            self.scores[best] = f32::NEG_INFINITY;
            if ranking {
                self.ranked.push(best as i32);
            }
            if rank < self.picks && !self.picked[best] {
                self.picked[best] = true;
                self.chosen.push(best as i32);
            }
        }
    }

    /// The distinct experts selected since `clear`, in first-selected order.
    pub fn chosen(&self) -> &[i32] {
        &self.chosen
    }

    /// With `keep_ranks`: every token's whole selection since `clear`, `n_used` a token in
    /// rank order (tokens past the capacity left out).
    pub fn ranked(&self) -> &[i32] {
        &self.ranked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_the_best_by_their_top_two() {
        // 4 groups of 3: sums of the top two are 0.9+0.8, 1.0+0.1, 0.5+0.5, 0.7+0.6.
        let mut scores = [0.9, 0.8, 0.1, 1.0, 0.1, 0.0, 0.5, 0.5, 0.2, 0.7, 0.6, 0.0];
        let (mut gs, mut kept) = ([0.0; 4], [false; 4]);
        mask_groups(&mut scores, &mut gs, &mut kept, 2);
        assert_eq!(kept, [true, false, false, true]);
        assert!(scores[3..9].iter().all(|s| *s == f32::NEG_INFINITY));
        assert_eq!(scores[0], 0.9);
        assert_eq!(scores[10], 0.6);
    }

    #[test]
    fn gating_functions_match_their_definitions() {
        let mut s = [0.0f32, 1.0, -1.0];
        gate(&mut s, GatingFunc::Sigmoid);
        assert!((s[0] - 0.5).abs() < 1e-6 && (s[1] - 0.731_058_6).abs() < 1e-6);
        let mut s = [1.0f32, 2.0, 3.0];
        gate(&mut s, GatingFunc::Softmax);
        assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s[2] > s[1]);
        let mut s = [100.0f32, 0.0];
        gate(&mut s, GatingFunc::SqrtSoftplus);
        assert!((s[0] - 10.0).abs() < 1e-4 && (s[1] - 2f32.ln().sqrt()).abs() < 1e-6);
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..2051).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..2051).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
        assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-3);
        assert_eq!(dot(&[2.0; 3], &[0.5; 3]), 3.0);
    }

    #[test]
    fn selector_picks_top_k_distinct_over_tokens_with_bias_and_groups() {
        // 4 experts, n_embd 2: router rows are e0=(1,0) e1=(0,1) e2=(1,1) e3=(-1,0).
        let router = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.0];
        let rule = RoutingRule::default();
        let mut sel = Selector::new(2, 4, 2, rule).unwrap();
        sel.clear();
        let none = RouterBiases::default();
        sel.add_token(&router, &[1.0, 0.1], none); // scores 1, 0.1, 1.1, -1 -> 2, 0
        assert_eq!(sel.chosen(), &[2, 0]);
        sel.add_token(&router, &[0.0, 1.0], none); // 0, 1, 1, 0 -> 1, 2 (2 already chosen)
        assert_eq!(sel.chosen(), &[2, 0, 1]);
        // A bias that favours expert 3 enough changes the pick.
        let favour_3 = [0.0, 0.0, 0.0, 5.0];
        sel.clear();
        sel.add_token(
            &router,
            &[1.0, 0.1],
            RouterBiases {
                selection: Some(&favour_3),
                ..none
            },
        );
        assert!(sel.chosen().contains(&3));
        // Two groups of two, one used. After softmax, group {0, 1} scores e^1 + e^0.1 = 3.82
        // against e^1.1 + e^-1 = 3.37 for {2, 3}, so only experts 0 and 1 remain, although
        // expert 2 alone scores highest.
        let grouped = RoutingRule {
            groups: 2,
            groups_used: 1,
            ..RoutingRule::default()
        };
        let mut sel = Selector::new(2, 4, 2, grouped).unwrap();
        sel.clear();
        sel.add_token(&router, &[1.0, 0.1], none);
        let mut got = sel.chosen().to_vec();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert!(Selector::new(
            2,
            4,
            2,
            RoutingRule {
                gating_func: GatingFunc::Unknown(9),
                ..RoutingRule::default()
            }
        )
        .is_none());
    }

    /// `Confident` keeps each token's best-scored three quarters of its selection, rounded
    /// up; `All` keeps all of it.
    #[test]
    fn confident_reads_keep_the_best_scored_three_quarters() {
        assert_eq!(
            [1, 2, 4, 6, 8].map(|k| PredictReads::Confident.per_token(k)),
            [1, 2, 3, 5, 6]
        );
        assert_eq!(PredictReads::All.per_token(8), 8);
        // 8 experts, n_embd 1: expert e scores e (7 best), so the top 4 are 7, 6, 5, 4.
        let router: Vec<f32> = (0..8).map(|e| e as f32).collect();
        let mut all = Selector::new(1, 8, 4, RoutingRule::default()).unwrap();
        let mut confident = all.clone();
        confident.set_reads(PredictReads::Confident);
        assert_eq!((all.picks(), confident.picks()), (4, 3));
        for sel in [&mut all, &mut confident] {
            sel.clear();
            sel.add_token(&router, &[1.0], RouterBiases::default());
        }
        assert_eq!(all.chosen(), &[7, 6, 5, 4]);
        assert_eq!(confident.chosen(), &[7, 6, 5]);
        // A second token adds its own best three.
        confident.add_token(&router, &[-1.0], RouterBiases::default());
        assert_eq!(confident.chosen(), &[7, 6, 5, 0, 1, 2]);
        // Set back to all, it collects all four again.
        confident.set_reads(PredictReads::All);
        confident.clear();
        confident.add_token(&router, &[1.0], RouterBiases::default());
        assert_eq!(confident.chosen(), all.chosen());
    }

    /// `keep_ranks` keeps each token's whole ranking while `chosen` holds only the picks
    /// read, and stops at its capacity.
    #[test]
    fn ranks_are_kept_whole_while_only_the_picks_are_chosen() {
        let router: Vec<f32> = (0..8).map(|e| e as f32).collect();
        let mut sel = Selector::new(1, 8, 4, RoutingRule::default()).unwrap();
        sel.keep_ranks(2);
        sel.set_picks(2);
        sel.clear();
        sel.add_token(&router, &[1.0], RouterBiases::default());
        sel.add_token(&router, &[-1.0], RouterBiases::default());
        assert_eq!(sel.chosen(), &[7, 6, 0, 1]);
        assert_eq!(sel.ranked(), &[7, 6, 5, 4, 0, 1, 2, 3]);
        // A third token is chosen from but not ranked: the buffer never grows.
        sel.add_token(&router, &[0.5], RouterBiases::default());
        assert_eq!(sel.ranked().len(), 8);
        assert_eq!(sel.chosen(), &[7, 6, 0, 1]);
        sel.set_picks(0);
        sel.clear();
        sel.add_token(&router, &[1.0], RouterBiases::default());
        assert!(sel.chosen().is_empty());
        assert_eq!(sel.ranked(), &[7, 6, 5, 4]);
        sel.set_picks(99);
        assert_eq!(sel.picks(), 4);
    }

    /// Ranks are read up to the first that measured below `READ_ABOVE`; before every rank
    /// up to there has `MIN_SCORED` scores, the fallback; old scores fade.
    #[test]
    fn rank_score_reads_the_ranks_right_often_enough() {
        let mut score = RankScore::new(4);
        assert_eq!(score.reads(3), 3, "nothing scored yet");
        // Ranks right 96%, 90%, 65% and 85% of the time.
        let right_in_100 = [96, 90, 65, 85];
        for i in 0..100 {
            for (rank, share) in right_in_100.iter().enumerate() {
                score.record(rank, i < *share);
            }
            score.check_invariants();
        }
        assert_eq!(score.accuracy(0), Some(0.96));
        assert_eq!(score.reads(3), 2, "the third rank is below the line");
        // Rank 2 improves: all four are read once its running share passes 0.8.
        for _ in 0..1000 {
            for rank in 0..4 {
                score.record(rank, true);
            }
        }
        assert_eq!(score.reads(1), 4);
        // A best rank that is mostly wrong: nothing read.
        let mut poor = RankScore::new(2);
        for i in 0..MIN_SCORED {
            poor.record(0, i % 2 == 0);
            poor.record(1, true);
        }
        assert_eq!(poor.reads(1), 0);
        // Too few scores at a rank before the first weak one: the fallback.
        let mut young = RankScore::new(2);
        for _ in 0..MIN_SCORED - 1 {
            young.record(0, true);
            young.record(1, true);
        }
        assert_eq!(young.reads(1), 1);
        // Ranks past n_used are ignored; the window halves the counts and keeps the share.
        young.record(7, true);
        for _ in 0..3 * SCORE_WINDOW {
            young.record(0, false);
            young.check_invariants();
        }
        assert!(young.accuracy(0).unwrap() < 0.01);
        assert_eq!(young.reads(1), 0);
    }

    /// The invariants hold through a long mixed run.
    #[test]
    fn rank_score_invariants_hold() {
        let mut score = RankScore::new(8);
        let mut x = 12345u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            score.record((x % 9) as usize, x % 3 != 0);
            score.check_invariants();
        }
    }

    /// The router's bias goes into the logits before gating, the selection bias onto the
    /// gated scores after it, as `build_moe_ffn` adds them.
    #[test]
    fn logit_bias_applies_before_gating_and_selection_bias_after() {
        // Two experts, n_embd 1: logits 1.0 and 0.9.
        let router = [1.0, 0.9];
        let sigmoid = RoutingRule {
            gating_func: GatingFunc::Sigmoid,
            ..RoutingRule::default()
        };
        let mut sel = Selector::new(1, 2, 1, sigmoid).unwrap();
        let pick = |sel: &mut Selector, b: RouterBiases<'_>| {
            sel.clear();
            sel.add_token(&router, &[1.0], b);
            sel.chosen()[0]
        };
        assert_eq!(pick(&mut sel, RouterBiases::default()), 0);
        // +0.2 on expert 1's logit: 1.1 > 1.0, expert 1.
        let lift = [0.0, 0.2];
        let logit = RouterBiases {
            logit: Some(&lift),
            ..RouterBiases::default()
        };
        assert_eq!(pick(&mut sel, logit), 1);
        // Both: sigmoid(1.0) = 0.731 + 0.15 = 0.881 against sigmoid(1.1) = 0.750.
        let favour_0 = [0.15, 0.0];
        let both = RouterBiases {
            logit: Some(&lift),
            selection: Some(&favour_0),
        };
        assert_eq!(pick(&mut sel, both), 0);
    }
}
