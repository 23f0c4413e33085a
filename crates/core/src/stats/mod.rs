//! Telemetry: lock-free counters updated on the hot path ([`counters`]), the run's shared
//! state ([`RunStats`]), and the stats JSON it snapshots into ([`Snapshot`],
//! `schema_version` [`SCHEMA_VERSION`], documented in the README). Readings of the process
//! (`/proc`) come in as arguments: this module reads nothing itself.

mod counters;
mod residency;
mod snapshot;

pub use counters::{Counter, IoCounters, LayerCounters, PagerCounters, PhaseCounters};
pub use residency::{ResidencySnapshot, ResidencyView, HEAT_DECAY};
pub use snapshot::*;

/// Version of the stats JSON. 2: prompt and decode figures apart, the decode cache hit
/// rate, prediction coverage and accuracy (the README lists the renames from 1).
pub const SCHEMA_VERSION: u32 = 2;
