//! What `generate --chat` and `serve` share about chats: the template that renders them and
//! the reasoning budget of their replies.

use std::path::PathBuf;

use clap::Args;

use epm_engine::chat::ChatTemplate;

use super::exit::UsageError;

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// A Jinja chat template to use instead of the model's.
    #[arg(long)]
    chat_template_file: Option<PathBuf>,
    /// Tokens a reply may spend in each reasoning block (`<think>` ..., gpt-oss's analysis
    /// channel) before the block's close is written for it (for the server: for requests
    /// that set no budget of their own). -1: no budget; 0: each block closed at once.
    #[arg(long, default_value_t = -1, value_parser = clap::value_parser!(i64).range(-1..=i64::from(u32::MAX)))]
    reasoning_budget: i64,
    /// Written before the close when a budget is spent (e.g. " Time to answer.").
    #[arg(long, default_value = "")]
    pub reasoning_budget_message: String,
}

impl ChatArgs {
    /// The template file's text, checked to compile (before any model loads).
    pub fn template(&self) -> Result<Option<String>, UsageError> {
        let Some(p) = &self.chat_template_file else {
            return Ok(None);
        };
        let src = std::fs::read_to_string(p).map_err(|e| {
            UsageError(format!(
                "cannot read --chat-template-file {}: {e}",
                p.display()
            ))
        })?;
        ChatTemplate::new(&src)
            .map_err(|e| UsageError(format!("--chat-template-file {}: {e}", p.display())))?;
        Ok(Some(src))
    }

    /// The reasoning budget's tokens per block (`None`: no budget).
    pub fn budget_tokens(&self) -> Option<u32> {
        u32::try_from(self.reasoning_budget).ok()
    }

    /// Whether any of these flags was given (they need a chat).
    pub fn any_given(&self) -> bool {
        self.chat_template_file.is_some()
            || self.reasoning_budget != -1
            || !self.reasoning_budget_message.is_empty()
    }
}
