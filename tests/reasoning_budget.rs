//! The reasoning budget over real HTTP, on a `-mini` model with random weights: a block
//! that outruns its budget is closed for the model (its first tokens exactly what an
//! unbudgeted reply generates, then the close), the text goes on after it, and every
//! protocol that carries a budget (llama-server's fields, Anthropic's `thinking`, the
//! server's `--reasoning-budget`) closes the same block at the same place.

mod common;

use common::server::{thinking_mini, Server};
use common::*;
use serde_json::{json, Value};

fn chat_body(extra: Value) -> Value {
    merged(
        json!({"messages": [{"role": "user", "content": "Why is the sky blue?"}],
               "max_tokens": 24, "temperature": 0}),
        &extra,
    )
}

/// A chat reply's `(reasoning_content, content)`, checked against the same request
/// streamed.
fn split(server: &Server, body: &Value) -> (String, String) {
    split_counted(server, body).0
}

/// [`split`], and the usage's `reasoning_tokens` (the same streamed).
fn split_counted(server: &Server, body: &Value) -> ((String, String), u64) {
    let r = server.chat(body);
    let counted = r["usage"]["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("{r}"));
    let m = &r["choices"][0]["message"];
    let text = |k: &str| m[k].as_str().unwrap_or("").to_string();
    let (reasoning, content) = (text("reasoning_content"), text("content"));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let events = server.stream("/v1/chat/completions", &streamed);
    let streamed_count = events
        .iter()
        .find_map(|e| e["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64());
    assert_eq!(streamed_count, Some(counted));
    assert_eq!(
        (
            chat_deltas(&events, "reasoning_content"),
            chat_deltas(&events, "content")
        ),
        (reasoning.clone(), content.clone()),
        "streamed and not differ"
    );
    ((reasoning, content), counted)
}

/// The prompt a chat with `extra` renders to.
fn rendered(server: &Server, extra: Value) -> String {
    server.post("/apply-template", &chat_body(extra)).unwrap()["prompt"]
        .as_str()
        .unwrap()
        .to_string()
}

fn tokens(server: &Server, text: &str) -> Vec<Value> {
    server
        .post(
            "/tokenize",
            &json!({"content": text, "parse_special": true}),
        )
        .unwrap()["tokens"]
        .as_array()
        .unwrap()
        .clone()
}

fn detokenize(server: &Server, ids: &[Value]) -> String {
    server.post("/detokenize", &json!({"tokens": ids})).unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `/completion` of `prompt`'s generated token ids, with `extra` settings.
fn completion_ids(server: &Server, prompt: &str, extra: Value) -> Vec<Value> {
    let body = merged(
        json!({"prompt": prompt, "n_predict": 24, "temperature": 0, "return_tokens": true}),
        &extra,
    );
    server.post("/completion", &body).unwrap()["tokens"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_block_past_its_budget_is_closed_and_the_reply_goes_on() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, template, server) = thinking_mini(dir.path(), &[]);
    let prompt = rendered(&server, json!({}));
    assert!(prompt.ends_with("<think>\n"), "{prompt:?}");

    // Without a budget the random model never closes the block: all 24 tokens reason.
    let free = completion_ids(&server, &prompt, json!({}));
    let ((reasoning, content), counted) = split_counted(&server, &chat_body(json!({})));
    assert_eq!((content.as_str(), counted), ("", 24));
    assert_eq!(reasoning.trim(), detokenize(&server, &free).trim());
    // `</think>` is one added token, as in Qwen's vocabulary: the close is that token.
    let close = tokens(&server, "</think>");
    assert_eq!(close.len(), 1, "{close:?}");
    assert!(!detokenize(&server, &free).contains("</think>"));

    // Budget 5: the first 5 tokens are the free reply's (the budget waits for a whole
    // character, which the first 5 here are), then the close, then the model's own text.
    let n = 5;
    let budgeted = completion_ids(
        &server,
        &prompt,
        json!({"reasoning_budget_tokens": n, "reasoning_budget_arm_immediately": true}),
    );
    assert!(!detokenize(&server, &free[..n]).contains('\u{fffd}'));
    assert_eq!(budgeted[..n], free[..n]);
    assert_eq!(budgeted[n..n + close.len()], close[..], "{budgeted:?}");
    assert_eq!(budgeted.len(), 24);
    let thought = detokenize(&server, &free[..n]);
    let after = detokenize(&server, &budgeted[n + close.len()..]);
    assert_ne!(after.trim(), "");
    // OpenAI's completions take llama-server's fields as `/completion` does.
    let legacy = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 24, "temperature": 0,
                    "reasoning_budget_tokens": n, "reasoning_budget_arm_immediately": true}),
        )
        .unwrap();
    assert_eq!(
        legacy["choices"][0]["text"],
        detokenize(&server, &budgeted),
        "{legacy}"
    );
    for field in ["thinking_budget_tokens", "reasoning_budget_tokens"] {
        let ((r, c), counted) = split_counted(&server, &chat_body(json!({field: n})));
        assert_eq!((r.trim(), c.as_str()), (thought.trim(), after.trim_start()));
        assert_eq!(counted, n as u64);
    }
    // The Responses API takes the same fields, and reports the reasoning tokens.
    let resp = server
        .post(
            "/v1/responses",
            &json!({"input": "Why is the sky blue?", "max_output_tokens": 24, "temperature": 0,
                    "thinking_budget_tokens": n}),
        )
        .unwrap();
    assert_eq!(
        resp["usage"]["output_tokens_details"]["reasoning_tokens"], n as u64,
        "{resp}"
    );
    assert_eq!(resp["output"][0]["type"], "reasoning", "{resp}");
    assert_eq!(
        resp["output"][0]["content"][0]["text"]
            .as_str()
            .map(str::trim),
        Some(thought.trim())
    );
    // Streamed, the reasoning is one item whose text comes in `reasoning_text` deltas, and
    // the completed response's output is the one not streamed.
    let events = server.stream(
        "/v1/responses",
        &json!({"input": "Why is the sky blue?", "max_output_tokens": 24, "temperature": 0,
                "thinking_budget_tokens": n, "stream": true}),
    );
    let of = |kind: &'static str| events.iter().filter(move |e| e["type"] == kind);
    let added: Vec<&Value> = of("response.output_item.added")
        .map(|e| &e["item"]["type"])
        .collect();
    assert_eq!(added, [&json!("reasoning"), &json!("message")]);
    let deltas: String = of("response.reasoning_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        deltas,
        resp["output"][0]["content"][0]["text"].as_str().unwrap()
    );
    assert_eq!(of("response.reasoning_text.delta").count(), n);
    let done = of("response.completed").next().unwrap();
    let without_ids = |output: &Value| -> Vec<Value> {
        output
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let mut o = o.clone();
                o.as_object_mut().unwrap().remove("id");
                o
            })
            .collect()
    };
    assert_eq!(
        without_ids(&done["response"]["output"]),
        without_ids(&resp["output"])
    );
    // Both names at once, equal, are one budget.
    let both = json!({"thinking_budget_tokens": n, "reasoning_budget_tokens": n});
    assert_eq!(split(&server, &chat_body(both)).1, after.trim_start());

    // A message written before the close; the model goes on after the close.
    let message = " Time to answer.";
    let (r, c) = split(
        &server,
        &chat_body(json!({"thinking_budget_tokens": n, "reasoning_budget_message": message})),
    );
    let thought_with_message = format!("{}{message}", thought.trim());
    let with_message = completion_ids(
        &server,
        &prompt,
        json!({"reasoning_budget_tokens": n, "reasoning_budget_arm_immediately": true,
               "reasoning_budget_message": message}),
    );
    let closed_at = with_message
        .windows(close.len())
        .position(|w| w == &close[..])
        .unwrap();
    assert!(closed_at > n, "{with_message:?}");
    let after_message = detokenize(&server, &with_message[closed_at + close.len()..]);
    assert_eq!(
        (r.trim(), c.as_str()),
        (thought_with_message.trim(), after_message.trim_start())
    );

    // Budget 0: the block is closed at once, and the whole reply is content.
    let ((r, c), counted) =
        split_counted(&server, &chat_body(json!({"thinking_budget_tokens": 0})));
    assert_eq!((r.as_str(), counted), ("", 0));
    assert_ne!(c, "");

    // Anthropic's `thinking.budget_tokens` closes the same block at the same place.
    let msg = server
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 24, "temperature": 0,
                    "thinking": {"type": "enabled", "budget_tokens": n},
                    "messages": [{"role": "user", "content": "Why is the sky blue?"}]}),
        )
        .unwrap();
    let blocks = msg["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "thinking", "{msg}");
    assert_eq!(
        blocks[0]["thinking"].as_str().unwrap().trim(),
        thought.trim()
    );
    assert_eq!(blocks[1]["text"], after.trim_start(), "{msg}");
    // `adaptive` thinking is taken (thinking on, no budget of its own).
    let adaptive = server
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 8, "temperature": 0,
                    "thinking": {"type": "adaptive"},
                    "messages": [{"role": "user", "content": "Why is the sky blue?"}]}),
        )
        .unwrap();
    assert_eq!(adaptive["content"][0]["type"], "thinking", "{adaptive}");

    // What cannot be a budget is a 400 that says why.
    for (body, says) in [
        (json!({"thinking_budget_tokens": -3}), "-1 for no budget"),
        (
            json!({"thinking_budget_tokens": 3, "reasoning_budget_tokens": 4}),
            "differ",
        ),
        (
            json!({"thinking_budget_tokens": 3, "reasoning_budget_start_tag": "<think>"}),
            "reasoning_budget_end_tag",
        ),
    ] {
        let (code, v, _) = server
            .post("/v1/chat/completions", &chat_body(body))
            .unwrap_err();
        assert_eq!(code, 400, "{v}");
        assert!(v.to_string().contains(says), "{v}");
    }
    let (code, v, _) = server
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 8,
                    "thinking": {"type": "enabled", "budget_tokens": -5},
                    "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .unwrap_err();
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("budget_tokens"), "{v}");
    drop(server);

    // The server's `--reasoning-budget` is the budget of chats that set none; a request's
    // -1 lifts it.
    let server = Server::start(
        &model,
        &[
            "--chat-template-file",
            template.to_str().unwrap(),
            "--reasoning-budget",
            "5",
            "--reasoning-budget-message",
            message,
        ],
    );
    let (r, c) = split(&server, &chat_body(json!({})));
    assert_eq!(
        (r.trim(), c.as_str()),
        (thought_with_message.trim(), after_message.trim_start())
    );
    // `/metrics` counts the closes forced and the reasoning tokens: this chat's two requests
    // (streamed and not), 5 tokens each.
    assert_eq!(server.metric("epm_reasoning_budget_closes_total"), 2.0);
    assert_eq!(server.metric("epm_reasoning_tokens_total"), 10.0);
    let (r, c) = split(&server, &chat_body(json!({"thinking_budget_tokens": -1})));
    assert_eq!((r.trim(), c.as_str()), (reasoning.trim(), ""));
    assert_eq!(server.metric("epm_reasoning_budget_closes_total"), 2.0);
    assert_eq!(
        server.metric("epm_reasoning_tokens_total"),
        10.0 + 2.0 * 24.0
    );
    // A raw prompt is its writer's: the server's budget does not reach `/completion`.
    assert_eq!(completion_ids(&server, &prompt, json!({})), free);
}

