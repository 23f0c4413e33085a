//! The page at `/` in a real browser (Debian's headless Chromium through chromedriver),
//! against a server on a `-mini` model that pages: every check reads the page's own DOM
//! or the data attributes its canvases carry, polled with a deadline.

mod common;

use common::browser::{self, Browser};
use common::server::{thinking_mini, Server};
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const KEY: &str = "test-key-1";

fn attr(b: &Browser, selector: &str, name: &str) -> Value {
    b.eval(
        "const e = document.querySelector(arguments[0]); return e ? (e.dataset[arguments[1]] ?? null) : null;",
        json!([selector, name]),
    )
}

/// Chromium and its driver; without them a skip (a failure on CI, which installs them).
fn browser_or_skip() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let found = browser::available();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium and chromium-driver (.ci/run installs them)"
        );
        eprintln!("SKIPPED: the page test needs chromium and chromium-driver (apt-get install chromium chromium-driver)");
    }
    found
}

#[test]
fn the_page_chats_and_shows_the_pager_at_work() {
    let Some((chromium, driver)) = browser_or_skip() else {
        return;
    };
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let budget_mb = min_budget_mb(&model, &["-c", "1024"]);
    let budget = budget_mb.to_string();
    let server = Server::start(&model, &["--ram-budget-mb", &budget, "--api-key", KEY]);
    // The page itself needs no key; its data does.
    let page = ureq::get(&server.url("/")).call().unwrap();
    assert!(page.content_type().starts_with("text/html"));
    assert!(page.into_string().unwrap().contains("id=\"residency\""));
    assert_eq!(
        ureq::get(&server.url("/pager/residency"))
            .call()
            .unwrap_err()
            .kind(),
        ureq::ErrorKind::HTTP
    );

    let b = Browser::start(&chromium, &driver);
    b.open(&server.url("/"));
    // The stream answers 401: the page asks for the key once.
    wait_for(
        "the page to ask for the key",
        Duration::from_secs(30),
        || b.eval("return document.getElementById('keydlg').open;", json!([])) == json!(true),
    );
    b.eval(
        "document.getElementById('keyin').value = arguments[0]; document.querySelector('#keydlg button').click();",
        json!([KEY]),
    );
    wait_for("the pager view to draw", Duration::from_secs(30), || {
        attr(&b, "#residency", "layers") == json!("8")
    });
    assert_eq!(attr(&b, "#residency", "experts"), json!("32"));
    let idle_signature = attr(&b, "#residency", "signature");

    b.eval(
        "document.getElementById('maxtok').value = '64'; document.getElementById('temp').value = '0';
         document.getElementById('input').value = 'Name three rivers and what lives in them.';
         document.getElementById('send').click();",
        json!([]),
    );
    // While the reply streams, the residency map changes; sample it until the reply is done.
    let mut while_streaming = BTreeSet::new();
    let mut reply_seen_growing = false;
    let mut last_len = 0;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        assert!(Instant::now() < deadline, "the reply did not finish");
        let state = b.eval(
            "const m = document.querySelectorAll('.msg.assistant .text');
             return {busy: document.body.dataset.busy, len: m.length ? m[m.length - 1].textContent.length : 0,
                     sig: document.getElementById('residency').dataset.signature};",
            json!([]),
        );
        let len = state["len"].as_u64().unwrap_or(0);
        reply_seen_growing |= len > last_len && last_len > 0;
        last_len = last_len.max(len);
        if state["busy"] == "1" {
            while_streaming.insert(state["sig"].to_string());
        } else if len > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(last_len > 0, "no reply text");
    assert!(
        reply_seen_growing,
        "the reply did not stream (it appeared at once)"
    );
    assert!(
        while_streaming.len() >= 2,
        "the residency map did not change while the reply streamed: {while_streaming:?}"
    );
    assert_ne!(attr(&b, "#residency", "signature"), idle_signature);
    // The usage line: prompt, reused and generated tokens, time to first token.
    let usage = b.eval(
        "const u = document.querySelectorAll('.msg.assistant .usage'); return u.length ? u[u.length - 1].textContent : '';",
        json!([]),
    );
    let usage = usage.as_str().unwrap();
    for part in ["prompt", "reused", "generated", "first token"] {
        assert!(usage.contains(part), "usage line {usage:?} lacks {part}");
    }
    // The RSS line stayed under the budget line the page drew.
    let max_rss: f64 = attr(&b, "#c_rss", "maxRss")
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let drawn_budget: f64 = attr(&b, "#c_rss", "budget")
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(drawn_budget, budget_mb as f64);
    assert!(
        max_rss > 0.0 && max_rss <= drawn_budget,
        "RSS {max_rss} MiB against the budget {drawn_budget} MiB"
    );
    // Each chart's legend shows its series' latest figures: the speed chart's decode rate
    // is the reply's, and the hook's milliseconds (another unit) have the right-hand axis.
    let speed_latest = || -> Vec<Option<f64>> {
        attr(&b, "#l_speed", "latest")
            .as_str()
            .map(|s| serde_json::from_str(s).unwrap())
            .unwrap_or_default()
    };
    wait_for(
        "the speed legend to show the reply's decode rate",
        Duration::from_secs(10),
        || {
            speed_latest()
                .get(1)
                .copied()
                .flatten()
                .is_some_and(|v| v > 0.0)
        },
    );
    assert!(
        speed_latest()[2].is_some_and(|ms| ms >= 0.0),
        "{:?}",
        speed_latest()
    );
    let legend = b.eval(
        "return document.getElementById('l_speed').textContent;",
        json!([]),
    );
    assert!(
        legend.as_str().unwrap().contains("hook ms/token (right)"),
        "{legend}"
    );
    // The conversation survives a reload (localStorage).
    b.open(&server.url("/"));
    wait_for(
        "the conversation to come back",
        Duration::from_secs(10),
        || {
            b.eval(
                "return document.querySelectorAll('.msg').length;",
                json!([]),
            ) == json!(2)
        },
    );
    let png = b.screenshot();
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn the_stream_and_the_snapshot_follow_their_schema() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let budget = min_budget_mb(&model, &["-c", "1024"]).to_string();
    let server = Server::start(&model, &["--ram-budget-mb", &budget]);
    server.chat(&json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0}));
    let snap: Value = ureq::get(&server.url("/pager/residency"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(snap["schema_version"], 1);
    assert_eq!(snap["layers"].as_array().unwrap().len(), 8);
    assert_eq!(snap["n_expert"], 32);
    use base64::Engine as _;
    let decode = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(snap[k].as_str().unwrap())
            .unwrap()
    };
    // One bit per expert in each bitmap, one byte of heat per expert.
    for k in ["resident", "pinned", "speculative"] {
        assert_eq!(decode(k).len(), 8 * 32 / 8, "{k}");
    }
    assert_eq!(decode("heat").len(), 8 * 32);
    let resident: u32 = decode("resident").iter().map(|b| b.count_ones()).sum();
    assert!(resident > 0);
    assert!(decode("heat").contains(&255), "the hottest expert is 255");
    // Two events of the stream, each the documented object; counters only grow.
    let r = ureq::get(&server.url("/pager/stream")).call().unwrap();
    assert!(r.content_type().starts_with("text/event-stream"));
    let mut events = Vec::new();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(r.into_reader()));
    let mut name = String::new();
    while events.len() < 2 {
        let line = lines.next().unwrap().unwrap();
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            assert_eq!(name, "pager");
            events.push(serde_json::from_str::<Value>(d).unwrap());
        }
    }
    for e in &events {
        assert_eq!(e["schema_version"], 1);
        assert_eq!(e["paged"], true);
        for k in [
            "uptime_ms",
            "budget_bytes",
            "reserve_bytes",
            "expert_budget_bytes",
            "evictions",
            "read_bytes",
            "decode_read_bytes",
            "decode_steps",
            "prefill_us",
            "decode_us",
            "hook_us",
            "hook_decode_us",
            "prefill_done",
            "prefill_total",
            "queue_depth",
        ] {
            assert!(e[k].is_u64(), "{k}: {e}");
        }
        for k in [
            "rss_bytes",
            "rss_anon_bytes",
            "rss_file_bytes",
            "expert_resident_bytes",
            "peak_rss_bytes",
        ] {
            assert!(e["memory"][k].is_u64(), "memory.{k}");
        }
        for k in [
            "selected",
            "cache_hits",
            "prefetch_hits",
            "misses",
            "miss_bytes",
        ] {
            assert!(e["decode"][k].is_u64() && e["prompt"][k].is_u64(), "{k}");
        }
        assert_eq!(e["tokens"]["generated"], 8);
        assert_eq!(e["slots"][0]["state"], "idle");
        assert_eq!(e["slots"][0]["generated"], 8);
        assert_eq!(e["residency"]["n_expert"], 32);
        assert!(e["memory"]["rss_bytes"].as_u64().unwrap() <= e["budget_bytes"].as_u64().unwrap());
    }
    assert!(events[1]["uptime_ms"].as_u64() > events[0]["uptime_ms"].as_u64());
}

