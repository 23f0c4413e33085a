//! `epm-run serve` end to end: a real server on an ephemeral loopback port, driven by a
//! real HTTP client, stopped by SIGTERM when each test ends.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The content of a streamed chat (or the text of a streamed completion).
fn streamed_text(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e.get("choices")?.get(0).cloned())
        .filter_map(|c| {
            c.get("delta")
                .and_then(|d| d.get("content"))
                .or_else(|| c.get("text"))
                .and_then(Value::as_str)
                .map(String::from)
        })
        .collect()
}

fn content(r: &Value) -> String {
    r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn mini(dir: &Path) -> PathBuf {
    synth(dir, "qwen3-30b-a3b-mini", &[])
}

/// What `generate` prints for a prompt at temperature 0 (without its final newline).
fn generate_text(model: &Path, prompt: &str, n: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        prompt,
        "-n",
        n,
        "-c",
        "1024",
        "-t",
        "2",
    ];
    args.extend_from_slice(extra);
    let out = ok(&epm(&args));
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

/// The synthetic presets carry Qwen3's ChatML: this is what it renders for a system and a
/// user message with the generation prompt.
fn chatml(system: &str, user: &str) -> String {
    format!("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

fn messages(system: &str, user: &str) -> Value {
    json!([{"role": "system", "content": system}, {"role": "user", "content": user}])
}

#[test]
fn same_output_as_generate_streaming_or_not_paged_or_not() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let budget = (min_budget_mb(&model, &["-c", "1024"]) + 8).to_string();
    let (system, user) = (
        "You are a helpful assistant.",
        "Name three colours of the sea at dawn.",
    );
    let want = generate_text(
        &model,
        &chatml(system, user),
        "24",
        &["--ram-budget-mb", &budget],
    );
    let unpaged_gen = generate_text(&model, &chatml(system, user), "24", &["--no-pager"]);
    assert_eq!(want, unpaged_gen, "generate paged and unpaged differ");
    let want_completion = generate_text(&model, "Once upon a time", "20", &["--no-pager"]);
    for flags in [vec!["--ram-budget-mb", budget.as_str()], vec!["--no-pager"]] {
        let s = Server::start(&model, &flags);
        let body = json!({"messages": messages(system, user), "max_tokens": 24, "temperature": 0});
        let r = s.chat(&body);
        assert_eq!(content(&r), want, "{flags:?} non-streaming");
        assert_eq!(r["object"], "chat.completion");
        let u = &r["usage"];
        assert_eq!(
            u["completion_tokens"].as_u64().unwrap() + u["prompt_tokens"].as_u64().unwrap(),
            u["total_tokens"].as_u64().unwrap()
        );
        assert!(["stop", "length"].contains(&r["choices"][0]["finish_reason"].as_str().unwrap()));
        let mut sb = body.clone();
        sb["stream"] = json!(true);
        sb["stream_options"] = json!({"include_usage": true});
        let events = s.stream("/v1/chat/completions", &sb);
        assert_eq!(streamed_text(&events), want, "{flags:?} streaming");
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
        let usage = events
            .iter()
            .find(|e| e.get("usage").is_some())
            .expect("a usage chunk");
        assert_eq!(usage["usage"]["completion_tokens"], u["completion_tokens"]);
        // Plain completions, both ways.
        let c = s
            .post(
                "/v1/completions",
                &json!({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}),
            )
            .unwrap();
        assert_eq!(c["choices"][0]["text"], want_completion.as_str());
        let ev = s.stream("/v1/completions", &json!({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "stream": true}));
        assert_eq!(streamed_text(&ev), want_completion);
        // The other endpoints.
        let models: Value = ureq::get(&s.url("/v1/models"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(models["data"][0]["id"], "qwen3-30b-a3b-mini");
        let stats = live_stats(&s);
        assert_eq!(stats.pager_enabled, flags[0] != "--no-pager");
        assert!(stats.tokens.generated > 0);
        let metrics = ureq::get(&s.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        for m in [
            "epm_decode_cache_hit_rate",
            "epm_read_bytes_total",
            "epm_rss_bytes",
            "epm_budget_bytes",
            "epm_queue_depth",
            "epm_active_slots",
            "epm_tokens_per_second",
        ] {
            assert!(metrics.contains(m), "/metrics lacks {m}");
        }
    }
}

/// A system prompt several ubatches (128 tokens) long, as agents send.
fn agent_system_prompt() -> String {
    "You are a careful assistant for a coding agent. Tools: read_file, write_file, \
     run_tests, search. Always explain what you will do before you do it, keep \
     answers short, and never invent file names. "
        .repeat(12)
}

/// A chat request with greedy sampling and every token's top logprobs.
fn agent_request(system: &str, user: &str) -> Value {
    json!({"messages": messages(system, user), "max_tokens": 16, "temperature": 0,
           "logprobs": true, "top_logprobs": 5})
}

/// The server's stats now (`/stats`).
fn live_stats(s: &Server) -> Snapshot {
    ureq::get(&s.url("/stats"))
        .call()
        .unwrap()
        .into_json()
        .unwrap()
}

/// Two chat replies with the same text and the same logprobs, to the last bit.
fn assert_same_reply(warm: &Value, cold: &Value) {
    assert_eq!(
        content(warm),
        content(cold),
        "prefix reuse changed the output"
    );
    assert_eq!(
        warm["choices"][0]["logprobs"], cold["choices"][0]["logprobs"],
        "prefix reuse changed the logprobs"
    );
}

fn cached_tokens(r: &Value) -> u64 {
    r["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

#[test]
fn prefix_reuse_changes_nothing_and_is_reported() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let system = agent_system_prompt();
    let req = |user: &str| agent_request(&system, user);
    // Upstream's split: whole ubatches of 128 from position 0.
    let args = ["-c", "2048", "-ub", "128", "--prompt-split", "grid"];
    let warm = Server::start(&model, &args);
    let first = warm.chat(&req("List the files in src."));
    assert_eq!(cached_tokens(&first), 0);
    let second = warm.chat(&req("Now run the tests."));
    let cached = cached_tokens(&second);
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    // Whole ubatches of the shared system prompt are kept, the rest evaluated.
    assert!(
        cached >= 256 && cached % 128 == 0 && cached < prompt,
        "cached {cached} of {prompt}"
    );
    let stats = live_stats(&warm);
    assert_eq!(stats.tokens.prompt_reused, cached);
    assert_eq!(stats.tokens.prompt_split, "grid");
    drop(warm);
    let cold = Server::start(&model, &args);
    let again = cold.chat(&req("Now run the tests."));
    assert_eq!(cached_tokens(&again), 0);
    assert_same_reply(&second, &again);
    // The same request twice keeps every whole ubatch before its last token.
    let repeat = cold.chat(&req("Now run the tests."));
    assert_eq!(cached_tokens(&repeat), (prompt - 1) / 128 * 128);
    assert_eq!(content(&repeat), content(&again));
}

/// The server's default split also cuts a prompt after an end-of-turn token once the piece
/// holds 256 tokens: a request that shares the system message keeps all of it (not only
/// its whole ubatches of 128) and evaluates only its own turn, with the same logprobs as a
/// cold server, which evaluates the same ubatches.
#[test]
fn a_shared_system_message_is_kept_whole_and_changes_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let system = agent_system_prompt();
    let req = |user: &str| agent_request(&system, user);
    let args = ["-c", "2048", "-ub", "128"];
    let warm = Server::start(&model, &args);
    // Where the system message ends, in tokens: its `<|im_end|>` is the first cut.
    let head = format!("<|im_start|>system\n{system}<|im_end|>");
    let tokens = warm
        .post("/tokenize", &json!({"content": head, "add_special": false}))
        .unwrap();
    let system_end = tokens["tokens"].as_array().unwrap().len() as u64;
    assert!(system_end > 256 && system_end % 128 != 0, "{system_end}");
    let first = warm.chat(&req("List the files in src."));
    assert_eq!(cached_tokens(&first), 0);
    let second = warm.chat(&req("Now run the tests."));
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(cached_tokens(&second), system_end, "of {prompt}");
    let stats = live_stats(&warm);
    assert_eq!(stats.tokens.prompt_reused, system_end);
    assert_eq!(stats.tokens.prompt_split, "turns");
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(stats.tokens.prompt, first_prompt + prompt - system_end);
    drop(warm);
    let cold = Server::start(&model, &args);
    let again = cold.chat(&req("Now run the tests."));
    assert_eq!(cached_tokens(&again), 0);
    assert_same_reply(&second, &again);
    // The conversation goes on: the next request carries the reply and a new turn, and
    // keeps the system message (the first turn's piece is shorter than 256 tokens).
    let reply = content(&again);
    let conversation = json!([
        {"role": "system", "content": system},
        {"role": "user", "content": "Now run the tests."},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Explain the change."},
    ]);
    let body = json!({"messages": conversation, "max_tokens": 8, "temperature": 0,
                      "logprobs": true, "top_logprobs": 5});
    let third = cold.chat(&body);
    assert_eq!(cached_tokens(&third), system_end);
    drop(cold);
    let fresh = Server::start(&model, &args);
    let third_cold = fresh.chat(&body);
    assert_same_reply(&third, &third_cold);
}

/// The flags of a server on the mini at its minimum budget with its prompt store in
/// `store`, and of a cold server of the same shape without a store.
fn store_server_args(model: &Path, store: &Path) -> (Vec<String>, Vec<String>) {
    let shape = ["-c", "2048", "-ub", "128"];
    let budget = min_budget_mb(model, &shape).to_string();
    let mut args: Vec<String> = shape.iter().map(|a| a.to_string()).collect();
    args.extend(["--ram-budget-mb".into(), budget]);
    let mut cold = args.clone();
    cold.extend(["--prompt-cache-mb".into(), "0".into()]);
    args.extend(["--prompt-cache-dir".into(), store.to_str().unwrap().into()]);
    (args, cold)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// How many tokens a chat's system message takes, up to its end-of-turn token.
fn system_message_tokens(s: &Server, system: &str) -> u64 {
    let head = format!("<|im_start|>system\n{system}<|im_end|>");
    let tokens = s
        .post("/tokenize", &json!({"content": head, "add_special": false}))
        .unwrap();
    tokens["tokens"].as_array().unwrap().len() as u64
}

/// A chat UI's side request between two turns (a title for the conversation) takes the
/// only slot: the conversation's KV is put aside on disk and loaded back for the next turn,
/// which keeps the whole system message and gets a cold server's reply. At exit the slot's
/// conversation is put aside too, and the files stay for the next run: a restarted server
/// with the same model and settings answers a new conversation on that system message
/// without evaluating it again, and still as a cold server does.
#[test]
fn a_conversation_put_aside_for_a_side_request_comes_back_for_its_next_turn_and_after_a_restart() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    // On a disk, as the store requires (a temp folder may be in memory).
    let store = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let system = agent_system_prompt();
    let (args, cold_args) = store_server_args(&model, store.path());
    let (args, cold_args) = (strs(&args), strs(&cold_args));
    let mut s = Server::start(&model, &args);
    let system_end = |system: &str| system_message_tokens(&s, system);
    // A second agent, with a system message of its own.
    let other_system = system.replace("careful", "patient");
    let (end_a, end_b) = (system_end(&system), system_end(&other_system));
    s.chat(&agent_request(&system, "List the files in src."));
    let title = s.chat(&json!({
        "messages": messages("Write a five-word title for the conversation.", "List the files in src."),
        "max_tokens": 8, "temperature": 0}));
    assert_eq!(cached_tokens(&title), 0);
    // The one folder of this model and settings (beside the warm start's heat file), and
    // the prefix files in it.
    let folder = || {
        let dirs: Vec<PathBuf> = std::fs::read_dir(store.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir() && !p.ends_with("responses"))
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs[0].clone()
    };
    let prefixes = || {
        std::fs::read_dir(folder())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("kv".as_ref()))
            .count()
    };
    assert_eq!(prefixes(), 1, "the conversation's prefix");
    let second = s.chat(&agent_request(&system, "Now run the tests."));
    assert_eq!(cached_tokens(&second), end_a);
    let st = live_stats(&s).prompt_store;
    assert_eq!((st.saved, st.loaded, st.failures), (1, 1, 0), "{st:?}");
    assert_eq!(st.restored, 0, "{st:?}");
    assert!(
        st.written_bytes > 0 && st.read_bytes == st.written_bytes,
        "{st:?}"
    );
    // The engine's time in them is counted: a save writes and syncs, a load reads.
    assert!(st.save_us > 0 && st.load_us > 0, "{st:?}");
    // Written and read past the page cache: nothing of the file stays there, outside the
    // budget's accounting.
    for e in std::fs::read_dir(folder()).unwrap() {
        let path = e.unwrap().path();
        if path.extension() == Some("kv".as_ref()) {
            let cached = epm_sys::cache::file_cache_resident_bytes(&path).unwrap();
            assert_eq!(cached, 0, "{} stays in the page cache", path.display());
        }
    }
    // The second agent takes the slot; the first one's system message is already stored.
    s.chat(&agent_request(&other_system, "List the files in src."));
    assert_eq!(live_stats(&s).prompt_store.saved, 1);
    assert!(s.stop().success());
    // What the slot held at exit was put aside too, beside the first.
    assert_eq!(prefixes(), 2);
    assert!(folder().join("index.json").is_file());
    let cold = Server::start(&model, &cold_args);
    let cold_second = cold.chat(&agent_request(&system, "Now run the tests."));
    assert_eq!(cached_tokens(&cold_second), 0);
    assert_same_reply(&second, &cold_second);
    let cold_a = cold.chat(&agent_request(&system, "Explain the change."));
    let cold_b = cold.chat(&agent_request(&other_system, "Explain the change."));
    drop(cold);
    // A restart takes both up; new conversations of both agents keep their system message,
    // and get a cold server's replies.
    let restarted = Server::start(&model, &args);
    let a = restarted.chat(&agent_request(&system, "Explain the change."));
    assert_eq!(cached_tokens(&a), end_a);
    assert_same_reply(&a, &cold_a);
    let b = restarted.chat(&agent_request(&other_system, "Explain the change."));
    assert_eq!(cached_tokens(&b), end_b);
    assert_same_reply(&b, &cold_b);
    let st = live_stats(&restarted).prompt_store;
    assert_eq!((st.restored, st.loaded, st.failures), (2, 2, 0), "{st:?}");
    assert_eq!(st.restored_bytes, st.read_bytes, "{st:?}");
    drop(restarted);
    // A file of the right size whose bytes changed on disk is refused before llama.cpp
    // reads it: the prompt is evaluated whole and the reply is still a cold server's.
    for e in std::fs::read_dir(folder()).unwrap() {
        let path = e.unwrap().path();
        if path.extension() == Some("kv".as_ref()) {
            let mut bytes = std::fs::read(&path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x40;
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let damaged = Server::start(&model, &args);
    let a = damaged.chat(&agent_request(&system, "Explain the change."));
    assert_eq!(cached_tokens(&a), 0);
    assert_same_reply(&a, &cold_a);
    let st = live_stats(&damaged).prompt_store;
    assert_eq!((st.restored, st.loaded, st.failures), (2, 0, 1), "{st:?}");
    drop(damaged);
    // Other settings (here the ubatch) compute other KV bytes: their own folder, nothing
    // taken up, and the output of a cold server.
    let mut other = args.clone();
    other[3] = "64";
    let elsewhere = Server::start(&model, &other);
    let again = elsewhere.chat(&agent_request(&system, "Explain the change."));
    assert_eq!(cached_tokens(&again), 0);
    assert_eq!(live_stats(&elsewhere).prompt_store.restored, 0);
    drop(elsewhere);
    let folders = std::fs::read_dir(store.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.ends_with("responses"))
        .count();
    assert_eq!(folders, 2);
}

/// A conversation whose KV alone is larger than the whole prompt store is not written
/// (it would be deleted at once): a side request costs the next turn its evaluation
/// again, as without a store, and the log says once what to raise.
#[test]
fn a_conversation_larger_than_the_prompt_store_is_never_written() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let store = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let system = agent_system_prompt();
    let (mut args, _) = store_server_args(&model, store.path());
    args.extend(["--prompt-cache-mb".into(), "1".into()]);
    let s = Server::start(&model, &strs(&args));
    let side_request = || {
        s.chat(&json!({
            "messages": messages("Write a five-word title for the conversation.", "List the files in src."),
            "max_tokens": 8, "temperature": 0}))
    };
    s.chat(&agent_request(&system, "List the files in src."));
    side_request();
    let st = live_stats(&s).prompt_store;
    assert_eq!((st.saved, st.too_large, st.failures), (0, 1, 0), "{st:?}");
    assert_eq!(st.written_bytes, 0, "{st:?}");
    let kv_files = walkdir_files(store.path(), "kv");
    assert_eq!(kv_files, 0);
    let second = s.chat(&agent_request(&system, "Now run the tests."));
    assert_eq!(cached_tokens(&second), 0, "evaluated again");
    side_request();
    assert_eq!(live_stats(&s).prompt_store.too_large, 2);
    let log = s.stderr.lock().unwrap().clone();
    assert_eq!(log.matches("raise --prompt-cache-mb").count(), 1, "{log}");
    assert!(
        log.contains("more than the prompt store's 1.0 MiB"),
        "{log}"
    );
}

/// Files named `*.ext` anywhere under `dir`.
fn walkdir_files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                walkdir_files(&p, ext)
            } else {
                usize::from(p.extension() == Some(ext.as_ref()))
            }
        })
        .sum()
}

/// A server that has been idle for `--prompt-cache-idle-s` puts its conversations aside
/// then, so one killed later without a chance to save (SIGKILL here, as the OOM killer
/// does) still answers them after a restart without evaluating them again.
#[test]
fn a_server_killed_after_an_idle_spell_keeps_what_it_put_aside_then() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let store = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let system = agent_system_prompt();
    let (mut args, cold_args) = store_server_args(&model, store.path());
    args.extend(["--prompt-cache-idle-s".into(), "1".into()]);
    let (args, cold_args) = (strs(&args), strs(&cold_args));
    let mut s = Server::start(&model, &args);
    let system_end = system_message_tokens(&s, &system);
    s.chat(&agent_request(&system, "List the files in src."));
    let deadline = Instant::now() + Duration::from_secs(60);
    while live_stats(&s).prompt_store.saved_idle == 0 {
        assert!(Instant::now() < deadline, "no save within 60 s of idling");
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = live_stats(&s).prompt_store;
    assert_eq!((st.saved, st.saved_idle, st.failures), (1, 1, 0), "{st:?}");
    s.kill();
    let cold = Server::start(&model, &cold_args);
    let cold_reply = cold.chat(&agent_request(&system, "Explain the change."));
    assert_eq!(cached_tokens(&cold_reply), 0);
    drop(cold);
    let restarted = Server::start(&model, &args);
    let reply = restarted.chat(&agent_request(&system, "Explain the change."));
    assert_eq!(cached_tokens(&reply), system_end);
    assert_same_reply(&reply, &cold_reply);
    let st = live_stats(&restarted).prompt_store;
    assert_eq!((st.restored, st.loaded, st.failures), (1, 1, 0), "{st:?}");
}

/// Concurrent requests each get their own output. Their decode steps share one batch, and
/// llama.cpp's CPU backend computes a batch of several tokens with other kernels than a
/// single token (README), so a request decoded next to others may continue differently
/// from the same request decoded alone: this test checks what must hold whatever the
/// kernels (no request sees another's tokens; each starts as it does alone; identical
/// requests stay identical) and reports how many outputs batching changed.
#[test]
fn parallel_requests_each_get_their_own_output() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    // Plain completions: this synthetic model continues mostly from the last token, and
    // every chat prompt ends with the same template text.
    let users = [
        "Tell me about rivers",
        "Count to ten in French",
        "What is a monad",
    ];
    let req = |u: &str| json!({"prompt": u, "max_tokens": 24, "temperature": 0, "stream": true});
    let s = Server::start(&model, &["--parallel", "3", "-c", "3072"]);
    let run = |bodies: Vec<Value>| -> Vec<Vec<String>> {
        std::thread::scope(|sc| {
            let handles: Vec<_> = bodies
                .into_iter()
                .map(|body| {
                    let s = &s;
                    sc.spawn(move || {
                        s.stream("/v1/completions", &body)
                            .iter()
                            .filter_map(|e| e["choices"][0]["text"].as_str().map(String::from))
                            .filter(|t| !t.is_empty())
                            .collect::<Vec<String>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let alone: Vec<Vec<String>> = users.iter().map(|u| run(vec![req(u)]).remove(0)).collect();
    let together = run(users.iter().map(|u| req(u)).collect());
    let same = run(vec![req(users[0]); 3]);
    for i in 0..users.len() {
        // The first token comes from each request's own prefill: as alone.
        assert_eq!(
            together[i].first(),
            alone[i].first(),
            "request {i} started differently"
        );
    }
    // Three copies of one request decoded in one batch: three identical outputs.
    assert_eq!(same[0], same[1]);
    assert_eq!(same[1], same[2]);
    let texts: Vec<String> = together.iter().map(|t| t.concat()).collect();
    assert!(
        texts[0] != texts[1] && texts[1] != texts[2],
        "outputs mixed up: {texts:?}"
    );
    let changed = (0..users.len())
        .filter(|&i| together[i] != alone[i])
        .count();
    eprintln!(
        "note: batched decoding changed the output of {changed} of {} requests against decoding each alone (a batch of several tokens runs other matrix kernels on this CPU backend; README, \"Parallel requests\")",
        users.len()
    );
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(metrics.contains("epm_slots 3"), "{metrics}");
}

/// A long prompt that arrives while another request replies is evaluated in the same
/// ubatches as alone, with a decode step of the reply between each two (the reply goes on
/// instead of waiting for the whole prompt), and gives the same first token, logits and all.
#[test]
fn a_long_prompt_beside_a_reply_pauses_for_it_and_answers_as_alone() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let args = ["--parallel", "2", "-c", "4096", "-ub", "64"];
    let long = json!({"prompt": "The river bends past the old mill and the town. ".repeat(60),
        "max_tokens": 1, "temperature": 0, "logprobs": 5});
    let reply = json!({"prompt": "Tell me a long story", "max_tokens": 600, "temperature": 0,
        "stream": true});
    let s = Server::start(&model, &args);
    let (beside, reply_tokens, tokens_before_long) = std::thread::scope(|sc| {
        let (first_token, started) = std::sync::mpsc::channel();
        let s = &s;
        let reply = sc.spawn(move || {
            let r = ureq::post(&s.url("/v1/completions"))
                .send_json(reply)
                .unwrap();
            let mut tokens = 0;
            each_sse_event(r.into_reader(), |e| {
                if e["choices"][0]["text"]
                    .as_str()
                    .is_some_and(|t| !t.is_empty())
                {
                    tokens += 1;
                    if tokens == 1 {
                        first_token.send(()).unwrap();
                    }
                }
            });
            tokens
        });
        started.recv_timeout(Duration::from_secs(60)).unwrap();
        let before = s.metric("epm_generated_tokens_total");
        let beside = s.post("/v1/completions", &long).unwrap();
        (beside, reply.join().unwrap(), before)
    });
    let prompt_tokens = beside["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 512,
        "{prompt_tokens} tokens: too few ubatches"
    );
    let pauses = s.metric("epm_prefill_pauses_total");
    let ubatches = prompt_tokens.div_ceil(64) as f64;
    // A pause after every ubatch but the last, while the reply ran (its 600 tokens outlast
    // the prompt's ubatches unless it ended early).
    assert!(
        pauses >= 1.0 && pauses <= ubatches - 1.0,
        "{pauses} pauses over {ubatches} ubatches"
    );
    assert!(reply_tokens as f64 >= tokens_before_long + pauses);
    drop(s);
    let alone = Server::start(&model, &args)
        .post("/v1/completions", &long)
        .unwrap();
    assert_eq!(
        beside["choices"][0]["logprobs"], alone["choices"][0]["logprobs"],
        "the long prompt's first token differs beside a reply"
    );
    assert_eq!(beside["usage"], alone["usage"]);
}

#[test]
fn several_choices_are_the_seeded_requests_one_after_another_streamed_or_not() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    // One slot: each choice decodes alone, as the single requests it is compared with.
    let s = Server::start(&model, &["--queue", "2"]);
    let ask = |n: u32, seed: u32, stream: bool| {
        json!({"messages": messages("Be brief.", "Name a colour"), "max_tokens": 8,
            "temperature": 1.0, "seed": seed, "n": n, "stream": stream,
            "stream_options": {"include_usage": true}})
    };
    let whole = s.chat(&ask(3, 7, false));
    let choices = whole["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{whole}");
    let singles: Vec<Value> = (7..10).map(|seed| s.chat(&ask(1, seed, false))).collect();
    for (i, (c, single)) in choices.iter().zip(&singles).enumerate() {
        assert_eq!(c["index"], i, "{whole}");
        // Choice i samples with the seed after i: the request with that seed alone.
        assert_eq!(c["message"], single["choices"][0]["message"], "choice {i}");
        assert_eq!(c["finish_reason"], single["choices"][0]["finish_reason"]);
    }
    let texts: Vec<&Value> = choices.iter().map(|c| &c["message"]["content"]).collect();
    assert!(
        texts[0] != texts[1] || texts[1] != texts[2],
        "three seeds, one text: {texts:?}"
    );
    let completion: u64 = singles
        .iter()
        .map(|r| r["usage"]["completion_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(whole["usage"]["completion_tokens"], completion);
    assert_eq!(
        whole["usage"]["prompt_tokens"],
        singles[0]["usage"]["prompt_tokens"]
    );

    let events = s.stream("/v1/chat/completions", &ask(3, 7, true));
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let mut streamed = vec![String::new(); 3];
    let mut finished = vec![Value::Null; 3];
    for c in events
        .iter()
        .filter_map(|e| e["choices"].as_array())
        .flatten()
    {
        let i = c["index"].as_u64().unwrap() as usize;
        streamed[i] += c["delta"]["content"].as_str().unwrap_or("");
        if !c["finish_reason"].is_null() {
            assert!(finished[i].is_null(), "choice {i} finished twice");
            finished[i] = c["finish_reason"].clone();
        }
    }
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(streamed[i], c["message"]["content"].as_str().unwrap());
        assert_eq!(finished[i], c["finish_reason"]);
    }
    let usages: Vec<&Value> = events.iter().filter(|e| e["usage"].is_object()).collect();
    assert_eq!(usages.len(), 1, "one usage chunk, after every choice");
    assert_eq!(usages[0]["usage"]["completion_tokens"], completion);

    // Completions take `n` too.
    let text = s
        .post(
            "/v1/completions",
            &json!({"prompt": "Once upon", "max_tokens": 4, "temperature": 0, "n": 2}),
        )
        .unwrap();
    assert_eq!(text["choices"][1]["index"], 1, "{text}");
    assert_eq!(text["choices"][0]["text"], text["choices"][1]["text"]);
    for (n, needle) in [(0, "`n` must be at least 1"), (4, "holds at most 3")] {
        let (code, body, _) = s
            .post("/v1/chat/completions", &ask(n, 7, false))
            .unwrap_err();
        assert_eq!(code, 400, "{body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn a_client_that_disconnects_frees_its_slot() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let s = Server::start(&model, &["--queue", "0"]);
    let body = json!({"messages": messages("Be verbose.", "Write a long story."), "max_tokens": 800, "temperature": 0, "stream": true});
    {
        let r = ureq::post(&s.url("/v1/chat/completions"))
            .send_json(body.clone())
            .unwrap();
        let mut lines = BufReader::new(r.into_reader()).lines();
        // Read until the first content chunk, then hang up.
        for line in lines.by_ref() {
            if line.unwrap().contains("content") {
                break;
            }
        }
    }
    wait_for(
        "the cancelled request's slot to be free",
        Duration::from_secs(30),
        || {
            let m = ureq::get(&s.url("/metrics"))
                .call()
                .unwrap()
                .into_string()
                .unwrap();
            m.contains("epm_requests_total{outcome=\"cancelled\"} 1")
                && m.contains("epm_active_slots 0")
        },
    );
    // With no queue, a busy slot would refuse this: it is served.
    let r = s
        .chat(&json!({"messages": messages("Be brief.", "Hi"), "max_tokens": 4, "temperature": 0}));
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn bad_requests_get_openai_errors_with_the_right_status() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let s = Server::start(
        &model,
        &["--api-key", "sekrit", "--queue", "0", "--max-body-mb", "1"],
    );
    // The answer, or the transport error that kept it from the client.
    let try_call = |body: &str, key: Option<&str>| {
        let mut r =
            ureq::post(&s.url("/v1/chat/completions")).set("Content-Type", "application/json");
        if let Some(k) = key {
            r = r.set("Authorization", &format!("Bearer {k}"));
        }
        match r.send_string(body) {
            Ok(r) => Ok((r.status(), r.into_json::<Value>().unwrap(), None)),
            Err(ureq::Error::Status(c, r)) => {
                let retry = r.header("retry-after").map(String::from);
                Ok((c, r.into_json::<Value>().unwrap(), retry))
            }
            Err(e) => Err(e.to_string()),
        }
    };
    let call =
        |body: &str, key: Option<&str>| try_call(body, key).unwrap_or_else(|e| panic!("{e}"));
    let ok_body = json!({"messages": messages("Be brief.", "Hi"), "max_tokens": 2}).to_string();
    let check = |(code, body, _): (u16, Value, Option<String>), want: u16, needle: &str| {
        assert_eq!(code, want, "{body}");
        let msg = body["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no error object: {body}"));
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        assert!(body["error"]["type"].is_string());
    };
    check(call(&ok_body, None), 401, "missing API key");
    check(call(&ok_body, Some("wrong")), 401, "wrong API key");
    assert_eq!(call(&ok_body, Some("sekrit")).0, 200);
    check(call("{not json", Some("sekrit")), 400, "not valid JSON");
    check(
        call(r#"{"messages": [], "max_tokens": 2}"#, Some("sekrit")),
        400,
        "empty",
    );
    check(
        call(
            r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "two"}"#,
            Some("sekrit"),
        ),
        400,
        "max_tokens",
    );
    check(
        call(
            r#"{"messages": [{"role": "user", "content": 5}]}"#,
            Some("sekrit"),
        ),
        400,
        "messages[0].content",
    );
    let long = json!({"messages": messages("Be brief.", "Hi"), "max_tokens": 5000}).to_string();
    let too_long = call(&long, Some("sekrit"));
    assert_eq!(too_long.1["error"]["code"], "context_length_exceeded");
    check(too_long, 400, "maximum context length is 1024 tokens");
    let huge =
        json!({"messages": messages("x", &"word ".repeat(300_000)), "max_tokens": 2}).to_string();
    // The server reads (and drops) an oversized body before it answers 413, so a client
    // still writing it sees the answer, not a reset connection: every try gets the 413.
    for _ in 0..5 {
        let answer = try_call(&huge, Some("sekrit"))
            .unwrap_or_else(|e| panic!("no answer to an oversized body: {e:?}"));
        check(answer, 413, "larger than the server accepts");
    }
    // Overload: one slot, no queue, a long generation running.
    let busy = json!({"messages": messages("Be verbose.", "Write a long story."), "max_tokens": 600, "stream": true, "temperature": 0});
    let r = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", "Bearer sekrit")
        .send_json(busy)
        .unwrap();
    let mut lines = BufReader::new(r.into_reader()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("content") {
            break;
        }
    }
    let (code, body, retry) = call(&ok_body, Some("sekrit"));
    check((code, body, None), 503, "busy");
    assert!(retry.is_some(), "503 without Retry-After");
    // /health stays open without a key; the rest needs it.
    assert!(ureq::get(&s.url("/health")).call().is_ok());
    assert!(matches!(
        ureq::get(&s.url("/v1/models")).call(),
        Err(ureq::Error::Status(401, _))
    ));
    drop(lines);
}

#[test]
fn sigterm_during_a_stream_ends_it_and_exits_cleanly() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let stats_path = dir.path().join("serve-stats.json");
    let mut s = Server::start(&model, &["--stats-file", stats_path.to_str().unwrap()]);
    let body = json!({"messages": messages("Be verbose.", "Write a long story."), "max_tokens": 900, "stream": true, "temperature": 0});
    let r = ureq::post(&s.url("/v1/chat/completions"))
        .send_json(body)
        .unwrap();
    let mut reader = BufReader::new(r.into_reader());
    let mut line = String::new();
    while !line.contains("content") {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    let pid = s.pid();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let rest = sse_events(reader);
    assert_eq!(rest.last().unwrap(), "[DONE]", "{rest:?}");
    let last_json = rest.iter().rev().find(|e| e.is_object()).unwrap();
    assert!(
        last_json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{last_json}"
    );
    let status = s.stop();
    assert!(status.success(), "exit status {status}");
    let st = stats(&stats_path);
    assert!(st.complete && st.tokens.generated > 0);
}

/// Closing the terminal a server runs in (SIGHUP) stops it as SIGTERM does: exit 0, its
/// stats written, its conversations put aside for the next run.
#[test]
fn sighup_stops_the_server_as_sigterm_does() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let stats_path = dir.path().join("serve-stats.json");
    let mut s = Server::start(&model, &["--stats-file", stats_path.to_str().unwrap()]);
    s.chat(
        &json!({"messages": messages("Be brief.", "Hello."), "max_tokens": 4, "temperature": 0}),
    );
    let _ = Command::new("kill")
        .args(["-HUP", &s.pid().to_string()])
        .status();
    let status = s.try_status().unwrap();
    // Killed by the signal, it would have neither exited 0 nor written its stats.
    assert!(status.success(), "exit status {status}");
    let st = stats(&stats_path);
    assert!(st.complete && st.tokens.generated > 0);
}

/// The mini at its minimum budget and `-ub 128`, served with reads throttled to 10 MB/s (a
/// blkio cgroup), so that each cold prompt ubatch takes seconds; `None` (with a note)
/// where reads cannot be throttled. Bound as `(_cap, server)`, the server drops first
/// (and is stopped) even when a test fails, so the cap's cgroups can be removed.
fn throttled_mini_server(dir: &Path, stats_path: &Path) -> Option<(Cap, Server)> {
    let model = mini(dir);
    let Some(device) = epm_sys::proc::disk_device(&model) else {
        eprintln!("note: the model is not on a block device; reads cannot be throttled");
        return None;
    };
    let Some(cap) = Cap::hard(8 << 30) else {
        eprintln!("note: no writable cgroup memory controller; reads cannot be throttled");
        return None;
    };
    let cap = match cap.with_read_limit(&device, 10_000_000) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("note: {e}");
            return None;
        }
    };
    let budget = min_budget_mb(&model, &["-c", "1024", "-ub", "128"]).to_string();
    let server = Server::start_in(
        &cap,
        &model,
        &[
            "--ram-budget-mb",
            &budget,
            "-ub",
            "128",
            "--stats-file",
            stats_path.to_str().unwrap(),
        ],
    );
    Some((cap, server))
}

/// A long prompt streamed with progress events; returns the stream once `ubatches`
/// ubatches of it are done (the next one is then in flight).
fn stream_until_ubatches_done(
    s: &Server,
    prompt: &str,
    ubatches: usize,
) -> BufReader<Box<dyn std::io::Read + Send + Sync>> {
    let body = json!({"prompt": prompt, "max_tokens": 4, "stream": true, "return_progress": true, "temperature": 0});
    let r = match ureq::post(&s.url("/v1/completions")).send_json(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => panic!("{code}: {}", r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    let mut reader = BufReader::new(r.into_reader());
    let mut line = String::new();
    // One progress event comes before any evaluation, then one per ubatch.
    let mut progress = 0;
    while progress < ubatches + 1 {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
        if line.contains("prompt_progress") {
            progress += 1;
        }
    }
    reader
}

/// About 31 tokens each on the mini's tokenizer.
const PAGER_WORDS: &str = "the pager reads each expert it needs and evicts the coldest ones ";

/// SIGTERM while a prompt's ubatch is evaluated stops that ubatch (llama.cpp's abort
/// callback) rather than waiting for the prompt: the stream ends with the shutdown error,
/// and the exit stats count the batch stopped part-way and no evaluated prompt.
#[test]
fn sigterm_during_a_prefill_stops_the_ubatch_in_flight() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("serve-stats.json");
    let Some((_cap, mut s)) = throttled_mini_server(dir.path(), &stats_path) else {
        return;
    };
    // 684 tokens: six ubatches.
    let reader = stream_until_ubatches_done(&s, &PAGER_WORDS.repeat(22), 1);
    let _ = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status();
    let rest = sse_events(reader);
    let last_json = rest.iter().rev().find(|e| e.is_object()).unwrap();
    assert!(
        last_json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{last_json}"
    );
    let status = s.stop();
    assert!(status.success(), "exit status {status}");
    let st = stats(&stats_path);
    assert_eq!(st.tokens.aborted_batches, 1, "{:?}", st.tokens);
    assert_eq!(st.tokens.prompt, 0, "no prompt finished");
}

/// Waits until llama.cpp has returned from the ubatch stopped for a client gone: no ubatch
/// of the mini takes more than a few seconds here, so a minute means it ran to its end.
fn wait_for_the_ubatch_stopped(s: &Server) {
    let gone = Instant::now();
    wait_for(
        "the stopped ubatch (tokens.cancelled_batches 1)",
        Duration::from_secs(60),
        || live_stats(s).tokens.cancelled_batches == 1,
    );
    eprintln!("stopped {:?} after the client went", gone.elapsed());
}

/// The same for a request that is not streamed: its handler's future is dropped when the
/// connection closes (a client that times out), and with it the job's channel.
#[test]
fn a_client_gone_during_a_prompt_not_streamed_stops_the_ubatch_in_flight() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("serve-stats.json");
    let Some((_cap, mut s)) = throttled_mini_server(dir.path(), &stats_path) else {
        return;
    };
    let body =
        json!({"prompt": PAGER_WORDS.repeat(22), "max_tokens": 4, "temperature": 0}).to_string();
    let addr = s.url("").trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let prefilled = |s: &Server| -> u64 {
        let slots: Value = ureq::get(&s.url("/slots"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        slots[0]["n_prompt_tokens_processed"].as_u64().unwrap_or(0)
    };
    wait_for("the first ubatch", Duration::from_secs(60), || {
        prefilled(&s) >= 128
    });
    drop(conn);
    wait_for_the_ubatch_stopped(&s);
    assert!(s.stop().success());
    let st = stats(&stats_path);
    assert_eq!(
        st.tokens.prompt % 128,
        0,
        "whole ubatches only: {:?}",
        st.tokens
    );
    assert!(st.tokens.prompt < 684, "{:?}", st.tokens);
    assert_eq!(st.tokens.aborted_batches, 0);
}

/// A client that goes away during its prompt stops the prefill within the ubatch in
/// flight (llama.cpp's abort callback asks the job's channel), and the ubatches evaluated
/// before it are kept: the same prompt sent again reuses them.
#[test]
fn a_client_gone_during_its_prompt_stops_the_prefill_and_leaves_its_ubatches() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("serve-stats.json");
    let Some((_cap, mut s)) = throttled_mini_server(dir.path(), &stats_path) else {
        return;
    };
    // About 930 tokens: seven whole ubatches and a part.
    let prompt = PAGER_WORDS.repeat(30);
    drop(stream_until_ubatches_done(&s, &prompt, 1));
    wait_for_the_ubatch_stopped(&s);
    let again = s
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 1, "temperature": 0}),
        )
        .unwrap();
    let n = again["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let whole = n / 128 * 128;
    assert!(
        cached >= 128 && cached % 128 == 0 && cached < whole,
        "{cached} of {n} tokens reused: the first prompt's whole ubatches up to where it \
         stopped, and not all {whole}"
    );
    let status = s.stop();
    assert!(status.success(), "exit status {status}");
    let st = stats(&stats_path);
    // The first request evaluated what the second reused, and no more.
    assert_eq!(st.tokens.prompt, n, "{:?}", st.tokens);
    assert_eq!(st.tokens.prompt_reused, cached);
    assert_eq!(
        (st.tokens.cancelled_batches, st.tokens.aborted_batches),
        (1, 0)
    );
}

#[test]
fn a_model_file_replaced_under_the_server_gets_a_503_that_names_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let mut s = Server::start(&model, &["--no-pager"]);
    let body =
        json!({"messages": messages("Be brief.", "Hello"), "max_tokens": 4, "temperature": 0});
    s.chat(&body);
    // A re-download: a new file renamed over the old one (the mapping keeps the old inode).
    let fresh = dir.path().join("fresh.gguf");
    std::fs::copy(&model, &fresh).unwrap();
    std::fs::rename(&fresh, &model).unwrap();
    let (code, err, retry) = s.post("/v1/chat/completions", &body).unwrap_err();
    assert_eq!(code, 503);
    assert!(retry.is_some());
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(model.to_str().unwrap()) && msg.contains("restart the server"),
        "{msg}"
    );
    assert!(msg.contains("replaced"), "{msg}");
    let health = ureq::get(&s.url("/health")).call().unwrap_err();
    let ureq::Error::Status(503, r) = health else {
        panic!("/health: {health:?}")
    };
    assert_eq!(r.into_json::<Value>().unwrap()["status"], "model_changed");
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(metrics.contains("epm_model_file_changed 1"), "{metrics}");
    assert!(s.stop().success());
}

#[test]
fn a_stats_file_that_cannot_be_written_is_counted_and_the_server_goes_on() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let stats_path = out.join("stats.json");
    let mut s = Server::start(
        &model,
        &["--no-pager", "--stats-file", stats_path.to_str().unwrap()],
    );
    let failures = |s: &Server| -> u64 {
        let m = ureq::get(&s.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        m.lines()
            .find(|l| l.starts_with("epm_output_write_failures_total{file=\"stats\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |v| v.parse::<f64>().unwrap() as u64)
    };
    assert_eq!(failures(&s), 0);
    // The folder goes away (a cleaned temp dir, an unmounted disk): SIGUSR2 cannot write.
    std::fs::remove_dir_all(&out).unwrap();
    let usr2 = |s: &Server| {
        Command::new("kill")
            .args(["-USR2", &s.pid().to_string()])
            .status()
            .unwrap();
    };
    usr2(&s);
    wait_for(
        "the failed write to be counted",
        Duration::from_secs(20),
        || failures(&s) == 1,
    );
    // The server goes on serving.
    let body =
        json!({"messages": messages("Be brief.", "Hello"), "max_tokens": 4, "temperature": 0});
    s.chat(&body);
    usr2(&s);
    wait_for("the second failure", Duration::from_secs(20), || {
        failures(&s) == 2
    });
    let log = s.stderr.lock().unwrap().clone();
    assert_eq!(
        log.matches("cannot write the stats file").count(),
        1,
        "logged once: {log}"
    );
    assert!(log.contains(stats_path.to_str().unwrap()), "{log}");
    // Back again: the next write succeeds, whole, and nothing half-written is left.
    std::fs::create_dir(&out).unwrap();
    usr2(&s);
    wait_for("the stats file", Duration::from_secs(20), || {
        stats_path.exists()
    });
    let snap = stats(&stats_path);
    assert!(snap.tokens.generated > 0);
    assert!(s.stop().success());
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("stats.json")]);
}

#[test]
fn a_model_truncated_under_a_running_request_ends_the_server_with_its_message_and_stats() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let budget = min_budget_mb(&model, &["-c", "1024"]).to_string();
    let stats_path = dir.path().join("stats.json");
    let mut s = Server::start(
        &model,
        &[
            "--ram-budget-mb",
            &budget,
            "--stats-file",
            stats_path.to_str().unwrap(),
        ],
    );
    let body = json!({"messages": messages("Be brief.", "Tell a long story."), "max_tokens": 900,
                      "temperature": 0, "stream": true});
    let r = ureq::post(&s.url("/v1/chat/completions"))
        .send_json(body)
        .unwrap();
    let mut lines = BufReader::new(r.into_reader()).lines();
    // Once the reply streams, cut the file: the pages it still needs are gone.
    while !lines.next().unwrap().unwrap().contains("content") {}
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 4)
        .unwrap();
    let code = s.try_status().and_then(|status| status.code());
    assert_eq!(code, Some(2));
    let log = s.stderr.lock().unwrap().clone();
    assert!(
        log.contains("SIGBUS") && log.contains(model.to_str().unwrap()),
        "{log}"
    );
    let snap = stats(&stats_path);
    assert!(!snap.complete && snap.tokens.generated > 0);
}

