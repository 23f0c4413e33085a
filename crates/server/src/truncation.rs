//! The Responses API's `truncation: "auto"`: where a conversation too long for a slot's
//! context may be cut. OpenAI drops input items in the middle of the conversation; here the
//! instructions and the system messages that open it stay, and whole turns (a user message
//! and what answered it: messages, calls and their outputs) go from the oldest.
//!
//! The cut is taken at fixed points, so that it stays put while a conversation grows: a cut
//! chosen afresh as the oldest turns that make room would move with every request, and
//! every request would then evaluate its whole prompt again. The points are the first turns
//! after each multiple of a stride of the conversation's bytes from its start (bytes of the
//! items as sent, but for the ids this server gives them, so an earlier request's items
//! count the same again): the kept part then changes once per stride of growth, and the
//! requests in between reuse their prefix.

use serde_json::Value;

/// Bytes of items per token of a slot's context in the stride between cut points: at about
/// four bytes of item per token, a stride is half the context, so that a cut leaves room for
/// half a context of growth before the next.
pub const STRIDE_BYTES_PER_CONTEXT_TOKEN: usize = 2;

fn role(item: &Value) -> Option<&str> {
    let is_message = item
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(|t| t == "message");
    item.get("role")
        .and_then(Value::as_str)
        .filter(|_| is_message)
}

/// An item's bytes as the stride counts them: its JSON without the `id` this server gives
/// a message sent without one, which differs from request to request.
fn item_bytes(item: &Value) -> usize {
    match item.as_object() {
        Some(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "id")
            .map(|(k, v)| k.len() + v.to_string().len())
            .sum(),
        None => item.to_string().len(),
    }
}

/// Where `items` may be cut, in the order to try them: the leading system messages kept
/// (`head`, the count of items before the first turn), then candidate starts of the kept
/// turns, each a user message's index. First the fixed points (the first turn at or after
/// each multiple of `stride_bytes` from the first turn's start), then the other turns after
/// the last of them, oldest first: the later a start, the less is kept.
pub fn cut_points(items: &[Value], stride_bytes: usize) -> (usize, Vec<usize>) {
    let head = items
        .iter()
        .take_while(|i| matches!(role(i), Some("system" | "developer")))
        .count();
    let stride = stride_bytes.max(1);
    let mut bytes = 0usize;
    let mut fixed = Vec::new();
    let mut turns = Vec::new();
    for (i, item) in items.iter().enumerate().skip(head) {
        // The first turn is kept whole or the request fails: not a cut.
        if i > head && role(item) == Some("user") {
            turns.push(i);
            if bytes / stride > fixed.len() {
                fixed.push(i);
            }
        }
        bytes += item_bytes(item);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let (head, points) = cut_points(&items, 1_000_000);
        assert_eq!(head, 1);
        // No fixed point within a stride this long: every later turn, oldest first.
        assert_eq!(points, vec![5, 9]);
        let k = kept(&items, head, 9);
        assert_eq!(k.len(), 5);
        assert_eq!(k[0]["role"], "developer");
        assert_eq!(k[1], user("c"));
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
        assert_eq!(cut_points(&items, 1000), cut_points(&with_ids, 1000));
    }

    #[test]
    fn a_growing_conversation_is_cut_once_per_stride_and_keeps_half_a_window() {
        let text = "x".repeat(100);
        let bytes = |items: &[Value]| items.iter().map(|i| i.to_string().len()).sum::<usize>();
        // A window of 4,000 bytes of items, a cut point every 2,000 (half of it).
        let (window, stride) = (4000, 2000);
        let mut items = vec![json!({"role": "system", "content": "be brief"})];
        let (mut starts, mut cuts) = (Vec::new(), 0);
        for _ in 0..40 {
            items.extend(turn(&text));
            if bytes(&items) <= window {
                continue;
            }
            let (head, points) = cut_points(&items, stride);
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
