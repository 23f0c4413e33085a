//! GGUF: our own reader and writer (pure Rust, no unsafe), split-file models, and the
//! expert-tensor index the pager works from.
//!
//! Every count read from a file is checked against the bytes that remain before anything
//! is allocated for it, so a malformed or truncated file yields a typed [`GgufError`].
#![forbid(unsafe_code)]

mod error;
pub mod index;
mod reader;
#[cfg(test)]
mod tests;
mod types;
mod value;
pub mod writer;

pub use error::GgufError;
pub use index::{ExpertTensor, GatingFunc, ModelIndex, MoeLayer, RouterTensor, RoutingRule};
pub use reader::{split_path, GgufFile, GgufModel, TensorInfo};
pub use types::GgmlType;
pub use value::Value;

/// The GGUF magic, `"GGUF"` as little-endian bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
