//! Pure policy of EPM, unit-tested without llama.cpp, a model or a system call:
//!
//! - [`pager`]: which experts are resident, pinned and evicted, within the expert budget;
//!   it tells an [`pager::Advisor`] what to do and never does it itself.
//! - [`plan`]: from GGUF metadata and measured inputs, the reserve, the working set, the
//!   minimum budget and the expert budget.
//! - [`stats`]: lock-free counters for the hot path and the stats JSON they snapshot into.
//! - [`predict`]: the router math of cross-layer prediction (gating, groups, top-k).
//! - [`prefix`]: which part of a sequence's KV cache a new prompt may keep, exactly.
//! - [`sim`]: offline replay of routing traces through cache policies, Belady's bound included.
//! - [`trace`]: the routing-trace file format.
//! - [`units`]: byte units, written once.
#![forbid(unsafe_code)]

pub mod pager;
pub mod plan;
pub mod predict;
pub mod prefix;
pub mod sim;
pub mod stats;
pub mod trace;
pub mod units;
