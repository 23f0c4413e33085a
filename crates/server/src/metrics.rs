//! `/metrics`: the pager, the cache, memory against the budget, and the server's queue and
//! slots, in Prometheus text through `prometheus-client`. Every value is read at scrape
//! time (a stats snapshot and the counters), so the families are constant metrics of a
//! collector; labels are typed.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::protocol::Protocol;
use crate::state::AppState;

/// How a request ended.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Completed,
    Cancelled,
    Failed,
    RejectedOverload,
}

/// A generation phase.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Prompt,
    Prefill,
    Decode,
}

/// What the cache had for a selected expert.
#[derive(Debug, Clone, Copy)]
enum Selection {
    CacheHit,
    PrefetchHit,
    Miss,
}

/// An output file the run writes.
#[derive(Debug, Clone, Copy)]
enum OutputFile {
    Stats,
    Trace,
}

/// Prompt tokens by how they were handled.
#[derive(Debug, Clone, Copy)]
enum PromptTokens {
    Evaluated,
    Reused,
}

macro_rules! label_values {
    ($($t:ty { $($v:ident => $s:literal),* $(,)? })*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                e.write_str(match self { $(<$t>::$v => $s),* })
            }
        }
    )*};
}

label_values! {
    Outcome { Completed => "completed", Cancelled => "cancelled", Failed => "failed", RejectedOverload => "rejected_overload" }
    Phase { Prompt => "prompt", Prefill => "prefill", Decode => "decode" }
    Selection { CacheHit => "cache_hit", PrefetchHit => "prefetch_hit", Miss => "miss" }
    PromptTokens { Evaluated => "evaluated", Reused => "reused" }
    OutputFile { Stats => "stats", Trace => "trace" }
}

/// The verdict on decode's reads so far.
pub fn disk_verdict(st: &AppState) -> Option<epm_core::diagnose::DiskVerdict> {
    epm_core::diagnose::diagnose(
        epm_core::diagnose::DecodeReads {
            read_bytes: st.stats.decode_read_bytes.get(),
            seconds: st.stats.decode_us.get() as f64 / 1e6,
        },
        st.disk_mb_per_s,
    )
}

/// A protocol as a label value.
#[derive(Debug, Clone, Copy)]
struct ProtocolLabel(Protocol);

impl EncodeLabelValue for ProtocolLabel {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        e.write_str(self.0.name())
    }
}