/// LRU evicting its coldest expert, with several sessions at a budget whose expert cache
/// cannot hold one decode step's selections, is warned about at start (it would evict what
/// the next step needs first); the same flags with room for a step, LRU evicting by next
/// use (the default), or the default policy start without a warning.
#[test]
fn lru_coldest_with_more_sessions_than_the_cache_holds_is_warned_about() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let min = min_budget_mb(&model, &["-c", "2048", "--parallel", "4"]);
    let small = (min + 20).to_string();
    let warned = |extra: &[&str]| {
        let mut args = vec!["-c", "2048", "--parallel", "4"];
        args.extend_from_slice(extra);
        let mut s = Server::start(&model, &args);
        assert!(s.stop().success());
        let log = s.stderr.lock().unwrap().clone();
        log.contains("--cache-policy lru --evict-by coldest: one decode step of 4 sequence(s)")
    };
    assert!(warned(&[
        "--cache-policy",
        "lru",
        "--evict-by",
        "coldest",
        "--ram-budget-mb",
        &small
    ]));
    assert!(!warned(&["--ram-budget-mb", &small]), "the default policy");
    assert!(
        !warned(&["--cache-policy", "lru", "--ram-budget-mb", &small]),
        "LRU evicting by next use"
    );
    assert!(
        !warned(&["--cache-policy", "lru", "--ram-budget-mb", "4096"]),
        "every expert fits"
    );
}