/// A block the model opens itself is counted from its opening, a forced close beats even a
/// +100 bias, and a new opening gets a fresh budget: with the opening tag forced at every
/// step, the tokens cycle exactly. The tags are the request's own, given as Qwen's.
#[test]
fn a_block_the_model_opens_is_counted_and_each_new_one_rearms() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &[]);
    // Each is one added token, as in Qwen's vocabulary.
    let (open_tag, close_tag) = ("<think>", "</think>");
    let open = tokens(&server, open_tag);
    let close = tokens(&server, close_tag);
    assert_eq!((open.len(), close.len()), (1, 1));
    let ids = completion_ids(
        &server,
        "Hello",
        json!({"n_predict": 12, "logit_bias": [[open[0], 100]], "reasoning_budget_tokens": 2,
               "reasoning_budget_start_tag": open_tag, "reasoning_budget_end_tag": close_tag}),
    );
    let (o, c) = (open[0].clone(), close[0].clone());
    // The opening, 2 counted tokens, the close; then again.
    let cycle = [o.clone(), o.clone(), o.clone(), c.clone()];
    let expected: Vec<Value> = cycle.iter().cycle().take(12).cloned().collect();
    assert_eq!(ids, expected);
    // Without the budget the bias alone holds.
    let free = completion_ids(
        &server,
        "Hello",
        json!({"n_predict": 12, "logit_bias": [[open[0], 100]]}),
    );
    assert!(free.iter().all(|t| *t == o), "{free:?}");
}