struct Scrape(Arc<AppState>);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A counter (its name gets `_total`).
fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn family<L: EncodeLabelSet>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(L, f64)],
) -> std::fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        let sample = m.encode_family(labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*v).encode(sample)?,
            _ => ConstGauge::new(*v).encode(sample)?,
        }
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let st = &self.0;
        let s = epm_engine::telemetry::snapshot(&st.stats);
        let g = &st.generation;
        let n = |x: u64| x as f64;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
        let e = &mut e;
        gauge(
            e,
            "epm_up_seconds",
            "Seconds since the server started.",
            st.started.elapsed().as_secs_f64(),
        )?;
        gauge(
            e,
            "epm_slots",
            "Parallel sequences (--parallel).",
            st.slots as f64,
        )?;
        gauge(
            e,
            "epm_active_slots",
            "Slots busy now: evaluating a prompt or generating.",
            g.active_slots.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            e,
            "epm_queue_depth",
            "Requests waiting for a slot.",
            g.waiting.load(Ordering::Relaxed) as f64,
        )?;
        let outcome = |o: Outcome| [("outcome", o)];
        family(
            e,
            "epm_requests",
            "Requests by how they ended.",
            MetricType::Counter,
            &[
                (outcome(Outcome::Completed), load(&g.completed)),
                (outcome(Outcome::Cancelled), load(&g.cancelled)),
                (outcome(Outcome::Failed), load(&g.failed)),
                (
                    outcome(Outcome::RejectedOverload),
                    load(&st.server.rejected_overload),
                ),
            ],
        )?;
        if let Some(v) = disk_verdict(st) {
            gauge(
                e,
                "epm_decode_read_bytes_per_second",
                "Bytes decode read from disk per second of decode.",
                v.read_mb_per_s * 1e6,
            )?;
            if let (Some(p), Some(share)) = (v.probed_mb_per_s, v.read_share) {
                gauge(
                    e,
                    "epm_disk_probed_bytes_per_second",
                    "The disk's best speed in the --disk-probe report.",
                    p * 1e6,
                )?;
                gauge(
                    e,
                    "epm_decode_read_time_share",
                    "Share of decode time that reading its bytes at the probed speed takes.",
                    share,
                )?;
                gauge(
                    e,
                    "epm_decode_disk_bound",
                    "1 when decode is disk-bound (the read time share is at least one half).",
                    f64::from(u8::from(v.disk_bound)),
                )?;
            }
        }
        let by_protocol: Vec<([(&str, ProtocolLabel); 1], f64)> = Protocol::ALL
            .iter()
            .map(|&p| ([("protocol", ProtocolLabel(p))], st.requests.get(p) as f64))
            .collect();
        family(
            e,
            "epm_http_requests",
            "HTTP requests received, by the protocol of their path.",
            MetricType::Counter,
            &by_protocol,
        )?;
        family(
            e,
            "epm_prompt_tokens",
            "Prompt tokens: evaluated, and reused from a slot's KV cache.",
            MetricType::Counter,
            &[
                ([("kind", PromptTokens::Evaluated)], n(s.tokens.prompt)),
                ([("kind", PromptTokens::Reused)], n(s.tokens.prompt_reused)),
            ],
        )?;
        counter(
            e,
            "epm_generated_tokens",
            "Tokens generated.",
            n(s.tokens.generated),
        )?;
        counter(
            e,
            "epm_decode_steps",
            "Decode steps (one batch of every active slot).",
            n(s.io.decode_steps),
        )?;
        counter(
            e,
            "epm_prefill_pauses",
            "Pauses of a prompt's prefill after a ubatch, for the next step: the replies under way, other prompts, requests that arrived.",
            load(&g.prefill_pauses),
        )?;
        counter(
            e,
            "epm_reasoning_tokens",
            "Tokens generated inside reasoning blocks (chat replies).",
            load(&g.reasoning_tokens),
        )?;
        counter(
            e,
            "epm_reasoning_budget_closes",
            "Reasoning blocks whose close the reasoning budget forced.",
            load(&g.reasoning_closes_forced),
        )?;
        counter(
            e,
            "epm_compactions",
            "Conversations compacted: summaries written (/v1/responses/compact, compaction_trigger, context_management, Anthropic compaction).",
            load(&st.server.compactions),
        )?;
        let stored = st.responses.lock().map(|r| r.usage()).unwrap_or_default();
        gauge(
            e,
            "epm_responses_stored",
            "Responses API responses kept for previous_response_id.",
            stored.responses as f64,
        )?;
        gauge(
            e,
            "epm_conversations_stored",
            "Conversations API conversations kept.",
            stored.conversations as f64,
        )?;
        gauge(
            e,
            "epm_responses_stored_bytes",
            "Bytes of those responses and conversations (at most --responses-store-mb).",
            stored.bytes as f64,
        )?;
        family(e, "epm_tokens_per_second", "Prompt tokens per second of prefill, and generated tokens per second of decode (all slots).", MetricType::Gauge, &[
            ([("phase", Phase::Prefill)], s.tok_per_s.prefill),
            ([("phase", Phase::Decode)], s.tok_per_s.decode),
        ])?;
        let x = &s.experts;
        let sel = |p: Phase, r: Selection| ([("phase", p)], [("result", r)]);
        family(e, "epm_expert_selections", "Distinct experts selected per routed layer and ubatch, by phase and what the cache had.", MetricType::Counter, &[
            (sel(Phase::Prompt, Selection::CacheHit), n(x.prompt.cache_hits)),
            (sel(Phase::Prompt, Selection::PrefetchHit), n(x.prompt.prefetch_hits)),
            (sel(Phase::Prompt, Selection::Miss), n(x.prompt.misses)),
            (sel(Phase::Decode, Selection::CacheHit), n(x.decode.cache_hits)),
            (sel(Phase::Decode, Selection::PrefetchHit), n(x.decode.prefetch_hits)),
            (sel(Phase::Decode, Selection::Miss), n(x.decode.misses)),
        ])?;
        gauge(
            e,
            "epm_decode_cache_hit_rate",
            "Decode selections resident before routing, prediction's reads not counted.",
            x.decode.cache_hit_rate,
        )?;
        counter(
            e,
            "epm_expert_evictions",
            "Experts evicted.",
            n(x.evictions),
        )?;
        counter(
            e,
            "epm_warm_start_experts",
            "Experts a warm start read in while idle (those earlier runs selected most).",
            n(x.warm_start.experts),
        )?;
        counter(
            e,
            "epm_warm_start_adopted_experts",
            "Experts found in the page cache at start (left by an earlier run or a write of the file), kept as resident rather than read again.",
            n(x.warm_start.adopted),
        )?;
        counter(
            e,
            "epm_warm_start_hits",
            "Of those read in or kept, experts routing selected before they were evicted.",
            n(x.warm_start.hits),
        )?;
        gauge(
            e,
            "epm_expert_resident_bytes",
            "Expert bytes resident now.",
            n(x.resident_bytes),
        )?;
        gauge(
            e,
            "epm_expert_budget_bytes",
            "Expert bytes allowed resident, besides what the token table lends.",
            n(s.expert_budget_bytes),
        )?;
        gauge(
            e,
            "epm_token_table_lent_bytes",
            "Token-embedding pages not yet read, lent to the expert cache.",
            n(s.memory.token_table_lent_bytes),
        )?;
        gauge(
            e,
            "epm_cgroup_deduction_peak_bytes",
            "The most the expert cache gave up for kernel memory a cgroup limit charges.",
            n(s.memory.cgroup_deduction_peak_bytes),
        )?;
        counter(
            e,
            "epm_read_bytes",
            "Bytes this process read from storage.",
            n(s.io.read_bytes),
        )?;
        gauge(
            e,
            "epm_rss_bytes",
            "Total resident memory (anonymous + file) now.",
            n(s.memory.rss_bytes),
        )?;
        gauge(
            e,
            "epm_rss_peak_bytes",
            "Peak total resident memory.",
            n(s.memory.peak_rss_bytes),
        )?;
        gauge(
            e,
            "epm_budget_bytes",
            "The total-RSS budget (0 when unpaged).",
            n(s.budget_bytes),
        )?;
        gauge(
            e,
            "epm_swap_bytes",
            "Swap used by this process.",
            n(s.memory.swap_bytes),
        )?;
        counter(
            e,
            "epm_hook_busy_seconds",
            "Time inside the pager's hook.",
            s.hook.busy_us as f64 / 1e6,
        )?;
        gauge(
            e,
            "epm_model_file_changed",
            "1 once a model file changed on disk under the server (new requests get 503).",
            f64::from(u8::from(st.server.model_changed.get().is_some())),
        )?;
        family(
            e,
            "epm_output_write_failures",
            "Writes of an output file that failed (the server went on).",
            MetricType::Counter,
            &[
                (
                    [("file", OutputFile::Stats)],
                    n(st.stats.stats_write_failures.get()),
                ),
                (
                    [("file", OutputFile::Trace)],
                    n(st.stats.trace_write_failures.get()),
                ),
            ],
        )?;
        Ok(())
    }
}

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The Prometheus text of the server's metrics now. The registry is built per scrape: its
/// one collector reads the state, which must not own it.
pub fn render(state: Arc<AppState>) -> String {
    let mut r = Registry::default();
    r.register_collector(Box::new(Scrape(state)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &r) {
        tracing::warn!("encoding /metrics failed: {e}");
    }
    out
}
