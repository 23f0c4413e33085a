//! Every protocol over real HTTP on one server: the same greedy tokens as
//! `/v1/chat/completions` for the same conversation, each protocol's own error shape for
//! malformed JSON, wrong types, a missing field and a missing key, prefix reuse in each
//! protocol's usage fields, the llama.cpp-native helpers, CORS, and per-protocol metrics.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn post_raw(server: &Server, path: &str, body: &str, key: Option<&str>) -> (u16, Value) {
    let mut req = ureq::post(&server.url(path)).set("content-type", "application/json");
    if let Some(k) = key {
        req = req.set("x-api-key", k);
    }
    match req.send_string(body) {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn post(server: &Server, path: &str, body: Value) -> Value {
    let (code, v) = post_raw(server, path, &body.to_string(), Some("k"));
    assert_eq!(code, 200, "{path}: {v}");
    v
}

/// The error message, checking the protocol's shape on the way.
fn error_message(path: &str, v: &Value) -> String {
    let m = if path.starts_with("/v1/messages") {
        assert_eq!(v["type"], "error", "{v}");
        assert!(v["error"]["type"].is_string(), "{v}");
        &v["error"]["message"]
    } else if path.starts_with("/api/") {
        &v["error"]
    } else if path.starts_with("/v1/") || path == "/chat/completions" {
        assert!(v["error"]["type"].is_string(), "{v}");
        &v["error"]["message"]
    } else {
        assert!(v["error"]["code"].is_u64(), "{v}");
        &v["error"]["message"]
    };
    m.as_str()
        .unwrap_or_else(|| panic!("{path}: no message in {v}"))
        .to_string()
}

#[test]
fn every_protocol_generates_the_same_tokens_and_speaks_its_own_errors() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let mut server = Server::start(&model, &["-c", "2048", "--api-key", "k"]);
    // Longer than a ubatch, so that a repeat of it keeps whole ubatches.
    let user = long_question();
    let user = user.as_str();
    let n = 10;
    let chat = |body: Value| post(&server, "/v1/chat/completions", body);
    let reference = chat(
        json!({"messages": [{"role": "user", "content": user}], "max_tokens": n, "temperature": 0}),
    );
    let want = reference["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!want.is_empty());

    let anthropic = post(
        &server,
        "/v1/messages",
        json!({"max_tokens": n, "temperature": 0,
        "messages": [{"role": "user", "content": [{"type": "text", "text": user}]}]}),
    );
    assert_eq!(
        anthropic["content"][0]["text"],
        want.as_str(),
        "{anthropic}"
    );
    assert_eq!(anthropic["stop_reason"], "max_tokens");
    assert!(
        anthropic["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "the same prompt again is reused: {anthropic}"
    );

    let ollama = post(
        &server,
        "/api/chat",
        json!({"model": "anything:latest", "stream": false,
        "messages": [{"role": "user", "content": user}], "options": {"temperature": 0, "num_predict": n}}),
    );
    assert_eq!(ollama["message"]["content"], want.as_str(), "{ollama}");
    assert_eq!(ollama["done_reason"], "length");
    let evaluated = ollama["prompt_eval_count"].as_u64().unwrap();
    assert!(
        evaluated < reference["usage"]["prompt_tokens"].as_u64().unwrap(),
        "Ollama counts only the prompt tokens it evaluated, the rest were reused: {ollama}"
    );

    let responses = post(
        &server,
        "/v1/responses",
        json!({"input": user, "max_output_tokens": n, "temperature": 0}),
    );
    assert_eq!(
        responses["output"][0]["content"][0]["text"],
        want.as_str(),
        "{responses}"
    );
    assert!(
        responses["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // llama-server's paths without `/v1`, for clients given the bare address.
    let bare = post(
        &server,
        "/chat/completions",
        json!({"messages": [{"role": "user", "content": user}], "max_tokens": n, "temperature": 0}),
    );
    assert_eq!(bare["choices"][0]["message"]["content"], want.as_str());
    let bare = post(
        &server,
        "/responses",
        json!({"input": user, "max_output_tokens": n, "temperature": 0}),
    );
    assert_eq!(bare["output"][0]["content"][0]["text"], want.as_str());

    // llama.cpp-native: render, tokenize and complete the same prompt.
    let rendered = post(
        &server,
        "/apply-template",
        json!({"messages": [{"role": "user", "content": user}]}),
    );
    let prompt = rendered["prompt"].as_str().unwrap().to_string();
    let toks = post(
        &server,
        "/tokenize",
        json!({"content": prompt, "add_special": true}),
    );
    let ids: Vec<i64> = toks["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    assert_eq!(
        ids.len() as u64,
        reference["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    let native = post(
        &server,
        "/completion",
        json!({"prompt": ids, "n_predict": n, "temperature": 0}),
    );
    assert_eq!(native["content"], want.as_str(), "{native}");
    assert!(native["tokens_cached"].as_u64().unwrap() > 0);
    assert_eq!(native["stop_type"], "limit");
    assert_eq!(native["tokens"], json!([]), "no ids unless asked: {native}");
    // `return_tokens`: the generated ids, which read back as the content.
    let with_ids = post(
        &server,
        "/completion",
        json!({"prompt": ids, "n_predict": n, "temperature": 0, "return_tokens": true}),
    );
    assert_eq!(with_ids["content"], want.as_str(), "{with_ids}");
    let generated = with_ids["tokens"].as_array().unwrap();
    assert_eq!(generated.len() as u64, n, "{with_ids}");
    assert!(with_ids.get("completion_probabilities").is_none());
    let read_back = post(&server, "/detokenize", json!({"tokens": generated}));
    assert_eq!(read_back["content"], want.as_str());
    let back = post(&server, "/detokenize", json!({"tokens": ids}));
    assert_eq!(back["content"], prompt.as_str());
    let pieces = post(
        &server,
        "/tokenize",
        json!({"content": "hello world", "with_pieces": true}),
    );
    let joined: String = pieces["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["piece"].as_str().unwrap())
        .collect();
    assert_eq!(joined, "hello world");

    // Each protocol's error shape, with a message that says what is wrong.
    let cases: &[(&str, &str, &str)] = &[
        ("/v1/chat/completions", "{not json", "not valid JSON"),
        ("/v1/chat/completions", r#"{"messages": "hi"}"#, "messages"),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}"#,
            "send `tools`",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "echo": true}"#,
            "`echo`",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "best_of": 3}"#,
            "`best_of` must be 1",
        ),
        ("/v1/messages", "{not json", "not valid JSON"),
        (
            "/v1/messages",
            r#"{"max_tokens": "ten", "messages": []}"#,
            "max_tokens",
        ),
        (
            "/v1/messages",
            r#"{"messages": [{"role": "user", "content": "x"}]}"#,
            "`max_tokens` is required",
        ),
        ("/api/chat", "{not json", "not valid JSON"),
        (
            "/api/chat",
            r#"{"messages": [{"role": "user", "content": "x"}], "options": {"temperature": "hot"}}"#,
            "temperature",
        ),
        ("/api/generate", r#"{"prompt": 5}"#, "prompt"),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]}"#,
            "`modalities` asks for more than text",
        ),
        (
            "/completion",
            r#"{"prompt": "x", "lora": [{"id": 0, "scale": 1.0}]}"#,
            "`lora`: this server loads no LoRA adapters",
        ),
        (
            "/api/generate",
            r#"{"prompt": "x", "context": [1, 2, 3]}"#,
            "`context` (Ollama's deprecated token history) is not served",
        ),
        (
            "/api/chat",
            r#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#,
            "`top_logprobs` needs `logprobs: true`",
        ),
        (
            "/v1/responses",
            r#"{"instructions": "x"}"#,
            "`input` is missing",
        ),
        (
            "/v1/responses",
            r#"{"prompt": {"id": "pmpt_1"}}"#,
            "`prompt` (a prompt template stored by OpenAI) is not served",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "allowed_tools", "mode": "sometimes", "tools": []}}"#,
            "`tool_choice` is",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "previous_response_id": "resp_1"}"#,
            "no stored response has the id `resp_1`",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "tools": [{"type": "custom"}]}"#,
            "`tools[0].name` is missing",
        ),
        (
            "/v1/messages",
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                "mcp_servers": [{"type": "url", "url": "https://example.org/mcp", "name": "x"}]}"#,
            "`mcp_servers`: this server connects to no MCP servers",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "custom",
                "custom": {"name": "p", "format": {"type": "grammar", "grammar": {"definition": "start: /a/"}}}}]}"#,
            "`tools[0].custom.format.grammar.syntax` is missing: use `lark` or `regex`",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "custom", "custom": {}}]}"#,
            "`tools[0].custom.name` is missing",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "tools": [{"type": "web_search"}, {"type": "local_shell"}]}"#,
            "`tools[1].type` is `local_shell`: give function or custom tools",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "tools": [{"type": "custom", "name": "p",
                "format": {"type": "grammar", "syntax": "ebnf", "definition": "start: /a/"}}]}"#,
            "`tools[0].format.syntax` is `ebnf`: use `lark` or `regex`",
        ),
        (
            "/v1/responses",
            r#"{"input": "x", "tools": [{"type": "custom", "name": "p",
                "format": {"type": "grammar", "syntax": "lark"}}]}"#,
            "`tools[0].format.definition` is missing",
        ),
        (
            "/v1/messages",
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}]}"#,
            "`tools[0].type` is `web_search_20250305`: this server runs no server tools",
        ),
        (
            "/v1/messages",
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"input_schema": {"type": "object"}}]}"#,
            "`tools[0].name` is missing",
        ),
        (
            "/completion",
            r#"{"prompt": [999999999]}"#,
            "outside the vocabulary",
        ),
        ("/completion", "{not json", "not valid JSON"),
        ("/tokenize", r#"{"text": "x"}"#, "content"),
    ];
    for (path, body, needle) in cases {
        let (code, v) = post_raw(&server, path, body, Some("k"));
        assert_eq!(code, 400, "{path} {body}: {v}");
        let msg = error_message(path, &v);
        assert!(
            msg.contains(needle),
            "{path} {body}: {msg:?} lacks {needle:?}"
        );
    }
    // A prompt beyond the context (2,048 tokens), as each protocol's clients recognize it
    // (agents compact their conversation on it).
    let long = "Tell me about rivers, lakes and the sea. ".repeat(300);
    let overflow = |path: &str, body: Value| {
        let (code, v) = post_raw(&server, path, &body.to_string(), Some("k"));
        assert_eq!(code, 400, "{path}: {v}");
        v
    };
    let messages = json!([{"role": "user", "content": long}]);
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let body = if path == "/v1/responses" {
            json!({"input": messages})
        } else {
            json!({"messages": messages})
        };
        let v = overflow(path, body);
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
        let msg = error_message(path, &v);
        assert!(
            msg.starts_with("This model's maximum context length is 2048 tokens"),
            "{msg}"
        );
        assert!(v["error"]["n_prompt_tokens"].as_u64().unwrap() > 2048);
    }
    let v = overflow(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4000}),
    );
    assert!(
        error_message("/v1/chat/completions", &v)
            .contains("for the completion): lower max_tokens to at most"),
        "{v}"
    );
    let v = overflow(
        "/v1/messages",
        json!({"max_tokens": 8, "messages": messages}),
    );
    let msg = error_message("/v1/messages", &v);
    let counts: Vec<&str> = msg
        .strip_prefix("prompt is too long: ")
        .and_then(|m| m.split(" maximum").next())
        .map(|m| m.split(" tokens > ").collect())
        .unwrap_or_default();
    assert_eq!(counts.len(), 2, "{msg}");
    assert!(
        counts[0].parse::<u64>().unwrap() > 2048 && counts[1] == "2048",
        "{msg}"
    );
    let v = overflow(
        "/v1/messages",
        json!({"max_tokens": 4000, "messages": [{"role": "user", "content": "x"}]}),
    );
    assert!(
        error_message("/v1/messages", &v)
            .starts_with("input length and `max_tokens` exceed context limit: "),
        "{v}"
    );
    let v = overflow("/completion", json!({"prompt": long}));
    assert_eq!(v["error"]["type"], "exceed_context_size_error", "{v}");
    assert_eq!(v["error"]["n_ctx"], 2048, "{v}");
    // Ollama cuts a conversation at its oldest turns; only a last turn too long is refused.
    let v = overflow("/api/chat", json!({"messages": messages, "stream": false}));
    assert!(
        error_message("/api/chat", &v).contains("a slot's context holds 2048"),
        "{v}"
    );

    for path in [
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/messages",
        "/api/chat",
        "/completion",
    ] {
        let (code, v) = post_raw(&server, path, "{}", None);
        assert_eq!(code, 401, "{path}: {v}");
        assert!(error_message(path, &v).contains("API key"), "{path}: {v}");
    }
    let (code, v) = post_raw(&server, "/api/nothing", "{}", Some("k"));
    assert_eq!((code, v["error"].is_string()), (404, true), "{v}");

    // Read-only views.
    let get = |path: &str| -> Value {
        ureq::get(&server.url(path))
            .set("authorization", "Bearer k")
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    };
    let models = get("/v1/models");
    assert_eq!(models["data"][0]["id"], "qwen3-30b-a3b-mini");
    assert_eq!(get("/models"), models);
    // `models.retrieve`: the loaded model, whichever name is asked.
    let one = get("/v1/models/some-name");
    assert_eq!(
        (&one["id"], &one["object"]),
        (&models["data"][0]["id"], &json!("model"))
    );
    // Health needs no key, at llama-server's `/v1/health` too.
    for path in ["/health", "/v1/health"] {
        assert_eq!(ureq::get(&server.url(path)).call().unwrap().status(), 200);
    }
    let props = get("/props");
    assert_eq!(props["default_generation_settings"]["n_ctx"], 2048);
    assert!(props["chat_template"]
        .as_str()
        .unwrap()
        .contains("<tool_call>"));
    assert_eq!(get("/slots").as_array().unwrap().len(), 1);
    let tags = get("/api/tags");
    assert_eq!(tags["models"][0]["name"], "qwen3-30b-a3b-mini");
    let show = post(&server, "/api/show", json!({"model": "x"}));
    assert_eq!(show["details"]["family"], "qwen3moe");
    // `general.file_type`, which synth writes as converters do (its experts are Q4_K).
    assert_eq!(show["details"]["quantization_level"], "Q4_K_M");
    assert_eq!(show["model_info"]["qwen3moe.context_length"], 40_960);
    assert!(get("/api/version")["version"].is_string());

    let metrics = ureq::get(&server.url("/metrics"))
        .set("authorization", "Bearer k")
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    for p in ["openai", "anthropic", "ollama", "llamacpp"] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("epm_http_requests_total{{protocol=\"{p}\"}}")))
            .unwrap_or_else(|| panic!("no request count for {p}:\n{metrics}"));
        let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(count >= 2.0, "{line}");
    }
    assert!(server.stop().success());
}

