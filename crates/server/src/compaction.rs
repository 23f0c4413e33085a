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
//! A request's `context_management: [{"type": "compaction", "compact_threshold": N}]` asks
//! for the same without a call of its own (OpenAI's server-side compaction, which the
//! Agents SDK's `ModelSettings.context_management` and its `Compaction` capability send):
//! when the conversation's prompt passes `N` tokens, or leaves the reply less than a
//! [`crate::truncation::REPLY_SHARE_AFTER_A_CUT`] of a slot's context (clients send
//! thresholds made for hosted models' windows, 200,000 tokens and more), it is summarized
//! first; the reply is then generated from the summary and the turn in progress
//! ([`Compacting`]), and the compaction item leads the response's output. With
//! `context_management`, the items before a conversation's latest compaction item are
//! left out but for its opening system messages ([`since_latest_compaction`]): that item
//! carries them, so a client may send them again or not (OpenAI's advice is to drop
//! them), and a `previous_response_id` chain stays as short.
//!
//! Anthropic's compaction ([`crate::anthropic`]) is written by the same summary
//! ([`summarize_with`]) and planned by the same [`Compacting`], over the template's
//! messages.
//!
//! OpenAI's `encrypted_content` is opaque to clients; here it is the summary's plain text.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{parse_json, ApiError};
use crate::generation::{self, collect, loaded, prepare_chat, submit, Asked};
use crate::openai::wire::{new_id, now};
use crate::openai::OpenAiError;
use crate::output::{BudgetAsk, BudgetTokens, OutputAsk, ToolChoice};
use crate::responses::{chat_input, history, own_items, usage, ResponsesRequest};
use crate::state::AppState;
use crate::truncation::{is_user_message, leading_system_messages, REPLY_SHARE_AFTER_A_CUT};

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

/// The share of a slot's context the summary's reply (reasoning and summary) may take at
/// most (1 / this), so that a small context still holds the conversation it summarizes.
const MOST_REPLY_SHARE: u32 = 2;

/// The share of a slot's context the summary's reply is given at least (1 / this): below
/// it, the conversation's oldest turns make room.
const LEAST_REPLY_SHARE: u32 = 8;

/// The share of a slot's context the user messages a compaction keeps may take (1 / this).
const KEPT_USER_SHARE: usize = 4;

/// The message a compaction item is in a conversation the model is shown: a user message
/// opening with [`COMPACTION_PREFIX`].
pub fn summary_message(item: &Value) -> Value {
    let summary = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    summary_as_message(summary)
}

/// The message a conversation's `summary` is to the model (a Responses compaction item's,
/// an Anthropic compaction block's).
pub fn summary_as_message(summary: &str) -> Value {
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
    let items = req.managed(history(&state, &req, own)?);
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
    let sampling = Asked {
        temperature: req.temperature,
        top_p: req.top_p,
        seed: req.seed,
        ..Default::default()
    };
    let chat = |items: &[Value]| chat_input(req, items);
    summarize_with(state, items.to_vec(), chat, None, sampling).await
}

/// The model's summary of the conversation `items` (each a protocol's item or a template
/// message: `chat` renders any part of them, with the request's system prompt and tools),
/// asked by `prompt` (the server's own, [`COMPACT_PROMPT`], when absent or blank), sampled
/// as `sampling` asks; and what writing it took.
pub(crate) async fn summarize_with(
    state: &AppState,
    items: Vec<Value>,
    chat: impl Fn(&[Value]) -> Result<generation::ChatInput, ApiError>,
    prompt: Option<&str>,
    sampling: Asked,
) -> Result<(String, generation::Usage), ApiError> {
    let loaded = loaded(state)?;
    let prompt = prompt
        .filter(|p| !p.trim().is_empty())
        .unwrap_or(COMPACT_PROMPT);
    let mut asking = items;
    asking.push(json!({"role": "user", "content": prompt}));
    // Where even the least reply does not fit, the conversation's oldest turns are left out
    // of what the summary is written from, rather than nothing written.
    let prompt = generation::chat_tokens(loaded, &chat(&asking)?)?.len();
    let (reply_tokens, reasoning_tokens) = summary_reply(loaded.n_ctx_per_seq, prompt);
    let asking = generation::fit_conversation(loaded, asking, Some(reply_tokens), &chat)?;
    let ask = OutputAsk {
        tool_choice: ToolChoice::None,
        budget: BudgetAsk {
            tokens: BudgetTokens::Tokens(reasoning_tokens),
            ..Default::default()
        },
        ..Default::default()
    };
    let asked = Asked {
        max_tokens: Some(reply_tokens),
        ..sampling
    };
    let p = prepare_chat(loaded, &chat(&asking)?, &ask, &asked)?;
    let c = collect(submit(state, p)?).await?;
    let summary = c.text.trim();
    if summary.is_empty() {
        return Err(ApiError::internal(
            "the model wrote no summary (its reply was empty or reasoning only): compact again, or start a new conversation",
        ));
    }
    state
        .server
        .compactions
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok((summary.to_string(), c.usage))
}

