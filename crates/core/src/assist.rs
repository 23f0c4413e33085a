//! Whether the hook shares a routing step's system calls with its assisting thread, chosen
//! step by step from what each way has cost on this machine.
//!
//! The two threads make page-cache calls on one file and contend for its locks. Where the
//! kernel's work per page is dear, a shared step is shorter: W1 at 8 GiB on the AMD EPYC VM,
//! the hook took 41 ms per decode token shared against 58 alone, and decode ran 1.065x.
//! Where it is cheap the contention costs more than the second core gives: on the Intel
//! Xeon VM 38 against 32 ms, and decode ran 0.96x (STATUS). So by default the hook times
//! its steps both ways, as wall time per byte advised, makes most steps the cheaper way,
//! and keeps making a random one step in about [`EXPLORE_ONE_IN`] the other way, so that
//! a change (a prompt's larger steps, a busier kernel) is seen. Neither way changes what is read or
//! evicted, only which thread makes the calls.

/// Steps each way that are timed, alternately, before either is preferred.
pub const WARMUP_STEPS: u32 = 8;

/// Steps between two looks at the ways' costs; the preferred way changes only then.
pub const EPOCH_STEPS: u32 = 256;

/// On average one step in this many is made the way not preferred, drawn at random: a
/// fixed period would meet the same layers every token (16 divides 48), and layers differ
/// in what their steps cost.
pub const EXPLORE_ONE_IN: u64 = 16;

/// Weight of the latest epoch in a way's running cost.
const EPOCH_WEIGHT: f64 = 0.25;

/// The way not preferred takes over only when its running cost is below this share of the
/// preferred way's, so that noise alone does not flip the choice.
const SWITCH_BELOW: f64 = 0.9;

/// How a step's calls are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepWay {
    /// All on the hook's thread.
    Alone,
    /// Taken from one list by the hook's thread and the assisting one.
    Shared,
}

impl StepWay {
    fn other(self) -> StepWay {
        match self {
            StepWay::Alone => StepWay::Shared,
            StepWay::Shared => StepWay::Alone,
        }
    }

    fn index(self) -> usize {
        match self {
            StepWay::Alone => 0,
            StepWay::Shared => 1,
        }
    }
}

/// `--assist-thread`: which way the hook makes its steps when it has an assisting thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssistMode {
    /// Every step shared.
    Always,
    /// The way that costs less here, measured as the run goes (module doc).
    Measured,
}

/// Wall time and bytes of one way's steps within an epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    steps: u32,
    ns: f64,
    bytes: f64,
}

impl Sums {
    /// Nanoseconds per byte advised: the ratio of the sums, so that a large step counts by
    /// its bytes rather than as one sample.
    fn per_byte(&self) -> Option<f64> {
        (self.bytes > 0.0).then(|| self.ns / self.bytes)
    }
}

/// Invariants (checked in the tests below):
/// 1. `epoch[w]` sums only steps made way `w` that advised at least one byte, since the
///    last look; `cost[w]` is `None` until the warm-up ends, then averages epochs' costs;
/// 2. until both ways have [`WARMUP_STEPS`] steps, `next_way` returns the way with fewer
///    (shared on a tie), so both are timed on steps of the same kind, and the cheaper
///    becomes `preferred`;
/// 3. after that, `preferred` changes only at the end of an epoch of [`EPOCH_STEPS`]
///    steps, when the other way's running cost is below [`SWITCH_BELOW`] of its own;
///    `next_way` returns the other way for a random one step in about
///    [`EXPLORE_ONE_IN`], `preferred` otherwise;
/// 4. in [`AssistMode::Always`], `next_way` is always [`StepWay::Shared`], `record` keeps
///    nothing, and `preferred` stays shared.
#[derive(Debug, Clone)]
pub struct AssistChoice {
    mode: AssistMode,
    epoch: [Sums; 2],
    cost: [Option<f64>; 2],
    preferred: StepWay,
    /// xorshift64 state for the exploration draw (fixed seed: a run is repeatable).
    draw: u64,
}

