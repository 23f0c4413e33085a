//! What agents need, end to end over real HTTP on a `-mini` model with random weights: tool
//! calls constrained by a grammar (so that they are valid whatever the weights), JSON
//! schemas, the reasoning split, logprobs, content parts, and the errors for what cannot be
//! served. Also: a constraint changes the sampled token, never the logits.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// The subset of JSON Schema the test schemas use, checked strictly.
fn validate(v: &Value, s: &Value, path: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{path}: {why} (value {v})"));
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return if e.contains(v) {
            Ok(())
        } else {
            fail("not in enum")
        };
    }
    match s.get("type").and_then(Value::as_str) {
        Some("object") => {
            let Some(o) = v.as_object() else {
                return fail("not an object");
            };
            let props = s["properties"].as_object().cloned().unwrap_or_default();
            for r in s["required"].as_array().into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap()) {
                    return fail(&format!("missing required {r}"));
                }
            }
            for (k, x) in o {
                let Some(sub) = props.get(k) else {
                    return fail(&format!("key {k} is not in properties"));
                };
                validate(x, sub, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        Some("array") => {
            let Some(a) = v.as_array() else {
                return fail("not an array");
            };
            if let Some(m) = s["maxItems"].as_u64() {
                if a.len() as u64 > m {
                    return fail("too many items");
                }
            }
            if let Some(m) = s["minItems"].as_u64() {
                if (a.len() as u64) < m {
                    return fail("too few items");
                }
            }
            for (i, x) in a.iter().enumerate() {
                validate(x, &s["items"], &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Some("string") => {
            let Some(t) = v.as_str() else {
                return fail("not a string");
            };
            if let Some(p) = s["pattern"].as_str() {
                // The test's patterns read the same in Rust's syntax as in ECMA-262's.
                if !regex::Regex::new(p).unwrap().is_match(t) {
                    return fail(&format!("does not match {p}"));
                }
            }
            match s["maxLength"].as_u64() {
                Some(m) if t.chars().count() as u64 > m => fail("too long"),
                _ => Ok(()),
            }
        }
        Some("integer") => {
            let Some(n) = v.as_i64() else {
                return fail("not an integer");
            };
            if s["minimum"].as_i64().is_some_and(|m| n < m)
                || s["maximum"].as_i64().is_some_and(|m| n > m)
            {
                return fail("out of bounds");
            }
            Ok(())
        }
        Some("number") => {
            let Some(n) = v.as_f64() else {
                return fail("not a number");
            };
            if s["minimum"].as_f64().is_some_and(|m| n < m)
                || s["maximum"].as_f64().is_some_and(|m| n > m)
            {
                return fail("out of bounds");
            }
            Ok(())
        }
        Some("boolean") => v
            .is_boolean()
            .then_some(())
            .ok_or_else(|| format!("{path}: not a boolean")),
        other => panic!("the test validator does not know type {other:?}"),
    }
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}})
}

fn time_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {
            "offset": {"type": "integer", "minimum": -12, "maximum": 14},
            "precise": {"type": "boolean"}},
            "required": ["offset"]}}})
}

fn tool_schema(tools: &[Value], name: &str) -> Value {
    tools
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("the reply called {name}, which is not a tool"))["function"]
        ["parameters"]
        .clone()
}