/// The tokens a summary's reply may take, and of them its reasoning, in a slot of `n_ctx`
/// tokens after a `prompt` of so many: the room the prompt leaves, within a
/// [`MOST_REPLY_SHARE`] and a [`LEAST_REPLY_SHARE`] of the context (and the bounds'
/// [`SUMMARY_TOKENS`] + [`REASONING_TOKENS`]); the reasoning keeps its share of it.
fn summary_reply(n_ctx: u32, prompt: usize) -> (u32, u32) {
    let most = (SUMMARY_TOKENS + REASONING_TOKENS).min(n_ctx / MOST_REPLY_SHARE);
    let least = most.min(n_ctx / LEAST_REPLY_SHARE);
    let room = n_ctx.saturating_sub(u32::try_from(prompt).unwrap_or(u32::MAX));
    let reply = most.min(room).max(least);
    (
        reply,
        reply * REASONING_TOKENS / (SUMMARY_TOKENS + REASONING_TOKENS),
    )
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
    for item in items.iter().rev().filter(|i| is_user_message(i)) {
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

/// One entry of a request's `context_management`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ContextManagement {
    #[serde(rename = "type")]
    _kind: ManagementKind,
    /// The prompt's tokens past which the conversation is compacted (absent: only when it
    /// would leave the reply too little of the context).
    compact_threshold: Option<u32>,
}

/// What a `context_management` entry manages: compaction is the one kind OpenAI has.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ManagementKind {
    Compaction,
}

/// Whether a request's `context_management` asks for compaction, and past which prompt
/// tokens: the lowest threshold its entries give (`Some(None)`: compaction asked, with no
/// threshold but the context's).
pub(crate) fn asked_threshold(entries: Option<&[ContextManagement]>) -> Option<Option<u32>> {
    let entries = entries.filter(|e| !e.is_empty())?;
    Some(entries.iter().filter_map(|e| e.compact_threshold).min())
}

/// `items` from their latest compaction item on, after the system messages they open with
/// (all of them when they hold none).
pub(crate) fn since_latest_compaction(mut items: Vec<Value>) -> Vec<Value> {
    let is_compaction = |i: &Value| i.get("type").and_then(Value::as_str) == Some("compaction");
    let head = leading_system_messages(&items);
    if let Some(latest) = items.iter().rposition(is_compaction).filter(|&l| l >= head) {
        items.drain(head..latest);
    }
    items
}

/// What a compacted conversation keeps of its items beside the compaction item: the system
/// messages it opens with, then (after the compaction item) its last user message and its
/// newest items that fit a [`KEPT_USER_SHARE`] of a slot's context, so that a turn in
/// progress (a call and its output) goes on as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compacting {
    /// 1. The items before the compaction item are `items[..head]`, the system messages
    ///    the conversation opens with.
    head: usize,
    /// 2. The items after it, by index in `items`, ascending, each past `head`; at least
    ///    one item of `items[head..]` is not among them (else nothing would be compacted).
    kept: Vec<usize>,
}

