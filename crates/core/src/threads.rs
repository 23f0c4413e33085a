//! Thread policy: how many compute threads a run uses for decode and for prefill (`-t`),
//! given the cores.

/// `-t`: a number of compute threads, or `auto` (every physical core,
/// [`Threads::on_cores`]).
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

impl Threads {
    /// The compute threads of a run on `cores` cores (physical ones, performance cores on a
    /// hybrid CPU: `epm_sys::proc::compute_cores`), for decode and prefill alike. `Auto`
    /// computes on every core however little of the experts the pager keeps: a core left to
    /// the helper threads (reads ahead, evictions) was worth less than a second compute
    /// thread wherever it was measured with this build's hook. W1 at 4 GiB (a sixth of the experts
    /// cached, 2 cores): on an Intel Xeon VM 2.80 decode tok/s with two compute threads
    /// against 2.23 with one and the helpers (1.25x), and 0.94 against 0.91 with the disk
    /// throttled to 400 MB/s; on an AMD EPYC VM 1.40 against 1.36 (STATUS.md). An earlier
    /// build, whose hook made every call on the compute thread, had it the other way on an
    /// Intel Xeon (1.56 against 1.38).
    pub fn on_cores(self, cores: u32) -> u32 {
        match self {
            Threads::Fixed(n) => n,
            Threads::Auto => cores.max(1),
        }
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
    fn auto_computes_on_every_core_and_fixed_counts_are_kept() {
        assert_eq!(Threads::Auto.on_cores(2), 2);
        assert_eq!(Threads::Auto.on_cores(8), 8);
        // Never fewer than one compute thread.
        assert_eq!(Threads::Auto.on_cores(0), 1);
        assert_eq!(Threads::Fixed(3).on_cores(2), 3);
    }
}