/// `generate --chat` takes the same template and budget; without `--chat` they are a
/// usage error.
#[test]
fn generate_chat_closes_the_block_at_its_budget() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let template = template_opening_the_block(dir.path());
    let chat = |extra: &[&str]| -> String {
        let mut child = Command::new(bin())
            .args(["generate", "-m", model.to_str().unwrap(), "--chat"])
            .args(["--chat-template-file", template.to_str().unwrap()])
            .args(["-n", "16", "--temp", "0", "-c", "512", "-t", "2"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "Why is the sky blue?").unwrap();
        drop(stdin);
        ok(&child.wait_with_output().unwrap())
    };
    let free = chat(&[]);
    let budgeted = chat(&[
        "--reasoning-budget",
        "3",
        "--reasoning-budget-message",
        "@@",
    ]);
    assert!(!free.contains("</think>"), "{free:?}");
    // The reply is the free reply's first three tokens, the message and the close, then
    // the model's text after it.
    let at = budgeted
        .find("@@</think>")
        .unwrap_or_else(|| panic!("{budgeted:?}"));
    let thought = budgeted[..at].trim_start_matches("> ");
    assert!(!thought.is_empty() && free.trim_start_matches("> ").starts_with(thought));
    assert!(
        budgeted[at + "@@</think>".len()..].trim().len() > 1,
        "{budgeted:?}"
    );

    let out = epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "Hi",
        "--reasoning-budget",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("are for --chat"));
}

