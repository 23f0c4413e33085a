//! GGUF, the file format: our own reader and writer (pure Rust, no unsafe) and split-file
//! models. What the tensors mean (experts, routers, recurrent layers) is `epm_core::model`'s.
//!
//! Every count read from a file is checked against the bytes that remain before anything
//! is allocated for it, so a malformed or truncated file yields a typed [`GgufError`].
#![forbid(unsafe_code)]

mod error;
mod file_type;
mod reader;
#[cfg(test)]
mod tests;
mod types;
mod value;
pub mod writer;

pub use error::GgufError;
pub use file_type::FileType;
pub use reader::{split_path, GgufFile, GgufModel, TensorInfo};
pub use types::GgmlType;
pub use value::Value;

/// The GGUF magic, `"GGUF"` as little-endian bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
