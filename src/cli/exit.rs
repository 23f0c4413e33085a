//! Exit codes, in one place: typed errors from every crate map to the codes the README
//! documents.

use epm_bench::harness::HarnessError;
use epm_core::plan::BelowMinimum;
use epm_core::trace::TraceError;
use epm_engine::EngineError;
use epm_gguf::GgufError;
use epm_server::ServeError;
use epm_synth::SynthError;

/// Success.
pub const OK: i32 = 0;
/// A runtime failure: llama.cpp failed, an I/O error, the hook failed, an A/B check failed.
pub const RUNTIME: i32 = 1;
/// Bad input or usage: a missing or malformed model, a budget below the minimum, bad
/// flag values, an empty prompt, a context too small, a model file truncated under a run.
pub const BAD_INPUT: i32 = 2;
/// Interrupted (Ctrl-C / SIGTERM) where a command cleans up and stops early.
pub const INTERRUPTED: i32 = 130;

/// Bad input or usage that no library error describes.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Stopped by Ctrl-C or SIGTERM, after cleaning up: what a command had done so far is
/// kept (the text printed, the stats file, the expert heat).
#[derive(Debug, thiserror::Error)]
#[error("interrupted: {0}")]
pub struct Interrupted(pub &'static str);

/// What the user is told of an error: its chain joined by `": "`, each cause left out whose
/// text the messages before it already end with (a library error that names its source in
/// its own message, as `"cannot open {path}: {source}"` does, would print it twice).
pub fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// The exit code for an error: the first cause in the chain that decides it.
pub fn code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.is::<Interrupted>() {
            return INTERRUPTED;
        }
        if cause.is::<UsageError>() || cause.is::<BelowMinimum>() || cause.is::<TraceError>() {
            return BAD_INPUT;
        }
        let bad_input = if let Some(g) = cause.downcast_ref::<GgufError>() {
            Some(g.is_bad_input())
        } else if let Some(s) = cause.downcast_ref::<EngineError>() {
            Some(s.is_bad_input())
        } else if let Some(s) = cause.downcast_ref::<ServeError>() {
            Some(s.is_bad_input())
        } else if let Some(s) = cause.downcast_ref::<SynthError>() {
            Some(s.is_bad_input())
        } else if let Some(h) = cause.downcast_ref::<HarnessError>() {
            match h {
                HarnessError::Interrupted => return INTERRUPTED,
                HarnessError::Gguf(g) => Some(g.is_bad_input()),
                HarnessError::Io(_) => Some(false),
                // The machine cannot throttle (no writable blkio cgroup), or the model is
                // not on a disk: the request cannot be met here.
                HarnessError::Throttle(_) | HarnessError::NoDisk(_) => Some(true),
            }
        } else {
            None
        };
        match bad_input {
            Some(true) => return BAD_INPUT,
            Some(false) => return RUNTIME,
            None => {}
        }
    }
    RUNTIME
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_cause_that_its_error_already_names_is_said_once() {
        let open = GgufError::Open {
            path: PathBuf::from("m.gguf"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        let e = anyhow::Error::new(open).context("loading the model");
        assert_eq!(
            message(&e),
            "loading the model: cannot open m.gguf: no such file"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(message(&plain), "outer: inner");
    }

    #[test]
    fn io_errors_are_runtime_failures_and_bad_files_are_bad_input() {
        let io = GgufError::Io {
            path: PathBuf::from("m.gguf"),
            source: std::io::Error::other("disk"),
        };
        assert_eq!(code(&anyhow::Error::new(io)), RUNTIME);
        let magic = GgufError::BadMagic {
            path: PathBuf::from("m.gguf"),
            found: vec![0; 4],
        };
        assert_eq!(
            code(&anyhow::Error::new(magic).context("opening")),
            BAD_INPUT
        );
        assert_eq!(
            code(&anyhow::Error::new(HarnessError::Interrupted)),
            INTERRUPTED
        );
        assert_eq!(
            code(&anyhow::Error::new(Interrupted("by Ctrl-C")).context("generating")),
            INTERRUPTED
        );
        assert_eq!(
            code(&anyhow::Error::new(EngineError::EmptyPrompt)),
            BAD_INPUT
        );
        assert_eq!(code(&anyhow::anyhow!("something else")), RUNTIME);
    }
}
