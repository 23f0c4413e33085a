//! The OpenAI API's request and response bodies, as far as EPM serves them. Unknown
//! request fields are ignored, as OpenAI clients expect; wrong types are errors.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use epm_engine::generation::{TokenLogprob, TokenText};

use crate::error::ApiError;
use crate::generation::{Asked, SamplerExtras, WirePrompt};
use crate::output;

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
    /// llama-server's extension.
    pub top_k: Option<i32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<u32>,
    /// llama-server's: streamed chunks carry `prompt_progress` while the prompt is read.
    #[serde(default)]
    pub return_progress: bool,
    /// OpenAI's penalties and `logit_bias`, and llama-server's `min_p` and `repeat_*`.
    #[serde(flatten)]
    pub extras: SamplerExtras,
}

impl Sampling {
    /// The settings as the generation core's adapter takes them.
    pub fn asked(&self, max_tokens: Option<u32>, default_max_tokens: Option<u32>) -> Asked {
        Asked {
            max_tokens,
            default_max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed,
            stop: self.stop.clone().map(Stop::into_vec).unwrap_or_default(),
            extras: self.extras.clone(),
            prompt_only: false,
        }
    }

    /// The choices asked for (`n`, 1 unless given), checked against the requests the server
    /// holds at once (`capacity`: its slots and queue), since each choice is one of them.
    pub fn choices(&self, capacity: usize) -> Result<usize, ApiError> {
        match self.n.unwrap_or(1) as usize {
            0 => Err(ApiError::bad_request("`n` must be at least 1")),
            n if n > capacity => Err(ApiError::bad_request(format!(
                "`n` is {n}, but each choice is a request and this server holds at most {capacity} at once (its --parallel slots and --queue): ask for fewer choices, or start it with a larger --queue"
            ))),
            n => Ok(n),
        }
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

/// OpenAI's `tool_choice`, in either API's shape: `"none"`, `"auto"`, `"required"`; a named
/// function (`{"type": "function", "function": {"name"}}`, flat `{"type": "function",
/// "name"}` in Responses) or custom tool (`{"type": "custom", "custom": {"name"}}` or flat);
/// or `{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools":
/// [...]}}` (its fields flat in Responses), the tools the reply may call, the others still
/// shown to the model.
pub fn tool_choice(v: &Value) -> Result<output::ToolChoice, ApiError> {
    let wrong = || {
        ApiError::bad_request(format!(
            "`tool_choice` is {v}: use \"none\", \"auto\", \"required\", {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, {{\"type\": \"custom\", \"custom\": {{\"name\": ...}}}} or {{\"type\": \"allowed_tools\", \"allowed_tools\": {{\"mode\": \"auto\", \"tools\": [...]}}}}"
        ))
    };
    // A named tool: its name nested under its type (Chat Completions) or flat (Responses).
    let name_of = |t: &Value| -> Option<String> {
        let kind = t.get("type").and_then(Value::as_str)?;
        t.get(kind)
            .and_then(|n| n.get("name"))
            .or_else(|| t.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match v {
        Value::String(s) => match s.as_str() {
            "none" => Ok(output::ToolChoice::None),
            "auto" => Ok(output::ToolChoice::Auto),
            "required" => Ok(output::ToolChoice::Required),
            _ => Err(wrong()),
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function" | "custom") => name_of(v)
                .map(output::ToolChoice::Function)
                .ok_or_else(wrong),
            Some("allowed_tools") => {
                let a = o.get("allowed_tools").unwrap_or(v);
                let required = match a.get("mode").and_then(Value::as_str) {
                    Some("auto") => false,
                    Some("required") => true,
                    _ => return Err(wrong()),
                };
                let names = a
                    .get("tools")
                    .and_then(Value::as_array)
                    .ok_or_else(wrong)?
                    .iter()
                    .map(|t| name_of(t).ok_or_else(wrong))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(output::ToolChoice::Allowed { names, required })
            }
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

/// `response_format`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    /// Any JSON object; llama-server also takes a `schema` here.
    JsonObject {
        schema: Option<Value>,
    },
    JsonSchema {
        json_schema: JsonSchemaFormat,
    },
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub schema: Option<Value>,
    /// Constrained decoding is always strict.
    pub strict: Option<bool>,
}

impl ResponseFormat {
    pub fn format(&self) -> output::Format {
        match self {
            ResponseFormat::Text => output::Format::Text,
            ResponseFormat::JsonObject { schema: Some(s) } => output::Format::JsonSchema(s.clone()),
            ResponseFormat::JsonObject { schema: None } => output::Format::JsonObject,
            ResponseFormat::JsonSchema { json_schema } => match &json_schema.schema {
                Some(s) => output::Format::JsonSchema(s.clone()),
                None => output::Format::JsonObject,
            },
        }
    }
}

/// llama-server's `reasoning_format`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningFormat {
    None,
    Auto,
    Deepseek,
    #[serde(rename = "deepseek-legacy")]
    DeepseekLegacy,
}

impl From<ReasoningFormat> for output::ReasoningFormat {
    fn from(r: ReasoningFormat) -> output::ReasoningFormat {
        match r {
            ReasoningFormat::None => output::ReasoningFormat::None,
            _ => output::ReasoningFormat::DeepSeek,
        }
    }
}

/// The constraints both endpoints take: OpenAI's `response_format`, and llama-server's
/// `grammar` and `json_schema`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Constraints {
    pub response_format: Option<ResponseFormat>,
    pub grammar: Option<String>,
    pub json_schema: Option<Value>,
}

impl Constraints {
    pub fn format(&self) -> output::Format {
        match (&self.json_schema, &self.response_format) {
            (Some(s), _) => output::Format::JsonSchema(s.clone()),
            (None, Some(f)) => f.format(),
            (None, None) => output::Format::Text,
        }
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
    /// Read by [`tool_choice`].
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub reasoning_format: Option<ReasoningFormat>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    /// Extra template variables (`enable_thinking` ...), as llama-server takes them.
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub reasoning_effort: Option<output::ReasoningEffort>,
    /// Output kinds: an audio reply (`["text", "audio"]`, with `audio`) is refused, as this
    /// model writes text only.
    pub modalities: Option<Vec<String>>,
    /// The legacy form of `tools` and `tool_choice`: refused with a pointer to them.
    pub functions: Option<Value>,
    pub function_call: Option<Value>,
    #[serde(flatten)]
    pub budget: output::WireBudget,
    #[serde(flatten)]
    pub constraints: Constraints,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: WirePrompt,
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    /// The legacy form: how many alternatives per token (0: the sampled token's only).
    pub logprobs: Option<u32>,
    /// Refused when they ask for something (`echo: true`, `best_of` above 1, a `suffix`):
    /// not served, and ignoring them would answer another question.
    pub echo: Option<bool>,
    pub best_of: Option<u32>,
    pub suffix: Option<String>,
    /// llama-server's reasoning budget, with the block's tags (a raw prompt has no template
    /// turns to take them from) or the template's.
    #[serde(flatten)]
    pub budget: output::WireBudget,
    #[serde(flatten)]
    pub constraints: Constraints,
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
    /// The reply is tool calls.
    ToolCalls,
}

impl From<&epm_engine::generation::FinishReason> for FinishReason {
    fn from(r: &epm_engine::generation::FinishReason) -> FinishReason {
        use epm_engine::generation::FinishReason as Core;
        match r {
            Core::EndOfGeneration | Core::StopSequence(_) => FinishReason::Stop,
            Core::Length => FinishReason::Length,
            Core::ToolCalls => FinishReason::ToolCalls,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

/// Of the completion: tokens generated inside reasoning blocks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompletionTokensDetails {
    pub reasoning_tokens: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens_details: CompletionTokensDetails,
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
            completion_tokens_details: CompletionTokensDetails {
                reasoning_tokens: u.reasoning,
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
    /// Null when the reply is tool calls only.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

/// A call in `tool_calls`: a function's (`"type": "function"`, its `function`) or a custom
/// tool's (`"type": "custom"`, its `custom`: the name and the input text).
#[derive(Debug, Clone, Serialize)]
pub struct WireToolCall {
    /// Only in stream deltas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<WireFunction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Option<WireCustom>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WireCustom {
    pub name: String,
    pub input: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct WireFunction {
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

impl WireToolCall {
    /// The wire form of `c`, a custom call when its tool is one of `custom_tools`.
    pub fn new(
        c: &epm_chat::ToolCall,
        index: Option<usize>,
        custom_tools: &[String],
    ) -> WireToolCall {
        let id = c.id.clone().unwrap_or_else(|| new_id("call"));
        if custom_tools.contains(&c.name) {
            return WireToolCall {
                index,
                id,
                kind: "custom",
                function: None,
                custom: Some(WireCustom {
                    name: c.name.clone(),
                    input: output::custom_input(&c.arguments),
                }),
            };
        }
        WireToolCall {
            index,
            id,
            kind: "function",
            function: Some(WireFunction {
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            }),
            custom: None,
        }
    }
}

/// A token's text for logprobs: the string (lossy where the token is part of a character)
/// and its bytes.
fn token_text(t: &TokenText) -> (String, Vec<u8>) {
    (
        String::from_utf8_lossy(&t.bytes).into_owned(),
        t.bytes.clone(),
    )
}

/// Chat's `logprobs.content[]` entry.
pub fn chat_logprob(l: &TokenLogprob) -> Value {
    let (token, bytes) = token_text(&l.token);
    let top: Vec<Value> = l
        .top
        .iter()
        .map(|(t, lp)| {
            let (token, bytes) = token_text(t);
            serde_json::json!({"token": token, "logprob": lp, "bytes": bytes})
        })
        .collect();
    serde_json::json!({"token": token, "logprob": l.logprob, "bytes": bytes, "top_logprobs": top})
}

/// Completions' legacy `logprobs` object for `tokens`, whose text starts at `offset`.
pub fn text_logprobs(tokens: &[TokenLogprob], mut offset: usize) -> Value {
    let mut toks = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    for l in tokens {
        let (token, _) = token_text(&l.token);
        offsets.push(offset);
        offset += token.len();
        toks.push(token);
        lps.push(l.logprob);
        let top: Map<String, Value> = l
            .top
            .iter()
            .map(|(t, lp)| (token_text(t).0, serde_json::json!(lp)))
            .collect();
        tops.push(Value::Object(top));
    }
    serde_json::json!({"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

#[derive(Debug, Clone, Serialize)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: FinishReason,
}

/// `GET /v1/models`, in OpenAI's shape and Anthropic's at once (`models.list` of either
/// client): OpenAI's reads `object` and `data`, Anthropic's `data`, `has_more`, `first_id`
/// and `last_id`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

impl ModelList {
    pub fn new(data: Vec<ModelCard>) -> ModelList {
        ModelList {
            object: "list",
            first_id: data.first().map(|m| m.id.clone()),
            last_id: data.last().map(|m| m.id.clone()),
            data,
            has_more: false,
        }
    }
}

/// One model, with OpenAI's fields (`object`, `created`, `owned_by`) and Anthropic's
/// (`type`, `display_name`, `created_at`).
#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    /// Seconds since the epoch (OpenAI's `created`).
    pub created: u64,
    pub owned_by: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub display_name: String,
    /// `created` in RFC 3339 (Anthropic's `created_at`).
    pub created_at: String,
}

impl ModelCard {
    /// The card of a model served under `id` since `created` (seconds since the epoch).
    pub fn new(id: String, created: u64) -> ModelCard {
        ModelCard {
            display_name: id.clone(),
            id,
            object: "model",
            created,
            owned_by: "epm",
            kind: "model",
            created_at: rfc3339(created),
        }
    }
}

/// A request's id: `<prefix>-<run><n>`, `<run>` 8 hex digits drawn once per process and
/// `<n>` a count: unique within this server's life, and across restarts.
pub fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Random per process (std's hasher keys come from the OS), so that ids stay unique
    // across restarts: stored responses outlive the server that made them.
    static RUN: OnceLock<u32> = OnceLock::new();
    let run = RUN.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32
    });
    format!("{prefix}-{run:08x}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Seconds since the epoch, for `created`.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seconds since the epoch as an RFC 3339 time in UTC (`2026-12-05T18:30:00Z`), as Ollama
/// and Anthropic write times.
pub fn rfc3339(secs: u64) -> String {
    let (d, s) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(d as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// Days since 1970-01-01 as a (year, month, day) date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_written_in_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // A leap day, and the last second of a century year that is not a leap year.
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339(1_796_494_797), "2026-12-05T18:19:57Z");
    }

    #[test]
    fn a_model_list_reads_as_openai_and_anthropic_lists() {
        let list =
            serde_json::to_value(ModelList::new(vec![ModelCard::new("w1".into(), 0)])).unwrap();
        assert_eq!(
            list,
            json!({"object": "list", "has_more": false, "first_id": "w1", "last_id": "w1",
                "data": [{"id": "w1", "object": "model", "created": 0, "owned_by": "epm",
                    "type": "model", "display_name": "w1", "created_at": "1970-01-01T00:00:00Z"}]})
        );
    }

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
        assert!(matches!(c.prompt, WirePrompt::Texts(_)));
    }

    #[test]
    fn tool_choice_is_read_in_either_apis_shape() {
        use output::ToolChoice as T;
        let read = |v: Value| tool_choice(&v);
        assert_eq!(read(json!("required")).unwrap(), T::Required);
        let f = T::Function("f".into());
        for v in [
            json!({"type": "function", "function": {"name": "f"}}),
            json!({"type": "function", "name": "f"}),
            json!({"type": "custom", "custom": {"name": "f"}}),
            json!({"type": "custom", "name": "f"}),
        ] {
            assert_eq!(read(v).unwrap(), f);
        }
        let allowed = |required| T::Allowed {
            names: vec!["f".into(), "p".into()],
            required,
        };
        assert_eq!(
            read(json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                {"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "p"}}]}}))
            .unwrap(),
            allowed(true)
        );
        assert_eq!(
            read(json!({"type": "allowed_tools", "mode": "auto", "tools": [
                {"type": "function", "name": "f"}, {"type": "custom", "name": "p"}]}))
            .unwrap(),
            allowed(false)
        );
        for bad in [
            json!("sometimes"),
            json!(3),
            json!({"type": "function"}),
            json!({"type": "allowed_tools", "mode": "never", "tools": []}),
            json!({"type": "allowed_tools", "mode": "auto"}),
            json!({"type": "web_search"}),
        ] {
            let e = read(bad.clone()).expect_err(&bad.to_string());
            assert!(e.message.contains("allowed_tools"), "{bad}: {}", e.message);
        }
    }
}
