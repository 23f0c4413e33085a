//! Pure policy of EPM, unit-tested without llama.cpp, a model or a system call:
//!
//! - [`model`]: the model as EPM sees it, from GGUF metadata: its routed experts (shard,
//!   offset, bytes per expert), routers, routing rule and memory layout.
//! - [`pager`]: which experts are resident, pinned and evicted, within the expert budget;
//!   it tells an [`pager::Advisor`] what to do and never does it itself.
//! - [`plan`]: from GGUF metadata and measured inputs, the reserve, the working set, the
//!   minimum budget and the expert budget the metadata promises.
//! - [`budget`]: after load, the one split of the RAM budget into what every part uses.
//! - [`threads`]: compute threads for decode and prefill (`-t`).
//! - [`assist`]: whether the hook shares a routing step's calls with its assisting thread.
//! - [`diagnose`]: whether decode waited on the disk, and the hint that says what helps.
//! - [`stats`]: lock-free counters for the hot path and the stats JSON they snapshot into.
//! - [`predict`]: the router math of cross-layer prediction (gating, groups, top-k).
//! - [`prefix`]: which part of a sequence's KV cache a new prompt may keep, exactly.
//! - [`sim`]: offline replay of routing traces through cache policies, Belady's bound included.
//! - [`trace`]: the routing-trace file format.
//! - [`units`]: byte units, written once.
#![forbid(unsafe_code)]

pub mod assist;
pub mod budget;
pub mod diagnose;
pub mod heat;
pub mod model;
pub mod pager;
pub mod plan;
pub mod predict;
pub mod prefix;
pub mod prompt_store;
pub mod sim;
pub mod stats;
pub mod threads;
pub mod trace;
pub mod units;