fn ask(seed: u64, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris, and the time?"}],
        "max_tokens": 300, "temperature": 1.0, "seed": seed,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The tool calls of a streamed chat: deltas put together by index, as clients do.
fn streamed_calls(events: &[Value]) -> (Vec<(String, String)>, Option<String>) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = None;
    for e in events {
        let Some(c) = e.get("choices").and_then(|c| c.get(0)) else {
            continue;
        };
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        for d in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = d["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
                assert!(d["id"].is_string() && d["type"] == "function", "{d}");
            }
            calls[i].0 += d["function"]["name"].as_str().unwrap_or("");
            calls[i].1 += d["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    (calls, finish)
}

/// A grammar-forced reply's reasoning and content, checked against the letters each may
/// hold, and the same split streamed: `(reasoning, content)`.
fn reasoning_split(
    server: &Server,
    body: &Value,
    reasoning_letters: std::ops::RangeInclusive<char>,
    content_letters: std::ops::RangeInclusive<char>,
) -> (String, String) {
    let r = server.chat(body);
    let m = &r["choices"][0]["message"];
    let reasoning = m["reasoning_content"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let content = m["content"].as_str().unwrap().to_string();
    assert!(
        !reasoning.is_empty() && reasoning.chars().all(|c| reasoning_letters.contains(&c)),
        "{r}"
    );
    assert!(
        !content.is_empty() && content.chars().all(|c| content_letters.contains(&c)),
        "{r}"
    );
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let events = server.stream("/v1/chat/completions", &sbody);
    assert_eq!(
        (
            chat_deltas(&events, "reasoning_content"),
            chat_deltas(&events, "content")
        ),
        (reasoning.clone(), content.clone())
    );
    (reasoning, content)
}

fn mini(dir: &Path) -> std::path::PathBuf {
    synth(dir, "qwen3-30b-a3b-mini", &[])
}

#[test]
fn required_tool_calls_are_valid_calls_for_20_seeds_streamed_and_not() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &["-c", "2048"]);
    let tools = vec![weather_tool(), time_tool()];
    let mut called = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let body = ask(seed, json!({"tools": tools, "tool_choice": "required"}));
        let r = server.chat(&body);
        let choice = &r["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "seed {seed}: {r}");
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "one call unless parallel_tool_calls: {r}");
        let f = &calls[0]["function"];
        let name = f["name"].as_str().unwrap();
        let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
        validate(&args, &tool_schema(&tools, name), name)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(calls[0]["id"].as_str().is_some_and(|s| !s.is_empty()));
        called.insert(name.to_string());

        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let events = server.stream("/v1/chat/completions", &sbody);
        let (scalls, finish) = streamed_calls(&events);
        assert_eq!(
            finish.as_deref(),
            Some("tool_calls"),
            "seed {seed} streamed"
        );
        assert_eq!(scalls.len(), 1);
        let args: Value = serde_json::from_str(&scalls[0].1).unwrap();
        validate(&args, &tool_schema(&tools, &scalls[0].0), &scalls[0].0).unwrap();
    }
    assert_eq!(called.len(), 2, "20 seeds call both tools: {called:?}");

    // A named tool is always the one called.
    for seed in 0..5 {
        let body = ask(
            seed,
            json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
        );
        let r = server.chat(&body);
        assert_eq!(
            r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time",
            "{r}"
        );
    }

    // `allowed_tools` (required): a call of an allowed tool only, while every tool is
    // shown (the prompt is the same as with no choice); one not in `tools` is a 400.
    let search = json!({"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"]}}});
    let three = vec![weather_tool(), search.clone(), time_tool()];
    let allow = |names: &[&str], mode: &str| {
        json!({"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools":
            names.iter().map(|n| json!({"type": "function", "function": {"name": n}})).collect::<Vec<_>>()}})
    };
    let mut allowed_called = std::collections::BTreeSet::new();
    for seed in 0..8 {
        let body = ask(
            seed,
            json!({"tools": three, "tool_choice": allow(&["search", "get_time"], "required")}),
        );
        let r = server.chat(&body);
        let f = &r["choices"][0]["message"]["tool_calls"][0]["function"];
        let name = f["name"]
            .as_str()
            .unwrap_or_else(|| panic!("seed {seed}: {r}"));
        assert!(name == "search" || name == "get_time", "seed {seed}: {r}");
        let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
        validate(&args, &tool_schema(&three, name), name)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        allowed_called.insert(name.to_string());
        let plain = server.chat(&ask(seed, json!({"tools": three, "max_tokens": 1})));
        assert_eq!(r["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
    }
    assert_eq!(
        allowed_called.len(),
        2,
        "8 seeds call both allowed tools: {allowed_called:?}"
    );
    let r = server.chat(&ask(
        0,
        json!({"tools": three, "tool_choice": allow(&["search"], "auto"), "max_tokens": 4}),
    ));
    assert!(r["choices"][0]["finish_reason"].is_string(), "{r}");
    let (code, err, _) = server
        .post(
            "/v1/chat/completions",
            &ask(
                0,
                json!({"tools": tools, "tool_choice": allow(&["search"], "auto")}),
            ),
        )
        .unwrap_err();
    assert_eq!(code, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`search`, which is not in `tools`"),
        "{err}"
    );

    // Cut off by max_tokens: a length finish, never a malformed call.
    let r = server.chat(&ask(
        1,
        json!({"tools": tools, "tool_choice": "required", "max_tokens": 6}),
    ));
    assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");
    assert!(
        r["choices"][0]["message"].get("tool_calls").is_none(),
        "{r}"
    );
    assert!(
        r["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("<tool_"),
        "{r}"
    );

    // Tool results go back through the template.
    let follow = json!({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"}],
        "tools": tools, "max_tokens": 4, "temperature": 0});
    let r = server.chat(&follow);
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 100, "{r}");
}

#[test]
fn json_schema_replies_validate_for_20_seeds() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &[]);
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "kind": {"type": "string", "enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
        "owner": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 8},
            "verified": {"type": "boolean"}}, "required": ["city", "verified"]},
        "nickname": {"type": "string", "maxLength": 6},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "code": {"type": "string", "pattern": "^(?:[A-Z]{2}|x)-\\d{2,3}$"},
        "plain": {"type": "string", "pattern": "^[^\"\\\\]{1,6}$"},
        "quoted": {"type": "string", "pattern": "^[\"\\\\a]{1,3}$"}},
        "required": ["name", "age", "score", "kind", "tags", "owner", "zip", "code", "plain", "quoted"],
        "additionalProperties": false});
    for seed in 0..20 {
        let body = ask(
            seed,
            json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "pet", "schema": schema, "strict": true}}}),
        );
        let r = server.chat(&body);
        assert_eq!(r["choices"][0]["finish_reason"], "stop", "seed {seed}: {r}");
        let text = r["choices"][0]["message"]["content"].as_str().unwrap();
        let v: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text}"));
        validate(&v, &schema, "$").unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
    // json_object: some JSON object (bounded here by a short reply or a length finish).
    let r = server.chat(&ask(
        3,
        json!({"response_format": {"type": "json_object"}, "max_tokens": 40}),
    ));
    assert!(
        r["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .trim_start()
            .starts_with('{'),
        "{r}"
    );

    // Lengths above llama.cpp's repetition limit (2000) are written in blocks it takes.
    let long = ask(
        0,
        json!({"max_tokens": 6, "response_format": {"type": "json_schema", "json_schema": {"name": "l",
        "schema": {"type": "object", "properties": {"text": {"type": "string", "minLength": 2100, "maxLength": 4500}},
                   "required": ["text"]}}}}),
    );
    let r = server.chat(&long);
    assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");

    // What the engine cannot compile is a 400 that names it.
    let bad = ask(
        0,
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "z",
        "schema": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^(?i)[0-9]{5}$"}}}}}}),
    );
    let (code, err, _) = server.post("/v1/chat/completions", &bad).unwrap_err();
    assert_eq!(code, 400);
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`pattern`") && msg.contains("#/properties/zip") && msg.contains("(?i)"),
        "{msg}"
    );
    let (code, err, _) = server
        .post(
            "/v1/chat/completions",
            &ask(0, json!({"grammar": "root ::= ( \"a\""})),
        )
        .unwrap_err();
    assert_eq!(code, 400, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("grammar"),
        "{err}"
    );
}

