#!/usr/bin/env python3
"""What a user waits for a thinking model's answer, with and without a reasoning budget:
streamed chats to `epm-run serve` on a full-size model whose template opens the `<think>`
block in the generation prompt (as Qwen3.5's and later templates do), alternating a request
without a budget and one with `thinking_budget_tokens` B. The synthetic model never closes a
block by itself, so without a budget the whole reply reasons. Records, per request, the time
to the first reasoning token, to the first answer (content) token, and to the end, the
reasoning tokens the usage reports, and whether the budgeted reasoning is the unbudgeted
reply's start (the same greedy tokens up to the close).

    python3 bench/serve_reasoning_budget.py -m W1.gguf --budget-mb 8192 [--runs 2]
        [--max-tokens 160] [--thinking-budget 32] --out validate/serve-reasoning-budget-....json
"""
import argparse, http.client, json, os, signal, statistics, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import disk_read_mb_s, drop_cache, machine, request_json, start_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def template_opening_the_block(folder):
    """The synthetic Qwen3 template with a generation prompt that opens `<think>`."""
    stock = open(os.path.join(ROOT, "crates", "synth", "src", "templates", "qwen3-chatml.jinja")).read()
    closed = "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}"
    if closed not in stock:
        raise SystemExit("the stock template changed: update this script")
    opening = closed.replace("    {%- endif %}", "    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}")
    path = os.path.join(folder, "think-open.jinja")
    with open(path, "w") as f:
        f.write(stock.replace(closed, opening))
    return path


def streamed_chat(port, body):
    """One streamed chat: times to the first reasoning and content deltas and to the end,
    the texts, and the final usage."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:500]}")
    first = {"reasoning": None, "content": None}
    text = {"reasoning": "", "content": ""}
    usage = None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            usage = event["usage"]
        for ch in event.get("choices", []):
            d = ch.get("delta", {})
            for key, field in (("reasoning", "reasoning_content"), ("content", "content")):
                if d.get(field):
                    text[key] += d[field]
                    if first[key] is None:
                        first[key] = time.time() - t0
    total = time.time() - t0
    c.close()
    return {"first_reasoning_s": first["reasoning"], "first_answer_s": first["content"], "total_s": total,
            "reasoning_tokens": usage["completion_tokens_details"]["reasoning_tokens"],
            "completion_tokens": usage["completion_tokens"], "prompt_tokens": usage["prompt_tokens"],
            "reasoning": text["reasoning"], "content": text["content"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--thinking-budget", type=int, default=32)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-think-")
    template = template_opening_the_block(tmp)
    drop_cache(a.model)
    disk_before = disk_read_mb_s(a.model)
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", "1024", "-t", "2",
           "--ram-budget-mb", str(a.budget_mb), "--chat-template-file", template]
    proc, port = start_server(cmd)
    rows = []
    try:
        for run in range(a.runs):
            for budget in (None, a.thinking_budget):
                # Each pair asks its own question, so that neither reuses the other's reply.
                body = {"messages": [{"role": "user", "content": f"Question {run}: why is the sky blue?"}],
                        "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
                        "stream_options": {"include_usage": True}}
                if budget is not None:
                    body["thinking_budget_tokens"] = budget
                row = {"run": run, "thinking_budget": budget, **streamed_chat(port, body)}
                rows.append(row)
                print({k: v for k, v in row.items() if k not in ("reasoning", "content")}, flush=True)
        _, stats = request_json(port, "GET", "/stats")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    free = [r for r in rows if r["thinking_budget"] is None]
    capped = [r for r in rows if r["thinking_budget"] is not None]
    same_start = all(f["reasoning"].strip().startswith(c["reasoning"].strip())
                     for f, c in zip(free, capped))
    report = {
        "what": "a thinking chat's wait for its answer, without and with a reasoning budget",
        "command": "python3 bench/serve_reasoning_budget.py " + " ".join(sys.argv[1:]),
        "server_command": " ".join(cmd), "machine": machine(),
        "disk_read_mb_s": {"before": disk_before, "after": disk_read_mb_s(a.model)},
        "max_tokens": a.max_tokens, "thinking_budget": a.thinking_budget,
        "unbudgeted": {"first_answer_s": [r["first_answer_s"] for r in free],
                       "total_s_median": statistics.median(r["total_s"] for r in free),
                       "reasoning_tokens": [r["reasoning_tokens"] for r in free]},
        "budgeted": {"first_answer_s_median": statistics.median(r["first_answer_s"] for r in capped),
                     "total_s_median": statistics.median(r["total_s"] for r in capped),
                     "reasoning_tokens": [r["reasoning_tokens"] for r in capped]},
        "budgeted_reasoning_is_the_unbudgeted_start": same_start,
        "peak_rss_bytes": stats["memory"]["peak_rss_bytes"], "budget_bytes": stats["budget_bytes"],
        "server_exit_code": code, "requests": rows,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: report[k] for k in ("unbudgeted", "budgeted", "budgeted_reasoning_is_the_unbudgeted_start")}))


if __name__ == "__main__":
    main()
