//! The budgets of a paged run, computed in one place. Before load, [`crate::plan`] checks
//! `--ram-budget-mb` against the minimum that metadata promises; after load, the measured
//! reserve turns the total-RSS budget into the numbers every part uses ([`Budgets::split`]):
//! the expert budget (`stats.expert_budget_bytes`), the eviction thread's slack, what the
//! pager may hold, and the RSS guard's limit. While the run goes on, [`pager_budget`] adds
//! what the token table lends and takes away what a cgroup limit's kernel memory needs
//! ([`cap_deduction`]). The engine, the hook's attach and the pager take what this gives;
//! none of them computes a budget of its own.

use crate::model::TokenTable;
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
/// 4. `pager >= working_set` (a routing's experts always fit), so `reserve + working_set
///    <= total`, or `split` refuses the budget.
/// 5. `rss_limit < total`.
/// 6. [`pager_budget`] is never below `working_set`.
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
    /// One ubatch's experts of the largest layer: the least the pager is ever given.
    pub working_set: u64,
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
            working_set: i.working_set_bytes,
        })
    }

    /// Whether every expert fits: then nothing is ever evicted.
    pub fn holds_every_expert(&self, expert_bytes: u64) -> bool {
        self.expert >= expert_bytes
    }

    /// The RSS guard's limit when a cgroup limit's kernel memory takes `cap_deduction`
    /// ([`cap_deduction`]) from the expert cache: lower by as much, but never below the
    /// reserve plus one ubatch's working set (invariant 6's floor), where the guard would
    /// evict on every layer what the pager must read back.
    pub fn rss_limit_under_cap(&self, cap_deduction: u64) -> u64 {
        let floor = (self.reserve + self.working_set).min(self.rss_limit);
        self.rss_limit.saturating_sub(cap_deduction).max(floor)
    }
}

/// What the pager may hold now: its share of the expert budget ([`Budgets::pager`]), plus
/// what the token table still lends, less what a cgroup limit's kernel memory takes
/// ([`cap_deduction`]); never less than one ubatch's working set, which must fit (a limit
/// that leaves less is the kernel's to enforce).
pub fn pager_budget(b: &Budgets, loan: Option<&TokenRowLoan>, cap_deduction: u64) -> u64 {
    (b.pager + loan.map_or(0, TokenRowLoan::lent_bytes))
        .saturating_sub(cap_deduction)
        .max(b.working_set)
}

/// What the expert cache gives up under a cgroup memory limit of `limit` bytes that
/// charges `kernel_bytes` of kernel memory, for an RSS budget of `total` bytes.
///
/// A cgroup charges the kernel memory a process causes (page tables over the model's
/// mapping, the page cache's index, its own objects: 56 MiB on W1 at 8 GiB) against the
/// same limit as its pages, and RSS does not show it. Where the limit leaves less room
/// above the budget than that, the kernel would reclaim the difference from the page
/// cache, experts included, which then fault back one page at a time. So RSS must stay
/// within `limit - kernel_bytes`: the expert cache gives up what the budget exceeds that
/// by (a limit below the budget itself included).
pub fn cap_deduction(kernel_bytes: u64, limit: u64, total: u64) -> u64 {
    (total + kernel_bytes).saturating_sub(limit)
}

/// The token-embedding table's pages that no token has read yet, lent to the expert cache.
///
/// The reserve counts every non-expert byte as resident, but llama.cpp reads the token
/// table (`get_rows`) one row per token of a batch, so a run faults in only the rows of the
/// tokens it has seen: on W1 the 315 MiB table is about an eighth of the expert cache at 4 GiB,
/// and gpt-oss-20b's BF16 table is 1,105 MiB. While the table is uncached and advised random (no
/// read-around), its pages become resident exactly when a row on them is read. So its
/// unread pages are budget the expert cache may use, and a batch's new rows are taken
/// back, evicting experts if needed, before llama.cpp reads them: resident experts plus
/// the pages read stay within the reserve's accounting at every step.
///
/// Invariants (checked in the tests):
/// 1. `taken` has a bit for each page of the table; the first and last pages (which a
///    neighbouring tensor's reads may bring in) are set from the start.
/// 2. A page's bit is set iff it is an edge page or a row passed to `take_rows` overlaps it.
/// 3. `taken_pages` is the number of bits set, and `lent_bytes() == (n_pages - taken_pages)
///    * page`, never more than the table's own bytes.
#[derive(Debug, Clone)]
pub struct TokenRowLoan {
    table: TokenTable,
    page: u64,
    first_page: u64,
    n_pages: u64,
    taken: Vec<u64>,
    taken_pages: u64,
}