/// llama-server's `/v1/chat/completions/control`: `reasoning_end` on a running reply closes
/// its block at the next token; the reasoning up to there is the free reply's start, and
/// the answer follows. A finished reply matches nothing, and an unknown action is a 400.
#[test]
fn a_client_ends_the_reasoning_of_a_running_reply() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (_, _, server) = thinking_mini(dir.path(), &[]);
    let n = 900;
    let body = json!({"messages": [{"role": "user", "content": "Why is the sky blue?"}],
                      "max_tokens": n, "temperature": 0, "stream": true,
                      "stream_options": {"include_usage": true}, "reasoning_control": true});
    let reader = ureq::post(&server.url("/v1/chat/completions"))
        .send_json(body.clone())
        .unwrap()
        .into_reader();
    let (mut id, mut reasoning, mut content, mut counted) =
        (None, String::new(), String::new(), None);
    each_sse_event(reader, |e| {
        if let Some(u) = e["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64() {
            counted = Some(u);
        }
        let d = &e["choices"][0]["delta"];
        if let Some(t) = d["reasoning_content"].as_str() {
            reasoning.push_str(t);
            // The first reasoning text seen: end the reasoning now.
            if id.is_none() {
                let chunk_id = e["id"].as_str().unwrap().to_string();
                let r = server
                    .post(
                        "/v1/chat/completions/control",
                        &json!({"id": chunk_id, "action": "reasoning_end"}),
                    )
                    .unwrap();
                assert_eq!(r, json!({"success": true}));
                id = Some(chunk_id);
            }
        }
        if let Some(t) = d["content"].as_str() {
            content.push_str(t);
        }
    });
    let counted = counted.expect("a usage chunk");
    assert!(
        counted > 0 && counted < n as u64 / 2,
        "{counted} reasoning tokens"
    );
    assert_ne!(content.trim(), "");
    // The reasoning up to the close is the free reply's start.
    let mut free = body.clone();
    free["stream"] = json!(false);
    let r = server.chat(&free);
    assert_eq!(
        r["usage"]["completion_tokens_details"]["reasoning_tokens"], n,
        "{}",
        r["usage"]
    );
    let whole = r["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap();
    assert!(whole.trim().starts_with(reasoning.trim()));
    assert!(reasoning.trim().len() < whole.trim().len());
    // The reply has finished: its id matches nothing now.
    let r = server
        .post(
            "/v1/chat/completions/control",
            &json!({"id": id.unwrap(), "action": "reasoning_end"}),
        )
        .unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert!(r["message"].as_str().unwrap().contains("no running"), "{r}");
    let (code, v, _) = server
        .post(
            "/v1/chat/completions/control",
            &json!({"id": "chatcmpl-1", "action": "pause"}),
        )
        .unwrap_err();
    assert_eq!(code, 400);
    assert!(v.to_string().contains("reasoning_end"), "{v}");
}