#[test]
fn reasoning_is_split_from_think_blocks_streamed_and_not() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &[]);
    // The grammar makes the random model open a think block, as a thinking model would.
    let grammar = r#"root ::= "<think>" [a-m]{4,12} "</think>" "\n\n" [n-z]{4,12}"#;
    let body = ask(5, json!({"grammar": grammar, "max_tokens": 60}));
    let (reasoning, content) = reasoning_split(&server, &body, 'a'..='m', 'n'..='z');

    // reasoning_format none: the block stays in the content, tags and all.
    let mut raw = body.clone();
    raw["reasoning_format"] = json!("none");
    let r = server.chat(&raw);
    assert_eq!(
        r["choices"][0]["message"]["content"],
        format!("<think>{reasoning}</think>\n\n{content}")
    );

    // The template decides: with enable_thinking false, Qwen3's template closes the block
    // in the prompt, so the reply is content from the start.
    let mut off = ask(
        5,
        json!({"max_tokens": 8, "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}}),
    );
    off["grammar"] = json!(r#"root ::= [a-z]{4,8}"#);
    let r = server.chat(&off);
    assert!(
        r["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{r}"
    );
}

#[test]
fn logprobs_are_the_log_softmax_of_the_logits_and_sorted() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let logits_file = dir.path().join("logits.bin");
    let stats = dir.path().join("stats.json");
    let prompt = "The rivers of Europe";
    ok(&epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        prompt,
        "-n",
        "6",
        "-c",
        "1024",
        "--dump-logits",
        logits_file.to_str().unwrap(),
        "--stats-file",
        stats.to_str().unwrap(),
    ]));
    let bytes = std::fs::read(&logits_file).unwrap();
    let ids: Vec<i64> = json(&stats)["tokens"]["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let n_vocab = bytes.len() / 4 / ids.len();
    let server = Server::start(&model, &[]);
    let r = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 5}),
        )
        .unwrap();
    let lp = &r["choices"][0]["logprobs"];
    let token_lps = lp["token_logprobs"].as_array().unwrap();
    assert_eq!(token_lps.len(), ids.len());
    for (pos, got) in token_lps.iter().enumerate() {
        let row: Vec<f64> = bytes[pos * n_vocab * 4..(pos + 1) * n_vocab * 4]
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        let want = row[ids[pos] as usize] - lse;
        assert!(
            (got.as_f64().unwrap() - want).abs() < 1e-4,
            "position {pos}: {got} vs {want}"
        );
    }

    let r = server.chat(
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
        "temperature": 0, "logprobs": true, "top_logprobs": 5}),
    );
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        r["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in content {
        let top: Vec<f64> = t["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["logprob"].as_f64().unwrap())
            .collect();
        assert_eq!(top.len(), 5);
        assert!(top.windows(2).all(|w| w[0] >= w[1]), "sorted: {top:?}");
        // Greedy: the sampled token is the most likely one.
        assert!(
            (t["logprob"].as_f64().unwrap() - top[0]).abs() < 1e-6,
            "{t}"
        );
        assert!(t["bytes"].is_array());
    }
}