#[test]
fn cors_admits_loopback_origins_by_default_and_others_when_told() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let preflight = |server: &Server, origin: &str| {
        let r = ureq::request("OPTIONS", &server.url("/v1/chat/completions"))
            .set("origin", origin)
            .set("access-control-request-method", "POST")
            .set(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .call();
        match r {
            Ok(r) => (
                r.status(),
                r.header("access-control-allow-origin").map(String::from),
                r.header("access-control-allow-headers").map(String::from),
            ),
            Err(ureq::Error::Status(code, r)) => (
                code,
                r.header("access-control-allow-origin").map(String::from),
                None,
            ),
            Err(e) => panic!("{e}"),
        }
    };
    let server = Server::start(&model, &["--api-key", "k"]);
    let (code, allow, headers) = preflight(&server, "http://localhost:3000");
    assert_eq!(
        (code, allow.as_deref()),
        (204, Some("http://localhost:3000"))
    );
    assert_eq!(headers.as_deref(), Some("authorization, content-type"));
    let (code, allow, _) = preflight(&server, "https://evil.example");
    assert_eq!(
        (code, allow),
        (403, None),
        "a web page elsewhere cannot drive the model"
    );
    let r = ureq::get(&server.url("/v1/models"))
        .set("origin", "http://127.0.0.1:8000")
        .set("authorization", "Bearer k")
        .call()
        .unwrap();
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://127.0.0.1:8000")
    );
    drop(server);
    let server = Server::start(&model, &["--cors-origin", "https://app.example"]);
    assert_eq!(preflight(&server, "https://app.example").0, 204);
    assert_eq!(preflight(&server, "https://other.example").0, 403);
}

