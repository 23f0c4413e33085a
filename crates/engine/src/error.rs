//! The engine's typed errors; each carries the facts needed to act on it.

use std::path::PathBuf;

use epm_core::plan::BelowMinimum;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    BudgetTooSmall(#[from] BelowMinimum),
    #[error("the prompt is empty: give text with -p or a non-empty file with -f")]
    EmptyPrompt,
    #[error("context too small: the prompt has {prompt} tokens and {predict} more are requested, but the context holds {n_ctx}; raise -c or lower -n")]
    ContextTooSmall {
        prompt: usize,
        predict: usize,
        n_ctx: u32,
    },
    #[error("llama.cpp could not load {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("llama.cpp: {0}")]
    Llama(String),
    #[error("cannot page this model: {0}. Run with --no-pager, or build with GGML_CPU_REPACK=OFF")]
    ForeignTensor(String),
    #[error("the pager's hook panicked during generation; paging stopped and the run was aborted")]
    HookPanicked,
    #[error("a paged session is already running on this engine: the pager owns the model's page cache, so there can be only one")]
    SessionActive,
    #[error(transparent)]
    Os(#[from] epm_sys::OsError),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing output: {0}")]
    Output(std::io::Error),
    #[error("the model has no chat template (tokenizer.chat_template): give one with --chat-template-file")]
    NoChatTemplate,
    #[error(transparent)]
    Template(#[from] crate::chat::TemplateError),
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplingError),
    #[error("llama.cpp's grammar parser rejected the grammar ({0}); check its GBNF syntax and that it defines `root`")]
    Grammar(String),
    #[error("the server is shutting down; this generation was cut short")]
    ShuttingDown,
    #[error("the client went away; its prompt's evaluation was stopped")]
    Cancelled,
    /// A saved prompt prefix could not be written or read back (the job runs without it).
    #[error("prompt store {path}: {reason}")]
    PromptStore { path: PathBuf, reason: String },
    /// A prompt prefix larger than the whole prompt store was not written (it would have
    /// been deleted at once).
    #[error("a prompt prefix of {tokens} tokens takes {:.1} MiB, more than the prompt store's {:.1} MiB", epm_core::units::mib_f(*bytes), epm_core::units::mib_f(*capacity))]
    PrefixLargerThanStore {
        tokens: usize,
        bytes: u64,
        capacity: u64,
    },
}

impl EngineError {
    /// Whether the user's input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            EngineError::BudgetTooSmall(_)
                | EngineError::EmptyPrompt
                | EngineError::ContextTooSmall { .. }
                | EngineError::NoChatTemplate
                | EngineError::Template(_)
                | EngineError::Grammar(_)
                | EngineError::Sampling(_)
        )
    }

    pub(crate) fn llama(e: impl std::fmt::Display) -> EngineError {
        EngineError::Llama(e.to_string())
    }
}