#[test]
fn content_parts_render_as_the_string_and_bad_messages_are_refused() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &[]);
    let with = |content: Value| {
        server.chat(&json!({"messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0}))
    };
    let plain = with(json!("Name three rivers."));
    let parts =
        with(json!([{"type": "text", "text": "Name three "}, {"type": "text", "text": "rivers."}]));
    assert_eq!(
        plain["choices"][0]["message"]["content"],
        parts["choices"][0]["message"]["content"]
    );
    assert_eq!(
        plain["usage"]["prompt_tokens"],
        parts["usage"]["prompt_tokens"]
    );

    let refuse = |body: Value, needle: &str| {
        let (code, err, _) = server.post("/v1/chat/completions", &body).unwrap_err();
        assert_eq!(code, 400, "{err}");
        assert_eq!(err["error"]["type"], "invalid_request_error");
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    };
    refuse(
        json!({"messages": [{"role": "wizard", "content": "hi"}]}),
        "`messages[0].role` is `wizard`",
    );
    refuse(
        json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}),
        "text-only",
    );
    refuse(
        json!({"messages": [{"role": "user", "content": "x"}], "tools": [weather_tool()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
        "`nope`",
    );
    refuse(
        json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}),
        "logprobs",
    );
}

#[test]
fn a_constraint_changes_tokens_never_logits() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let run = |extra: &[&str], name: &str| -> (String, Vec<i64>, Vec<u8>) {
        let logits = dir.path().join(format!("{name}.bin"));
        let stats = dir.path().join(format!("{name}.json"));
        let mut args = vec![
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "Once upon a time",
            "-c",
            "512",
            "--dump-logits",
            logits.to_str().unwrap(),
            "--stats-file",
            stats.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let text = ok(&epm(&args));
        let ids = json(&stats)["tokens"]["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        (text, ids, std::fs::read(&logits).unwrap())
    };
    let (text5, _, _) = run(&["-n", "5"], "prefix");
    let (_, free_ids, free_logits) = run(&["-n", "12"], "free");
    // A grammar that admits the free run's first 5 tokens, then only digits.
    let prefix = text5.trim_end_matches('\n');
    let grammar = dir.path().join("g.gbnf");
    let escaped = prefix.replace('\\', "\\\\").replace('"', "\\\"");
    std::fs::write(&grammar, format!("root ::= \"{escaped}\" [0-9]{{7}}\n")).unwrap();
    let (text, ids, logits) = run(
        &["-n", "12", "--grammar", grammar.to_str().unwrap()],
        "constrained",
    );
    assert!(text.starts_with(prefix), "{text:?} vs {prefix:?}");
    let first_change = free_ids
        .iter()
        .zip(&ids)
        .position(|(a, b)| a != b)
        .expect("the grammar changed a token");
    assert!(
        first_change >= 5,
        "the grammar changed token {first_change}, inside the prefix it admits"
    );
    let row = free_logits.len() / free_ids.len();
    for pos in 0..=first_change {
        assert!(
            logits[pos * row..(pos + 1) * row] == free_logits[pos * row..(pos + 1) * row],
            "the logits at position {pos} differ, before the grammar changed a token"
        );
    }
    // A grammar llama.cpp cannot parse is bad input.
    std::fs::write(&grammar, "root ::= (").unwrap();
    let out = epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "x",
        "-n",
        "2",
        "--grammar",
        grammar.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("grammar"));
}

/// A JSON format with tools (an agent that returns a structured result and uses tools on
/// the way, as the OpenAI Agents SDK asks with an `output_type`): each reply is either a
/// valid call or the schema's JSON, and both happen.
#[test]
fn a_format_with_tools_answers_in_the_format_or_calls_a_tool() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &[]);
    let tools = vec![weather_tool(), time_tool()];
    let schema = json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                        "required": ["unit"], "additionalProperties": false});
    let (mut calls, mut answers) = (0, 0);
    for seed in 0..10 {
        let body = ask(
            seed,
            json!({"tools": tools, "max_tokens": 200, "response_format": {"type": "json_schema",
                   "json_schema": {"name": "u", "schema": schema}}}),
        );
        let r = server.chat(&body);
        let choice = &r["choices"][0];
        match choice["message"]["tool_calls"][0]["function"].as_object() {
            Some(call) => {
                assert_eq!(choice["finish_reason"], "tool_calls", "seed {seed}: {r}");
                let name = call["name"].as_str().unwrap();
                let args: Value =
                    serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
                validate(&args, &tool_schema(&tools, name), name)
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                calls += 1;
            }
            None => {
                let content = choice["message"]["content"].as_str().unwrap();
                let answer: Value = serde_json::from_str(content)
                    .unwrap_or_else(|e| panic!("seed {seed}: {content:?}: {e}"));
                validate(&answer, &schema, "answer").unwrap();
                answers += 1;
            }
        }
    }
    assert!(calls > 0 && answers > 0, "{calls} calls, {answers} answers");
    // A required call is the reply; the format is for the answer after the calls.
    let body = ask(
        9,
        json!({"tools": tools, "tool_choice": "required", "max_tokens": 200,
               "response_format": {"type": "json_schema", "json_schema": {"name": "u", "schema": schema}}}),
    );
    let r = server.chat(&body);
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
}

