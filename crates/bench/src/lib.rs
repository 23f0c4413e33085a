//! Measurement tools, kept out of the runtime so `epm-run`'s engine does not carry them:
//!
//! - [`harness`]: A/B runs of `epm-run generate` as a black-box child process against
//!   upstream llama.cpp's loading, under hard memory caps, with plots;
//! - [`probe`]: what the disk under a model delivers (`probe-io`);
//! - [`plot`]: line charts as PNG.
#![forbid(unsafe_code)]

pub mod harness;
pub mod plot;
pub mod probe;