/// A constraint is for the answer: when the template opens the reasoning block, the model
/// reasons freely (the budget's close forced as without a constraint), and the JSON format
/// or the required tool call holds from the close on, so the answer lands in `content` or
/// `tool_calls`, not inside the reasoning.
#[test]
fn a_constraint_holds_from_the_close_of_the_block_the_template_opened() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (_model, _template, server) = thinking_mini(dir.path(), &[]);
    let n = 5;
    // The same request without a budget reasons to its end (the random model never closes
    // the block, and the held constraint does not shape it): the budgeted reasoning is its
    // start.
    let free_reasoning = |extra: &Value| -> String {
        let mut body = chat_body(extra.clone());
        body["max_tokens"] = json!(24);
        let r = server.chat(&body);
        assert_eq!(r["choices"][0]["message"]["content"], "", "{r}");
        r["choices"][0]["message"]["reasoning_content"]
            .as_str()
            .unwrap()
            .to_string()
    };

    let schema = json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                        "required": ["unit"], "additionalProperties": false});
    let format = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "u", "schema": schema}}});
    let mut body = chat_body(format.clone());
    body["thinking_budget_tokens"] = json!(n);
    body["max_tokens"] = json!(64);
    let ((reasoning, content), counted) = split_counted(&server, &body);
    assert_eq!(counted, n as u64);
    assert!(
        free_reasoning(&format).starts_with(reasoning.trim()),
        "{reasoning:?}"
    );
    let answer: Value =
        serde_json::from_str(&content).unwrap_or_else(|e| panic!("{content:?} is not JSON: {e}"));
    assert!(answer["unit"] == "c" || answer["unit"] == "f", "{answer}");

    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather", "parameters": schema}});
    let required = json!({"tools": [tool], "tool_choice": "required"});
    let mut body = chat_body(required.clone());
    body["thinking_budget_tokens"] = json!(n);
    body["max_tokens"] = json!(400);
    let r = server.chat(&body);
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{r}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["unit"] == "c" || args["unit"] == "f", "{args}");
    assert_eq!(
        r["usage"]["completion_tokens_details"]["reasoning_tokens"],
        n as u64
    );
    let reasoning = choice["message"]["reasoning_content"].as_str().unwrap();
    assert!(!reasoning.trim().is_empty());
    assert!(
        free_reasoning(&required).starts_with(reasoning.trim()),
        "{reasoning:?}"
    );
}

