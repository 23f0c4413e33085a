//! Fill-in-the-middle over real HTTP: `/infill` lays its prompt out as llama-server does (the
//! same tokens, generated from, as the layout written out by hand here and sent to
//! `/completion`), OpenAI's and Ollama's `suffix` fill the same middle, code completion's
//! `n_indent` ends a less indented line, `response_fields` picks fields, a request that
//! changes only the text around the cursor keeps the context files, and a model
//! without fill-in-the-middle tokens, or a malformed request, gets a 400 that says why.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};

fn post_raw(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    match server.post(path, body) {
        Ok(v) => (200, v),
        Err((code, v, _)) => (code, v),
    }
}

fn post(server: &Server, path: &str, body: Value) -> Value {
    let (code, v) = post_raw(server, path, &body);
    assert_eq!(code, 200, "{path}: {v}");
    v
}

/// `text` as the server tokenizes it (`parse_special` on: special tokens' text is one token).
fn tokens(server: &Server, text: &str) -> Vec<i64> {
    post(server, "/tokenize", json!({"content": text}))["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect()
}

fn special(server: &Server, text: &str) -> i64 {
    let t = tokens(server, text);
    assert_eq!(t.len(), 1, "{text} is one token: {t:?}");
    t[0]
}

#[test]
fn infill_and_suffix_fill_the_middle_in_their_layouts() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let mut server = Server::start(&model, &["-c", "2048", "-b", "512"]);
    let [pre, suf, mid, repo, sep] = [
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ]
    .map(|t| special(&server, t));
    let prefix = "def area(r):\n    return ";
    let suffix = "\n\nprint(area(2.0))\n";
    let typed = "3.14";
    let extra = "PI = 3.14159\n";
    let n = 8;

    // llama-server's layout, written out: the repository, each file by name, the file being
    // edited, then prefix, what is typed, suffix and middle; each piece tokenized alone.
    let mut want = vec![repo];
    want.extend(tokens(&server, "myproject\n"));
    want.push(sep);
    want.extend(tokens(&server, "consts.py\n"));
    want.extend(tokens(&server, extra));
    want.push(sep);
    want.extend(tokens(&server, "filename\n"));
    want.push(pre);
    want.extend(tokens(&server, prefix));
    want.extend(tokens(&server, typed));
    want.push(suf);
    want.extend(tokens(&server, suffix));
    want.push(mid);
    let reference = post(
        &server,
        "/completion",
        json!({"prompt": want, "n_predict": n, "temperature": 0, "return_tokens": true}),
    );
    let infill = post(
        &server,
        "/infill",
        json!({"input_prefix": prefix, "input_suffix": suffix, "prompt": typed,
               "input_extra": [{"filename": "consts.py", "text": extra}],
               "n_predict": n, "temperature": 0, "return_tokens": true}),
    );
    assert_eq!(infill["tokens"], reference["tokens"], "{infill}");
    assert_eq!(infill["content"], reference["content"]);
    assert_eq!(infill["tokens_evaluated"], json!(want.len()), "{infill}");
    assert_eq!(infill["tokens_predicted"], json!(n));
    // llama-server's timings: the prompt's and the generation's, apart.
    let t = &infill["timings"];
    assert_eq!(t["prompt_n"], json!(want.len()), "{t}");
    assert_eq!(t["predicted_n"], json!(n), "{t}");
    for key in [
        "prompt_ms",
        "predicted_ms",
        "prompt_per_second",
        "predicted_per_second",
    ] {
        assert!(t[key].as_f64().unwrap() > 0.0, "{key}: {t}");
    }

    // Streamed, the same text, and the last event carries the counts and timings.
    let events = server.stream(
        "/infill",
        &json!({"input_prefix": prefix, "input_suffix": suffix, "prompt": typed,
                "input_extra": [{"filename": "consts.py", "text": extra}],
                "n_predict": n, "temperature": 0, "stream": true}),
    );
    let text: String = events
        .iter()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(text, infill["content"].as_str().unwrap());
    let last = events.last().unwrap();
    assert_eq!(last["stop"], json!(true), "{last}");
    assert_eq!(last["tokens_evaluated"], json!(want.len()), "{last}");
    assert_eq!(last["timings"]["predicted_n"], json!(n), "{last}");

    // Only the fields asked for, by path.
    let picked = post(
        &server,
        "/infill",
        json!({"input_prefix": prefix, "input_suffix": suffix, "n_predict": 2,
               "response_fields": ["content", "timings/prompt_n", "no/such"]}),
    );
    let keys: Vec<&String> = picked.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["content", "timings/prompt_n"], "{picked}");
    assert!(picked["timings/prompt_n"].is_u64(), "{picked}");

    // `<|file_sep|>` ends a turn for llama.cpp, so the prompt is cut after the last one once
    // the files hold 256 tokens: a request that changes only the text around the cursor
    // keeps the files and evaluates from there.
    let long = extra.repeat(40);
    let files = json!([{"filename": "consts.py", "text": long}]);
    let mut context = vec![repo];
    context.extend(tokens(&server, "myproject\n"));
    context.push(sep);
    context.extend(tokens(&server, "consts.py\n"));
    context.extend(tokens(&server, &long));
    context.push(sep);
    assert!(context.len() > 300, "{}", context.len());
    for (cursor, cached) in [
        (prefix, None),
        ("def volume(r):\n    return ", Some(context.len())),
    ] {
        let v = post(
            &server,
            "/infill",
            json!({"input_prefix": cursor, "input_suffix": suffix, "input_extra": files,
                   "n_predict": 2, "temperature": 0}),
        );
        if let Some(cached) = cached {
            assert_eq!(v["tokens_cached"], json!(cached), "{v}");
        }
    }

    // OpenAI's and Ollama's `suffix`: PRE prompt SUF suffix MID, no repository.
    let mut plain = vec![pre];
    plain.extend(tokens(&server, prefix));
    plain.push(suf);
    plain.extend(tokens(&server, suffix));
    plain.push(mid);
    let reference = post(
        &server,
        "/completion",
        json!({"prompt": plain, "n_predict": n, "temperature": 0}),
    );
    let want_text = reference["content"].as_str().unwrap();
    assert!(!want_text.is_empty());
    let openai = post(
        &server,
        "/v1/completions",
        json!({"prompt": prefix, "suffix": suffix, "max_tokens": n, "temperature": 0}),
    );
    assert_eq!(openai["choices"][0]["text"], want_text, "{openai}");
    assert_eq!(openai["usage"]["prompt_tokens"], json!(plain.len()));
    let ollama = post(
        &server,
        "/api/generate",
        json!({"model": "m", "prompt": prefix, "suffix": suffix, "stream": false,
               "options": {"temperature": 0, "num_predict": n}}),
    );
    assert_eq!(ollama["response"], want_text, "{ollama}");
    // Ollama's durations (ns): the prompt's and the generation's, within the total.
    let ns = |k: &str| {
        ollama[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {ollama}"))
    };
    assert!(
        ns("prompt_eval_duration") > 0 && ns("eval_duration") > 0,
        "{ollama}"
    );
    assert!(ns("prompt_eval_duration") + ns("eval_duration") <= ns("total_duration"));
    let show = post(&server, "/api/show", json!({"model": "m"}));
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("insert")),
        "{show}"
    );

    // n_indent: with every token forced to a line break, the second is a blank line, which
    // ends the text (as a less indented line would); without it the breaks run on.
    let newlines = |limit: Option<u32>| {
        let mut body = json!({"input_prefix": prefix, "input_suffix": suffix, "n_predict": 6,
                              "temperature": 0, "logit_bias": [["\n", 100]]});
        if let Some(n) = limit {
            body["n_indent"] = json!(n);
        }
        post(&server, "/infill", body)
    };
    let free = newlines(None);
    assert_eq!(free["content"], "\n".repeat(6), "{free}");
    let cut = newlines(Some(4));
    assert_eq!(cut["content"], "\n", "{cut}");
    assert_eq!(cut["tokens_predicted"], json!(2), "{cut}");
    assert_eq!(cut["stop_type"], "limit", "{cut}");

    // Malformed requests.
    for (body, says) in [
        (json!({"input_prefix": "a"}), "input_suffix"),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "input_extra": "c"}),
            "input_extra",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}),
            "text",
        ),
        (json!({"input_prefix": [1, -5], "input_suffix": ""}), "-5"),
    ] {
        let (code, v) = post_raw(&server, "/infill", &body);
        assert_eq!(code, 400, "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    assert!(server.stop().success());

    // A model whose vocabulary has no fill-in-the-middle tokens.
    let model = synth(dir.path(), "gpt-oss-20b-mini", &[]);
    let mut server = Server::start(&model, &["-c", "1024"]);
    let (code, v) = post_raw(
        &server,
        "/infill",
        &json!({"input_prefix": "a", "input_suffix": "b"}),
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no fill-in-the-middle tokens"),
        "{v}"
    );
    let (code, v) = post_raw(
        &server,
        "/v1/completions",
        &json!({"prompt": "a", "suffix": "b", "max_tokens": 2}),
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fill-in-the-middle"),
        "{v}"
    );
    let (code, v) = post_raw(
        &server,
        "/api/generate",
        &json!({"model": "m", "prompt": "a", "suffix": "b", "stream": false}),
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("fill-in-the-middle"),
        "{v}"
    );
    let show = post(&server, "/api/show", json!({"model": "m"}));
    assert!(
        !show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("insert")),
        "{show}"
    );
    assert!(server.stop().success());
}

