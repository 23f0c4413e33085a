//! The sampling settings beyond temperature and top-p, end to end on a `-mini` model with
//! random weights: repetition penalties over the prompt and the output pick what
//! llama.cpp's formulas give from the dumped logits; every protocol that has the settings
//! passes them through to the same tokens; `logit_bias` (by id, by text, `false`) and
//! `min_p` do what they say; bad values are refused with the setting named.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

const PROMPT: &str = "The rivers of Europe flow from the Alps to the sea: the Rhine, the \
                      Rhone, the Danube and the Po. The rivers of Europe are long.";

/// Outputs are byte-identical only at the same ubatch: the CLI and the servers use this one.
const UBATCH: &str = "256";

fn server(model: &Path) -> Server {
    Server::start(model, &["-ub", UBATCH])
}

/// The mini in `dir`, a server on it, and [`PROMPT`]'s tokens.
fn setup(dir: &Path) -> (std::path::PathBuf, Server, Vec<i32>) {
    let model = synth(dir, "qwen3-30b-a3b-mini", &[]);
    let server = server(&model);
    let prompt = ids(&server
        .post(
            "/tokenize",
            &json!({"content": PROMPT, "add_special": true}),
        )
        .unwrap()["tokens"]);
    (model, server, prompt)
}

fn ids(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of token ids: {v}"))
        .iter()
        .map(|t| t.as_i64().unwrap() as i32)
        .collect()
}

/// The logits rows of a `--dump-logits` file, `n` of them.
fn rows(bytes: &[u8], n: usize) -> Vec<Vec<f32>> {
    let row = bytes.len() / 4 / n;
    bytes
        .chunks_exact(row * 4)
        .map(|r| {
            r.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        })
        .collect()
}

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &l) in row.iter().enumerate() {
        if l > row[best] {
            best = i;
        }
    }
    best as i32
}

/// llama.cpp's `penalties` sampler on one row, over the tokens in `window`.
fn penalize(row: &[f32], window: &[i32], repeat: f32, frequency: f32, presence: f32) -> Vec<f32> {
    let mut out = row.to_vec();
    let mut counts = std::collections::HashMap::new();
    for &t in window {
        *counts.entry(t).or_insert(0u32) += 1;
    }
    for (&t, &count) in &counts {
        let l = &mut out[t as usize];
        if *l <= 0.0 {
            *l *= repeat;
        } else {
            *l /= repeat;
        }
        *l -= count as f32 * frequency + presence;
    }
    out
}

fn generate_ids(
    model: &Path,
    dir: &Path,
    tag: &str,
    n: usize,
    extra: &[&str],
) -> (Vec<i32>, Vec<u8>) {
    let mut args = vec!["-ub", UBATCH];
    args.extend_from_slice(extra);
    let (logits, stats) = generate(model, dir, tag, PROMPT, &n.to_string(), &args);
    (stats.tokens.generated_ids, logits)
}

