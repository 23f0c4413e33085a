//! EPM (Expert Paging for MoE): run Mixture-of-Experts GGUF models whose weights exceed RAM
//! on unmodified llama.cpp, paging routed experts in and out of llama.cpp's own file mapping.
//!
//! Data path: [`gguf`] index -> [`plan`] -> [`llama`] session, whose eval-callback hook
//! feeds routing to the [`pager`] policy, which advises the [`os`] layer; [`stats`] counts.

pub mod gguf;
pub mod harness;
pub mod llama;
pub mod os;
pub mod pager;
pub mod plan;
pub mod probe;
pub mod stats;
pub mod synth;
