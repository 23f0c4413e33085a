#!/usr/bin/env python3
"""The stop button during a long prompt: how long the next request waits. A client sends the
agent session's 2,000-token prompt (streamed, as a chat UI does), closes the connection
--stop-after-s seconds into its prefill, and a second client sends a short chat at once;
its time to first token, counted from the first client's close, is what a user who pressed
stop and asked again waits. Cold start each run; builds alternate (--bin, repeat with
--label).

    python3 bench/serve_cancel.py -m qwen3-30b-a3b.gguf --budget-mb 4096 \\
        --bin before=/root/bins/before/epm-run --bin after=target/release/epm-run --runs 3 \\
        --out validate/serve-cancel-w1-4g.json
"""
import argparse, http.client, json, os, signal, socket, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import disk_read_mb_s, drop_cache, machine, start_server  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_agent import prompt_tokens, system_prompt  # noqa: E402


def stats_now(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/stats")
    return json.loads(c.getresponse().read())


def slot_state(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/slots")
    return json.loads(c.getresponse().read())[0]["state"]


def long_request_then_close(port, messages, stop_after_s):
    """Send a streamed chat and close its connection `stop_after_s` seconds after its prefill
    began (the slot's state is then `prefill`); returns the time of the close."""
    body = json.dumps({"messages": messages, "max_tokens": 16, "temperature": 0, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.time() + 60
    while slot_state(port) != "prefill":
        if time.time() > deadline:
            raise SystemExit("the long request's prefill did not start within 60 s")
        time.sleep(0.05)
    time.sleep(stop_after_s)
    s.close()
    return time.time()


def short_request(port, t_close):
    """A short streamed chat; returns (seconds from `t_close` to its first content, to its end)."""
    body = json.dumps({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
                       "temperature": 0, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"the short request: HTTP {r.status}: {r.read()[:300]}")
    first = None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("error"):
            raise SystemExit(f"the short request failed: {ev['error']}")
        delta = ev["choices"][0]["delta"] if ev.get("choices") else {}
        if first is None and delta.get("content"):
            first = time.time() - t_close
    return first, time.time() - t_close


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stop-after-s", type=float, default=10.0)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    rows, messages = [], None
    for rep in range(a.runs):
        for label, exe in bins:
            drop_cache(a.model)
            disk = disk_read_mb_s(a.model)
            cmd = [exe, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2",
                   "--ram-budget-mb", str(a.budget_mb)]
            proc, port = start_server(cmd)
            if messages is None:
                # The agent session's prompt, sized with the model's own tokenizer.
                tokens_per_word = 1.35
                for _ in range(3):
                    messages = [{"role": "system", "content": system_prompt(a.system_tokens, tokens_per_word)},
                                {"role": "user", "content": "List the crates."}]
                    n = prompt_tokens(port, messages, a.ctx)
                    if abs(n - a.system_tokens) <= a.system_tokens * 0.05:
                        break
                    tokens_per_word *= n / a.system_tokens
            try:
                t_close = long_request_then_close(port, messages, a.stop_after_s)
                first, done = short_request(port, t_close)
                st = stats_now(port)
            finally:
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(timeout=600)
            row = {"label": label, "rep": rep, "disk_read_mb_s": disk,
                   "next_first_token_after_close_s": first, "next_done_after_close_s": done,
                   "cancelled_batches": st["tokens"].get("cancelled_batches"),
                   "aborted_batches": st["tokens"].get("aborted_batches"),
                   "prompt_tokens_evaluated": st["tokens"]["prompt"], "ubatch": st["tokens"].get("ubatch"),
                   "peak_rss_bytes": st["memory"]["peak_rss_bytes"], "budget_bytes": st["budget_bytes"],
                   "server_exit_code": code}
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for label, _ in bins:
        xs = [r["next_first_token_after_close_s"] for r in rows if r["label"] == label]
        summary[label] = {"median_s": statistics.median(xs), "runs_s": xs}
    report = {"what": "the next request's wait after a client closes its long prompt mid-prefill",
              "command": "python3 bench/serve_cancel.py " + " ".join(sys.argv[1:]),
              "machine": machine(), "summary": summary, "runs": rows}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