impl TokenRowLoan {
    /// All of `table` but its edge pages, lent; `page` is the system page size.
    pub fn new(table: TokenTable, page: u64) -> TokenRowLoan {
        let page = page.max(1);
        let end = table.offset + table.bytes();
        let first_page = table.offset / page;
        let n_pages = end.div_ceil(page).saturating_sub(first_page).max(1);
        let mut loan = TokenRowLoan {
            table,
            page,
            first_page,
            n_pages,
            taken: vec![0; n_pages.div_ceil(64) as usize],
            taken_pages: 0,
        };
        loan.take_page(0);
        loan.take_page(n_pages - 1);
        loan
    }

    /// Bytes of the table's pages no row read has touched.
    pub fn lent_bytes(&self) -> u64 {
        (self.n_pages - self.taken_pages) * self.page
    }

    /// Bytes of the table's pages taken back (read, or edge pages).
    pub fn taken_bytes(&self) -> u64 {
        self.taken_pages * self.page
    }

    /// The pages the rows of `tokens` lie on are about to be read: take them back, and
    /// push the file offset of each page newly taken onto `fresh` (so the caller can read
    /// them in). Returns the bytes newly taken. Ids outside the table are left to llama.cpp
    /// to refuse.
    pub fn take_rows(
        &mut self,
        tokens: impl IntoIterator<Item = i32>,
        fresh: &mut Vec<u64>,
    ) -> u64 {
        let before = self.taken_pages;
        for t in tokens {
            let Ok(row) = u64::try_from(t) else { continue };
            if row >= self.table.rows {
                continue;
            }
            let start = self.table.offset + row * self.table.row_bytes;
            let end = start + self.table.row_bytes;
            for p in start / self.page..end.div_ceil(self.page) {
                if self.take_page(p - self.first_page) {
                    fresh.push(p * self.page);
                }
            }
        }
        (self.taken_pages - before) * self.page
    }

    /// Take page `p` (counted from the table's first); true if it was lent until now.
    fn take_page(&mut self, p: u64) -> bool {
        let (word, bit) = ((p / 64) as usize, 1u64 << (p % 64));
        let lent = self.taken[word] & bit == 0;
        if lent {
            self.taken[word] |= bit;
            self.taken_pages += 1;
        }
        lent
    }

    /// The table this loan is of.
    pub fn table(&self) -> TokenTable {
        self.table
    }

    /// File byte range of the table's pages, edge pages included (page-aligned).
    pub fn pages(&self) -> (u64, u64) {
        let start = self.first_page * self.page;
        (start, start + self.n_pages * self.page)
    }

