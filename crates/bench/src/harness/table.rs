//! The A/B report as a table for the terminal.

use super::{AbReport, Spread};
use epm_core::units::MIB;

/// A human-readable table of the rows and the summary.
pub fn render_table(report: &AbReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "cap: {:?}   read_ahead_kb: {:?}   kernel runs at: {:?}",
        report.cap,
        report.read_ahead_kb,
        report.kernel_readahead_kb.or(report.read_ahead_kb)
    );
    let _ = writeln!(
        s,
        "{:>3} {:>7} {:<14} {:<10} {:>9} {:>9} {:>8} {:>9} {:>9} {:>6} {:>9} {:>5}",
        "rep",
        "budget",
        "config",
        "outcome",
        "peak MiB",
        "TTFO s",
        "prefill",
        "decode",
        "MiB/tok",
        "d.hit",
        "evict",
        "same"
    );
    for r in &report.rows {
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        let same = match (r.tokens_match, r.logits_match) {
            (Some(true), Some(true)) => "yes",
            (Some(_), Some(_)) => "NO",
            _ => "-",
        };
        let _ = writeln!(
            s,
            "{:>3} {:>7} {:<14} {:<10} {:>9.1} {:>9} {:>8} {:>9} {:>9} {:>6} {:>9} {:>5}",
            r.rep,
            r.budget_mb,
            r.label,
            r.outcome.to_string().chars().take(10).collect::<String>(),
            r.child.peak_rss_bytes.max(r.child.vm_hwm_bytes) as f64 / MIB as f64,
            f(r.child.time_to_first_output_s),
            f(r.prefill_tok_s),
            f(r.decode_tok_s),
            r.read_bytes_per_token
                .map_or("-".into(), |v| format!("{:.2}", v / MIB as f64)),
            r.decode_cache_hit_rate
                .map_or("-".into(), |v| format!("{v:.2}")),
            r.evictions.map_or("-".into(), |v| v.to_string()),
            same
        );
    }
    for b in &report.summary {
        let m = |x: &Option<Spread>| {
            x.as_ref().map_or("-".into(), |s| {
                format!("{:.2} [{:.2}, {:.2}]", s.median, s.min, s.max)
            })
        };
        let _ = writeln!(
            s,
            "budget {} MiB: decode epm/kernel {}   epm/reference {}",
            b.budget_mb,
            m(&b.decode_epm_over_kernel),
            m(&b.decode_epm_over_reference)
        );
        for v in &b.variants {
            let _ = writeln!(
                s,
                "budget {} MiB: {} decode {} tok/s, {} of the first run",
                b.budget_mb,
                v.label,
                m(&v.decode_tok_s),
                m(&v.decode_over_first)
            );
        }
    }
    let _ = writeln!(s, "all_passed: {}", report.all_passed);
    for f in &report.failures {
        let _ = writeln!(s, "  FAIL {f}");
    }
    s
}