impl AssistChoice {
    pub fn new(mode: AssistMode) -> AssistChoice {
        AssistChoice {
            mode,
            epoch: [Sums::default(); 2],
            cost: [None; 2],
            preferred: StepWay::Shared,
            draw: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn warm(&self) -> bool {
        self.cost.iter().all(Option::is_some)
    }

    fn next_draw(&mut self) -> u64 {
        let mut x = self.draw;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.draw = x;
        x
    }

    /// The way to make the next step (invariants 2-4). Call it only for steps that will be
    /// [`record`](Self::record)ed.
    pub fn next_way(&mut self) -> StepWay {
        if self.mode == AssistMode::Always {
            return StepWay::Shared;
        }
        if !self.warm() {
            let [alone, shared] = &self.epoch;
            return if alone.steps < shared.steps {
                StepWay::Alone
            } else {
                StepWay::Shared
            };
        }
        if self.next_draw() % EXPLORE_ONE_IN == 0 {
            self.preferred.other()
        } else {
            self.preferred
        }
    }

    /// A step made `way` took `ns` of wall time for calls covering `bytes`.
    pub fn record(&mut self, way: StepWay, ns: u64, bytes: u64) {
        // Sharing every step, nothing is chosen: `preferred` stays shared (invariant 4).
        if bytes == 0 || self.mode == AssistMode::Always {
            return;
        }
        let e = &mut self.epoch[way.index()];
        e.steps += 1;
        e.ns += ns as f64;
        e.bytes += bytes as f64;
        let [alone, shared] = &self.epoch;
        if !self.warm() {
            if alone.steps >= WARMUP_STEPS && shared.steps >= WARMUP_STEPS {
                self.cost = self.epoch.map(|e| e.per_byte());
                self.look();
            }
            return;
        }
        if alone.steps + shared.steps >= EPOCH_STEPS {
            for (cost, e) in self.cost.iter_mut().zip(&self.epoch) {
                if let (Some(c), Some(now)) = (cost.as_mut(), e.per_byte()) {
                    *c += (now - *c) * EPOCH_WEIGHT;
                }
            }
            self.look();
        }
    }

    /// End an epoch: prefer the other way if it is cheaper by the margin (invariant 3).
    fn look(&mut self) {
        self.epoch = [Sums::default(); 2];
        let other = self.preferred.other();
        if let (Some(mine), Some(theirs)) = (self.per_byte(self.preferred), self.per_byte(other)) {
            if theirs < mine * SWITCH_BELOW {
                self.preferred = other;
            }
        }
    }

    /// The way most steps are made now.
    pub fn preferred(&self) -> StepWay {
        self.preferred
    }

    /// A way's running cost in nanoseconds per byte advised, once the warm-up has ended.
    pub fn per_byte(&self, way: StepWay) -> Option<f64> {
        self.cost[way.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `n` steps of 1 MiB, step `i` costing `ns(i, way)`; returns the ways asked for.
    fn run(
        choice: &mut AssistChoice,
        n: usize,
        ns: impl Fn(usize, StepWay) -> u64,
    ) -> Vec<StepWay> {
        (0..n)
            .map(|i| {
                let way = choice.next_way();
                choice.record(way, ns(i, way), 1 << 20);
                way
            })
            .collect()
    }

    /// Each way at a fixed cost per step.
    fn flat(alone: u64, shared: u64) -> impl Fn(usize, StepWay) -> u64 {
        move |_, way| match way {
            StepWay::Alone => alone,
            StepWay::Shared => shared,
        }
    }

    fn count(ways: &[StepWay], way: StepWay) -> usize {
        ways.iter().filter(|w| **w == way).count()
    }

    const WARMUP: usize = 2 * WARMUP_STEPS as usize;
    const EPOCH: usize = EPOCH_STEPS as usize;

    #[test]
    fn warmup_times_both_ways_alternately_then_prefers_the_cheaper() {
        for (alone, shared, cheaper) in [(58, 41, StepWay::Shared), (32, 38, StepWay::Alone)] {
            let mut c = AssistChoice::new(AssistMode::Measured);
            let ways = run(&mut c, WARMUP, flat(alone, shared));
            // Invariant 2: shared first on a tie, then the way with fewer steps.
            for pair in ways.chunks(2) {
                assert_eq!(pair, [StepWay::Shared, StepWay::Alone]);
            }
            assert!(c.warm());
            assert_eq!(c.preferred(), cheaper);
        }
    }

    #[test]
    fn the_cheaper_way_makes_most_steps_and_the_other_is_still_tried() {
        for (alone, shared, cheaper) in [(58, 41, StepWay::Shared), (32, 38, StepWay::Alone)] {
            let mut c = AssistChoice::new(AssistMode::Measured);
            run(&mut c, WARMUP, flat(alone, shared));
            let n = 20 * EPOCH;
            let ways = run(&mut c, n, flat(alone, shared));
            assert_eq!(c.preferred(), cheaper);
            // Invariant 3: about one step in EXPLORE_ONE_IN the other way.
            let explored = count(&ways, cheaper.other()) as f64 / n as f64;
            let expected = 1.0 / EXPLORE_ONE_IN as f64;
            assert!((explored - expected).abs() < expected / 4.0, "{explored}");
        }
    }

    #[test]
    fn exploration_meets_every_layer() {
        // A fixed period would meet the same layers of a 48-layer model every token.
        let mut c = AssistChoice::new(AssistMode::Measured);
        run(&mut c, WARMUP, flat(100, 70));
        let layers = 48;
        let ways = run(&mut c, layers * 200, flat(100, 70));
        for layer in 0..layers {
            let tried = ways
                .iter()
                .skip(layer)
                .step_by(layers)
                .filter(|w| **w == StepWay::Alone)
                .count();
            assert!((3..=30).contains(&tried), "layer {layer}: {tried} of 200");
        }
    }

    #[test]
    fn costs_that_differ_by_layer_do_not_bias_the_choice() {
        // Every 16th layer's step is three times dearer, either way; sharing saves 30%.
        let by_layer = |i: usize, way| {
            let base = if i % 48 % 16 == 15 { 300 } else { 100 };
            match way {
                StepWay::Alone => base,
                StepWay::Shared => base * 7 / 10,
            }
        };
        let mut c = AssistChoice::new(AssistMode::Measured);
        let mut preferred = Vec::new();
        for _ in 0..40 {
            run(&mut c, EPOCH, by_layer);
            preferred.push(c.preferred());
        }
        assert!(
            preferred.iter().all(|w| *w == StepWay::Shared),
            "{preferred:?}"
        );
    }

    #[test]
    fn a_change_in_cost_is_followed_at_an_epoch_and_noise_is_not() {
        let mut c = AssistChoice::new(AssistMode::Measured);
        run(&mut c, WARMUP, flat(100, 80));
        assert_eq!(c.preferred(), StepWay::Shared);
        // Alone now costs 5% less: within the margin, the choice stays.
        for _ in 0..20 {
            run(&mut c, EPOCH, flat(95, 100));
            assert_eq!(c.preferred(), StepWay::Shared);
        }
        // Alone now costs 30% less: the explored steps see it and it takes over, at the end
        // of an epoch and not before (invariant 3).
        let mut epochs = 0;
        while c.preferred() == StepWay::Shared {
            let ways = run(&mut c, EPOCH - 1, flat(70, 100));
            assert_eq!(c.preferred(), StepWay::Shared, "mid-epoch");
            assert!(count(&ways, StepWay::Alone) < EPOCH / 4);
            run(&mut c, 1, flat(70, 100));
            epochs += 1;
            assert!(epochs < 10, "never switched");
        }
        for _ in 0..20 {
            run(&mut c, EPOCH, flat(70, 100));
        }
        let per = |w| c.per_byte(w).unwrap() * f64::from(1u32 << 20);
        assert!(
            (per(StepWay::Alone) - 70.0).abs() < 1.0,
            "{}",
            per(StepWay::Alone)
        );
        assert!((per(StepWay::Shared) - 100.0).abs() < 1.0);
    }

    #[test]
    fn large_steps_weigh_by_their_bytes() {
        let mut c = AssistChoice::new(AssistMode::Measured);
        // Alone: one large cheap step and small dear ones; the cost is the ratio of the
        // sums, not the mean of each step's ratio.
        c.record(StepWay::Alone, 1_000, 1_000);
        for _ in 1..WARMUP_STEPS {
            c.record(StepWay::Alone, 1_000, 10);
        }
        for _ in 0..WARMUP_STEPS {
            c.record(StepWay::Shared, 1, 1);
        }
        let per = c.per_byte(StepWay::Alone).unwrap();
        let steps = f64::from(WARMUP_STEPS);
        assert!(
            (per - steps * 1_000.0 / (1_000.0 + (steps - 1.0) * 10.0)).abs() < 1e-9,
            "{per}"
        );
    }

    #[test]
    fn steps_without_bytes_are_not_counted() {
        let mut c = AssistChoice::new(AssistMode::Measured);
        c.record(StepWay::Shared, 5_000, 0);
        // Invariant 1: the step did not count toward the warm-up either.
        assert_eq!(c.epoch, [Sums::default(); 2]);
        assert_eq!(c.next_way(), StepWay::Shared);
    }

    #[test]
    fn always_shares_every_step() {
        let mut c = AssistChoice::new(AssistMode::Always);
        let ways = run(&mut c, 1_000, flat(1, 1_000));
        assert_eq!(count(&ways, StepWay::Shared), 1_000);
        assert_eq!(c.preferred(), StepWay::Shared);
    }
}
