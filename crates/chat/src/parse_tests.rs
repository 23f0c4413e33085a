use super::*;
use crate::ToolFamily;

/// Merge neighbouring pieces of the same kind (streaming splits them anywhere).
fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for p in pieces {
        match (out.last_mut(), p) {
            (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
            (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
            (_, p) => out.push(p),
        }
    }
    out
}

/// Parse `text` whole, and fed one character at a time: both must agree.
fn parse(family: Option<ToolFamily>, reasoning: Option<ReasoningSplit>, text: &str) -> Vec<Piece> {
    let mut whole = Vec::new();
    let mut p = OutputParser::new(family, reasoning.clone());
    p.push(text, &mut whole);
    p.finish(&mut whole);
    let mut streamed = Vec::new();
    let mut p = OutputParser::new(family, reasoning);
    let mut buf = [0u8; 4];
    for c in text.chars() {
        p.push(c.encode_utf8(&mut buf), &mut streamed);
    }
    p.finish(&mut streamed);
    let (whole, streamed) = (merged(whole), merged(streamed));
    assert_eq!(whole, streamed, "streamed parse differs for {text:?}");
    whole
}

fn content(s: &str) -> Piece {
    Piece::Content(s.into())
}

fn tool(name: &str, args: &str) -> Piece {
    Piece::ToolCall(ToolCall {
        name: name.into(),
        arguments: args.into(),
        id: None,
    })
}

fn think(starts_open: bool) -> Option<ReasoningSplit> {
    Some(ReasoningSplit {
        open: "<think>".into(),
        close: "</think>".into(),
        starts_open,
    })
}

#[test]
fn hermes_text_then_two_calls() {
    let out = parse(
        Some(ToolFamily::Hermes),
        None,
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
    );
    assert_eq!(
        out,
        vec![
            content("Let me check.\n"),
            tool("get_weather", r#"{"city":"Paris"}"#),
            tool("get_time", r#"{"tz":"CET"}"#),
        ]
    );
}

#[test]
fn hermes_call_cut_off_is_content() {
    let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    assert_eq!(
        parse(Some(ToolFamily::Hermes), None, text),
        vec![content(text)]
    );
}

#[test]
fn hermes_without_closing_tag_at_the_end_is_a_call() {
    let out = parse(
        Some(ToolFamily::Hermes),
        None,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",
    );
    assert_eq!(out, vec![tool("f", "{}")]);
}

#[test]
fn hermes_garbage_in_the_tags_is_content_and_plain_text_passes() {
    let text = "a <tool_call>not json</tool_call> b";
    assert_eq!(
        parse(Some(ToolFamily::Hermes), None, text),
        vec![content(text)]
    );
    assert_eq!(
        parse(Some(ToolFamily::Hermes), None, "a < b <tool"),
        vec![content("a < b <tool")]
    );
}

#[test]
fn reasoning_then_call() {
    let out = parse(
        Some(ToolFamily::Hermes),
        think(false),
        "<think>\nI should call it.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
    );
    assert_eq!(
        out,
        vec![
            Piece::Reasoning("\nI should call it.\n".into()),
            tool("f", r#"{"x":1}"#)
        ]
    );
}

#[test]
fn reasoning_forced_open_by_the_template() {
    let out = parse(None, think(true), "step one</think>\n\nThe answer.");
    assert_eq!(
        out,
        vec![Piece::Reasoning("step one".into()), content("The answer.")]
    );
    // Without a split, the tags stay in the content.
    let raw = "<think>a</think>b";
    assert_eq!(parse(None, None, raw), vec![content(raw)]);
    // A think tag after content is content.
    assert_eq!(
        parse(None, think(false), "x <think>y</think>"),
        vec![content("x <think>y</think>")]
    );
}

#[test]
fn reasoning_split_is_decided_by_the_template_and_prompt() {
    let tmpl = "{% if x %}<think>\n\n</think>{% endif %}";
    let open = ReasoningSplit::for_template(tmpl, "<|im_start|>assistant\n<think>\n").unwrap();
    assert!(open.starts_open);
    let closed = ReasoningSplit::for_template(tmpl, "<|im_start|>assistant\n").unwrap();
    assert!(!closed.starts_open);
    assert!(ReasoningSplit::for_template("{{ messages }}", "x").is_none());
}

#[test]
fn harmony_analysis_then_call() {
    let out = parse(
        Some(ToolFamily::Harmony),
        think(false),
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
    );
    assert_eq!(
        out,
        vec![
            Piece::Reasoning("Need weather.".into()),
            tool("get_weather", r#"{"city":"Paris"}"#)
        ]
    );
}

#[test]
fn harmony_final_answer_two_calls_and_a_cut_call() {
    let out = parse(
        Some(ToolFamily::Harmony),
        think(false),
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.",
    );
    assert_eq!(
        out,
        vec![Piece::Reasoning("Think.".into()), content("Hello there.")]
    );
    let two = "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\":1}<|call|><|start|>assistant to=functions.b<|channel|>commentary json<|message|>{}<|call|>";
    assert_eq!(
        parse(Some(ToolFamily::Harmony), think(false), two),
        vec![tool("a", r#"{"x":1}"#), tool("b", "{}")]
    );
    let cut = "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\":";
    assert_eq!(
        parse(Some(ToolFamily::Harmony), think(false), cut),
        vec![content("{\"x\":")]
    );
}

#[test]
fn llama3_bare_json_python_tag_and_plain_text() {
    let out = parse(
        Some(ToolFamily::Llama3),
        None,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"f\", \"parameters\": {}}",
    );
    assert_eq!(
        out,
        vec![tool("get_weather", r#"{"city":"Paris"}"#), tool("f", "{}")]
    );
    let tagged = parse(
        Some(ToolFamily::Llama3),
        None,
        "Sure. <|python_tag|>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}",
    );
    assert_eq!(tagged, vec![content("Sure. "), tool("f", r#"{"a":[1]}"#)]);
    assert_eq!(
        parse(Some(ToolFamily::Llama3), None, "Hello {world}"),
        vec![content("Hello {world}")]
    );
    let cut = "{\"name\": \"f\", \"parameters\": {\"c";
    assert_eq!(
        parse(Some(ToolFamily::Llama3), None, cut),
        vec![content(cut)]
    );
    let not_call = "{\"answer\": 42}";
    assert_eq!(
        parse(Some(ToolFamily::Llama3), None, not_call),
        vec![content(not_call)]
    );
}

#[test]
fn mistral_array_and_args_forms() {
    let out = parse(
        Some(ToolFamily::Mistral),
        None,
        "Checking.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123def\"}, {\"name\": \"b\", \"arguments\": {}}]",
    );
    assert_eq!(
        out,
        vec![
            content("Checking."),
            Piece::ToolCall(ToolCall {
                name: "a".into(),
                arguments: r#"{"x":1}"#.into(),
                id: Some("abc123def".into())
            }),
            tool("b", "{}"),
        ]
    );
    let v2 = parse(
        Some(ToolFamily::Mistral),
        None,
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]f[ARGS]{}",
    );
    assert_eq!(
        v2,
        vec![tool("get_weather", r#"{"city":"Paris"}"#), tool("f", "{}")]
    );
    let cut = "[TOOL_CALLS][{\"name\": \"a\", \"argu";
    assert_eq!(
        parse(Some(ToolFamily::Mistral), None, cut),
        vec![content(cut)]
    );
}

#[test]
fn deepseek_r1_and_v31_forms() {
    let r1 = "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    assert_eq!(
        parse(Some(ToolFamily::DeepSeek), think(false), r1),
        vec![
            content("Let me look."),
            tool("get_weather", r#"{"city":"Paris"}"#),
            tool("f", "{}")
        ]
    );
    let v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    assert_eq!(
        parse(Some(ToolFamily::DeepSeek), None, v31),
        vec![tool("get_weather", r#"{"city":"Rome"}"#)]
    );
    let cut = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"ci";
    assert_eq!(
        parse(Some(ToolFamily::DeepSeek), None, cut),
        vec![content(cut)]
    );
}

#[test]
fn families_are_detected_from_template_markers() {
    assert_eq!(
        ToolFamily::detect("{{ '<tool_call>' }}"),
        Some(ToolFamily::Hermes)
    );
    assert_eq!(
        ToolFamily::detect("<|start|>{{ '<|channel|>' }}<|message|>"),
        Some(ToolFamily::Harmony)
    );
    assert_eq!(
        ToolFamily::detect("[TOOL_CALLS]"),
        Some(ToolFamily::Mistral)
    );
    assert_eq!(
        ToolFamily::detect("<｜tool▁calls▁begin｜>"),
        Some(ToolFamily::DeepSeek)
    );
    assert_eq!(
        ToolFamily::detect("<|start_header_id|>ipython<|end_header_id|>"),
        Some(ToolFamily::Llama3)
    );
    assert_eq!(ToolFamily::detect("{{ messages }}"), None);
}