impl Compacting {
    /// How `items` would be compacted, with their tail measured by `tokens` against
    /// `budget`; `None` when the compaction would leave out nothing (one long turn).
    pub(crate) fn plan(
        items: &[Value],
        budget: usize,
        tokens: impl Fn(&Value) -> usize,
    ) -> Option<Compacting> {
        let head = leading_system_messages(items);
        let last_user = items
            .iter()
            .rposition(is_user_message)
            .filter(|&u| u >= head);
        // The newest items that fit, from an item that opens a step (not a call's output,
        // which would come without its call: a Responses `*_output` item, a template's
        // `tool` message).
        let is_output = |i: &Value| {
            i.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("_output"))
                || i.get("role").and_then(Value::as_str) == Some("tool")
        };
        let mut used = last_user.map_or(0, |u| tokens(&items[u]));
        let mut start = items.len();
        let mut i = items.len();
        while i > head.max(last_user.map_or(head, |u| u + 1)) {
            i -= 1;
            used += tokens(&items[i]);
            if used > budget {
                break;
            }
            if !is_output(&items[i]) {
                start = i;
            }
        }
        let kept: Vec<usize> = last_user
            .filter(|&u| u < start)
            .into_iter()
            .chain(start..items.len())
            .collect();
        (kept.len() < items.len() - head).then_some(Compacting { head, kept })
    }

    /// The conversation the reply is generated from: `items` compacted into `compaction`.
    pub(crate) fn view(&self, items: &[Value], compaction: Value) -> Vec<Value> {
        let kept = self.kept.iter().map(|&i| items[i].clone());
        items[..self.head]
            .iter()
            .cloned()
            .chain(std::iter::once(compaction))
            .chain(kept)
            .collect()
    }
}