#[test]
fn penalties_pick_what_llama_cpp_gives_over_prompt_and_output_in_every_protocol() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, server, prompt) = setup(dir.path());
    // The random weights' likeliest token leads the next by about 16 logits, so only
    // penalties this large change a pick.
    let (repeat, frequency, presence, last_n) = (1.5f32, 4.0f32, 9.0f32, 20usize);
    let n = 24;
    let flags = [
        "--repeat-penalty",
        "1.5",
        "--frequency-penalty",
        "4",
        "--presence-penalty",
        "9",
        "--repeat-last-n",
        "20",
    ];
    let (out, logits) = generate_ids(&model, dir.path(), "penalized", n, &flags);
    assert_eq!(out.len(), n);
    let rows = rows(&logits, n);
    let mut changed = 0;
    for (i, row) in rows.iter().enumerate() {
        let history: Vec<i32> = prompt.iter().chain(&out[..i]).copied().collect();
        let window = &history[history.len().saturating_sub(last_n)..];
        let want = argmax(&penalize(row, window, repeat, frequency, presence));
        assert_eq!(out[i], want, "position {i}: picked {} not {want}", out[i]);
        changed += usize::from(argmax(row) != want);
    }
    assert!(
        changed > 0,
        "the penalties changed no pick: the test shows nothing"
    );
    // The free run's logits are the same until the first changed pick: a sampler never
    // touches the context's logits.
    let (free, free_logits) = generate_ids(&model, dir.path(), "free", n, &[]);
    let first = free.iter().zip(&out).position(|(a, b)| a != b).unwrap();
    let row = free_logits.len() / n;
    assert_eq!(
        logits[..(first + 1) * row],
        free_logits[..(first + 1) * row]
    );

    // The same settings, by each protocol's names, give the same tokens.
    let settings = json!({"repeat_penalty": repeat, "frequency_penalty": frequency,
                          "presence_penalty": presence, "repeat_last_n": last_n});
    let body = json!({"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": true});
    let native = server
        .post("/completion", &merged(body, &settings))
        .unwrap();
    assert_eq!(ids(&native["tokens"]), out, "/completion");
    let body = json!({"prompt": PROMPT, "max_tokens": n, "temperature": 0});
    let openai = server
        .post("/v1/completions", &merged(body, &settings))
        .unwrap();
    assert_eq!(
        openai["choices"][0]["text"], native["content"],
        "/v1/completions"
    );
    let options = merged(json!({"num_predict": n, "temperature": 0}), &settings);
    let ollama = server
        .post(
            "/api/generate",
            &json!({"prompt": PROMPT, "raw": true, "stream": false, "options": options}),
        )
        .unwrap();
    assert_eq!(ollama["response"], native["content"], "/api/generate");
    // -1 is the whole context: nothing of the prompt or the output repeats at a large
    // presence penalty.
    let all = server
        .post(
            "/completion",
            &json!({"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": true,
                    "presence_penalty": 1000, "repeat_last_n": -1}),
        )
        .unwrap();
    let all = ids(&all["tokens"]);
    // A window longer than the context is the context (and allocates no more).
    let longest = server
        .post(
            "/completion",
            &json!({"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": true,
                    "presence_penalty": 1000, "repeat_last_n": i32::MAX}),
        )
        .unwrap();
    assert_eq!(ids(&longest["tokens"]), all);
    let mut seen: std::collections::HashSet<i32> = prompt.iter().copied().collect();
    for t in &all {
        assert!(seen.insert(*t), "token {t} repeats in {all:?}");
    }
    assert!(
        free.iter().any(|t| prompt.contains(t)),
        "the free run repeats nothing of the prompt: the check above shows nothing"
    );
}

#[test]
fn logit_bias_min_p_and_the_other_samplers_do_what_they_say() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, server, prompt) = setup(dir.path());
    let complete = |extra: Value| -> Vec<i32> {
        let body =
            json!({"prompt": prompt, "n_predict": 6, "temperature": 0, "return_tokens": true});
        ids(&server.post("/completion", &merged(body, &extra)).unwrap()["tokens"])
    };
    let (free, logits) = generate_ids(&model, dir.path(), "free", 6, &[]);
    assert_eq!(complete(json!({})), free);
    // `false` never picks the token: the first pick is the row's second best.
    let first = rows(&logits, 6)[0].clone();
    let mut without = first.clone();
    without[free[0] as usize] = f32::NEG_INFINITY;
    let banned = complete(json!({"logit_bias": [[free[0], false]]}));
    assert_eq!(banned[0], argmax(&without));
    assert!(!banned.contains(&free[0]), "{banned:?}");
    // OpenAI's shape: ids as strings; a large bias picks the token every time.
    let hello = ids(&server
        .post("/tokenize", &json!({"content": "hello"}))
        .unwrap()["tokens"]);
    assert_eq!(hello.len(), 1, "one token: {hello:?}");
    let forced = hello[0];
    assert_eq!(
        complete(json!({"logit_bias": {forced.to_string(): 100}})),
        vec![forced; 6]
    );
    let r = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 3, "temperature": 0,
                    "logit_bias": {forced.to_string(): 100}}),
        )
        .unwrap();
    assert_eq!(r["choices"][0]["text"], "hellohellohello");
    // Text: each of its tokens gets the bias.
    let word = ids(&server
        .post("/tokenize", &json!({"content": "river"}))
        .unwrap()["tokens"]);
    let by_text = complete(json!({"logit_bias": [["river", 100]]}));
    assert!(
        by_text.iter().all(|t| word.contains(t)),
        "{by_text:?} vs {word:?}"
    );

    // min_p 1 keeps only the likeliest token, and so does top-n-sigma at a tiny n:
    // sampling at temperature 2 is then greedy (without them, the random weights' other
    // tokens hold about a tenth of the mass there).
    let sampled = |seed: u64, extra: Value| {
        let body = json!({"prompt": prompt, "n_predict": 6, "temperature": 2.0, "seed": seed,
                          "return_tokens": true});
        ids(&server.post("/completion", &merged(body, &extra)).unwrap()["tokens"])
    };
    for seed in 1..=5 {
        assert_eq!(sampled(seed, json!({"min_p": 1.0})), free, "seed {seed}");
        assert_eq!(
            sampled(seed, json!({"top_n_sigma": 0.001})),
            free,
            "seed {seed}"
        );
    }
    assert!(
        (1..=5).any(|seed| sampled(seed, json!({})) != free),
        "sampling at temperature 2 was greedy for every seed: the checks above show nothing"
    );
    // `samplers` orders the chain, by names or letters; a stage left out is not applied:
    // top-k 1 before the temperature is greedy, and without its stage it does nothing.
    for order in [json!(["top_k", "temperature"]), json!("kt")] {
        for seed in 1..=3 {
            let r = sampled(seed, json!({"top_k": 1, "samplers": order}));
            assert_eq!(r, free, "{order} seed {seed}");
        }
    }
    assert!(
        (1..=5).any(|seed| sampled(seed, json!({"top_k": 1, "samplers": ["temp"]})) != free),
        "top-k was applied though `samplers` left it out"
    );
    // XTC that always fires with a threshold of 0 drops every token but the least likely
    // one above it: never the greedy pick.
    let xtc = complete(json!({"xtc_probability": 1.0, "xtc_threshold": 0.0}));
    assert_ne!(xtc[0], free[0]);
    // Mirostat draws the same tokens for the same seed.
    let miro = json!({"mirostat": 2, "mirostat_tau": 3.0, "temperature": 1.0, "seed": 7});
    assert_eq!(complete(miro.clone()), complete(miro));
    // DRY, typical sampling and dynamic temperature are taken, and generate.
    let rest = json!({"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n"], "typical_p": 0.9,
                      "dynatemp_range": 0.5, "temperature": 0.7, "seed": 3});
    assert_eq!(complete(rest).len(), 6);

    // ignore_eos: the end-of-turn token a bias forces is banned, and all 6 tokens come.
    let eos = ids(&server
        .post("/tokenize", &json!({"content": "<|im_end|>"}))
        .unwrap()["tokens"]);
    let ending = |ignore_eos: bool| {
        let body = json!({"prompt": prompt, "n_predict": 6, "temperature": 0,
                          "return_tokens": true, "ignore_eos": ignore_eos,
                          "logit_bias": [[eos[0], 100]]});
        server.post("/completion", &body).unwrap()
    };
    let r = ending(false);
    assert_eq!(r["stop_type"], "eos", "{r}");
    let r = ending(true);
    assert_eq!(
        (ids(&r["tokens"]).len(), &r["stop_type"]),
        (6, &json!("limit")),
        "{r}"
    );
    assert!(!ids(&r["tokens"]).contains(&eos[0]));
}

