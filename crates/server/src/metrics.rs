//! `/metrics`: Prometheus text exposition of the pager, the cache, memory against the
//! budget, and the server's own queue and slots.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use epm_core::stats::Snapshot;

use crate::scheduler::Shared;

/// One metric: its help, type and samples (`labels`, value).
fn metric(out: &mut String, name: &str, help: &str, kind: &str, samples: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

pub fn render(s: &Snapshot, shared: &Shared, slots: usize, uptime_s: f64) -> String {
    let mut o = String::new();
    let n = |x: u64| x as f64;
    let e = &s.experts;
    metric(
        &mut o,
        "epm_up_seconds",
        "Seconds since the server started.",
        "gauge",
        &[("", uptime_s)],
    );
    metric(
        &mut o,
        "epm_slots",
        "Parallel sequences (--parallel).",
        "gauge",
        &[("", slots as f64)],
    );
    metric(
        &mut o,
        "epm_active_slots",
        "Slots generating now.",
        "gauge",
        &[("", shared.active_slots.load(Ordering::Relaxed) as f64)],
    );
    metric(
        &mut o,
        "epm_queue_depth",
        "Requests waiting for a slot.",
        "gauge",
        &[("", shared.waiting.load(Ordering::Relaxed) as f64)],
    );
    metric(
        &mut o,
        "epm_requests_total",
        "Requests by how they ended.",
        "counter",
        &[
            (
                "outcome=\"completed\"",
                n(shared.completed.load(Ordering::Relaxed)),
            ),
            (
                "outcome=\"cancelled\"",
                n(shared.cancelled.load(Ordering::Relaxed)),
            ),
            (
                "outcome=\"failed\"",
                n(shared.failed.load(Ordering::Relaxed)),
            ),
            (
                "outcome=\"rejected_overload\"",
                n(shared.rejected_overload.load(Ordering::Relaxed)),
            ),
        ],
    );
    metric(
        &mut o,
        "epm_prompt_tokens_total",
        "Prompt tokens: evaluated, and reused from a slot's KV cache.",
        "counter",
        &[
            ("kind=\"evaluated\"", n(s.tokens.prompt)),
            ("kind=\"reused\"", n(s.tokens.prompt_reused)),
        ],
    );
    metric(
        &mut o,
        "epm_generated_tokens_total",
        "Tokens generated.",
        "counter",
        &[("", n(s.tokens.generated))],
    );
    metric(
        &mut o,
        "epm_decode_steps_total",
        "Decode steps (one batch of every active slot).",
        "counter",
        &[("", n(s.io.decode_steps))],
    );
    metric(
        &mut o,
        "epm_tokens_per_second",
        "Prompt tokens per second of prefill, and generated tokens per second of decode (all slots).",
        "gauge",
        &[("phase=\"prefill\"", s.tok_per_s.prefill), ("phase=\"decode\"", s.tok_per_s.decode)],
    );
    metric(
        &mut o,
        "epm_expert_selections_total",
        "Distinct experts selected per routed layer and ubatch, by phase and what the cache had.",
        "counter",
        &[
            (
                "phase=\"prompt\",result=\"cache_hit\"",
                n(e.prompt.cache_hits),
            ),
            (
                "phase=\"prompt\",result=\"prefetch_hit\"",
                n(e.prompt.prefetch_hits),
            ),
            ("phase=\"prompt\",result=\"miss\"", n(e.prompt.misses)),
            (
                "phase=\"decode\",result=\"cache_hit\"",
                n(e.decode.cache_hits),
            ),
            (
                "phase=\"decode\",result=\"prefetch_hit\"",
                n(e.decode.prefetch_hits),
            ),
            ("phase=\"decode\",result=\"miss\"", n(e.decode.misses)),
        ],
    );
    metric(
        &mut o,
        "epm_decode_cache_hit_rate",
        "Decode selections resident before routing, prediction's reads not counted.",
        "gauge",
        &[("", e.decode.cache_hit_rate)],
    );
    metric(
        &mut o,
        "epm_expert_evictions_total",
        "Experts evicted.",
        "counter",
        &[("", n(e.evictions))],
    );
    metric(
        &mut o,
        "epm_expert_resident_bytes",
        "Expert bytes resident now.",
        "gauge",
        &[("", n(e.resident_bytes))],
    );
    metric(
        &mut o,
        "epm_expert_budget_bytes",
        "Expert bytes allowed resident.",
        "gauge",
        &[("", n(s.expert_budget_bytes))],
    );
    metric(
        &mut o,
        "epm_read_bytes_total",
        "Bytes this process read from storage.",
        "counter",
        &[("", n(s.io.read_bytes))],
    );
    metric(
        &mut o,
        "epm_rss_bytes",
        "Total resident memory (anonymous + file) now.",
        "gauge",
        &[("", n(s.memory.rss_bytes))],
    );
    metric(
        &mut o,
        "epm_rss_peak_bytes",
        "Peak total resident memory.",
        "gauge",
        &[("", n(s.memory.peak_rss_bytes))],
    );
    metric(
        &mut o,
        "epm_budget_bytes",
        "The total-RSS budget (0 when unpaged).",
        "gauge",
        &[("", n(s.budget_bytes))],
    );
    metric(
        &mut o,
        "epm_swap_bytes",
        "Swap used by this process.",
        "gauge",
        &[("", n(s.memory.swap_bytes))],
    );
    metric(
        &mut o,
        "epm_hook_busy_seconds_total",
        "Time inside the pager's hook.",
        "counter",
        &[("", s.hook.busy_us as f64 / 1e6)],
    );
    o
}
