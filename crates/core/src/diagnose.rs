//! Whether decode waited on the disk: the bytes decode read per second of decode, against
//! what the disk delivers at best (a `probe-io` figure), and the one change that would
//! help.

/// At or above this share of decode time spent reading at the disk's best speed, decode is
/// disk-bound: most of each step is the reads, however fast the CPU.
pub const DISK_BOUND_SHARE: f64 = 0.5;

/// What decode read, and in how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeReads {
    /// Bytes read from disk during decode steps.
    pub read_bytes: u64,
    /// Wall time of the decode steps.
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DiskVerdict {
    /// What decode read per second of decode.
    pub read_mb_per_s: f64,
    /// The disk's best probed speed, when known.
    pub probed_mb_per_s: Option<f64>,
    /// The share of decode time that reading the same bytes at the probed speed takes.
    pub read_share: Option<f64>,
    pub disk_bound: bool,
    /// One line for the user: what was measured and what would help.
    pub hint: String,
}

/// The verdict on a run's decode; `None` when decode read nothing or took no time.
pub fn diagnose(reads: DecodeReads, probed_mb_per_s: Option<f64>) -> Option<DiskVerdict> {
    if reads.read_bytes == 0 || reads.seconds <= 0.0 {
        return None;
    }
    let mb = reads.read_bytes as f64 / 1e6;
    let read_mb_per_s = mb / reads.seconds;
    let probed = probed_mb_per_s.filter(|p| *p > 0.0);
    let read_share = probed.map(|p| (mb / p / reads.seconds).min(1.0));
    let disk_bound = read_share.is_some_and(|s| s >= DISK_BOUND_SHARE);
    let hint = match (probed, read_share) {
        (Some(p), Some(s)) if disk_bound => format!(
            "decode is disk-bound: it read {read_mb_per_s:.0} MB/s, and reading those bytes at the disk's probed {p:.0} MB/s takes {:.0}% of decode time; a larger --ram-budget-mb (fewer bytes per token), another --cache-policy, or a faster disk would speed it up",
            s * 100.0
        ),
        (Some(p), Some(s)) => format!(
            "decode is not disk-bound: it read {read_mb_per_s:.0} MB/s, and reading those bytes at the disk's probed {p:.0} MB/s takes {:.0}% of decode time; compute and the pager's CPU set its speed",
            s * 100.0
        ),
        _ => format!(
            "decode read {read_mb_per_s:.0} MB/s from disk; run `epm-run probe-io MODEL` and pass its report with --disk-probe to see whether that is the disk's limit"
        ),
    };
    Some(DiskVerdict {
        read_mb_per_s,
        probed_mb_per_s: probed,
        read_share,
        disk_bound,
        hint,
    })
}

/// The best speed in a `probe-io` report (its `results[].mb_per_s`), if it has any.
pub fn best_probed_mb_per_s(report: &serde_json::Value) -> Option<f64> {
    report
        .get("results")?
        .as_array()?
        .iter()
        .filter_map(|r| r.get("mb_per_s")?.as_f64())
        .fold(None, |best: Option<f64>, x| {
            Some(best.map_or(x, |b| b.max(x)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_that_reads_at_its_probed_speed_is_the_bound() {
        // 575 MB per token at 1.9 s per token on a 300 MB/s disk: the reads are the step.
        let v = diagnose(
            DecodeReads {
                read_bytes: 32 * 575_000_000,
                seconds: 32.0 * 1.92,
            },
            Some(300.0),
        )
        .unwrap();
        assert!(v.disk_bound);
        assert!((v.read_mb_per_s - 299.5).abs() < 1.0, "{}", v.read_mb_per_s);
        assert!(
            v.hint.contains("disk-bound") && v.hint.contains("--ram-budget-mb"),
            "{}",
            v.hint
        );
    }

    #[test]
    fn a_fast_disk_is_not_and_an_unprobed_one_says_how_to_tell() {
        let reads = DecodeReads {
            read_bytes: 10 * 200_000_000,
            seconds: 10.0 * 0.26,
        };
        let v = diagnose(reads, Some(1710.0)).unwrap();
        assert!(!v.disk_bound);
        assert!((v.read_share.unwrap() - 2000.0 / 1710.0 / 2.6).abs() < 1e-9);
        let v = diagnose(reads, None).unwrap();
        assert!(!v.disk_bound && v.read_share.is_none());
        assert!(v.hint.contains("probe-io"), "{}", v.hint);
        assert!(diagnose(
            DecodeReads {
                read_bytes: 0,
                seconds: 1.0
            },
            Some(1.0)
        )
        .is_none());
    }

    #[test]
    fn the_best_probed_speed_is_the_largest_result() {
        let r =
            serde_json::json!({"results": [{"mb_per_s": 986.0}, {"mb_per_s": 1233.5}, {"x": 1}]});
        assert_eq!(best_probed_mb_per_s(&r), Some(1233.5));
        assert_eq!(best_probed_mb_per_s(&serde_json::json!({})), None);
    }
}