/// A tool that is not `strict` gets no promise for its arguments (as OpenAI gives none), so
/// a keyword a grammar cannot hold (`uniqueItems`, common in agents' tool schemas) is left
/// to the model instead of refusing the whole request: the rest of its schema still holds.
/// A `strict` tool with it is refused, naming it, on every protocol.
#[test]
fn tools_that_are_not_strict_are_constrained_as_far_as_a_grammar_can() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mini(dir.path()), &[]);
    let params = json!({"type": "object", "properties": {
        "labels": {"type": "array", "items": {"type": "string", "enum": ["bug", "docs", "ci"]},
                   "minItems": 1, "maxItems": 3, "uniqueItems": true}},
        "required": ["labels"], "additionalProperties": false});
    let tool = |strict: Option<bool>| {
        let mut f =
            json!({"name": "label", "description": "Label the issue", "parameters": params});
        if let Some(s) = strict {
            f["strict"] = json!(s);
        }
        json!({"type": "function", "function": f})
    };
    for strict in [None, Some(false)] {
        for seed in 0..4 {
            let body = ask(
                seed,
                json!({"tools": [tool(strict)], "tool_choice": "required"}),
            );
            let r = server.chat(&body);
            let call = &r["choices"][0]["message"]["tool_calls"][0]["function"];
            assert_eq!(call["name"], "label", "{r}");
            let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            validate(&args, &params, "label").unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
        // tool_choice "auto" (the lazy grammar) is served too.
        let body = ask(0, json!({"tools": [tool(strict)], "max_tokens": 4}));
        assert!(server.chat(&body)["choices"][0]["finish_reason"].is_string());
    }
    let body = ask(0, json!({"tools": [tool(Some(true))], "max_tokens": 4}));
    let (code, err, _) = server.post("/v1/chat/completions", &body).unwrap_err();
    assert_eq!(code, 400);
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`uniqueItems`") && msg.contains("/labels"),
        "{msg}"
    );
    // Anthropic's tools: `strict` beside the schema.
    let anthropic = |strict: bool| {
        json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Label it"}],
               "tools": [{"name": "label", "input_schema": params, "strict": strict}]})
    };
    server.post("/v1/messages", &anthropic(false)).unwrap();
    let (code, _, _) = server.post("/v1/messages", &anthropic(true)).unwrap_err();
    assert_eq!(code, 400);
}

