//! Thread policy: how many compute threads a run uses for decode and for prefill (`-t`),
//! given the cores and how much of the experts the pager keeps.

/// `-t`: a number of compute threads, or `auto` (`auto_compute_threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    Auto,
    Fixed(u32),
}

impl std::str::FromStr for Threads {
    type Err = String;

    fn from_str(s: &str) -> Result<Threads, String> {
        match s {
            "auto" => Ok(Threads::Auto),
            n => match n.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Threads::Fixed(n)),
                _ => Err(format!("{s:?} is not a positive number or `auto`")),
            },
        }
    }
}

impl std::fmt::Display for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threads::Auto => f.write_str("auto"),
            Threads::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// Below this share of the expert bytes in the cache, decode waits on the disk more than it
/// computes: one core is worth more to the helper threads (reads ahead, evictions) than to
/// compute. Measured on W1 (2 cores): at 21% of the experts, one compute thread plus the
/// readahead thread decoded 1.56 tok/s against 1.38 with two compute threads on an Intel
/// Xeon, and 1.34 against 1.39 on an AMD EPYC (STATUS.md); at 45%, two compute threads won
/// (2.76 against 2.20).
pub const IO_BOUND_SHARE: f64 = 1.0 / 3.0;

/// Compute threads of a run. llama.cpp computes ubatches of one token (decode) with
/// `decode` threads and larger ones (prefill, several slots' decode) with `batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeThreads {
    pub decode: u32,
    pub batch: u32,
}

impl ComputeThreads {
    /// `-t` on `cores` cores. `Auto` gives decode [`auto_compute_threads`] and prefill
    /// every core: a prompt ubatch computes on each expert it reads for many tokens, so
    /// prefill gains more from a core than the helpers do (W1 at 4 GiB on 2 cores: 6.5
    /// prompt tok/s with two threads, 5.3 with one).
    pub fn new(
        t: Threads,
        cores: u32,
        expert_budget_bytes: Option<u64>,
        expert_bytes: u64,
    ) -> ComputeThreads {
        match t {
            Threads::Fixed(n) => ComputeThreads {
                decode: n,
                batch: n,
            },
            Threads::Auto => ComputeThreads {
                decode: auto_compute_threads(cores, expert_budget_bytes, expert_bytes),
                batch: cores.max(1),
            },
        }
    }
}

/// Compute threads for `auto` on `cores` cores: all of them, but one fewer (never fewer than
/// one) when the pager keeps less than `IO_BOUND_SHARE` of the expert bytes. `None` for the
/// budget: nothing is paged.
pub fn auto_compute_threads(
    cores: u32,
    expert_budget_bytes: Option<u64>,
    expert_bytes: u64,
) -> u32 {
    let cores = cores.max(1);
    match expert_budget_bytes {
        Some(b) if (b as f64) < IO_BOUND_SHARE * expert_bytes as f64 => (cores - 1).max(1),
        _ => cores,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_parse_and_print_back() {
        for t in ["auto", "1", "16"] {
            assert_eq!(t.parse::<Threads>().unwrap().to_string(), t);
        }
        for bad in ["0", "-1", "two", ""] {
            assert!(bad.parse::<Threads>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn auto_threads_leave_a_core_to_the_helpers_only_when_io_bound() {
        let experts = 30u64 << 30;
        // Unpaged, or a third of the experts or more: every core computes.
        assert_eq!(auto_compute_threads(2, None, experts), 2);
        assert_eq!(auto_compute_threads(2, Some(experts / 2), experts), 2);
        assert_eq!(auto_compute_threads(2, Some(experts / 3 + 1), experts), 2);
        // Below a third: one core is left to the readahead and eviction threads.
        assert_eq!(auto_compute_threads(2, Some(experts / 5), experts), 1);
        assert_eq!(auto_compute_threads(8, Some(experts / 5), experts), 7);
        // Never fewer than one compute thread.
        assert_eq!(auto_compute_threads(1, Some(experts / 5), experts), 1);
        assert_eq!(auto_compute_threads(0, None, experts), 1);
    }

    #[test]
    fn auto_keeps_every_core_for_prefill_and_fixed_counts_are_kept() {
        let experts = 30u64 << 30;
        let io_bound = ComputeThreads::new(Threads::Auto, 2, Some(experts / 5), experts);
        assert_eq!(
            io_bound,
            ComputeThreads {
                decode: 1,
                batch: 2
            }
        );
        let unpaged = ComputeThreads::new(Threads::Auto, 4, None, experts);
        assert_eq!(
            unpaged,
            ComputeThreads {
                decode: 4,
                batch: 4
            }
        );
        let fixed = ComputeThreads::new(Threads::Fixed(3), 2, Some(experts / 5), experts);
        assert_eq!(
            fixed,
            ComputeThreads {
                decode: 3,
                batch: 3
            }
        );
    }
}