/// The progress of a prompt's prefill, as `(cache, processed, total)` of each chunk that
/// carries `prompt_progress`, and whether any came after the first generated text.
fn progress_of(events: &[Value], text_key: &str) -> (Vec<(u64, u64, u64)>, bool) {
    let mut seen = Vec::new();
    let mut text_seen = false;
    let mut late = false;
    for e in events {
        if let Some(p) = e.get("prompt_progress") {
            late |= text_seen;
            let n = |k: &str| p[k].as_u64().unwrap();
            seen.push((n("cache"), n("processed"), n("total")));
        }
        let text = e.pointer(text_key).and_then(Value::as_str).unwrap_or("");
        text_seen |= !text.is_empty();
    }
    (seen, late)
}

/// With `return_progress`, a stream reports the prompt's prefill once before its first
/// ubatch and after each, as llama-server does, before any text; without it, nothing.
/// Prefix reuse shows as `cache`; `/slots` counts the tokens processed.
#[test]
fn prefill_progress_is_streamed_per_ubatch_when_asked() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // On the grid every ubatch but the last holds 32 tokens (cut at turns, this prompt's
    // user message would end one early: `prefix.rs` tests that split).
    let server = Server::start(
        &synth(dir.path(), "tiny", &[]),
        &["-ub", "32", "--prompt-split", "grid"],
    );
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(12);
    let body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 4,
        "stream": true, "return_progress": true, "stream_options": {"include_usage": true}});
    let check = |events: &[Value], text_key: &str, prompt_tokens: u64| -> u64 {
        let (seen, late) = progress_of(events, text_key);
        assert!(!late, "progress after the text: {seen:?}");
        let (cache, first, total) = seen[0];
        assert_eq!((first, total), (cache, prompt_tokens), "{seen:?}");
        assert_eq!(seen.last().unwrap().1, total, "{seen:?}");
        for w in seen.windows(2) {
            let step = w[1].1 - w[0].1;
            assert!(step == 32 || (step < 32 && w[1].1 == total), "{seen:?}");
        }
        assert_eq!(seen.len() as u64, 1 + (total - cache).div_ceil(32));
        cache
    };
    let events = server.stream("/v1/chat/completions", &body);
    let usage = &events.iter().find(|e| e["usage"].is_object()).unwrap()["usage"];
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 100, "{usage}");
    assert_eq!(check(&events, "/choices/0/delta/content", prompt_tokens), 0);
    // The same conversation again: the whole ubatches it shares are reused.
    let again = server.stream("/v1/chat/completions", &body);
    let cached = check(&again, "/choices/0/delta/content", prompt_tokens);
    assert!(cached >= 96 && cached % 32 == 0, "cache {cached}");

    let mut quiet = body.clone();
    quiet["return_progress"] = json!(false);
    let events = server.stream("/v1/chat/completions", &quiet);
    assert!(progress_of(&events, "/choices/0/delta/content")
        .0
        .is_empty());

    let native = json!({"prompt": prompt, "n_predict": 2, "stream": true, "return_progress": true});
    let events = server.stream("/completion", &native);
    let (seen, late) = progress_of(&events, "/content");
    assert!(
        !late && seen.len() > 3 && seen.last().unwrap().1 == seen[0].2,
        "{seen:?}"
    );
    // Streamed with `return_tokens`, each token's chunk carries its id: together the
    // same ids as the whole reply's.
    let asked = json!({"prompt": prompt, "n_predict": 4, "temperature": 0, "return_tokens": true});
    let whole: Value = ureq::post(&server.url("/completion"))
        .send_json(asked.clone())
        .unwrap()
        .into_json()
        .unwrap();
    let mut streamed_asked = asked;
    streamed_asked["stream"] = json!(true);
    let events = server.stream("/completion", &streamed_asked);
    let ids: Vec<Value> = events
        .iter()
        .filter_map(|e| e["tokens"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(ids.len(), 4, "{events:?}");
    assert_eq!(Value::from(ids), whole["tokens"], "{whole}");
    let slots: Value = ureq::get(&server.url("/slots"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let s = &slots[0];
    assert_eq!(
        s["n_prompt_tokens_processed"].as_u64().unwrap()
            + s["n_prompt_tokens_cache"].as_u64().unwrap(),
        s["n_prompt_tokens"].as_u64().unwrap(),
        "{s}"
    );
}

/// `generate --chat` is one more client of the generation core: a conversation on stdin
/// with a system message gets the replies the server gives the same messages, and a turn
/// reuses what the conversation before it holds in whole prompt pieces.
#[test]
fn generate_chat_answers_as_the_server_does_and_reuses_the_conversation() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let stats = dir.path().join("chat.json");
    // Longer than a prompt piece (256 tokens), so that the prompt is cut after it and the
    // next turn reuses it: reuse keeps whole pieces.
    let system = "You answer in one short sentence, and you name your sources. ".repeat(8);
    let system = system.as_str();
    let turns = [
        "Name three rivers of Europe, and say where each one meets the sea.",
        "And which of them is the longest?",
    ];
    let mut child = Command::new(bin())
        .args([
            "generate",
            "-m",
            model.to_str().unwrap(),
            "--chat",
            "--system",
            system,
        ])
        .args([
            "-n",
            "8",
            "-c",
            "1024",
            "-ub",
            "256",
            "-t",
            "2",
            "--stats-file",
        ])
        .arg(&stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for t in turns {
        writeln!(stdin, "{t}").unwrap();
    }
    drop(stdin);
    let out = ok(&child.wait_with_output().unwrap());
    // Each turn prints "> " and then its reply on a line.
    let replies: Vec<&str> = out
        .split("> ")
        .map(|r| r.trim_end_matches('\n'))
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(replies.len(), turns.len(), "{out:?}");
    assert!(
        json(&stats)["tokens"]["prompt_reused"].as_u64().unwrap() > 0,
        "the second turn reuses the first"
    );

    let server = Server::start(&model, &["-ub", "256"]);
    let mut messages = vec![json!({"role": "system", "content": system})];
    for (t, cli) in turns.iter().zip(&replies) {
        messages.push(json!({"role": "user", "content": t}));
        let r = server.chat(
            &json!({"messages": messages, "max_tokens": 8, "temperature": 0,
                                    "reasoning_format": "none"}),
        );
        let content = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(content, *cli, "turn {t:?}");
        messages.push(json!({"role": "assistant", "content": content.trim()}));
    }
}

/// The token-counting endpoints answer what the same request evaluates: OpenAI Responses'
/// `/v1/responses/input_tokens`, llama-server's `/v1/chat/completions/input_tokens` and
/// Anthropic's `count_tokens`, with their tools and template variables; and a conversation
/// too long for the context is counted, not refused.
#[test]
fn token_counts_are_the_prompt_each_request_evaluates() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["-c", "512"]);
    let ok = |path: &str, body: Value| post(&server, path, body);
    let tool = json!({"type": "function", "function": {"name": "get_time", "description": "Time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}});
    let messages = json!([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "What time is it in Paris?"}]);

    // Chat: with tools and with thinking off (the template writes both into the prompt).
    let chat = json!({"messages": messages, "tools": [tool], "reasoning_effort": "none"});
    let counted = ok("/v1/chat/completions/input_tokens", chat.clone());
    assert_eq!(counted["object"], "response.input_tokens");
    let mut run = chat.clone();
    run["max_tokens"] = json!(1);
    let used = ok("/v1/chat/completions", run)["usage"]["prompt_tokens"].clone();
    assert_eq!(counted["input_tokens"], used);
    let bare = ok(
        "/v1/chat/completions/input_tokens",
        json!({"messages": messages}),
    );
    assert!(bare["input_tokens"].as_u64() < counted["input_tokens"].as_u64());

    // Responses: instructions, input and tools as the Responses API spells them.
    let responses = json!({"instructions": "Be brief.", "input": "What time is it in Paris?",
        "tools": [{"type": "function", "name": "get_time", "description": "Time",
                   "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}]});
    let counted = ok("/v1/responses/input_tokens", responses.clone());
    assert_eq!(counted["object"], "response.input_tokens");
    let mut run = responses.clone();
    run["max_output_tokens"] = json!(1);
    let r = ok("/v1/responses", run);
    let used = r["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(counted["input_tokens"].as_u64(), Some(used), "{r}");

    // Anthropic: `thinking` reaches the template in the count as in the request.
    let msgs = json!([{"role": "user", "content": "What time is it in Paris?"}]);
    let off = json!({"model": "m", "messages": msgs, "thinking": {"type": "disabled"}});
    let counted = ok("/v1/messages/count_tokens", off.clone())["input_tokens"]
        .as_u64()
        .unwrap();
    let mut run = off.clone();
    run["max_tokens"] = json!(1);
    let u = ok("/v1/messages", run)["usage"].clone();
    let used = u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(counted, used, "{u}");
    let plain = ok(
        "/v1/messages/count_tokens",
        json!({"model": "m", "messages": msgs}),
    )["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(plain < counted, "{plain} vs {counted}");

    // The text a text model reads in Anthropic's other blocks: a document with a text or
    // content source (after its title and context) and a search result, in a message or
    // a tool result; a PDF is a 400 that says to send its text.
    let count = |content: Value| {
        ok(
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": [{"role": "user", "content": content}]}),
        )["input_tokens"]
            .as_u64()
            .unwrap()
    };
    let doc = json!({"type": "document", "title": "Notes", "context": "From the wiki",
        "source": {"type": "text", "media_type": "text/plain", "data": "Paris is in France."}});
    let question = json!({"type": "text", "text": "Where is Paris?"});
    assert_eq!(
        count(json!([doc, question])),
        count(json!(
            "Notes\nFrom the wiki\nParis is in France.\n\nWhere is Paris?"
        ))
    );
    let content_doc = json!({"type": "document", "source": {"type": "content",
        "content": [{"type": "text", "text": "Paris is in France."}]}});
    assert_eq!(
        count(json!([content_doc, question])),
        count(json!("Paris is in France.\n\nWhere is Paris?"))
    );
    let found = json!({"type": "search_result", "title": "Paris", "source": "https://example.org/paris",
        "content": [{"type": "text", "text": "Paris is in France."}]});
    assert_eq!(
        count(json!([found, question])),
        count(json!(
            "Paris\nhttps://example.org/paris\nParis is in France.\n\nWhere is Paris?"
        ))
    );
    let in_result = |content: Value| {
        ok("/v1/messages/count_tokens", json!({"model": "m",
            "tools": [{"name": "search", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "Where is Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]}]}))
            ["input_tokens"].as_u64().unwrap()
    };
    assert_eq!(
        in_result(json!([found])),
        in_result(json!(
            "Paris\nhttps://example.org/paris\nParis is in France.\n\n"
        ))
    );
    // A Claude conversation's history with server tools: the call is left out, its results
    // are text in the assistant's turn.
    let history = |assistant: Value| {
        ok(
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": [
            {"role": "user", "content": "Where is Paris?"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": "Thanks."}]}),
        )["input_tokens"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        history(json!([
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Paris"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "title": "Paris", "url": "https://example.org/paris",
                 "encrypted_content": "x"}]},
            {"type": "text", "text": "In France."}])),
        history(json!("Paris (https://example.org/paris)\n\nIn France."))
    );
    let pdf = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]});
    let (code, v) = post_raw(&server, "/v1/messages/count_tokens", &pdf.to_string(), None);
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/messages", &v).contains("send its text"),
        "{v}"
    );

    // Longer than the 512-token context: counted, while the chat itself is a 400.
    let long = json!({"messages": [{"role": "user", "content": "rivers of Europe ".repeat(300)}]});
    let n = ok("/v1/chat/completions/input_tokens", long.clone())["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(n > 512, "{n}");
    let (code, v) = post_raw(&server, "/v1/chat/completions", &long.to_string(), None);
    assert_eq!(code, 400, "{v}");
    // A malformed count request gets the protocol's 400.
    let (code, v) = post_raw(
        &server,
        "/v1/responses/input_tokens",
        "{\"input\": 3}",
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(!error_message("/v1/responses/input_tokens", &v).is_empty());
}

/// A greedy request of 8 tokens at most, with `extra`'s fields.
fn ask(extra: Value) -> Value {
    merged(json!({"max_output_tokens": 8, "temperature": 0}), &extra)
}

/// A question longer than a ubatch, so that a conversation continuing it keeps whole
/// ubatches of its KV.
fn long_question() -> String {
    "Name three rivers of Europe, and say where each one meets the sea. ".repeat(12)
}

/// A Responses `usage` whose prompt reused at least half of a first prompt of
/// `first_prompt` tokens.
fn assert_reused(usage: &Value, first_prompt: u64) {
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= first_prompt / 2,
        "the conversation's KV is reused: {usage}"
    );
}

/// The second turn the stored-state tests ask after `first` (asked `first_text`), as a
/// stateless client sends it: the first turn, then the second question.
fn second_turn(first_text: &str, first: &Value) -> Vec<Value> {
    let mut items = vec![json!({"role": "user", "content": first_text})];
    items.extend(first["output"].as_array().unwrap().iter().cloned());
    items.push(json!({"role": "user", "content": "And their lengths?"}));
    items
}

/// [`second_turn`] and `second`'s answer to it: the conversation so far.
fn whole_conversation(first: &Value, first_text: &str, second: &Value) -> Vec<Value> {
    let mut items = second_turn(first_text, first);
    items.extend(second["output"].as_array().unwrap().iter().cloned());
    items
}

/// The response to [`second_turn`] sent whole after the `opening` items, not stored, with
/// `extra` fields: what a turn continued from server-side state must equal.
fn sent_whole(
    server: &Server,
    opening: Vec<Value>,
    first_text: &str,
    first: &Value,
    extra: Value,
) -> Value {
    let mut whole = opening;
    whole.extend(second_turn(first_text, first));
    let body = merged(json!({"input": whole, "store": false}), &extra);
    post(server, "/v1/responses", ask(body))
}

/// The qwen3 mini in a temporary folder, and a state folder for its servers on the disk
/// (the response store keeps no files on a file system held in memory).
fn mini_with_state() -> (tempfile::TempDir, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    (dir, model, state)
}

/// A GET or DELETE: its status and JSON body.
fn call(method: &str, server: &Server, path: &str) -> (u16, Value) {
    match ureq::request(method, &server.url(path)).call() {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// Responses the server keeps: `previous_response_id` evaluates exactly the conversation a
/// client would send whole (the same prompt tokens, the same greedy reply, the earlier
/// turns' KV reused), streamed or not; a response is read back, its input items listed,
/// deleted, and a chain through a deleted one, an unknown id or `store: false` say so.
#[test]
fn stored_responses_continue_a_conversation() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["-c", "4096"]);
    let ok = |path: &str, body: Value| post(&server, path, body);
    let first_text = long_question();
    let first = ok(
        "/v1/responses",
        ask(json!({"input": first_text, "instructions": "Be brief."})),
    );
    assert_eq!(first["store"], true, "{first}");
    let id1 = first["id"].as_str().unwrap();

    let second = ok(
        "/v1/responses",
        ask(json!({"input": "And their lengths?",
        "previous_response_id": id1, "instructions": "Be brief."})),
    );
    assert_eq!(second["previous_response_id"], id1);
    // The same conversation sent whole, as a stateless client would.
    let brief = json!({"instructions": "Be brief."});
    let stateless = sent_whole(&server, Vec::new(), &first_text, &first, brief);
    assert_eq!(
        second["usage"]["input_tokens"],
        stateless["usage"]["input_tokens"]
    );
    assert_eq!(
        second["output"][0]["content"],
        stateless["output"][0]["content"]
    );
    let first_prompt = first["usage"]["input_tokens"].as_u64().unwrap();
    assert_reused(&second["usage"], first_prompt);
    let counted = ok(
        "/v1/responses/input_tokens",
        json!({"input": "And their lengths?",
        "previous_response_id": id1, "instructions": "Be brief."}),
    );
    assert_eq!(counted["input_tokens"], second["usage"]["input_tokens"]);
    // `store: false` keeps nothing.
    let (code, _) = call(
        "GET",
        &server,
        &format!("/v1/responses/{}", stateless["id"].as_str().unwrap()),
    );
    assert_eq!(code, 404);

    // Read back, and the request's own input items (not the earlier turns').
    let id2 = second["id"].as_str().unwrap();
    let (code, got) = call("GET", &server, &format!("/v1/responses/{id2}"));
    assert_eq!((code, &got["output"]), (200, &second["output"]));
    let (code, items) = call("GET", &server, &format!("/v1/responses/{id2}/input_items"));
    assert_eq!(code, 200, "{items}");
    let data = items["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{items}");
    assert_eq!(data[0]["content"][0]["text"], "And their lengths?");
    assert_eq!(items["first_id"], data[0]["id"]);

    // Streamed, continuing the second: kept once its stream completes.
    let events = server.stream(
        "/v1/responses",
        &ask(json!({"input": "Thanks.", "previous_response_id": id2, "stream": true})),
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    let id3 = done["response"]["id"].as_str().unwrap();
    assert!(
        done["response"]["usage"]["input_tokens"].as_u64()
            > second["usage"]["input_tokens"].as_u64()
    );
    let (code, got) = call("GET", &server, &format!("/v1/responses/{id3}"));
    assert_eq!((code, &got["previous_response_id"]), (200, &json!(id2)));

    // Deleted: gone, and the chain through it says why.
    let (code, del) = call("DELETE", &server, &format!("/v1/responses/{id1}"));
    assert_eq!((code, &del["deleted"]), (200, &json!(true)));
    let (code, v) = call("GET", &server, &format!("/v1/responses/{id1}"));
    assert_eq!(code, 404, "{v}");
    assert!(error_message("/v1/responses", &v).contains(id1), "{v}");
    let (code, v) = call("DELETE", &server, &format!("/v1/responses/{id1}"));
    assert_eq!(code, 404, "{v}");
    let (code, v) = post_raw(
        &server,
        "/v1/responses",
        &ask(json!({"input": "x", "previous_response_id": id3})).to_string(),
        None,
    );
    assert_eq!(code, 400, "{v}");
    let msg = error_message("/v1/responses", &v);
    assert!(
        msg.contains(id1) && msg.contains("no longer stored"),
        "{msg}"
    );
    // The second and the third are kept.
    assert_eq!(server.metric("epm_responses_stored"), 2.0);
    assert!(server.metric("epm_responses_stored_bytes") > 0.0);
}

/// Stored responses are files in the state folder too: a restarted server reads them back,
/// so a conversation continues by `previous_response_id` across the restart, and what was
/// deleted stays deleted.
#[test]
fn stored_responses_outlive_the_server() {
    let _g = serial();
    let (_dir, model, state) = mini_with_state();
    let args = ["--prompt-cache-dir", state.path().to_str().unwrap()];
    let server = Server::start(&model, &args);
    let first = post(
        &server,
        "/v1/responses",
        ask(json!({"input": "Name a river."})),
    );
    let id1 = first["id"].as_str().unwrap().to_string();
    let second = post(
        &server,
        "/v1/responses",
        ask(json!({"input": "And another?", "previous_response_id": id1})),
    );
    let id2 = second["id"].as_str().unwrap().to_string();
    let gone = post(
        &server,
        "/v1/responses",
        ask(json!({"input": "Forget this."})),
    );
    let gone = gone["id"].as_str().unwrap().to_string();
    let (code, _) = call("DELETE", &server, &format!("/v1/responses/{gone}"));
    assert_eq!(code, 200);
    // What the same continuation is, asked of the first server.
    let next = ask(json!({"input": "Which is longer?", "previous_response_id": id2}));
    let counted = post(&server, "/v1/responses/input_tokens", next.clone());
    drop(server);

    let server = Server::start(&model, &args);
    let (code, got) = call("GET", &server, &format!("/v1/responses/{id2}"));
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["output"], second["output"]);
    let (code, v) = call("GET", &server, &format!("/v1/responses/{gone}"));
    assert_eq!(code, 404, "{v}");
    let third = post(&server, "/v1/responses", next);
    assert_eq!(third["previous_response_id"], json!(id2));
    assert_eq!(third["usage"]["input_tokens"], counted["input_tokens"]);
    assert_eq!(server.metric("epm_responses_stored"), 3.0);
    // One file per response kept, and nothing else.
    let files = std::fs::read_dir(state.path().join("responses"))
        .unwrap()
        .count();
    assert_eq!(files, 3);
    // A background response whose server is killed before it ends, or stopped: its file
    // holds its request, and the next server runs it again under its id, to the reply the
    // same request gives in the foreground.
    let long = ask(json!({"input": "Tell me a long story.", "max_output_tokens": 900}));
    let mut server = server;
    let mut reference = Value::Null;
    for kill in [true, false] {
        let queued = post(
            &server,
            "/v1/responses",
            merged(long.clone(), &json!({"background": true})),
        );
        if kill {
            server.kill();
        } else {
            assert!(server.stop().success());
        }
        let id = queued["id"].as_str().unwrap();
        let file = state.path().join("responses").join(format!("{id}.json"));
        let on_disk =
            || -> Value { serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap() };
        let left = on_disk();
        assert_eq!(left["response"]["status"], "queued", "{left}");
        assert_eq!(left["request"]["input"], "Tell me a long story.");
        server = Server::start(&model, &args);
        let done = finished(&server, id);
        assert_eq!(done["status"], "incomplete", "{done}");
        if reference.is_null() {
            reference = post(
                &server,
                "/v1/responses",
                merged(long.clone(), &json!({"store": false})),
            );
        }
        assert_eq!(
            done["output"][0]["content"],
            reference["output"][0]["content"]
        );
        // Over, its file no longer holds the request.
        assert!(on_disk()["request"].is_null());
    }
}

/// Background response `id` polled until it is over: its final object.
fn finished(server: &Server, id: &str) -> Value {
    let path = format!("/v1/responses/{id}");
    let mut done = Value::Null;
    wait_for(
        "the background response to end",
        Duration::from_secs(60),
        || {
            let (code, r) = call("GET", server, &path);
            assert_eq!(code, 200, "{r}");
            let running = ["queued", "in_progress"].contains(&r["status"].as_str().unwrap());
            done = r;
            !running
        },
    );
    done
}

/// Every page of a conversation's items, oldest first, `limit` at a time, as a client
/// pages through them.
fn conversation_items(server: &Server, id: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut after = String::new();
    loop {
        let (code, page) = call(
            "GET",
            server,
            &format!("/v1/conversations/{id}/items?order=asc&limit={limit}{after}"),
        );
        assert_eq!(code, 200, "{page}");
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= limit, "{page}");
        items.extend(data.iter().cloned());
        if page["has_more"] != true {
            return items;
        }
        after = format!("&after={}", page["last_id"].as_str().unwrap());
    }
}

/// The Conversations API: a response in a conversation evaluates exactly what the
/// conversation sent whole would (its KV reused), and adds its input and output items;
/// items are listed a page at a time, added, read and deleted one by one; a restarted
/// server has the conversation; a deleted one is gone; and what cannot be done says why.
#[test]
fn conversations_hold_their_items_across_responses_and_restarts() {
    let _g = serial();
    let (_dir, model, state) = mini_with_state();
    let args = ["--prompt-cache-dir", state.path().to_str().unwrap()];
    let server = Server::start(&model, &args);
    let system = json!({"type": "message", "role": "system", "content": "Be brief."});
    let conv = post(
        &server,
        "/v1/conversations",
        json!({"items": [system], "metadata": {"topic": "rivers"}}),
    );
    assert_eq!(conv["object"], "conversation", "{conv}");
    let id = conv["id"].as_str().unwrap().to_string();
    let first_text = long_question();
    let first = post(
        &server,
        "/v1/responses",
        ask(json!({"input": first_text, "conversation": id})),
    );
    assert_eq!(first["conversation"], json!({"id": id}), "{first}");
    let second = post(
        &server,
        "/v1/responses",
        ask(json!({"input": "And their lengths?", "conversation": {"id": id}})),
    );
    // The same conversation sent whole.
    let opening = vec![json!({"role": "system", "content": "Be brief."})];
    let stateless = sent_whole(&server, opening, &first_text, &first, json!({}));
    assert_eq!(
        second["usage"]["input_tokens"],
        stateless["usage"]["input_tokens"]
    );
    // The same output items but for their ids.
    let without_ids = |r: &Value| {
        let mut out = r["output"].clone();
        out.as_array_mut()
            .unwrap()
            .iter_mut()
            .for_each(|i| i["id"] = Value::Null);
        out
    };
    assert_eq!(without_ids(&second), without_ids(&stateless));
    let first_prompt = first["usage"]["input_tokens"].as_u64().unwrap();
    assert_reused(&second["usage"], first_prompt);
    // Its items: the first item, then each response's input and output, in order, with
    // ids, paged two at a time.
    let items = conversation_items(&server, &id, 2);
    let outputs = |r: &Value| r["output"].as_array().unwrap().len();
    assert_eq!(items.len(), 1 + 1 + outputs(&first) + 1 + outputs(&second));
    assert_eq!(items[0]["content"][0]["text"], "Be brief.");
    assert_eq!(items[1]["content"][0]["text"], json!(first_text));
    assert_eq!(
        items[2..2 + outputs(&first)],
        first["output"].as_array().unwrap()[..]
    );
    assert!(items.iter().all(|i| i["id"].is_string()), "{items:?}");
    let (code, newest) = call(
        "GET",
        &server,
        &format!("/v1/conversations/{id}/items?limit=1"),
    );
    assert_eq!(
        (code, &newest["data"][0]),
        (200, items.last().unwrap()),
        "{newest}"
    );

    // An item added, read back and deleted.
    let added = post(
        &server,
        &format!("/v1/conversations/{id}/items"),
        json!({"items": [{"role": "user", "content": "An aside."}]}),
    );
    let item_id = added["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(added["first_id"], json!(item_id), "{added}");
    let item_path = format!("/v1/conversations/{id}/items/{item_id}");
    let (code, item) = call("GET", &server, &item_path);
    assert_eq!(
        (code, &item["content"][0]["text"]),
        (200, &json!("An aside."))
    );
    let (code, after) = call("DELETE", &server, &item_path);
    assert_eq!((code, &after["id"]), (200, &json!(id)), "{after}");
    let (code, v) = call("GET", &server, &item_path);
    assert_eq!(code, 404, "{v}");
    assert_eq!(conversation_items(&server, &id, 100), items);
    let updated = post(
        &server,
        &format!("/v1/conversations/{id}"),
        json!({"metadata": {"topic": "lakes"}}),
    );
    assert_eq!(updated["metadata"], json!({"topic": "lakes"}));

    // What cannot be done says why.
    for (path, body, status, says) in [
        (
            "/v1/responses",
            json!({"input": "x", "conversation": id, "previous_response_id": first["id"]}),
            400,
            "were both given",
        ),
        (
            "/v1/responses",
            json!({"input": "x", "conversation": "conv-unknown"}),
            404,
            "no stored conversation has the id `conv-unknown`",
        ),
        (
            "/v1/conversations",
            json!({"items": [{"role": "robot", "content": "x"}]}),
            400,
            "`items[0].role` is `robot`",
        ),
        (
            "/v1/conversations",
            json!({"metadata": {"n": 1}}),
            400,
            "`metadata.n`",
        ),
    ] {
        let (code, v) = post_raw(&server, path, &body.to_string(), None);
        assert_eq!(code, status, "{body}: {v}");
        assert!(error_message(path, &v).contains(says), "{body}: {v}");
    }
    let (code, v) = call(
        "GET",
        &server,
        &format!("/v1/conversations/{id}/items?limit=0"),
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = call("GET", &server, &format!("/v1/responses/{id}"));
    assert_eq!(code, 404, "{v}");
    let next = ask(json!({"input": "Which is longest?", "conversation": id}));
    let counted = post(&server, "/v1/responses/input_tokens", next.clone());
    drop(server);

    // The next server has it; a streamed response adds its items too.
    let server = Server::start(&model, &args);
    let (code, got) = call("GET", &server, &format!("/v1/conversations/{id}"));
    assert_eq!(
        (code, &got["metadata"]),
        (200, &json!({"topic": "lakes"})),
        "{got}"
    );
    assert_eq!(server.metric("epm_conversations_stored"), 1.0);
    let events = server.stream(
        "/v1/responses",
        &merged(next.clone(), &json!({"stream": true})),
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    assert_eq!(
        done["response"]["usage"]["input_tokens"],
        counted["input_tokens"]
    );
    let now = conversation_items(&server, &id, 100);
    assert_eq!(now.len(), items.len() + 1 + outputs(&done["response"]));

    // Deleted: gone, its file too, and a response in it says so.
    let (code, del) = call("DELETE", &server, &format!("/v1/conversations/{id}"));
    assert_eq!(
        (code, &del["object"]),
        (200, &json!("conversation.deleted"))
    );
    let (code, v) = call("GET", &server, &format!("/v1/conversations/{id}"));
    assert_eq!(code, 404, "{v}");
    let (code, v) = post_raw(&server, "/v1/responses", &next.to_string(), None);
    assert_eq!(code, 404, "{v}");
    assert!(!state
        .path()
        .join("responses")
        .join(format!("{id}.json"))
        .exists());
}

/// `POST /v1/responses/compact`: the conversation's user messages and one compaction item
/// holding the model's summary, written with the conversation's KV reused; a later request
/// sends them as its input, and the summary reaches the model. A request whose input ends
/// with a `compaction_trigger` answers the compaction item alone, streamed or not.
#[test]
fn a_conversation_is_compacted_to_its_user_messages_and_a_summary() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["-c", "4096"]);
    let first_text = long_question();
    let first = post(
        &server,
        "/v1/responses",
        ask(json!({"input": first_text, "instructions": "Be brief."})),
    );
    let second = post(
        &server,
        "/v1/responses",
        ask(
            json!({"input": "And their lengths?", "instructions": "Be brief.",
                   "previous_response_id": first["id"]}),
        ),
    );
    let compacted = post(
        &server,
        "/v1/responses/compact",
        json!({"model": "any", "previous_response_id": second["id"], "instructions": "Be brief.",
               "temperature": 0}),
    );
    assert_eq!(compacted["object"], "response.compaction", "{compacted}");
    let output = compacted["output"].as_array().unwrap();
    let (summary, users) = output.split_last().unwrap();
    let texts: Vec<&Value> = users.iter().map(|m| &m["content"][0]["text"]).collect();
    assert_eq!(texts, [&json!(first_text), &json!("And their lengths?")]);
    assert!(users.iter().all(|m| m["role"] == "user"), "{compacted}");
    assert_eq!(summary["type"], "compaction");
    let summary_text = summary["encrypted_content"].as_str().unwrap();
    assert!(!summary_text.trim().is_empty());
    let usage = &compacted["usage"];
    assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{usage}");
    let first_prompt = first["usage"]["input_tokens"].as_u64().unwrap();
    assert_reused(usage, first_prompt);
    // The next turn, from what the compaction gave: the summary is in its prompt.
    let mut input: Vec<Value> = output.clone();
    input.push(json!({"role": "user", "content": "Go on."}));
    let count = |input: &[Value]| {
        post(
            &server,
            "/v1/responses/input_tokens",
            json!({"input": input, "instructions": "Be brief."}),
        )["input_tokens"]
            .as_u64()
            .unwrap()
    };
    let without: Vec<Value> = input
        .iter()
        .filter(|i| i["type"] != "compaction")
        .cloned()
        .collect();
    let summary_tokens = post(&server, "/tokenize", json!({"content": summary_text}))["tokens"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert!(count(&input) >= count(&without) + summary_tokens);
    let next = post(
        &server,
        "/v1/responses",
        ask(json!({"input": input, "instructions": "Be brief."})),
    );
    assert!(
        next["output"].as_array().is_some_and(|o| !o.is_empty()),
        "{next}"
    );
    // Newer clients ask on the Responses endpoint itself, with a trigger item last: the
    // answer is a response whose one item is the compaction, streamed or not.
    let mut triggered = whole_conversation(&first, &first_text, &second);
    triggered.push(json!({"type": "compaction_trigger"}));
    // Greedy: a sampled summary may end inside its reasoning, and then there is none.
    let ask_trigger = json!({"input": triggered, "instructions": "Be brief.", "store": false,
                             "temperature": 0});
    let r = post(&server, "/v1/responses", ask_trigger.clone());
    assert_eq!(r["status"], "completed", "{r}");
    let items = r["output"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{r}");
    assert_eq!(items[0]["type"], "compaction");
    assert!(!items[0]["encrypted_content"].as_str().unwrap().is_empty());
    assert_reused(&r["usage"], first_prompt);
    let events = server.stream(
        "/v1/responses",
        &merged(ask_trigger, &json!({"stream": true})),
    );
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(events[2]["item"]["id"], events[3]["item"]["id"]);
    assert_eq!(events[4]["response"]["output"][0], events[3]["item"]);
    // Nothing to compact says what to send.
    let (code, v) = post_raw(
        &server,
        "/v1/responses/compact",
        r#"{"model": "any"}"#,
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/responses", &v).contains("`input` is missing"),
        "{v}"
    );
}

/// The reply's text of a Responses answer: its last item's.
fn reply_text(r: &Value) -> &Value {
    let last = r["output"].as_array().and_then(|o| o.last());
    &last.unwrap_or_else(|| panic!("no output: {r}"))["content"][0]["text"]
}

/// `context_management`: past its threshold the conversation is summarized first, and the
/// reply is the one the summary and the turn in progress get when sent as they are; the
/// compaction item leads the output (plain, streamed, in the background), and the next turn
/// is the same whether the client sends everything, only what follows the compaction item,
/// or continues the response by its id.
#[test]
fn context_management_compacts_a_conversation_past_its_threshold() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["-c", "1024"]);
    let first_text = long_question();
    let opened = json!({"input": first_text, "instructions": "Be brief."});
    let first = post(&server, "/v1/responses", ask(opened.clone()));
    let items = second_turn(&first_text, &first);
    let managed = |threshold: u64, extra: Value| {
        let cm = json!([{"type": "compaction", "compact_threshold": threshold}]);
        let body = json!({"input": items, "instructions": "Be brief.", "context_management": cm});
        ask(merged(body, &extra))
    };
    let is_compaction = |item: &Value| item["type"] == "compaction";
    // Under the threshold (and well within the context), nothing changes.
    let under = post(
        &server,
        "/v1/responses",
        managed(100_000, json!({"store": false})),
    );
    let plain = post(
        &server,
        "/v1/responses",
        ask(json!({"input": items, "instructions": "Be brief.", "store": false})),
    );
    assert!(
        !under["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(is_compaction),
        "{under}"
    );
    assert_eq!(reply_text(&under), reply_text(&plain));
    assert_eq!(
        under["usage"]["input_tokens"],
        plain["usage"]["input_tokens"]
    );
    // Past it: the compaction item first, then the reply the summary and the last question
    // get as they are.
    let compacted = post(&server, "/v1/responses", managed(50, json!({})));
    let output = compacted["output"].as_array().unwrap();
    assert!(is_compaction(&output[0]), "{compacted}");
    assert_eq!(output[1]["type"], "message", "{compacted}");
    assert!(!output[0]["encrypted_content"]
        .as_str()
        .unwrap()
        .trim()
        .is_empty());
    let last_question = json!({"role": "user", "content": "And their lengths?"});
    let direct = post(
        &server,
        "/v1/responses",
        ask(
            json!({"input": [output[0], last_question], "instructions": "Be brief.",
                   "store": false}),
        ),
    );
    assert_eq!(reply_text(&compacted), reply_text(&direct));
    assert_eq!(
        compacted["usage"]["input_tokens"],
        direct["usage"]["input_tokens"]
    );
    // The next turn: sent whole, from the compaction item on, or by id; the items before
    // the compaction item are its.
    let go_on = json!({"role": "user", "content": "Go on."});
    let mut whole = items.clone();
    whole.extend(output.iter().cloned());
    whole.push(go_on.clone());
    let pruned: Vec<Value> = output.iter().cloned().chain([go_on]).collect();
    let cm = json!([{"type": "compaction", "compact_threshold": 100_000}]);
    let next = |extra: Value| {
        let body = json!({"instructions": "Be brief.", "context_management": cm, "store": false});
        post(&server, "/v1/responses", ask(merged(body, &extra)))
    };
    let turns = [
        next(json!({"input": whole})),
        next(json!({"input": pruned})),
        next(json!({"input": "Go on.", "previous_response_id": compacted["id"]})),
    ];
    for t in &turns {
        assert!(
            !t["output"].as_array().unwrap().iter().any(is_compaction),
            "{t}"
        );
        assert_eq!(reply_text(t), reply_text(&turns[1]), "{t}");
        assert_eq!(
            t["usage"]["input_tokens"],
            turns[1]["usage"]["input_tokens"]
        );
    }
    // Streamed: the response and the compaction item open at once, and the reply's items
    // follow it.
    let events = server.stream("/v1/responses", &managed(50, json!({"stream": true})));
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done"
        ]
    );
    assert_eq!(events[2]["item"]["type"], "compaction");
    assert_eq!(events[2]["output_index"], 0);
    assert_eq!(events[3]["item"]["id"], events[2]["item"]["id"]);
    let later = events[4..]
        .iter()
        .filter_map(|e| e["output_index"].as_u64());
    assert!(
        later.clone().count() > 0 && later.into_iter().all(|i| i >= 1),
        "{events:?}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["output"][0], events[3]["item"]);
    // In the background: compacted on its task, the item first once it is done.
    let queued = post(
        &server,
        "/v1/responses",
        managed(50, json!({"background": true})),
    );
    let ended = finished(&server, queued["id"].as_str().unwrap());
    assert!(is_compaction(&ended["output"][0]), "{ended}");
    assert_eq!(ended["output"][1]["type"], "message", "{ended}");
    // Plain, streamed and in the background: three summaries, counted.
    assert_eq!(server.metric("epm_compactions_total"), 3.0);
    // A reply the model cannot be asked is refused before any summary is written.
    let format = json!({"format": {"type": "json_schema", "name": "set",
                                   "schema": {"type": "array", "uniqueItems": true}}});
    let (code, v) = post_raw(
        &server,
        "/v1/responses",
        &managed(50, json!({"text": format})).to_string(),
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/responses", &v).contains("uniqueItems"),
        "{v}"
    );
    assert_eq!(server.metric("epm_compactions_total"), 3.0);
    // A conversation of one turn has nothing before it to compact.
    let one = merged(
        opened,
        &json!({"context_management": [{"type": "compaction", "compact_threshold": 10}]}),
    );
    let alone = post(&server, "/v1/responses", ask(one));
    assert!(
        !alone["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(is_compaction),
        "{alone}"
    );
    // Another kind of management is refused, naming the field.
    let (code, v) = post_raw(
        &server,
        "/v1/responses",
        &json!({"input": "Hi", "context_management": [{"type": "truncation"}]}).to_string(),
        None,
    );
    assert_eq!(code, 400, "{v}");
    let message = error_message("/v1/responses", &v);
    assert!(
        message.contains("context_management[0].type") && message.contains("compaction"),
        "{v}"
    );
}

/// The text block of an Anthropic answer: its last block's text.
fn last_text(r: &Value) -> &Value {
    let last = r["content"].as_array().and_then(|c| c.last());
    &last.unwrap_or_else(|| panic!("no content: {r}"))["text"]
}

/// The prompt tokens of an Anthropic answer: evaluated and read from the cache.
fn prompt_tokens(r: &Value) -> u64 {
    let u = &r["usage"];
    u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap()
}

/// Anthropic compaction: past its trigger, the `compact_20260112` edit puts the compaction
/// block first and replies as the summary and the last question get when sent as they are;
/// a later request is read from its latest compaction block on, whether the blocks before
/// it are sent or not; `compaction` answers the block alone, and so does a paused edit,
/// streamed with the block opened at once.
#[test]
fn anthropic_compaction_summarizes_past_the_trigger_and_on_request() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["-c", "1024"]);
    let question = json!({"role": "user", "content": "And their lengths?"});
    let messages = json!([
        {"role": "user", "content": long_question()},
        {"role": "assistant", "content": "The Rhine, the Danube and the Rhone."},
        question,
    ]);
    let ask = |extra: Value| {
        let body = json!({"max_tokens": 8, "temperature": 0, "system": "Be brief."});
        post(&server, "/v1/messages", merged(body, &extra))
    };
    let edit = |trigger: u64, pause: bool| {
        json!({"edits": [{"type": "compact_20260112", "pause_after_compaction": pause,
                          "trigger": {"type": "input_tokens", "value": trigger}}]})
    };
    // Under the trigger, nothing changes.
    let under = ask(json!({"messages": messages, "context_management": edit(100_000, false)}));
    let plain = ask(json!({"messages": messages}));
    assert_eq!(under["content"], plain["content"]);
    let compacted = ask(json!({"messages": messages, "context_management": edit(50, false)}));
    let content = compacted["content"].as_array().unwrap();
    assert_eq!(content[0]["type"], "compaction", "{compacted}");
    assert!(!content[0]["content"].as_str().unwrap().trim().is_empty());
    assert_eq!(content[1]["type"], "text", "{compacted}");
    // The summary's tokens apart, then the reply's, which the top-level usage is.
    let iterations = compacted["usage"]["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), 2, "{compacted}");
    assert_eq!(iterations[0]["type"], "compaction");
    assert!(iterations[0]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(iterations[1]["type"], "message");
    for field in ["input_tokens", "output_tokens", "cache_read_input_tokens"] {
        assert_eq!(
            iterations[1][field], compacted["usage"][field],
            "{compacted}"
        );
    }
    let block = content[0].clone();
    let direct = ask(json!({"messages": [{"role": "assistant", "content": [block]}, question]}));
    assert_eq!(last_text(&compacted), last_text(&direct));
    assert_eq!(prompt_tokens(&compacted), prompt_tokens(&direct));
    // The next turn, with what came before the compaction block or without it.
    let reply = json!({"role": "assistant", "content": content});
    let go_on = json!({"role": "user", "content": "Go on."});
    let mut whole = messages.as_array().unwrap().clone();
    whole.extend([reply.clone(), go_on.clone()]);
    let pruned = ask(json!({"messages": [reply, go_on]}));
    let sent_whole = ask(json!({"messages": whole}));
    assert_eq!(last_text(&sent_whole), last_text(&pruned));
    assert_eq!(prompt_tokens(&sent_whole), prompt_tokens(&pruned));
    // Asked outright: the block alone.
    let summarized = ask(json!({"messages": messages, "compaction": {"type": "summarize"}}));
    assert_eq!(summarized["stop_reason"], "compaction", "{summarized}");
    let blocks = summarized["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0]["type"], "compaction");
    assert!(summarized["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let only = &summarized["usage"]["iterations"];
    assert_eq!(only.as_array().map(Vec::len), Some(1), "{summarized}");
    assert_eq!(only[0]["type"], "compaction");
    // Paused and streamed: the block opens at once and is the whole answer.
    let body = json!({"max_tokens": 8, "temperature": 0, "messages": messages, "stream": true,
                      "context_management": edit(50, true)});
    let events = server.stream("/v1/messages", &body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[1]["content_block"]["type"], "compaction");
    assert_eq!(events[2]["delta"]["type"], "compaction_delta");
    assert!(!events[2]["delta"]["content"].as_str().unwrap().is_empty());
    assert_eq!(events[4]["delta"]["stop_reason"], "compaction");
    assert_eq!(events[4]["usage"]["iterations"][0]["type"], "compaction");
    assert_eq!(server.metric("epm_compactions_total"), 3.0);
    // Both ways at once, or an edit of another kind, are refused, naming them.
    let both = json!({"max_tokens": 8, "messages": messages, "compaction": {"type": "summarize"},
                      "context_management": edit(50, false)});
    let (code, v) = post_raw(&server, "/v1/messages", &both.to_string(), None);
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/messages", &v).contains("`compaction` and a `context_management`"),
        "{v}"
    );
    let other = json!({"max_tokens": 8, "messages": messages,
                       "context_management": {"edits": [{"type": "clear_everything"}]}});
    let (code, v) = post_raw(&server, "/v1/messages", &other.to_string(), None);
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/messages", &v).contains("context_management.edits[0]"),
        "{v}"
    );
    // A reply that could not be asked is refused before any summary is written.
    let no_length = json!({"messages": messages, "context_management": edit(50, false)});
    let (code, v) = post_raw(&server, "/v1/messages", &no_length.to_string(), None);
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/messages", &v).contains("`max_tokens` is required"),
        "{v}"
    );
    assert_eq!(server.metric("epm_compactions_total"), 3.0);
}

/// With `--responses-store-mb 0` nothing is kept, and a continuation says how to do without.
#[test]
fn a_server_without_a_response_store_says_to_send_the_conversation() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = Server::start(&model, &["--responses-store-mb", "0"]);
    let (code, r) = post_raw(
        &server,
        "/v1/responses",
        r#"{"input": "Hi", "max_output_tokens": 2}"#,
        None,
    );
    assert_eq!((code, &r["store"]), (200, &json!(false)), "{r}");
    let (code, _) = call(
        "GET",
        &server,
        &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
    );
    assert_eq!(code, 404);
    let body = json!({"input": "x", "previous_response_id": r["id"]}).to_string();
    let (code, v) = post_raw(&server, "/v1/responses", &body, None);
    assert_eq!(code, 400, "{v}");
    let msg = error_message("/v1/responses", &v);
    assert!(
        msg.contains("keeps none") && msg.contains("whole conversation"),
        "{msg}"
    );
}

/// A background response (`background: true`) is answered at once, `queued`, and runs on:
/// polled, it ends with the reply the same request gives in the foreground; its events
/// replay whole or after a sequence number; a cancel stops a running one (`cancelled`,
/// the job counted cancelled); and what cannot be done says why.
#[test]
fn background_responses_answer_at_once_run_on_and_cancel() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    // A context long enough that the long reply below (tens of seconds on the mini) cannot
    // end by itself while the test makes its calls on a loaded machine.
    let server = Server::start(&model, &["-c", "32768"]);
    let ask = |extra: Value| {
        merged(
            json!({"input": "Name three rivers of Europe.", "max_output_tokens": 12, "temperature": 0}),
            &extra,
        )
    };
    let reference = post(&server, "/v1/responses", ask(json!({})));
    let queued = post(&server, "/v1/responses", ask(json!({"background": true})));
    assert_eq!(
        (&queued["status"], &queued["background"], &queued["output"]),
        (&json!("queued"), &json!(true), &json!([])),
        "{queued}"
    );
    let id = queued["id"].as_str().unwrap().to_string();
    let path = format!("/v1/responses/{id}");
    let done = finished(&server, &id);
    assert_eq!(done["status"], reference["status"], "{done}");
    assert_eq!(
        done["output"][0]["content"],
        reference["output"][0]["content"]
    );
    assert_eq!(
        done["usage"]["input_tokens"],
        reference["usage"]["input_tokens"]
    );
    assert_eq!(done["created_at"], queued["created_at"]);

    // Its events, replayed: numbered from 0 without a gap, queued first, completed last,
    // and the text deltas are the reply.
    let events = sse_events(
        ureq::get(&server.url(&format!("{path}?stream=true")))
            .call()
            .unwrap()
            .into_reader(),
    );
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..3],
        [
            "response.created",
            "response.queued",
            "response.in_progress"
        ]
    );
    assert_eq!(kinds.last(), Some(&"response.completed"));
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        text,
        done["output"][0]["content"][0]["text"].as_str().unwrap()
    );
    let after = sse_events(
        ureq::get(&server.url(&format!("{path}?stream=true&starting_after=2")))
            .call()
            .unwrap()
            .into_reader(),
    );
    assert_eq!(after[..], events[3..]);
    // Cancelling a response that is over answers it as it is.
    let (code, again) = post_raw(&server, &format!("{path}/cancel"), "", None);
    assert_eq!((code, &again["status"]), (200, &done["status"]), "{again}");

    // A long one, cancelled while it runs: not continued, not deleted meanwhile.
    let long = post(
        &server,
        "/v1/responses",
        ask(json!({"background": true, "max_output_tokens": 30000})),
    );
    let long_id = long["id"].as_str().unwrap();
    let (code, v) = post_raw(
        &server,
        "/v1/responses",
        &ask(json!({"previous_response_id": long_id})).to_string(),
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/responses", &v).contains("still running"),
        "{v}"
    );
    let (code, items) = call(
        "GET",
        &server,
        &format!("/v1/responses/{long_id}/input_items"),
    );
    assert_eq!(code, 200, "{items}");
    assert_eq!(items["data"].as_array().map(Vec::len), Some(1), "{items}");
    let (code, v) = call("DELETE", &server, &format!("/v1/responses/{long_id}"));
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/responses", &v).contains("cancel it first"),
        "{v}"
    );
    let cancelled_before = server.metric("epm_requests_total{outcome=\"cancelled\"}");
    let (code, cancelled) = post_raw(
        &server,
        &format!("/v1/responses/{long_id}/cancel"),
        "",
        None,
    );
    assert_eq!(code, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["usage"], Value::Null);
    let (code, got) = call("GET", &server, &format!("/v1/responses/{long_id}"));
    assert_eq!((code, &got["status"]), (200, &json!("cancelled")));
    wait_for("the cancelled job to end", Duration::from_secs(30), || {
        server.metric("epm_requests_total{outcome=\"cancelled\"}") > cancelled_before
    });
    let (code, _) = call("DELETE", &server, &format!("/v1/responses/{long_id}"));
    assert_eq!(code, 200);

    // What cannot be done.
    let (code, v) = post_raw(
        &server,
        "/v1/responses",
        &ask(json!({"background": true, "store": false})).to_string(),
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        error_message("/v1/responses", &v).contains("needs `store: true`"),
        "{v}"
    );
    let foreground = reference["id"].as_str().unwrap();
    let (code, v) = post_raw(
        &server,
        &format!("/v1/responses/{foreground}/cancel"),
        "",
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert!(error_message("/v1/responses", &v).contains("did not run in the background"));
    let (code, v) = call(
        "GET",
        &server,
        &format!("/v1/responses/{foreground}?stream=true"),
    );
    assert_eq!(code, 400, "{v}");
    assert!(error_message("/v1/responses", &v).contains("events are not kept"));
    let (code, _) = post_raw(&server, "/v1/responses/resp-none/cancel", "", None);
    assert_eq!(code, 404);
}
