#!/usr/bin/env python3
"""Record the routing trace of K sessions decoding at once, for `epm-run sim`: `serve
--parallel K --trace-file OUT` with a budget that holds the whole model (routing does not
depend on the budget), and the K different prompts of `serve_batching.py` sent together,
--tokens each, greedy. The trace's decode steps then carry one token of each session.

    python3 bench/trace_parallel.py -m W1.gguf -k 4 --tokens 128 --trace /tmp/w1-k4.trace
"""
import argparse, json, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
sys.path.insert(0, HERE)
from epmlib import request_json, start_server  # noqa: E402
from serve_batching import PROMPTS  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-k", type=int, default=4, help=f"sessions at once (1-{len(PROMPTS)})")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--budget-mb", type=int, default=22000, help="large enough for the whole model")
    ap.add_argument("--trace", required=True)
    a = ap.parse_args()
    if not 1 <= a.k <= len(PROMPTS):
        sys.exit(f"-k must be between 1 and {len(PROMPTS)}")
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", str(1024 * a.k), "-t", "2",
           "--parallel", str(a.k), "--ram-budget-mb", str(a.budget_mb), "--trace-file", a.trace]
    proc, port = start_server(cmd)
    replies = [None] * a.k

    def send(i):
        replies[i] = request_json(port, "POST", "/v1/completions", {
            "prompt": PROMPTS[i], "max_tokens": a.tokens, "temperature": 0}, timeout=3600)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(a.k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    proc.terminate()
    code = proc.wait(timeout=120)
    bad = [r for r in replies if r is None or r[0] != 200]
    if bad or code != 0:
        sys.exit(f"failed: server exit {code}, replies {json.dumps(bad)[:300]}")
    print(json.dumps({"trace": a.trace, "usage": [r[1]["usage"] for r in replies]}))


if __name__ == "__main__":
    main()