/// A template that leaves the opening to the model (Qwen3's own): under a JSON format or a
/// required call, the model's `<think>` at its first token is taken outside the grammar,
/// so it reasons before its answer (the grammar refused it at once before); the budget
/// closes the block, and the constraint holds from there. A +100 bias on `<think>` makes
/// the random model open the block, and every token inside it `<think>` too.
#[test]
fn a_constrained_reply_may_open_its_own_block() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &[]);
    let open = tokens(&server, "<think>");
    assert_eq!(open.len(), 1);
    let bias = json!({"logit_bias": {open[0].to_string(): 100}});
    let schema = json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                        "required": ["unit"], "additionalProperties": false});
    let format = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "u", "schema": schema}}});
    let unit = |text: &str| {
        let v: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"));
        assert!(v["unit"] == "c" || v["unit"] == "f", "{v}");
    };
    // A model that answers at once is constrained from its first token, as before.
    let ((reasoning, content), counted) = split_counted(&server, &chat_body(format.clone()));
    assert_eq!((reasoning.as_str(), counted), ("", 0));
    unit(&content);
    // One that opens the block reasons: to the end of its tokens without a budget.
    let mut body = chat_body(merged(format.clone(), &bias));
    body["max_tokens"] = json!(12);
    let ((reasoning, content), counted) = split_counted(&server, &body);
    assert_eq!((content.as_str(), counted), ("", 11));
    assert_eq!(reasoning, "<think>".repeat(11));
    // With a budget the block is closed and the answer is the schema's.
    body["thinking_budget_tokens"] = json!(4);
    body["max_tokens"] = json!(64);
    let ((reasoning, content), counted) = split_counted(&server, &body);
    assert_eq!((reasoning, counted), ("<think>".repeat(4), 4));
    unit(&content);
    // A required call, after the same reasoning.
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather", "parameters": schema}});
    let mut body = chat_body(merged(
        json!({"tools": [tool], "tool_choice": "required"}),
        &bias,
    ));
    body["thinking_budget_tokens"] = json!(4);
    body["max_tokens"] = json!(400);
    let r = server.chat(&body);
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
    assert_eq!(
        choice["message"]["reasoning_content"],
        "<think>".repeat(4),
        "{r}"
    );
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{r}");
    unit(call["arguments"].as_str().unwrap());
}

/// gpt-oss under a JSON format answers in its final channel, after an analysis it may write
/// first (as llama.cpp's grammar for it lets it), which the budget closes; the analysis is
/// the reasoning and the JSON the content. The random model opens the analysis for some
/// seeds and answers at once for others.
#[test]
fn gpt_oss_may_reason_before_its_json_answer() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&synth(dir.path(), "gpt-oss-20b-mini", &[]), &[]);
    let schema = json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                        "required": ["unit"], "additionalProperties": false});
    let (mut reasoned, mut direct) = (0, 0);
    for seed in 0..8 {
        let body = chat_body(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "u", "schema": schema}},
            "thinking_budget_tokens": 6, "max_tokens": 200, "temperature": 1.0, "seed": seed}));
        let ((reasoning, content), counted) = split_counted(&server, &body);
        let answer: Value = serde_json::from_str(&content)
            .unwrap_or_else(|e| panic!("seed {seed}: {content:?} is not JSON: {e}"));
        assert!(answer["unit"] == "c" || answer["unit"] == "f", "{answer}");
        if reasoning.is_empty() {
            assert_eq!(counted, 0, "seed {seed}");
            direct += 1;
        } else {
            assert_eq!(counted, 6, "seed {seed}: {reasoning:?}");
            reasoned += 1;
        }
    }
    assert!(
        reasoned > 0 && direct > 0,
        "{reasoned} reasoned, {direct} did not"
    );
}