    /// File byte range of the pages lent at the start: the table's pages but the edges
    /// (page-aligned; empty for a table of one or two pages). Nothing may read it ahead.
    pub fn interior(&self) -> (u64, u64) {
        let (start, end) = self.pages();
        if self.n_pages < 3 {
            return (start, start);
        }
        (start + self.page, end - self.page)
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
        assert!(b.pager >= b.working_set, "invariant 4");
        assert_eq!(b.working_set, i.working_set_bytes, "invariant 4");
        assert!(b.rss_limit < b.total, "invariant 5");
        for deduction in [0, MIB, b.pager, u64::MAX / 2] {
            assert!(
                pager_budget(b, None, deduction) >= b.working_set,
                "invariant 6"
            );
        }
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

    #[test]
    fn a_cgroup_limit_takes_the_kernel_memory_beyond_its_room_from_the_cache() {
        let i = inputs(8 * GIB, false);
        let b = Budgets::split(i).unwrap();
        check(&b, &i);
        // The limit equals the budget: all 56 MiB of kernel memory come out of the cache.
        assert_eq!(cap_deduction(56 * MIB, 8 * GIB, 8 * GIB), 56 * MIB);
        assert_eq!(pager_budget(&b, None, 56 * MIB), b.pager - 56 * MIB);
        // A limit 100 MiB above the budget leaves room for it: nothing.
        assert_eq!(cap_deduction(56 * MIB, 8 * GIB + 100 * MIB, 8 * GIB), 0);
        // 30 MiB of room: the other 26 MiB.
        assert_eq!(
            cap_deduction(56 * MIB, 8 * GIB + 30 * MIB, 8 * GIB),
            26 * MIB
        );
        // A limit below the budget: the cache keeps within the limit.
        assert_eq!(cap_deduction(0, 7 * GIB, 8 * GIB), GIB);
        assert_eq!(b.rss_limit_under_cap(56 * MIB), b.rss_limit - 56 * MIB);
        // Never below one routing's experts, whatever the limit; nor the guard's limit
        // below the reserve and those experts.
        let deduction = cap_deduction(10 * MIB, GIB, 8 * GIB);
        assert_eq!(pager_budget(&b, None, deduction), b.working_set);
        assert_eq!(b.rss_limit_under_cap(deduction), b.reserve + b.working_set);
    }

    #[test]
    fn the_loan_and_the_deduction_both_count_toward_the_pager_budget() {
        let i = inputs(4 * GIB, false);
        let b = Budgets::split(i).unwrap();
        let l = TokenRowLoan::new(table(0, 4096, 1000), 4096);
        assert_eq!(l.lent_bytes(), 998 * 4096);
        assert_eq!(pager_budget(&b, Some(&l), 0), b.pager + 998 * 4096);
        assert_eq!(pager_budget(&b, Some(&l), MIB), b.pager + 998 * 4096 - MIB);
    }

    /// A token table in file 0.
    fn table(offset: u64, row_bytes: u64, rows: u64) -> TokenTable {
        TokenTable {
            file: 0,
            offset,
            row_bytes,
            rows,
        }
    }

    fn check_loan(l: &TokenRowLoan, taken_rows: &[u64]) {
        // 1 and 2.
        let mut expect = vec![false; l.n_pages as usize];
        expect[0] = true;
        expect[l.n_pages as usize - 1] = true;
        for &r in taken_rows {
            let start = l.table.offset + r * l.table.row_bytes;
            let end = start + l.table.row_bytes;
            for p in start / l.page..end.div_ceil(l.page) {
                expect[(p - l.first_page) as usize] = true;
            }
        }
        for (p, &e) in expect.iter().enumerate() {
            assert_eq!(
                l.taken[p / 64] >> (p % 64) & 1 == 1,
                e,
                "invariant 2: page {p}"
            );
        }
        // 3.
        let set = expect.iter().filter(|&&b| b).count() as u64;
        assert_eq!(l.taken_pages, set, "invariant 3");
        assert_eq!(l.lent_bytes(), (l.n_pages - set) * l.page, "invariant 3");
        assert!(l.lent_bytes() <= l.table.bytes(), "invariant 3");
    }

    #[test]
    fn a_row_read_takes_back_exactly_the_pages_it_lies_on() {
        // 100 rows of 1,700 bytes from an unaligned offset: rows straddle pages.
        let mut l = TokenRowLoan::new(table(10_000, 1_700, 100), 4096);
        check_loan(&l, &[]);
        // Bytes 10,000..180,000: pages 2..=43, 42 pages, two of them edges.
        assert_eq!(l.lent_bytes(), 40 * 4096);
        assert_eq!(l.pages(), (2 * 4096, 44 * 4096));
        assert_eq!(l.interior(), (3 * 4096, 43 * 4096));
        // Row 9 is bytes 25,300..27,000: page 6 only. Row 10 (27,000..28,700) crosses
        // into page 7.
        let mut fresh = Vec::new();
        assert_eq!(l.take_rows([9], &mut fresh), 4096);
        assert_eq!(fresh, [6 * 4096]);
        assert_eq!(l.take_rows([10], &mut fresh), 4096);
        assert_eq!(fresh, [6 * 4096, 7 * 4096]);
        check_loan(&l, &[9, 10]);
        // Row 12 (30,400..32,100) is on page 7, taken; row 13 (32,100..33,800) on 7 and 8.
        fresh.clear();
        assert_eq!(l.take_rows([12, 13, 10], &mut fresh), 4096);
        assert_eq!(fresh, [8 * 4096]);
        check_loan(&l, &[9, 10, 12, 13]);
        // Already taken, out of range and negative ids take nothing.
        fresh.clear();
        assert_eq!(l.take_rows([13, 100, -1], &mut fresh), 0);
        assert!(fresh.is_empty());
        check_loan(&l, &[9, 10, 12, 13]);
        // Every row: nothing is lent any more.
        l.take_rows(0..100, &mut fresh);
        check_loan(&l, &(0..100).collect::<Vec<_>>());
        assert_eq!(l.lent_bytes(), 0);
    }

    #[test]
    fn a_table_within_one_page_lends_nothing() {
        let l = TokenRowLoan::new(table(4096, 8, 10), 4096);
        check_loan(&l, &[]);
        assert_eq!(l.lent_bytes(), 0);
        assert_eq!(l.interior(), (4096, 4096));
    }
}
