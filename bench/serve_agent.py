#!/usr/bin/env python3
"""An agent-style session against `epm-run serve` on a full-size model: a fixed system
prompt of about --system-tokens tokens and --requests short turns, one after another, as a
coding agent sends them. Records each request's time to first token (streaming), prompt
and cached tokens, and decode speed; the later requests should skip the shared prefill.

    python3 bench/serve_agent.py -m qwen3-30b-a3b.gguf --budget-mb 4096 [--requests 20]
        [--system-tokens 2000] [--server-arg=-ub --server-arg=128]
        [--out validate/serve-agent-qwen3-30b-a3b-4g.json]
    python3 bench/serve_agent.py -m qwen3-30b-a3b.gguf --unpaged-warm --requests 2 ...
        # the same requests served unpaged from a warm page cache: the compute bound
    python3 bench/serve_agent.py ... --side-request
        # a chat UI's side request (a title for the conversation) after every turn
"""
import argparse, http.client, json, os, re, signal, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import disk_read_mb_s, drop_cache, machine, read_through_cache, request_json, start_server  # noqa: E402

WORDS = ("the repository holds a Rust workspace with crates for parsing, planning, paging and serving; "
         "tests run with cargo; tools live under tools and benchmarks under bench; "
         "always read a file before you change it, run the tests after every change, "
         "and report what you did in one short paragraph. ").split()
TURNS = ["List the crates.", "Open the pager.", "Run the tests.", "Fix the failing test.",
         "Explain the change.", "Add a unit test.", "Run clippy.", "Summarize the diff.",
         "Check the README.", "Update STATUS.", "Format the code.", "Commit the work."]


def system_prompt(tokens, tokens_per_word):
    """A system prompt of about `tokens` tokens at `tokens_per_word`."""
    n = int(tokens / tokens_per_word)
    words = []
    while len(words) < n:
        words.extend(WORDS)
    return "You are a coding agent. " + " ".join(words[:n])


