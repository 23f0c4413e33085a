//! The llama.cpp side of EPM. An [`Engine`] loads a model once through the patched
//! llama-cpp-2 (no populate, no extra buffer types); a [`Session`] on it is one llama.cpp
//! context with the pager attached through the `cb_eval` [`hook`](crate::hook), and
//! prefills, decodes, samples and keeps or drops KV prefixes for up to `n_seq` sequences.
//! [`generation`] is the generation core that every client (`generate`, `--chat`, `serve`)
//! drives; [`telemetry`] turns the run's counters into the stats file.
//!
//! No terminal I/O: progress and text reach the caller through callbacks and sinks. The
//! only `unsafe` code is in the hook module (the FFI trampoline, the tensors it reads,
//! finding llama.cpp's mappings, and a sequence's state copied to and from our buffers).

#![deny(unsafe_code)]

pub mod chat;
mod engine;
mod error;
pub mod generation;
#[allow(unsafe_code)]
mod hook;
pub mod infill;
pub mod integrity;
mod prefix_file;
pub mod prompt_folder;
mod sampling;
mod session;
pub mod telemetry;
pub mod warm;

pub use engine::{Engine, EngineOptions, ModelFacts, PagerMode, SessionOptions};
pub use epm_core::prefix::SeqCache;
pub use error::EngineError;
pub use hook::attach::{PagingOptions, Prediction};
pub use hook::GoneProbe;
pub use sampling::{
    Dry, Extras, LogitBias, Mirostat, Penalties, Pick, Picked, Sampler, SamplerOrder,
    SamplingError, SamplingParams, Stage,
};
pub use session::{PrefillProgress, Prefilled, Session, Step};
