#!/usr/bin/env python3
"""A reply under way while a long prompt arrives on another slot (`--parallel 2`): how long
the reply waits between two tokens, and the long prompt's time to first token, for two (or
more) builds side by side. The reply (a streamed completion of --reply-tokens tokens) starts
first; once it has streamed --lead tokens, the long prompt (the text of -f, a streamed
completion of --long-tokens tokens) is sent. Each run starts a fresh server (cold page
cache, empty prompt store), the builds alternating; every run must give each request the
same text as the first build's first run. With --short-after-s, a third request (a short
prompt, `--parallel 3`) is sent that long after the long prompt: its time to first token
says whether it waited for the long prompt's end.

    python3 bench/serve_prefill_pause.py --bin /root/bins/before --bin target/release/epm-run \
        --label before --label after -m W1.gguf --budget-mb 8192 [-f bench/w1-prompt-2000.txt] \
        [--runs 3] [--short-after-s 20] --out validate/serve-prefill-pause-w1-8g.json
"""
import argparse, json, os, statistics, sys, threading, time

import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from epmlib import (add_build_args, build_labels, disk_read_mb_s, drop_cache, machine,  # noqa: E402
                    sse_json, start_server, write_report)

REPLY_PROMPT = "Tell me a long story about a river, a mill and the town around them."
SHORT_PROMPT = "Name three colours."


def stream_completion(port, body, on_token):
    """POST a streamed /v1/completions; calls on_token(time) for each text piece; returns
    the text and the usage."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"completion failed: {r.status} {r.read()[:300]!r}")
    text, usage = [], None
    for e in sse_json(r):
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices", []):
            if ch.get("text"):
                on_token(time.time())
                text.append(ch["text"])
    c.close()
    return "".join(text), usage


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def one_run(a, label, binary, long_prompt):
    drop_cache(a.model)
    slots = 2 if a.short_after_s is None else 3
    cmd = [binary, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2", "--parallel", str(slots),
           "--ram-budget-mb", str(a.budget_mb)] + a.arg
    proc, port = start_server(cmd)
    try:
        reply_times, long_times = [], []
        lead = threading.Event()

        def on_reply_token(t):
            reply_times.append(t)
            if len(reply_times) == a.lead:
                lead.set()

        out = {}

        def reply():
            out["reply"] = stream_completion(port, {"prompt": REPLY_PROMPT, "max_tokens": a.reply_tokens,
                                                    "temperature": 0}, on_reply_token)

        th = threading.Thread(target=reply)
        th.start()
        if not lead.wait(timeout=3600):
            raise SystemExit("the reply did not start")
        sent = time.time()
        short_times = []

        def short():
            time.sleep(a.short_after_s)
            out["short_sent"] = time.time()
            out["short"] = stream_completion(port, {"prompt": SHORT_PROMPT, "max_tokens": 4, "temperature": 0},
                                             short_times.append)

        sh = None
        if a.short_after_s is not None:
            sh = threading.Thread(target=short)
            sh.start()
        long_text, long_usage = stream_completion(port, {"prompt": long_prompt, "max_tokens": a.long_tokens,
                                                         "temperature": 0}, long_times.append)
        th.join()
        if sh:
            sh.join()
        reply_text, reply_usage = out["reply"]
        first = long_times[0]
        # The reply's tokens while the long prompt was evaluated, and its longest wait then.
        during = [t for t in reply_times if sent <= t <= first]
        marks = [sent] + during + [min(first, reply_times[-1])]
        gaps = [b - a_ for a_, b in zip(marks, marks[1:])]
        row = {} if sh is None else {"short_ttft_s": short_times[0] - out["short_sent"],
                                     "short_text": out["short"][0]}
        return row | {
            "label": label,
            "long_ttft_s": first - sent,
            "long_prompt_tokens": long_usage["prompt_tokens"],
            "reply_tokens_during_long_prefill": len(during),
            "reply_longest_wait_s": max(gaps),
            "reply_total_s": reply_times[-1] - reply_times[0],
            "reply_tokens": len(reply_times),
            "prefill_pauses": metric(port, "epm_prefill_pauses_total"),
            "reply_text": reply_text,
            "long_text": long_text,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser()
    add_build_args(ap)
    ap.add_argument("-f", "--prompt-file", default=os.path.join(HERE, "w1-prompt-2000.txt"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lead", type=int, default=4, help="reply tokens streamed before the long prompt is sent")
    ap.add_argument("--reply-tokens", type=int, default=96)
    ap.add_argument("--long-tokens", type=int, default=1,
                    help="tokens the long prompt asks for (its first comes from its prefill alone: the "
                         "same in every run; later ones are decoded beside the reply)")
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("--short-after-s", type=float,
                    help="send a short prompt this long after the long one, on a third slot")
    ap.add_argument("--arg", action="append", default=[], help="an extra serve flag for every build")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    labels = build_labels(a)
    long_prompt = open(a.prompt_file).read()
    disk_before = disk_read_mb_s(a.model)
    rows = []
    for rep in range(a.runs):
        for label, b in zip(labels, a.bin):
            row = one_run(a, label, b, long_prompt)
            row["rep"] = rep
            print({k: v for k, v in row.items() if not k.endswith("_text")}, flush=True)
            rows.append(row)
    by = {l: [r for r in rows if r["label"] == l] for l in labels}
    keys = ("reply_longest_wait_s", "long_ttft_s", "reply_total_s", "reply_tokens_during_long_prefill")
    if a.short_after_s is not None:
        keys = ("short_ttft_s",) + keys
    med = {l: {k: statistics.median(r[k] for r in by[l]) for k in keys} for l in labels}
    base, last = labels[0], labels[-1]
    report = {
        "what": "a reply under way on one slot while a long prompt arrives on the other (--parallel 2): "
                "the reply's longest wait between tokens, and the long prompt's time to first token",
        "command": "python3 bench/serve_prefill_pause.py " + " ".join(sys.argv[1:]),
        "machine": machine(), "disk_read_mb_s": {"before": disk_before, "after": disk_read_mb_s(a.model)},
        "medians": med,
        "ratio_of_medians": {k: med[last][k] / med[base][k] for k in keys[:-1]},
        "pairs": {k: [y[k] / x[k] for x, y in zip(by[base], by[last])] for k in keys[:-1]},
        "same_text": len({(r["reply_text"], r["long_text"]) for r in rows}) == 1,
        "runs": rows,
    }
    # The reply's later tokens may differ: a batch of two decodes with other kernels than one.
    report["passed"] = len({r["long_text"] for r in rows}) == 1
    write_report(a.out, report)


if __name__ == "__main__":
    main()
