//! `POST /v1/responses/compact`: a conversation too long to go on, made short. The model is
//! shown the conversation as its requests rendered it (their instructions and tools, so
//! that the KV the last request left is reused) and asked for a summary; the answer, as
//! OpenAI's, is the conversation's user messages (the newest of them, up to a share of a
//! slot's context) followed by one `compaction` item holding that summary. A later request
//! sends those items as its `input`, and the compaction item reaches the template as a
//! user message opening with [`COMPACTION_PREFIX`] ([`summary_message`]). Codex calls this
//! endpoint when its provider is OpenAI's, base URL set to this server; the Agents SDK's
//! `OpenAIResponsesCompactionSession` does too.
//!
//! A `POST /v1/responses` whose input ends with `{"type": "compaction_trigger"}` is the
//! newer way to ask: its answer is a response with the compaction item alone
//! ([`summarize`] is shared).
//!
//! OpenAI's `encrypted_content` is opaque to clients; here it is the summary's plain text.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::error::{parse_json, ApiError};
use crate::generation::{self, collect, loaded, prepare_chat, submit, Asked};
use crate::openai::wire::{new_id, now};
use crate::openai::OpenAiError;
use crate::output::{BudgetAsk, BudgetTokens, OutputAsk, ToolChoice};
use crate::responses::{chat_input, history, own_items, usage, ResponsesRequest};
use crate::state::AppState;

/// What the model is asked, after the conversation, to compact it.
const COMPACT_PROMPT: &str = "The conversation above has grown too long to continue, and will be replaced by a summary written now. Write that summary for whoever continues the work without the conversation: the user's goals and requests, what has been done and found (files, commands, results, errors), the decisions made and why, and what remains to do next. Be specific and brief; write only the summary.";

/// What a compaction item's summary is introduced by, as the model sees it in a later
/// request.
pub const COMPACTION_PREFIX: &str =
    "The earlier part of this conversation was compacted. Its summary:\n\n";

/// The summary's tokens at most.
const SUMMARY_TOKENS: u32 = 1024;

/// The reasoning a thinking model may do before the summary: its block is closed after
/// these tokens, so that the summary follows within the reply's limit.
const REASONING_TOKENS: u32 = 512;

/// The share of a slot's context the user messages a compaction keeps may take (1 / this).
const KEPT_USER_SHARE: usize = 4;

/// The message a compaction item is in a conversation the model is shown: a user message
/// opening with [`COMPACTION_PREFIX`].
pub fn summary_message(item: &Value) -> Value {
    let summary = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    json!({"role": "user", "content": format!("{COMPACTION_PREFIX}{summary}")})
}

/// `POST /v1/responses/compact`: `input`, `previous_response_id` (or `conversation`),
/// `instructions` and `tools` as a response takes them.
pub(crate) async fn compact(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Json<Value>, OpenAiError> {
    let req: ResponsesRequest = parse_json(body)?;
    let loaded = loaded(&state)?;
    // The conversation may be all in what it continues.
    let continues = req.previous_response_id.is_some() || req.conversation.is_some();
    let own = match req.input {
        None if continues => Vec::new(),
        _ => own_items(&req)?,
    };
    let items = history(&state, &req, own)?;
    let (summary, usage_of) = summarize(&state, &req, &items).await?;
    let budget = loaded.n_ctx_per_seq as usize / KEPT_USER_SHARE;
    let mut output = kept_user_messages(&items, budget, |text| {
        loaded.engine.tokenize_plain(text).len()
    });
    output.push(compaction_item(&new_id("cmp"), &summary));
    Ok(Json(json!({
        "id": new_id("resp"), "object": "response.compaction", "created_at": now(),
        "output": output, "usage": usage(&usage_of),
    })))
}

/// A compaction item holding `summary`.
pub fn compaction_item(id: &str, summary: &str) -> Value {
    json!({"type": "compaction", "id": id, "encrypted_content": summary})
}

/// The model's summary of the conversation `items` (rendered with `req`'s instructions and
/// tools), and what writing it took.
pub(crate) async fn summarize(
    state: &AppState,
    req: &ResponsesRequest,
    items: &[Value],
) -> Result<(String, generation::Usage), ApiError> {
    let loaded = loaded(state)?;
    let mut asking = items.to_vec();
    asking.push(json!({"type": "message", "role": "user", "content": COMPACT_PROMPT}));
    // Where the conversation and the reply do not fit, its oldest turns are left out of what
    // the summary is written from, rather than nothing written.
    let reply_tokens = SUMMARY_TOKENS + REASONING_TOKENS;
    let asking =
        generation::fit_conversation(loaded, asking, Some(reply_tokens), |i| chat_input(req, i))?;
    let ask = OutputAsk {
        tool_choice: ToolChoice::None,
        budget: BudgetAsk {
            tokens: BudgetTokens::Tokens(REASONING_TOKENS),
            ..Default::default()
        },
        ..Default::default()
    };
    let asked = Asked {
        max_tokens: Some(reply_tokens),
        temperature: req.temperature,
        top_p: req.top_p,
        seed: req.seed,
        ..Default::default()
    };
    let p = prepare_chat(loaded, &chat_input(req, &asking)?, &ask, &asked)?;
    let c = collect(submit(state, p)?).await?;
    let summary = c.text.trim();
    if summary.is_empty() {
        return Err(ApiError::internal(
            "the model wrote no summary (its reply was empty or reasoning only): compact again, or start a new conversation",
        ));
    }
    Ok((summary.to_string(), c.usage))
}

/// The user messages of `items`, the newest of them whose texts take at most `budget`
/// tokens (`tokens` counts a text's), oldest first.
fn kept_user_messages(
    items: &[Value],
    budget: usize,
    tokens: impl Fn(&str) -> usize,
) -> Vec<Value> {
    let mut kept = Vec::new();
    let mut used = 0;
    let users = items.iter().rev().filter(|i| {
        i.get("type").and_then(Value::as_str).unwrap_or("message") == "message"
            && i.get("role").and_then(Value::as_str) == Some("user")
    });
    for item in users {
        used += tokens(&crate::responses::item_text(
            item.get("content").unwrap_or(&Value::Null),
        ));
        if used > budget {
            break;
        }
        kept.push(item.clone());
    }
    kept.reverse();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, text: &str) -> Value {
        json!({"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})
    }

    #[test]
    fn the_newest_user_messages_that_fit_are_kept_in_order() {
        let items = vec![
            msg("user", "one two"),
            msg("assistant", "a reply of many words that is not counted"),
            json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
            msg("user", "three"),
            msg("user", "four five six"),
        ];
        let words = |t: &str| t.split_whitespace().count();
        let texts = |kept: Vec<Value>| -> Vec<Value> {
            kept.iter()
                .map(|m| m["content"][0]["text"].clone())
                .collect()
        };
        assert_eq!(
            texts(kept_user_messages(&items, 6, words)),
            ["one two", "three", "four five six"]
        );
        // The oldest goes first; a message that does not fit ends the walk.
        assert_eq!(
            texts(kept_user_messages(&items, 5, words)),
            ["three", "four five six"]
        );
        assert!(kept_user_messages(&items, 2, words).is_empty());
        let summary = summary_message(&json!({"type": "compaction", "encrypted_content": "S"}));
        assert_eq!(summary["role"], "user");
        assert_eq!(summary["content"], format!("{COMPACTION_PREFIX}S"));
    }
}
