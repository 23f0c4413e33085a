//! The budgets of a paged run, computed in one place. Before load, [`crate::plan`] checks
//! `--ram-budget-mb` against the minimum that metadata promises; after load, the measured
//! reserve turns the total-RSS budget into the numbers every part uses ([`Budgets::split`]):
//! the expert budget (`stats.expert_budget_bytes`), the eviction thread's slack, what the
//! pager may hold, and the RSS guard's limit. The engine, the hook's attach and the pager
//! take what this gives; none of them computes a budget of its own.

use crate::plan::{BelowMinimum, RunShape};
use crate::units::MIB;

/// The eviction thread's slack is a sixteenth of the expert budget, at most 96 MiB (a few
/// layers' evictions of a 30B model's decode steps): evictions queued and not yet made
/// still hold their pages.
pub const EVICT_SLACK_DIVISOR: u64 = 16;
pub const EVICT_SLACK_MAX: u64 = 96 * MIB;

/// The RSS guard acts this far below the budget. It reads total RSS once per routed layer;
/// between two readings the layer's compute faults in what the reserve covers (activations,
/// KV cells, non-expert pages) a little at a time, so the guard evicts before the budget
/// is crossed rather than after. 4 MiB is a quarter of the plan's fixed margin.
pub const RSS_GUARD_HEADROOM: u64 = 4 * MIB;

/// What a paged run was given and what it measured after load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetInputs {
    /// `--ram-budget-mb`: the most total RSS (anonymous + file) may reach.
    pub total_bytes: u64,
    /// Everything that is not a routed expert, measured after load (`plan::measured_reserve`).
    pub reserve_bytes: u64,
    /// One ubatch's experts of the largest layer (`plan::ubatch_working_set`): what must be
    /// resident at once.
    pub working_set_bytes: u64,
    /// All the model's expert bytes.
    pub expert_bytes: u64,
    /// Evictions are made on a thread of their own.
    pub evict_thread: bool,
    /// The run's shape, for the error message.
    pub shape: RunShape,
}

/// The numbers every part of a paged run uses.
///
/// Invariants (checked in the tests):
/// 1. `expert + reserve == total`.
/// 2. `pager + evict_slack == expert`.
/// 3. `evict_slack == 0` unless evictions are on a thread and not every expert fits.
/// 4. `pager >= working set` (a routing's experts always fit), so `reserve + working set
///    <= total`, or `split` refuses the budget.
/// 5. `rss_limit < total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub total: u64,
    pub reserve: u64,
    /// Expert bytes allowed resident, queued evictions included: `total - reserve`.
    pub expert: u64,
    /// Of `expert`, the bytes kept for evictions queued on the eviction thread.
    pub evict_slack: u64,
    /// What the pager may hold resident: `expert - evict_slack`.
    pub pager: u64,
    /// Measured RSS above this makes the hook evict more.
    pub rss_limit: u64,
}

impl Budgets {
    /// Split the total budget by the measured reserve, or refuse it when the reserve and
    /// one ubatch's experts do not fit.
    pub fn split(i: BudgetInputs) -> Result<Budgets, BelowMinimum> {
        let min = i.reserve_bytes + i.working_set_bytes;
        if i.total_bytes < min {
            return Err(BelowMinimum {
                budget_bytes: i.total_bytes,
                min_bytes: min,
                shape: i.shape,
                measured: Some((i.reserve_bytes, i.working_set_bytes)),
            });
        }
        let expert = i.total_bytes - i.reserve_bytes;
        // With every expert inside the budget nothing is ever evicted: no slack.
        let evict_slack = if i.evict_thread && expert < i.expert_bytes {
            (expert / EVICT_SLACK_DIVISOR)
                .min(EVICT_SLACK_MAX)
                // The slack never takes room a routing needs.
                .min(expert - i.working_set_bytes.min(expert))
        } else {
            0
        };
        Ok(Budgets {
            total: i.total_bytes,
            reserve: i.reserve_bytes,
            expert,
            evict_slack,
            pager: expert - evict_slack,
            rss_limit: i.total_bytes.saturating_sub(RSS_GUARD_HEADROOM),
        })
    }

    /// Whether every expert fits: then nothing is ever evicted.
    pub fn holds_every_expert(&self, expert_bytes: u64) -> bool {
        self.expert >= expert_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::GIB;

    fn inputs(total: u64, evict_thread: bool) -> BudgetInputs {
        BudgetInputs {
            total_bytes: total,
            reserve_bytes: 1200 * MIB,
            working_set_bytes: 300 * MIB,
            expert_bytes: 16 * GIB,
            evict_thread,
            shape: RunShape::new(4096, 128),
        }
    }

    fn check(b: &Budgets, i: &BudgetInputs) {
        assert_eq!(b.expert + b.reserve, b.total, "invariant 1");
        assert_eq!(b.pager + b.evict_slack, b.expert, "invariant 2");
        assert!(
            b.evict_slack == 0 || (i.evict_thread && b.expert < i.expert_bytes),
            "invariant 3"
        );
        assert!(b.pager >= i.working_set_bytes, "invariant 4");
        assert!(b.rss_limit < b.total, "invariant 5");
    }

    #[test]
    fn the_expert_budget_is_the_total_less_the_measured_reserve() {
        let i = inputs(4 * GIB, false);
        let b = Budgets::split(i).unwrap();
        check(&b, &i);
        assert_eq!(b.expert, 4 * GIB - 1200 * MIB);
        assert_eq!(b.pager, b.expert);
        assert_eq!(b.evict_slack, 0);
    }

    #[test]
    fn the_eviction_slack_is_a_sixteenth_at_most_96_mib() {
        let small = inputs(2 * GIB, true);
        let b = Budgets::split(small).unwrap();
        check(&b, &small);
        assert_eq!(b.evict_slack, (2 * GIB - 1200 * MIB) / 16);
        let large = inputs(8 * GIB, true);
        let b = Budgets::split(large).unwrap();
        check(&b, &large);
        assert_eq!(b.evict_slack, 96 * MIB);
        // Every expert fits: nothing is evicted, so no slack.
        let all = inputs(20 * GIB, true);
        let b = Budgets::split(all).unwrap();
        check(&b, &all);
        assert_eq!(b.evict_slack, 0);
        assert!(b.holds_every_expert(all.expert_bytes));
    }

    #[test]
    fn the_slack_never_takes_the_room_of_a_routing() {
        // Just above the minimum: the slack would leave less than one ubatch's experts.
        let i = inputs(1200 * MIB + 310 * MIB, true);
        let b = Budgets::split(i).unwrap();
        check(&b, &i);
        assert_eq!(b.evict_slack, 10 * MIB);
    }

    #[test]
    fn the_rss_guard_acts_4_mib_below_the_budget() {
        let i = inputs(4 * GIB, false);
        assert_eq!(Budgets::split(i).unwrap().rss_limit, 4 * GIB - 4 * MIB);
    }

    #[test]
    fn below_the_measured_minimum_is_refused_with_the_numbers() {
        let i = inputs(1400 * MIB, false);
        let e = Budgets::split(i).unwrap_err();
        assert_eq!(e.min_bytes, 1500 * MIB);
        assert_eq!(e.measured, Some((1200 * MIB, 300 * MIB)));
        let msg = e.to_string();
        assert!(msg.contains("minimum of 1500 MiB"), "{msg}");
        assert!(msg.contains("reserve 1200 MiB"), "{msg}");
    }
}
