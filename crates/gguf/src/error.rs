//! Typed errors of the GGUF reader and writer; each carries the facts needed to act on it.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} is a directory, not a GGUF file: pass the path of a .gguf file")]
    IsDirectory { path: PathBuf },
    #[error("{path} is not a GGUF file (first bytes {found:02x?}, expected \"GGUF\")")]
    BadMagic { path: PathBuf, found: Vec<u8> },
    #[error("{path}: unsupported GGUF version {version} (this reader supports 2 and 3)")]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("{path}: truncated header: {what} at offset {offset} needs {needed} bytes but only {remaining} remain")]
    TruncatedHeader {
        path: PathBuf,
        what: &'static str,
        offset: u64,
        needed: u64,
        remaining: u64,
    },
    #[error("{path}: metadata key {key:?} has unknown value type {value_type}")]
    BadValueType {
        path: PathBuf,
        key: String,
        value_type: u32,
    },
    #[error("{path}: metadata nests arrays deeper than {max_depth} levels")]
    TooDeep { path: PathBuf, max_depth: usize },
    #[error("{path}: invalid UTF-8 in {what} at offset {offset}")]
    Utf8 {
        path: PathBuf,
        what: &'static str,
        offset: u64,
    },
    #[error("{path}: tensor {tensor:?} has unknown ggml type {ggml_type}")]
    UnknownTensorType {
        path: PathBuf,
        tensor: String,
        ggml_type: u32,
    },
    #[error("{path}: tensor {tensor:?} has an invalid shape {dims:?} for type {ggml_type}")]
    BadShape {
        path: PathBuf,
        tensor: String,
        dims: Vec<u64>,
        ggml_type: String,
    },
    #[error(
        "tensor {tensor:?}: its data source wrote {wrote} bytes, but its shape needs {expected}"
    )]
    WrongDataLength {
        tensor: String,
        wrote: u64,
        expected: u64,
    },
    #[error("{path}: tensor {tensor:?} data [{start}, {end}) runs past the end of the file ({file_size} bytes): the file is truncated, re-download or re-create it")]
    TruncatedData {
        path: PathBuf,
        tensor: String,
        start: u64,
        end: u64,
        file_size: u64,
    },
    #[error("{path}: bad metadata {key:?}: {reason}")]
    BadMetadata {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error(
        "{path}: shard {index} of {count} is missing: all shards must sit next to the first one"
    )]
    MissingShard {
        path: PathBuf,
        index: u32,
        count: u32,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("writing GGUF data: {0}")]
    Write(#[from] io::Error),
}

impl GgufError {
    /// Whether the user's input is at fault (exit 2: a missing, malformed or truncated
    /// model) rather than the machine (exit 1: an I/O error while reading or writing).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, GgufError::Io { .. } | GgufError::Write(_))
    }
}