#[test]
fn bad_sampling_settings_are_refused_with_the_setting_named() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let server = server(&model);
    let refused = |path: &str, body: Value, want: &str| {
        let (code, v, _) = server.post(path, &body).expect_err(path);
        assert_eq!(code, 400, "{path}: {v}");
        let message = v["error"]["message"]
            .as_str()
            .or(v["error"].as_str())
            .unwrap_or_default()
            .to_string();
        assert!(message.contains(want), "{path}: {message:?} lacks {want:?}");
    };
    let chat = |extra: Value| {
        merged(
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
            &extra,
        )
    };
    refused(
        "/v1/chat/completions",
        chat(json!({"logit_bias": {"99999999": 1}})),
        "outside the vocabulary",
    );
    refused(
        "/v1/chat/completions",
        chat(json!({"logit_bias": {"5": "up"}})),
        "use a number, or false",
    );
    refused(
        "/v1/chat/completions",
        chat(json!({"presence_penalty": 1e39})),
        "`presence_penalty`",
    );
    refused(
        "/v1/chat/completions",
        chat(json!({"min_p": 1.5})),
        "`min_p` 1.5",
    );
    refused(
        "/completion",
        json!({"prompt": "x", "repeat_penalty": 0}),
        "`repeat_penalty` 0",
    );
    refused(
        "/completion",
        json!({"prompt": "x", "mirostat": 3}),
        "`mirostat` 3",
    );
    refused(
        "/completion",
        json!({"prompt": "x", "typical_p": 0}),
        "`typical_p` 0",
    );
    refused(
        "/completion",
        json!({"prompt": "x", "dry_multiplier": 1, "dry_sequence_breakers": ["a\u{0}"]}),
        "NUL",
    );
    refused(
        "/completion",
        json!({"prompt": "x", "repeat_last_n": -2}),
        "`repeat_last_n` -2",
    );
    refused(
        "/api/generate",
        json!({"prompt": "x", "stream": false, "options": {"repeat_penalty": -1}}),
        "`repeat_penalty` -1",
    );
    // The CLI: bad input, exit 2, the flag named.
    let out = epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "x",
        "-n",
        "1",
        "--min-p",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`min-p` 2 is out of range"));
}
