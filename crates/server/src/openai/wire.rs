//! The OpenAI API's request and response bodies, as far as EPM serves them. Unknown
//! request fields are ignored, as OpenAI clients expect; wrong types are errors.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::generation::Asked;

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// A chat message. `content` is a string, an array of content parts or null; the rest
/// (`tool_calls`, `name`, `tool_call_id`, `reasoning_content` ...) goes to the template.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Sampling and length settings both endpoints share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<u32>,
}

impl Sampling {
    /// The settings as the generation core's adapter takes them.
    pub fn asked(&self, max_tokens: Option<u32>, default_max_tokens: Option<u32>) -> Asked {
        Asked {
            max_tokens,
            default_max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            n: self.n,
            stop: self.stop.clone().map(Stop::into_vec).unwrap_or_default(),
        }
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    /// The newer name of `max_tokens`.
    pub max_completion_tokens: Option<u32>,
    pub tools: Option<Value>,
    /// Extra template variables (`enable_thinking` ...), as llama-server takes them.
    pub chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// `prompt`: a string, or an array holding one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl From<&epm_engine::generation::FinishReason> for FinishReason {
    fn from(r: &epm_engine::generation::FinishReason) -> FinishReason {
        use epm_engine::generation::FinishReason as Core;
        match r {
            Core::EndOfGeneration | Core::StopSequence(_) => FinishReason::Stop,
            Core::Length => FinishReason::Length,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: PromptTokensDetails,
}

impl From<crate::generation::Usage> for Usage {
    fn from(u: crate::generation::Usage) -> Usage {
        Usage {
            prompt_tokens: u.prompt,
            completion_tokens: u.completion,
            total_tokens: u.prompt + u.completion,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: u.cached,
            },
        }
    }
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// A whole response of `/v1/chat/completions` (`C` = [`ChatChoice`]) or `/v1/completions`
/// ([`TextChoice`]), not streamed.
#[derive(Debug, Clone, Serialize)]
pub struct Completion<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<Value>,
    pub finish_reason: FinishReason,
}

#[derive(Debug, Clone, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: FinishReason,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

/// A request's id: `<prefix>-<n>`, unique within this server's life.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Seconds since the epoch, for `created`.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_ignored_and_wrong_types_are_not() {
        let r: ChatRequest = serde_json::from_str(
            r#"{"messages":[{"role":"user","content":"hi","name":"x"}],"max_tokens":5,
                "logit_bias":{},"stop":"@@@","stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, Some(5));
        assert!(r.sampling.stream);
        assert_eq!(r.sampling.stop.unwrap().into_vec(), vec!["@@@"]);
        assert_eq!(r.messages[0].rest["name"], "x");
        let bad = serde_json::from_str::<ChatRequest>(r#"{"messages":[],"max_tokens":"five"}"#);
        assert!(bad.is_err());
        let c: CompletionRequest =
            serde_json::from_str(r#"{"prompt":["a"],"stop":["x","y"]}"#).unwrap();
        assert!(matches!(c.prompt, Prompt::Many(_)));
    }
}