/// `n_predict: 0`, how editors (llama.vim, llama.vscode) keep their context files in a
/// slot's cache between completions, evaluates the prompt and generates nothing, as
/// llama-server does; the completion that follows with the same files reuses them.
#[test]
fn n_predict_zero_evaluates_the_context_ahead_and_generates_nothing() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let mut server = Server::start(&model, &["-c", "2048", "-b", "512"]);
    let files: Vec<Value> = (0..6)
        .map(|i| {
            json!({"filename": format!("src/part{i}.py"),
                   "text": format!("def part{i}(x):\n    return x * {i} + 1\n").repeat(10)})
        })
        .collect();
    let ring = json!({"input_prefix": "", "input_suffix": "", "input_extra": files,
                      "prompt": "", "n_predict": 0, "temperature": 0.0, "samplers": [],
                      "cache_prompt": true, "t_max_prompt_ms": 1, "t_max_predict_ms": 1});
    let warm = post(&server, "/infill", ring);
    assert_eq!(warm["content"], "", "{warm}");
    assert_eq!(warm["tokens_predicted"], 0, "{warm}");
    assert_eq!(warm["stop_type"], "limit", "{warm}");
    let evaluated = warm["tokens_evaluated"].as_u64().unwrap();
    assert!(evaluated > 600, "the context files are evaluated: {warm}");
    let slots: Value = ureq::get(&server.url("/slots"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(slots[0]["n_decoded"], 0, "{slots}");
    let fim = post(
        &server,
        "/infill",
        json!({"input_prefix": "def total(x):\n    return ", "input_suffix": "\n",
               "input_extra": files, "n_predict": 4, "temperature": 0.0}),
    );
    let cached = fim["tokens_cached"].as_u64().unwrap();
    assert!(
        cached >= 512 && cached < evaluated,
        "the files evaluated ahead are reused (whole ubatches): {cached} of {evaluated}: {fim}"
    );
    assert_eq!(fim["tokens_predicted"], 4, "{fim}");
    server.stop();
}