/// gpt-oss end to end: harmony's channels over the OpenAI API. Required and named calls
/// come back as `tool_calls` parsed from `commentary to=functions.NAME`, streamed and not,
/// after an analysis the model may write first (as llama.cpp's grammar for gpt-oss lets
/// it; the random model's is closed by a budget); the analysis channel is the reasoning
/// and the final channel the content; tool results render back through the harmony
/// template.
#[test]
fn harmony_tool_calls_and_channels_on_gpt_oss_mini() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&synth(dir.path(), "gpt-oss-20b-mini", &[]), &["-c", "2048"]);
    let tools = vec![weather_tool(), time_tool()];
    let mut called = std::collections::BTreeSet::new();
    let mut reasoned = 0;
    for seed in 0..10 {
        let body = ask(
            seed,
            json!({"tools": tools, "tool_choice": "required", "thinking_budget_tokens": 8}),
        );
        let r = server.chat(&body);
        let choice = &r["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "seed {seed}: {r}");
        if choice["message"]["reasoning_content"].is_string() {
            assert_eq!(
                r["usage"]["completion_tokens_details"]["reasoning_tokens"], 8,
                "seed {seed}: {r}"
            );
            reasoned += 1;
        }
        let call = &choice["message"]["tool_calls"][0]["function"];
        let name = call["name"].as_str().unwrap();
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        validate(&args, &tool_schema(&tools, name), name)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        called.insert(name.to_string());

        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let (scalls, finish) = streamed_calls(&server.stream("/v1/chat/completions", &sbody));
        assert_eq!(finish.as_deref(), Some("tool_calls"), "seed {seed}");
        assert_eq!(
            scalls,
            vec![(
                name.to_string(),
                call["arguments"].as_str().unwrap().to_string()
            )]
        );
    }
    assert_eq!(called.len(), 2, "10 seeds call both tools: {called:?}");
    assert!(
        (1..10).contains(&reasoned),
        "{reasoned} of 10 seeds reasoned first"
    );
    // Ollama clients (Zed, Open WebUI) offer `think` where the model says it reasons.
    let show = server.post("/api/show", &json!({"model": "m"})).unwrap();
    for c in ["tools", "thinking"] {
        assert!(
            show["capabilities"].as_array().unwrap().contains(&json!(c)),
            "{show}"
        );
    }
    let named = ask(
        2,
        json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
    );
    let r = server.chat(&named);
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time",
        "{r}"
    );

    // A reply in two channels, as gpt-oss writes one: analysis, then final.
    let grammar = r#"root ::= "<|channel|>analysis<|message|>" [a-m]{4,12} "<|end|><|start|>assistant<|channel|>final<|message|>" [n-z]{4,12}"#;
    let body = ask(5, json!({"grammar": grammar, "max_tokens": 80}));
    reasoning_split(&server, &body, 'a'..='m', 'n'..='z');

    // The call and its result go back through the template: the prompt grows by both.
    let turn = |extra: Vec<Value>| {
        let mut messages = vec![json!({"role": "user", "content": "Weather?"})];
        messages.extend(extra);
        let r = server.chat(
            &json!({"messages": messages, "tools": tools, "max_tokens": 2, "temperature": 0}),
        );
        r["usage"]["prompt_tokens"].as_u64().unwrap()
    };
    let before = turn(vec![]);
    let after = turn(vec![
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"}),
    ]);
    assert!(after > before + 20, "prompt tokens {before} -> {after}");
}

