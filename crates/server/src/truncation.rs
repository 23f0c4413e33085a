//! A conversation too long for a slot's context, cut to fit: the Responses API's
//! `truncation: "auto"`, and Ollama's chat, which always cuts. OpenAI drops input items in
//! the middle of the conversation, Ollama the oldest messages but the system ones; here the
//! instructions and the system messages that open the conversation stay, and whole turns
//! (a user message and what answered it: messages, calls and their outputs) go from the
//! oldest.
//!
//! The cut is taken at fixed points, so that it stays put while a conversation grows: a cut
//! chosen afresh as the oldest turns that make room would move with every request, and
//! every request would then evaluate its whole prompt again. The points are the first turns
//! after each multiple of half a context of the conversation's tokens from its start (each
//! item's tokens as the caller measures them, without the ids this server gives messages,
//! so an earlier request's items measure the same again): the kept part then changes once
//! per half a context of growth, and the requests in between reuse their prefix.

use serde_json::Value;

/// The stride between cut points is a slot's context divided by this. With the reply's
/// quarter ([`REPLY_SHARE_AFTER_A_CUT`]) a cut moves when what it keeps passes three quarters
/// of the context, to the next point, which keeps about a quarter: so once per half a
/// context of growth, and never keeping less than a quarter but for the turns' granularity.
pub const STRIDES_PER_CONTEXT: usize = 2;

fn role(item: &Value) -> Option<&str> {
    let is_message = item
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(|t| t == "message");
    item.get("role")
        .and_then(Value::as_str)
        .filter(|_| is_message)
}

/// An item as a size is measured: its JSON without the `id` this server gives a message sent
/// without one, which differs from request to request.
pub fn item_text(item: &Value) -> String {
    match item.as_object() {
        Some(o) => {
            let mut o = o.clone();
            o.remove("id");
            Value::Object(o).to_string()
        }
        None => item.to_string(),
    }
}

/// The count of system (or developer) messages `items` open with: what a cut keeps however
/// long the conversation.
pub fn leading_system_messages(items: &[Value]) -> usize {
    items
        .iter()
        .take_while(|i| matches!(role(i), Some("system" | "developer")))
        .count()
}

/// Whether `item` is a user message.
pub fn is_user_message(item: &Value) -> bool {
    role(item) == Some("user")
}

/// Where `items` may be cut, in the order to try them: the leading system messages kept
/// (`head`, the count of items before the first turn), then candidate starts of the kept
/// turns, each a user message's index. First the fixed points (the first turn at or after
/// each multiple of `stride` from the first turn's start, items measured by `size`), then
/// the other turns after the last of them, oldest first: the later a start, the less is kept.
pub fn cut_points(
    items: &[Value],
    stride: usize,
    size: impl Fn(&Value) -> usize,
) -> (usize, Vec<usize>) {
    let head = leading_system_messages(items);
    let stride = stride.max(1);
    let mut total = 0usize;
    let mut fixed = Vec::new();
    let mut turns = Vec::new();
    for (i, item) in items.iter().enumerate().skip(head) {
        // The first turn is kept whole or the request fails: not a cut.
        if i > head && is_user_message(item) {
            turns.push(i);
            if total / stride > fixed.len() {
                fixed.push(i);
            }
        }
        total += size(item);
    }
    let last_fixed = fixed.last().copied().unwrap_or(head);
    fixed.extend(turns.into_iter().filter(|&t| t > last_fixed));
    (head, fixed)
}

/// `items` with those from `head` up to `start` left out.
pub fn kept(items: &[Value], head: usize, start: usize) -> Vec<Value> {
    items[..head]
        .iter()
        .chain(&items[start..])
        .cloned()
        .collect()
}

/// The share of a slot's context a cut leaves to the reply at least (the reply's
/// `max_tokens` when larger): a conversation cut to just fit would otherwise get a reply of
/// a few tokens.
pub const REPLY_SHARE_AFTER_A_CUT: usize = 4;

