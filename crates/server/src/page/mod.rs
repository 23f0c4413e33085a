//! The page: `GET /` serves one HTML file embedded in the binary (chat, and a live view of
//! the pager), and two endpoints feed its view and any script:
//!
//! - `GET /pager/stream`: Server-Sent Events, one `pager` event every 250 ms, each a
//!   [`PagerEvent`] (`schema_version` [`PAGER_SCHEMA_VERSION`], README "The page").
//! - `GET /pager/residency`: one [`Residency`] snapshot.
//!
//! Both read counters and the residency bitmaps the pager publishes with plain atomic
//! stores (`epm_core::stats::ResidencyView`): a reader takes no lock the hook takes.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::stream::{self, Stream};
use serde::Serialize;

use epm_core::stats::ResidencySnapshot;
use epm_engine::generation::SlotState;

use crate::state::AppState;

/// Version of [`PagerEvent`] and [`Residency`].
pub const PAGER_SCHEMA_VERSION: u32 = 1;

/// How often the stream sends an event.
pub const STREAM_PERIOD: Duration = Duration::from_millis(250);

const PAGE: &str = include_str!("index.html");

/// `/`: outside the API key (it holds no data; it asks for the key).
pub fn public_routes() -> Router<Arc<AppState>> {
    Router::new().route("/", get(page))
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pager/stream", get(pager_stream))
        .route("/pager/residency", get(residency))
}

async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-cache")], Html(PAGE)).into_response()
}

/// The residency map: layers x experts, one bit per expert in each bitmap (row-major by
/// layer, least significant bit first, base64), and a byte of heat per expert.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Residency {
    pub schema_version: u32,
    /// The MoE layers' ids, one row each.
    pub layers: Vec<u32>,
    pub n_expert: u32,
    /// Held by the pager now.
    pub resident: String,
    /// Selected for the layer being computed (never evicted until the next routing).
    pub pinned: String,
    /// Read in on a prediction, not yet selected.
    pub speculative: String,
    /// 0-255 per expert: decayed selection count (decay 0.95 per token) against the
    /// hottest expert's.
    pub heat: String,
    /// Routings published so far (the map changes when it does).
    pub version: u64,
}

impl Residency {
    fn of(s: ResidencySnapshot) -> Residency {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Residency {
            schema_version: PAGER_SCHEMA_VERSION,
            layers: s.layers,
            n_expert: s.n_expert,
            resident: b64(&s.resident),
            pinned: b64(&s.pinned),
            speculative: b64(&s.speculative),
            heat: b64(&s.heat),
            version: s.version,
        }
    }
}