/// `reasoning_effort` (the Responses API's `reasoning.effort`) reaches the chat template,
/// as llama-server passes it: gpt-oss's harmony reads the level, and `none` turns Qwen3's
/// thinking off; a request's own `chat_template_kwargs` win.
#[test]
fn reasoning_effort_reaches_the_template() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let server = Server::start(&mini(dir.path()), &[]);
    let render = |extra: Value| -> String {
        let body = merged(json!({"messages": msgs}), &extra);
        server.post("/apply-template", &body).unwrap()["prompt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let off = "<think>\n\n</think>";
    assert!(!render(json!({})).contains(off));
    assert!(render(json!({"reasoning_effort": "none"})).ends_with(&format!("{off}\n\n")));
    assert!(!render(json!({"reasoning_effort": "high"})).contains(off));
    assert!(!render(json!({"reasoning_effort": "none",
                           "chat_template_kwargs": {"enable_thinking": true}}))
    .contains(off));
    // The chat and Responses endpoints render it too: two more prompt tokens or more.
    let prompt_tokens = |path: &str, body: Value, field: &str| {
        server.post(path, &body).unwrap()["usage"][field]
            .as_u64()
            .unwrap()
    };
    let chat = |extra: Value| {
        let body = merged(json!({"messages": msgs, "max_tokens": 1}), &extra);
        prompt_tokens("/v1/chat/completions", body, "prompt_tokens")
    };
    let plain = chat(json!({}));
    let none = chat(json!({"reasoning_effort": "none"}));
    assert!(none > plain + 1, "{none} vs {plain}");
    let responses = prompt_tokens(
        "/v1/responses",
        json!({"input": "Hi", "max_output_tokens": 1, "reasoning": {"effort": "none"}}),
        "input_tokens",
    );
    assert_eq!(responses, none);
    let (code, v, _) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": msgs, "reasoning_effort": "extreme"}),
        )
        .unwrap_err();
    assert_eq!(code, 400);
    assert!(v.to_string().contains("reasoning_effort"), "{v}");
    drop(server);

    let server = Server::start(&synth(dir.path(), "gpt-oss-20b-mini", &[]), &[]);
    let prompt = server
        .post(
            "/apply-template",
            &json!({"messages": msgs, "reasoning_effort": "low"}),
        )
        .unwrap()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("Reasoning: low"), "{prompt}");
    // Ollama's `think` takes a level too: thinking on, and the level to the template, as
    // the chat's `reasoning_effort` (the same prompt, token for token); `true` keeps the
    // template's own level.
    let ollama = |think: Value| {
        server.post(
            "/api/chat",
            &json!({"model": "m", "stream": false, "messages": msgs, "think": think,
                    "options": {"num_predict": 1}}),
        )
    };
    let chat_prompt = |effort: Option<&str>| {
        let mut body = json!({"messages": msgs, "max_tokens": 1});
        if let Some(e) = effort {
            body["reasoning_effort"] = json!(e);
        }
        server.post("/v1/chat/completions", &body).unwrap()["usage"]["prompt_tokens"].clone()
    };
    for level in ["low", "medium", "high"] {
        let r = ollama(json!(level)).unwrap();
        assert_eq!(
            r["prompt_eval_count"],
            chat_prompt(Some(level)),
            "{level}: {r}"
        );
    }
    assert_eq!(
        ollama(json!(true)).unwrap()["prompt_eval_count"],
        chat_prompt(None)
    );
    assert_ne!(chat_prompt(Some("low")), chat_prompt(Some("medium")));
    let (code, v, _) = ollama(json!("extreme")).unwrap_err();
    assert_eq!(code, 400);
    assert!(v["error"].as_str().unwrap().contains("\"low\""), "{v}");
}