/// `items`, or, when their prompt (`count` renders and counts it) and `max_tokens` (1 when
/// absent) would not fit a slot's `n_ctx`, `items` without their oldest turns: cut at the
/// first of [`cut_points`] (items measured by `size`, in tokens) that leaves the reply a
/// [`REPLY_SHARE_AFTER_A_CUT`] of the context, or else at the first that fits at all. Left
/// whole when even the last turn does not fit (the request's 400 then says so).
pub fn fit<E>(
    items: Vec<Value>,
    n_ctx: usize,
    max_tokens: Option<usize>,
    count: impl Fn(&[Value]) -> Result<usize, E>,
    size: impl Fn(&Value) -> usize,
) -> Result<Vec<Value>, E> {
    let need = max_tokens.unwrap_or(1);
    let whole = count(&items)?;
    if whole + need <= n_ctx {
        return Ok(items);
    }
    let reserve = need.max(n_ctx / REPLY_SHARE_AFTER_A_CUT);
    let (head, points) = cut_points(&items, n_ctx / STRIDES_PER_CONTEXT, size);
    let mut chosen = None;
    for start in points {
        let n = count(&kept(&items, head, start))?;
        if n + reserve <= n_ctx {
            chosen = Some((start, n));
            break;
        }
        if chosen.is_none() && n + need <= n_ctx {
            chosen = Some((start, n));
        }
    }
    let Some((start, n)) = chosen else {
        return Ok(items);
    };
    tracing::info!(
        "the conversation's oldest {} of {} items left out to fit a slot of {n_ctx} tokens ({whole} -> {n} prompt tokens)",
        start - head,
        items.len()
    );
    Ok(kept(&items, head, start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Sizes in bytes of the measured text, as a test's tokens.
    fn bytes_of(item: &Value) -> usize {
        item_text(item).len()
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn turn(text: &str) -> Vec<Value> {
        vec![
            user(text),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c", "output": text}),
            json!({"type": "message", "role": "assistant", "content": text}),
        ]
    }

    #[test]
    fn cuts_fall_on_user_messages_after_the_system_ones_and_never_before_the_first_turn() {
        let mut items = vec![json!({"role": "developer", "content": "be brief"})];
        for t in ["a", "b", "c"] {
            items.extend(turn(t));
        }
        let (head, points) = cut_points(&items, 1_000_000, bytes_of);
        assert_eq!(head, 1);
        // No fixed point within a stride this long: every later turn, oldest first.
        assert_eq!(points, vec![5, 9]);
        let k = kept(&items, head, 9);
        assert_eq!(k.len(), 5);
        assert_eq!(k[0]["role"], "developer");
        assert_eq!(k[1], user("c"));
    }

    #[test]
    fn a_cut_leaves_the_reply_a_quarter_of_the_context_or_else_what_fits() {
        let items: Vec<Value> = (0..8).flat_map(|i| turn(&i.to_string())).collect();
        // A token per item: 32 tokens, then each cut point leaves 4 fewer.
        let count = |items: &[Value]| -> Result<usize, ()> { Ok(items.len()) };
        assert_eq!(
            fit(items.clone(), 40, Some(8), count, bytes_of)
                .unwrap()
                .len(),
            32
        );
        // 32 + 9 > 40: cut to 28, which leaves 12 >= 40 / 4 = 10 for the reply.
        assert_eq!(
            fit(items.clone(), 40, Some(9), count, bytes_of)
                .unwrap()
                .len(),
            28
        );
        // No max_tokens: 32 + 1 > 32; a quarter (8) is left at 24.
        assert_eq!(
            fit(items.clone(), 32, None, count, bytes_of).unwrap().len(),
            24
        );
        // A reply larger than the context's quarter is what must be left.
        assert_eq!(
            fit(items.clone(), 40, Some(20), count, bytes_of)
                .unwrap()
                .len(),
            20
        );
        // Nothing leaves 36 of 40; the first cut that fits at all is taken.
        assert_eq!(
            fit(items.clone(), 40, Some(36), count, bytes_of)
                .unwrap()
                .len(),
            4
        );
        // Not even the last turn fits: whole, for the 400.
        assert_eq!(
            fit(items.clone(), 40, Some(37), count, bytes_of)
                .unwrap()
                .len(),
            32
        );
        assert_eq!(
            fit(
                items,
                40,
                None,
                |_: &[Value]| Err::<usize, _>("x"),
                bytes_of
            ),
            Err("x")
        );
    }

    #[test]
    fn the_ids_given_to_messages_do_not_move_the_points() {
        let text = "x".repeat(100);
        let items: Vec<Value> = (0..12).flat_map(|_| turn(&text)).collect();
        let with_ids: Vec<Value> = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let mut item = item.clone();
                item["id"] = json!(format!("msg-{}", 1000 * i));
                item
            })
            .collect();
        assert_eq!(
            cut_points(&items, 1000, bytes_of),
            cut_points(&with_ids, 1000, bytes_of)
        );
    }

    #[test]
    fn a_growing_conversation_is_cut_once_per_stride_and_keeps_half_a_window() {
        let text = "x".repeat(100);
        let bytes = |items: &[Value]| items.iter().map(bytes_of).sum::<usize>();
        // A window of 4,000 bytes of items, a cut point every 2,000 (half of it).
        let (window, stride) = (4000, 2000);
        let mut items = vec![json!({"role": "system", "content": "be brief"})];
        let (mut starts, mut cuts) = (Vec::new(), 0);
        for _ in 0..40 {
            items.extend(turn(&text));
            if bytes(&items) <= window {
                continue;
            }
            let (head, points) = cut_points(&items, stride, bytes_of);
            let start = points
                .into_iter()
                .find(|&p| bytes(&kept(&items, head, p)) <= window)
                .expect("the last turn fits");
            let k = kept(&items, head, start);
            // What is kept fits, and holds at least the window less a stride and a turn.
            assert!(bytes(&k) <= window && bytes(&k) + stride + bytes(&turn(&text)) > window);
            if starts.last() != Some(&start) {
                cuts += 1;
            }
            starts.push(start);
        }
        let grown = bytes(&items) - window;
        assert!(
            cuts <= grown / stride + 1,
            "{cuts} cuts over {grown} bytes of growth: {starts:?}"
        );
        // Cutting afresh at the oldest turn that makes room would have moved every time.
        assert!(cuts * 3 < starts.len(), "{starts:?}");
    }
}