/// A Responses tool loop keeps the turn's reasoning: the reasoning item before a call goes
/// back to the template as that assistant turn's `reasoning_content`, which Qwen3's template
/// writes within the turn in progress, so the continuation's prompt is the chat's with the
/// reasoning, whether the client sends the items back or names the previous response.
#[test]
fn a_responses_tool_loop_sends_the_reasoning_back_to_the_template() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (_model, _template, server) = thinking_mini(dir.path(), &[]);
    let params = json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                        "required": ["unit"]});
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather",
                        "parameters": params}]);
    let first = server
        .post(
            "/v1/responses",
            &json!({"input": "Weather in Paris?", "tools": tools, "tool_choice": "required",
                    "thinking_budget_tokens": 5, "max_output_tokens": 400, "temperature": 0}),
        )
        .unwrap();
    let output = first["output"].as_array().unwrap();
    let kinds: Vec<&Value> = output.iter().map(|o| &o["type"]).collect();
    assert_eq!(
        kinds,
        [&json!("reasoning"), &json!("function_call")],
        "{first}"
    );
    let reasoning = output[0]["content"][0]["text"].as_str().unwrap();
    let call = &output[1];
    let result =
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"});

    let count = |path: &str, body: Value| -> u64 {
        server.post(path, &body).unwrap()["input_tokens"]
            .as_u64()
            .unwrap()
    };
    let mut items = vec![json!({"role": "user", "content": "Weather in Paris?"})];
    items.extend(output.iter().cloned());
    items.push(result.clone());
    let sent_back = count(
        "/v1/responses/input_tokens",
        json!({"input": items, "tools": tools}),
    );
    let chained = count(
        "/v1/responses/input_tokens",
        json!({"input": [result], "previous_response_id": first["id"], "tools": tools}),
    );
    let chat_tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather", "parameters": params}}]);
    let chat = |assistant: Value| {
        count(
            "/v1/chat/completions/input_tokens",
            json!({"tools": chat_tools, "messages": [
                {"role": "user", "content": "Weather in Paris?"}, assistant,
                {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}]}),
        )
    };
    let calls = json!([{"id": call["call_id"], "type": "function",
        "function": {"name": "get_weather", "arguments": call["arguments"]}}]);
    let with = chat(
        json!({"role": "assistant", "content": "", "tool_calls": calls,
                           "reasoning_content": reasoning}),
    );
    let without = chat(json!({"role": "assistant", "content": "", "tool_calls": calls}));
    assert!(with > without, "{with} vs {without}");
    assert_eq!((sent_back, chained), (with, with));
}

/// gpt-oss's analysis channel: its close `<|end|>` is forced as any tag is, and the
/// generation goes on after it (llama.cpp keeps `<|end|>` out of a harmony vocabulary's
/// end-of-generation tokens), so a budgeted analysis leads on to the model's next message.
/// The random model never opens the channel itself, so the prompt opens it.
#[test]
fn a_harmony_analysis_past_its_budget_is_closed_and_the_reply_goes_on() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "gpt-oss-20b-mini", &[]);
    let server = Server::start(&model, &[]);
    let rendered = rendered(&server, json!({}));
    assert!(rendered.ends_with("<|start|>assistant"), "{rendered:?}");
    let prompt = format!("{rendered}<|channel|>analysis<|message|>");
    let end = tokens(&server, "<|end|>");
    assert_eq!(end.len(), 1, "{end:?}");

    let free = completion_ids(&server, &prompt, json!({}));
    assert_eq!(free.len(), 24);
    assert!(!free.contains(&end[0]), "{free:?}");
    let n = 3;
    let budgeted = completion_ids(
        &server,
        &prompt,
        json!({"reasoning_budget_tokens": n, "reasoning_budget_arm_immediately": true,
               "reasoning_budget_start_tag": "<|channel|>analysis",
               "reasoning_budget_end_tag": "<|end|>"}),
    );
    assert!(!detokenize(&server, &free[..n]).contains('\u{fffd}'));
    assert_eq!(budgeted[..n], free[..n], "{budgeted:?}");
    assert_eq!(budgeted[n], end[0], "{budgeted:?}");
    assert_eq!(
        budgeted.len(),
        24,
        "the close ended the generation: {budgeted:?}"
    );
}