/// A gpt-oss conversation is cut at its messages' ends (harmony's `<|end|>`, which does not
/// end a generation) as ChatML ones are at `<|im_end|>`: a later request keeps the whole
/// system and developer messages, and answers exactly as a cold server does.
#[test]
fn a_gpt_oss_request_keeps_the_whole_shared_system_message() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "gpt-oss-20b-mini", &[]);
    let system = "You answer questions about rivers and seas, briefly and with care. ".repeat(30);
    let body = |user: &str| {
        json!({"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
               "max_tokens": 6, "temperature": 0})
    };
    let server = Server::start(&model, &["-c", "4096"]);
    let first = server.chat(&body("Hi"));
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let later = server.chat(&body("Tell me more"));
    // Where the developer message (the request's system message) ends.
    let prompt = server
        .post("/apply-template", &body("Tell me more"))
        .unwrap()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    let ends = prompt.find("<|end|><|start|>user").unwrap() + "<|end|>".len();
    let upto = server
        .post(
            "/tokenize",
            &json!({"content": &prompt[..ends], "parse_special": true}),
        )
        .unwrap()["tokens"]
        .as_array()
        .unwrap()
        .len();
    assert!(
        upto > 1024,
        "{upto}: longer than a ubatch, so the grid alone would not keep it"
    );
    assert_eq!(
        later["usage"]["prompt_tokens_details"]["cached_tokens"], upto,
        "{later}"
    );
    drop(server);
    let cold = Server::start(&model, &["-c", "4096"]).chat(&body("Tell me more"));
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(
        later["choices"][0]["message"],
        cold["choices"][0]["message"]
    );
}