/// One event of `/pager/stream`: cumulative counters (a reader takes differences between
/// events for rates and per-token figures), memory now, the slots, and the residency map.
#[derive(Debug, Clone, Serialize)]
pub struct PagerEvent {
    pub schema_version: u32,
    pub uptime_ms: u64,
    pub model: String,
    pub paged: bool,
    pub budget_bytes: u64,
    pub reserve_bytes: u64,
    pub expert_budget_bytes: u64,
    pub memory: MemoryNow,
    pub tokens: TokensSoFar,
    pub decode: SelectionsSoFar,
    pub prompt: SelectionsSoFar,
    pub evictions: u64,
    pub read_bytes: u64,
    pub decode_read_bytes: u64,
    pub decode_steps: u64,
    pub prefill_us: u64,
    pub decode_us: u64,
    pub hook_us: u64,
    pub hook_decode_us: u64,
    /// The prompt being evaluated now (tokens done, in all; 0, 0 when none).
    pub prefill_done: u64,
    pub prefill_total: u64,
    pub slots: Vec<SlotNow>,
    pub queue_depth: usize,
    /// `None` when nothing is paged.
    pub residency: Option<Residency>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryNow {
    pub rss_bytes: u64,
    pub rss_anon_bytes: u64,
    pub rss_file_bytes: u64,
    /// Of the file-backed part, the experts the pager holds.
    pub expert_resident_bytes: u64,
    pub peak_rss_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokensSoFar {
    pub prompt: u64,
    pub prompt_reused: u64,
    pub generated: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SelectionsSoFar {
    pub selected: u64,
    pub cache_hits: u64,
    pub prefetch_hits: u64,
    pub misses: u64,
    pub miss_bytes: u64,
    pub prefetch_issued_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlotNow {
    /// `idle`, `prefill` or `decode`.
    pub state: &'static str,
    pub prompt_tokens: u64,
    pub reused_tokens: u64,
    pub generated: u64,
}

fn event(state: &AppState) -> PagerEvent {
    let s = &state.stats;
    let now = epm_engine::telemetry::reading();
    let p = &s.pager;
    let phase = |c: &epm_core::stats::PhaseCounters| SelectionsSoFar {
        selected: c.selected.get(),
        cache_hits: c.cache_hits.get(),
        prefetch_hits: c.prefetch_hits.get(),
        misses: c.misses.get(),
        miss_bytes: c.miss_bytes.get(),
        prefetch_issued_bytes: c.prefetch_issued_bytes.get(),
    };
    let g = &state.generation;
    PagerEvent {
        schema_version: PAGER_SCHEMA_VERSION,
        uptime_ms: state.started.elapsed().as_millis() as u64,
        model: state.model_name.clone(),
        paged: s.pager_enabled,
        budget_bytes: s.budget_bytes,
        reserve_bytes: s.reserve_bytes.get(),
        expert_budget_bytes: s.expert_budget_bytes.get(),
        memory: MemoryNow {
            rss_bytes: now.rss,
            rss_anon_bytes: now.rss_anon,
            rss_file_bytes: now.rss_file,
            expert_resident_bytes: p.resident_bytes.get(),
            peak_rss_bytes: s.peak_rss.get().max(now.hwm),
        },
        tokens: TokensSoFar {
            prompt: s.prompt_tokens.get(),
            prompt_reused: s.reused_prompt_tokens.get(),
            generated: s.generated_tokens.get(),
        },
        decode: phase(&p.decode),
        prompt: phase(&p.prompt),
        evictions: p.evictions.get(),
        read_bytes: now.read_bytes.saturating_sub(s.read_bytes_after_load.get()),
        decode_read_bytes: s.decode_read_bytes.get(),
        decode_steps: s.decode_steps.get(),
        prefill_us: s.prefill_us.get(),
        decode_us: s.decode_us.get(),
        hook_us: s.hook_ns.get() / 1000,
        hook_decode_us: s.hook_decode_ns.get() / 1000,
        prefill_done: s.prefill_done.get(),
        prefill_total: s.prefill_total.get(),
        slots: g
            .slots
            .iter()
            .map(|v| SlotNow {
                state: match v.state() {
                    SlotState::Idle => "idle",
                    SlotState::Prefill => "prefill",
                    SlotState::Decode => "decode",
                },
                prompt_tokens: v.prompt_tokens.load(Ordering::Relaxed),
                reused_tokens: v.reused_tokens.load(Ordering::Relaxed),
                generated: v.generated.load(Ordering::Relaxed),
            })
            .collect(),
        queue_depth: g.waiting.load(Ordering::Relaxed),
        residency: s
            .pager_enabled
            .then(|| Residency::of(p.residency.snapshot())),
    }
}

async fn residency(State(state): State<Arc<AppState>>) -> Json<Residency> {
    Json(Residency::of(state.stats.pager.residency.snapshot()))
}

async fn pager_stream(
    State(state): State<Arc<AppState>>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let ticks = stream::unfold(
        (state, tokio::time::interval(STREAM_PERIOD)),
        |(state, mut interval)| async move {
            interval.tick().await;
            let ev = event(&state);
            let data = serde_json::to_string(&ev).unwrap_or_default();
            Some((
                Ok(SseEvent::default().event("pager").data(data)),
                (state, interval),
            ))
        },
    );
    Sse::new(ticks).keep_alive(KeepAlive::default())
}