/// How a request's conversation `items` is compacted before its reply, when it asks for
/// compaction past `threshold` prompt tokens (absent: at the context's end only) and its
/// `prompt` (tokens) is past the threshold or would leave the reply (`max_output_tokens`,
/// at least a [`REPLY_SHARE_AFTER_A_CUT`] of a slot's context) too little room.
pub(crate) fn needed(
    loaded: &crate::state::Loaded,
    prompt: usize,
    items: &[Value],
    threshold: Option<u32>,
    max_output_tokens: Option<u32>,
) -> Option<Compacting> {
    let n_ctx = loaded.n_ctx_per_seq as usize;
    let reserve = (max_output_tokens.unwrap_or(1) as usize).max(n_ctx / REPLY_SHARE_AFTER_A_CUT);
    let past = threshold.is_some_and(|t| prompt > t as usize) || prompt + reserve > n_ctx;
    if !past {
        return None;
    }
    let size = |item: &Value| {
        loaded
            .engine
            .tokenize_plain(&crate::truncation::item_text(item))
            .len()
    };
    Compacting::plan(items, n_ctx / KEPT_USER_SHARE, size)
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
    /// A word per token, as the tests measure an item.
    fn words(item: &Value) -> usize {
        item_text_of(item).split_whitespace().count()
    }

    fn item_text_of(item: &Value) -> String {
        match item.get("content") {
            Some(c) => crate::responses::item_text(c),
            None => item["output"].as_str().unwrap_or("x").to_string(),
        }
    }

    fn call(id: &str) -> Value {
        json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"})
    }

    fn output(id: &str, text: &str) -> Value {
        json!({"type": "function_call_output", "call_id": id, "output": text})
    }

    /// The invariants [`Compacting`]'s fields state, against the `items` it was made for.
    fn check(plan: &Compacting, items: &[Value]) {
        // 1.
        assert_eq!(plan.head, leading_system_messages(items));
        // 2.
        assert!(plan.kept.windows(2).all(|w| w[0] < w[1]), "{plan:?}");
        assert!(plan.kept.iter().all(|&i| i >= plan.head && i < items.len()));
        assert!(plan.kept.len() < items.len() - plan.head);
    }

    #[test]
    fn a_compaction_keeps_the_system_messages_the_last_question_and_the_newest_steps() {
        let mut items = vec![msg("developer", "rules")];
        items.extend([msg("user", "a b"), msg("assistant", "c d")]);
        items.extend([
            msg("user", "the task"),
            call("1"),
            output("1", "one two three"),
        ]);
        items.extend([call("2"), output("2", "four five")]);
        // Everything after the last question fits: nothing but the old turn goes.
        let plan = Compacting::plan(&items, 100, words).unwrap();
        check(&plan, &items);
        assert_eq!(plan.kept, [3, 4, 5, 6, 7]);
        // A budget for the last step only: it is kept whole, from its call.
        let plan = Compacting::plan(&items, 2 + 1 + 2, words).unwrap();
        check(&plan, &items);
        assert_eq!(plan.kept, [3, 6, 7]);
        // A budget that would start the kept items at an output: from the next call on.
        let plan = Compacting::plan(&items, 2 + 1 + 2 + 3, words).unwrap();
        assert_eq!(plan.kept, [3, 6, 7]);
        // The last question is kept whatever its size.
        let plan = Compacting::plan(&items, 0, words).unwrap();
        check(&plan, &items);
        assert_eq!(plan.kept, [3]);
        let view = plan.view(
            &items,
            json!({"type": "compaction", "encrypted_content": "S"}),
        );
        let kinds: Vec<&str> = view
            .iter()
            .map(|i| {
                i["role"]
                    .as_str()
                    .unwrap_or_else(|| i["type"].as_str().unwrap())
            })
            .collect();
        assert_eq!(kinds, ["developer", "compaction", "user"]);
        // One turn has nothing before it to compact.
        assert_eq!(Compacting::plan(&items[..1], 0, words), None);
        let one_turn = [msg("user", "q"), call("1"), output("1", "r")];
        assert_eq!(Compacting::plan(&one_turn, 100, words), None);
        // A turn whose steps do not all fit compacts its older steps.
        let plan = Compacting::plan(&one_turn, 1, words).unwrap();
        check(&plan, &one_turn);
        assert_eq!(plan.kept, [0]);
    }

    #[test]
    fn a_summary_takes_the_room_left_within_its_bounds() {
        // A large context: the bounds, reasoning a third.
        assert_eq!(summary_reply(32_768, 1_000), (1_536, 512));
        // A small one: half of it at most, whatever the room.
        assert_eq!(summary_reply(1_024, 100), (512, 170));
        // The room a long conversation leaves.
        assert_eq!(summary_reply(1_024, 773), (251, 83));
        // Never less than an eighth: the conversation is cut to make room.
        assert_eq!(summary_reply(1_024, 1_000), (128, 42));
        assert_eq!(summary_reply(1_024, 5_000), (128, 42));
    }

    #[test]
    fn the_items_before_the_latest_compaction_are_left_out_but_the_system_ones() {
        let compaction = |s: &str| json!({"type": "compaction", "encrypted_content": s});
        let items = vec![
            msg("system", "rules"),
            msg("user", "a"),
            compaction("first"),
            msg("user", "b"),
            compaction("second"),
            msg("user", "c"),
        ];
        let kept = since_latest_compaction(items.clone());
        assert_eq!(
            kept,
            [items[0].clone(), compaction("second"), msg("user", "c")]
        );
        let none = vec![msg("user", "a"), msg("user", "b")];
        assert_eq!(since_latest_compaction(none.clone()), none);
        // The threshold asked: the lowest given; compaction without one; or none at all.
        let entries = |v: Value| serde_json::from_value::<Vec<ContextManagement>>(v).unwrap();
        let asked = entries(json!([{"type": "compaction", "compact_threshold": 900},
                                   {"type": "compaction", "compact_threshold": 300}]));
        assert_eq!(asked_threshold(Some(&asked)), Some(Some(300)));
        let unbounded = entries(json!([{"type": "compaction"}]));
        assert_eq!(asked_threshold(Some(&unbounded)), Some(None));
        assert_eq!(asked_threshold(Some(&[])), None);
        assert_eq!(asked_threshold(None), None);
        assert!(
            serde_json::from_value::<Vec<ContextManagement>>(json!([{"type": "other"}])).is_err()
        );
    }
}