/// The page's thinking budget reaches the server: a reply in a template that opens the
/// reasoning block is closed after the budget, shown folded, with the reasoning tokens in
/// the usage line; left empty, the block runs on (no budget on the server).
#[test]
fn the_page_sends_a_thinking_budget_and_shows_the_reasoning_count() {
    let Some((chromium, driver)) = browser_or_skip() else {
        return;
    };
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (_, _, server) = thinking_mini(dir.path(), &[]);
    let b = Browser::start(&chromium, &driver);
    b.open(&server.url("/"));
    let last_reply = || {
        b.eval(
            "const m = document.querySelectorAll('.msg.assistant');
             const last = m[m.length - 1];
             return {busy: document.body.dataset.busy, n: m.length,
                     reasoning: last ? (last.querySelector('details')?.textContent ?? null) : null,
                     text: last ? last.querySelector('.text').textContent : '',
                     usage: last ? (last.querySelector('.usage')?.textContent ?? '') : ''};",
            json!([]),
        )
    };
    let ask = |think: &str, n: u64| -> Value {
        b.eval(
            "document.getElementById('maxtok').value = '16'; document.getElementById('temp').value = '0';
             document.getElementById('think').value = arguments[0];
             document.getElementById('input').value = 'Why is the sky blue?';
             document.getElementById('send').click();",
            json!([think]),
        );
        let mut reply = Value::Null;
        wait_for("the reply to finish", Duration::from_secs(60), || {
            reply = last_reply();
            reply["n"] == json!(n) && reply["busy"] == "0" && reply["usage"] != ""
        });
        reply
    };
    let budgeted = ask("3", 1);
    let usage = budgeted["usage"].as_str().unwrap();
    assert!(usage.contains("generated 16 (reasoning 3)"), "{budgeted}");
    assert!(
        budgeted["reasoning"]
            .as_str()
            .is_some_and(|r| r.starts_with("reasoning") && r.len() > "reasoning".len()),
        "{budgeted}"
    );
    assert_ne!(budgeted["text"], "", "{budgeted}");
    let free = ask("", 2);
    assert!(
        free["usage"]
            .as_str()
            .unwrap()
            .contains("generated 16 (reasoning 16)"),
        "{free}"
    );
    assert_eq!(free["text"], "", "{free}");

    // "Answer now" ends a long reasoning block of the reply streaming: the answer follows.
    b.eval(
        "document.getElementById('maxtok').value = '800'; document.getElementById('think').value = '';
         document.getElementById('input').value = 'And why are sunsets red?';
         document.getElementById('send').click();",
        json!([]),
    );
    wait_for(
        "the Answer now button while the reply reasons",
        Duration::from_secs(60),
        || {
            b.eval(
                "return !document.getElementById('endthink').disabled;",
                json!([]),
            ) == json!(true)
        },
    );
    b.eval("document.getElementById('endthink').click();", json!([]));
    let mut reply = Value::Null;
    wait_for("the reply to finish", Duration::from_secs(120), || {
        reply = last_reply();
        reply["n"] == json!(3) && reply["busy"] == "0" && reply["usage"] != ""
    });
    let usage = reply["usage"].as_str().unwrap();
    let reasoning: u64 = usage
        .split("(reasoning ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{reply}"));
    assert!(reasoning < 400, "{reply}");
    assert_ne!(reply["text"], "", "{reply}");
    assert_eq!(
        b.eval(
            "return document.getElementById('error').textContent;",
            json!([])
        ),
        json!("")
    );
}