/// A restarted server reads, while idle, the experts its last run selected most (the expert
/// heat kept in its state folder) into free room of the expert cache: the first request
/// then finds them resident (warm hits), answers with the same tokens and logprobs as the
/// cold run, stays within budget, and leaves no stray cache (nor more of the token table
/// cached than it read). `--no-warm-start` reads
/// nothing; a heat file that is not one is said and replaced at the end. Where more of the
/// model is cached at start than the budget holds, the experts kept are the hottest.
#[test]
fn a_restarted_server_warms_its_expert_cache_with_what_the_last_run_selected() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = mini(dir.path());
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let budget = (min_budget_mb(&model, &["-c", "1024"]) + 4).to_string();
    let stats_path = dir.path().join("serve-stats.json");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "--ram-budget-mb",
            budget.as_str(),
            "--prompt-cache-mb",
            "0",
            "--prompt-cache-dir",
            state.path().to_str().unwrap(),
            "--stats-file",
            stats_path.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a
    };
    // A server stopped: no stray cache, within budget; its stats.
    let stop_clean = |mut s: Server| {
        assert!(s.stop().success());
        let st = stats(&stats_path);
        assert_eq!(st.experts.stray_cache_bytes_at_exit, 0);
        assert!(
            st.memory.peak_rss_bytes <= st.budget_bytes,
            "{:?}",
            st.memory
        );
        st
    };
    let body = json!({"messages": messages("Be brief.", "Name three rivers of Europe."),
        "max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let heat_files = || -> Vec<PathBuf> {
        std::fs::read_dir(state.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("heat-")
            })
            .collect()
    };

    // A first run starts cold and leaves its heat.
    let mut s = Server::start(&model, &args(&[]));
    let cold = s.chat(&body);
    assert_eq!(live_stats(&s).experts.warm_start.experts, 0);
    assert!(s.stop().success());
    let files = heat_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let heat = std::fs::read(&files[0]).unwrap();
    assert_eq!(&heat[..8], b"EPMHEAT\0");

    // The next, after the page cache lost the model (a reboot; a run left in the cache
    // would be kept, `paging.rs`), reads it in while idle, and its first request finds it.
    epm_sys::cache::drop_file_cache(&model).unwrap();
    let s = Server::start(&model, &args(&[]));
    wait_for("the warm start", Duration::from_secs(30), || {
        live_stats(&s).experts.warm_start.experts > 0
    });
    let warm = s.chat(&body);
    assert_same_reply(&warm, &cold);
    let st = live_stats(&s);
    let w = &st.experts.warm_start;
    assert!(w.hits > 0 && w.hits <= w.experts, "{w:?}");
    assert_eq!(s.metric("epm_warm_start_experts_total"), w.experts as f64);
    assert_eq!(s.metric("epm_warm_start_hits_total"), w.hits as f64);
    assert_eq!(
        s.metric("epm_warm_start_adopted_experts_total"),
        0.0,
        "a cold page cache"
    );
    assert!(w.bytes > 0);
    assert!(st.experts.prompt.cache_hits > 0, "{:?}", st.experts.prompt);
    let st = stop_clean(s);
    // The token table's loan holds in a server too: no more of it cached than was read.
    // (The model watcher's header checksum, every 2 s, read a readahead window into a
    // small model's token table; `epm_sys::fs::read_head`'s test holds that fix.)
    assert!(
        st.memory.token_table_cached_bytes_at_exit <= st.memory.token_table_taken_bytes,
        "{:?}",
        st.memory
    );

    // Cold by request: nothing read, the same reply.
    let mut s = Server::start(&model, &args(&["--no-warm-start"]));
    assert_same_reply(&s.chat(&body), &cold);
    assert_eq!(live_stats(&s).experts.warm_start.experts, 0);
    assert!(s.stop().success());

    // A file that is not a heat file: said, a cold start, and a good file written once the
    // server is idle, without a prompt store, so that a server killed then keeps it.
    std::fs::write(&files[0], b"not a heat file").unwrap();
    let mut s = Server::start(&model, &args(&["--prompt-cache-idle-s", "1"]));
    assert_same_reply(&s.chat(&body), &cold);
    assert_eq!(live_stats(&s).experts.warm_start.experts, 0);
    assert!(
        s.stderr.lock().unwrap().contains("not an expert heat file"),
        "{}",
        s.stderr.lock().unwrap()
    );
    wait_for(
        "the heat written while idle",
        Duration::from_secs(30),
        || std::fs::read(&files[0]).is_ok_and(|b| b.starts_with(b"EPMHEAT\0")),
    );
    // Restarted at once, while the page cache still holds what the killed one read: kept.
    s.kill();
    let s = Server::start(&model, &args(&[]));
    let adopted = live_stats(&s).experts.warm_start.adopted;
    assert!(adopted > 0);
    assert_eq!(
        s.metric("epm_warm_start_adopted_experts_total"),
        adopted as f64
    );
    assert_same_reply(&s.chat(&body), &cold);
    stop_clean(s);

    // Read whole (a checksum, an upstream run): more of the model is cached than the budget
    // holds, and the experts kept are those past runs selected most, not the first by
    // number.
    read_whole(&model);
    let past = std::fs::read(&files[0]).unwrap();
    let s = Server::start(&model, &args(&[]));
    let adopted = live_stats(&s).experts.warm_start.adopted as usize;
    let snap: Value = ureq::get(&s.url("/pager/residency"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let layers: Vec<u32> = serde_json::from_value(snap["layers"].clone()).unwrap();
    let n_expert = snap["n_expert"].as_u64().unwrap() as u32;
    use base64::Engine as _;
    let resident = base64::engine::general_purpose::STANDARD
        .decode(snap["resident"].as_str().unwrap())
        .unwrap();
    let slots = layers.len() * n_expert as usize;
    assert!(adopted > 0 && adopted < slots, "{adopted} of {slots}");
    let hot = epm_core::heat::ExpertHeat::decode(&past, &layers, n_expert)
        .unwrap()
        .hottest();
    let is_resident = |&(layer, expert): &(u32, u32)| {
        let l = layers.iter().position(|&x| x == layer).unwrap();
        let slot = l * n_expert as usize + expert as usize;
        resident[slot / 8] & (1 << (slot % 8)) != 0
    };
    let hottest = &hot[..adopted.min(hot.len())];
    let missing: Vec<_> = hottest.iter().filter(|e| !is_resident(e)).collect();
    assert!(
        missing.is_empty(),
        "of the {} hottest, not kept: {missing:?}",
        hottest.len()
    );
    assert_same_reply(&s.chat(&body), &cold);
    stop_clean(s);

    epm_sys::cache::drop_file_cache(&model).unwrap();
    let mut s = Server::start(&model, &args(&[]));
    wait_for("the warm start", Duration::from_secs(30), || {
        live_stats(&s).experts.warm_start.experts > 0
    });
    assert!(s.stop().success());
}