def prompt_tokens(port, messages):
    """The prompt's length in tokens, as the server counts a chat request's without
    evaluating anything (`/v1/chat/completions/input_tokens`)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/chat/completions/input_tokens", body=json.dumps({"messages": messages}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read().decode()
    if r.status != 200:
        raise SystemExit(f"could not count the prompt's tokens: HTTP {r.status}: {body[:300]}")
    return int(json.loads(body)["input_tokens"])


def stats_now(port):
    """The server's stats JSON now (counters are cumulative: a request's share is a difference)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/stats")
    return json.loads(c.getresponse().read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int)
    ap.add_argument("--unpaged-warm", action="store_true",
                    help="serve --no-pager with the model file read into the page cache first: the "
                         "compute bound of the same requests at the same ubatch (no budget)")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--out", required=True)
    ap.add_argument("--side-request", action="store_true",
                    help="after every turn, a short request with another system prompt (a chat UI's "
                         "title request): with one slot it takes the conversation's cache")
    ap.add_argument("--kill-after-idle-s", type=float,
                    help="end the server with SIGKILL (as the OOM killer does) after this many idle "
                         "seconds, instead of SIGTERM: what it put aside while idle is all a restart finds")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra flag for `serve` (repeat), e.g. --server-arg=-ub --server-arg=128")
    a = ap.parse_args()
    if (a.budget_mb is None) == (not a.unpaged_warm):
        ap.error("give --budget-mb for a paged run, or --unpaged-warm")
    # A cold start, as after a reboot; the disk's speed before and after (a host's rate
    # limit can change it within a session: sessions compare only where it held).
    drop_cache(a.model)
    disk_before = disk_read_mb_s(a.model)
    if a.unpaged_warm:
        read_through_cache(a.model, chunk=64 << 20)
        memory = ["--no-pager"]
    else:
        memory = ["--ram-budget-mb", str(a.budget_mb)]
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2", *memory, *a.server_arg]
    t_start = time.time()
    proc, port = start_server(cmd)
    load_s = time.time() - t_start
    # Size the system prompt with the model's own tokenizer, without evaluating anything:
    # a request whose max_tokens cannot fit is refused with the prompt's token count.
    tokens_per_word = 1.35
    for _ in range(3):
        system = system_prompt(a.system_tokens, tokens_per_word)
        n = prompt_tokens(port, [{"role": "system", "content": system},
                                 {"role": "user", "content": TURNS[0]}])
        if abs(n - a.system_tokens) <= a.system_tokens * 0.05:
            break
        tokens_per_word *= n / a.system_tokens
    history = [{"role": "system", "content": system}]
    rows = []
    for i in range(a.requests):
        # Each turn starts from the fixed system prompt: the agent's tools and rules.
        messages = history + [{"role": "user", "content": TURNS[i % len(TURNS)]}]
        body = json.dumps({"messages": messages, "max_tokens": a.max_tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}})
        before = stats_now(port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        t0 = time.time()
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            proc.send_signal(signal.SIGTERM)
            raise SystemExit(f"request {i}: HTTP {resp.status}: {resp.read().decode(errors='replace')[:500]}")
        ttft, first_text, usage, chunks, t_last = None, None, None, 0, None
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("error"):
                proc.send_signal(signal.SIGTERM)
                raise SystemExit(f"request {i}: the stream ended with an error: {ev['error']}")
            delta = ev["choices"][0]["delta"] if ev.get("choices") else {}
            # The first token is the first generated text of any kind: a reasoning model's
            # thinking streams before its answer, and a chat UI shows it.
            if delta.get("content") or delta.get("reasoning_content"):
                chunks += 1
                t_last = time.time()
                if ttft is None:
                    ttft = t_last - t0
                if first_text is None and delta.get("content"):
                    first_text = t_last - t0
            if ev.get("usage"):
                usage = ev["usage"]
        conn.close()
        total = time.time() - t0
        if usage is None:
            proc.send_signal(signal.SIGTERM)
            raise SystemExit(f"request {i}: the stream carried no usage ({chunks} content chunks)")
        decode = (usage["completion_tokens"] - 1) / (t_last - t0 - ttft) if usage and chunks > 1 and t_last - t0 > ttft else None
        after = stats_now(port)
        rows.append({"request": i, "ttft_s": ttft, "first_content_s": first_text, "total_s": total,
                     "prompt_tokens": usage["prompt_tokens"],
                     "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                     "completion_tokens": usage["completion_tokens"], "decode_tok_s": decode,
                     "read_bytes": after["io"]["read_bytes"] - before["io"]["read_bytes"],
                     "hook_s": (after["hook"]["busy_us"] - before["hook"]["busy_us"]) / 1e6,
                     "prompt_misses": after["experts"]["prompt"]["misses"] - before["experts"]["prompt"]["misses"]})
        if a.side_request:
            t_side = time.time()
            status, side = request_json(port, "POST", "/v1/chat/completions", {
                "messages": [{"role": "system", "content": "Write a five-word title for this conversation."},
                             {"role": "user", "content": TURNS[i % len(TURNS)]}],
                "max_tokens": 8, "temperature": 0}, timeout=3600)
            if status != 200:
                proc.send_signal(signal.SIGTERM)
                raise SystemExit(f"side request {i}: HTTP {status}: {side}")
            rows[-1]["side_request_s"] = time.time() - t_side
        print(rows[-1], flush=True)
    idle_save = None
    if a.kill_after_idle_s is not None:
        time.sleep(a.kill_after_idle_s)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/stats")
    stats = json.loads(c.getresponse().read())
    if a.kill_after_idle_s is not None:
        proc.send_signal(signal.SIGKILL)
        with open(proc.log_path) as f:
            m = re.findall(r"idle: put (\d+) prompt prefixes aside for a restart in ([0-9.]+) s", f.read())
        idle_save = [{"prefixes": int(n), "seconds": float(t)} for n, t in m]
    else:
        proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    disk_after = disk_read_mb_s(a.model)
    first = rows[0]["ttft_s"]
    later = statistics.median(r["ttft_s"] for r in rows[1:])
    report = {
        "what": "an agent-style session: a fixed system prompt and short turns, time to first token",
        "command": "python3 bench/serve_agent.py " + " ".join(sys.argv[1:]),
        "server_command": " ".join(cmd), "machine": machine(), "load_s": load_s,
        "disk_read_mb_s": {"before": disk_before, "after": disk_after},
        "first_ttft_s": first, "later_ttft_s_median": later,
        "summed_ttft_s": sum(r["ttft_s"] for r in rows), "ubatch": stats["tokens"].get("ubatch"), "ttft_first_over_later": first / later,
        "target_10x_met": first / later >= 10,
        "decode_tok_s_median": statistics.median(r["decode_tok_s"] for r in rows if r["decode_tok_s"]),
        "peak_rss_bytes": stats["memory"]["peak_rss_bytes"], "budget_bytes": stats["budget_bytes"],
        "prompt_reused_tokens": stats["tokens"]["prompt_reused"], "server_exit_code": code,
        "prompt_store": stats.get("prompt_store"),
        "ended_by": "SIGKILL after %g s idle" % a.kill_after_idle_s if a.kill_after_idle_s is not None else "SIGTERM",
        "idle_saves": idle_save,
        "requests": rows,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({k: report[k] for k in ("first_ttft_s", "later_ttft_s_median", "summed_ttft_s", "ttft_first_over_later",
                                              "decode_tok_s_median", "peak_rss_bytes")}, indent=1))


if __name__ == "__main__":
    main()
