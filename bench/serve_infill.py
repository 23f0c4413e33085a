#!/usr/bin/env python3
"""An editor's code-completion session against `epm-run serve`'s `/infill` on a full-size
model, as llama.vim and llama.vscode send it: other files as `input_extra` (about
--context-tokens tokens), the text before and after the cursor, and one request per pause in
typing, each with a few more words typed before the cursor. Records each request's time,
evaluated and cached prompt tokens and bytes read. Run it once per prompt split to compare
(`--server-arg=--prompt-split --server-arg=grid` against the default, which cuts after
`<|file_sep|>` and so keeps the other files from one request to the next).

    python3 bench/serve_infill.py -m W1.gguf --budget-mb 8192 [--requests 6]
        [--server-arg=--prompt-split --server-arg=grid] --out validate/serve-infill-....json
"""
import argparse, http.client, json, os, signal, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import disk_read_mb_s, drop_cache, machine, request_json, start_server  # noqa: E402

FUNCTION = '''def {name}(values, scale={n}):
    """Scale each value by {n} and keep the positive ones."""
    out = []
    for v in values:
        if v * scale > 0:
            out.append(v * scale)
    return out

'''
SUFFIX = "\n\nif __name__ == \"__main__\":\n    print(main())\n"
TYPED = ["total", " = ", "sum(", "values", ")", "\n    ", "return", " total"]


def code(n_functions, start=0):
    return "".join(FUNCTION.format(name=f"step_{i}", n=i) for i in range(start, start + n_functions))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--context-tokens", type=int, default=2000,
                    help="about this many tokens of other files, in three input_extra chunks")
    ap.add_argument("--n-predict", type=int, default=8)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--out", required=True)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra flag for `serve` (repeat), e.g. --server-arg=--prompt-split --server-arg=grid")
    a = ap.parse_args()
    drop_cache(a.model)
    disk_before = disk_read_mb_s(a.model)
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2",
           "--ram-budget-mb", str(a.budget_mb), *a.server_arg]
    proc, port = start_server(cmd)
    # Sized by the server's own tokenizer (about 170 tokens per function on the synthetic
    # vocabularies).
    status, t = request_json(port, "POST", "/tokenize", {"content": code(1)})
    per_function = len(t["tokens"])
    n = max(1, a.context_tokens // (3 * per_function))
    extra = [{"filename": f"lib/part_{k}.py", "text": code(n, start=100 * k)} for k in range(3)]
    # The file being edited: more before the cursor than /infill keeps (3/4 of a batch), so
    # the window slides as the user types, as it does in a long file.
    prefix = code(8, start=500) + "def main():\n    values = step_500([1, 2, 3])\n    "
    rows = []
    try:
        for i in range(a.requests):
            typed = "".join(TYPED[:i % len(TYPED)])
            # Greedy: llama.vim's sampler chain (top_k, top_p, infill) would end a synthetic
            # model's flat distribution at once (the infill sampler keeps only the
            # end-of-generation tokens when their share is large enough).
            body = {"input_prefix": prefix + typed, "input_suffix": SUFFIX, "input_extra": extra,
                    "n_predict": a.n_predict, "temperature": 0, "cache_prompt": True}
            _, before = request_json(port, "GET", "/stats")
            t0 = time.time()
            status, v = request_json(port, "POST", "/infill", body, timeout=3600)
            total = time.time() - t0
            if status != 200:
                raise SystemExit(f"request {i}: HTTP {status}: {v}")
            _, after = request_json(port, "GET", "/stats")
            rows.append({"request": i, "total_s": total, "tokens_evaluated": v["tokens_evaluated"],
                         "tokens_cached": v["tokens_cached"], "tokens_predicted": v["tokens_predicted"],
                         "read_bytes": after["io"]["read_bytes"] - before["io"]["read_bytes"],
                         "content": v["content"]})
            print(rows[-1], flush=True)
        _, stats = request_json(port, "GET", "/stats")
    finally:
        proc.send_signal(signal.SIGTERM)
        code_ = proc.wait(timeout=120)
    later = rows[1:]
    report = {
        "what": "an editor's completion session on /infill: other files, a sliding prefix, a few words typed per request",
        "command": "python3 bench/serve_infill.py " + " ".join(sys.argv[1:]),
        "server_command": " ".join(cmd), "machine": machine(),
        "disk_read_mb_s": {"before": disk_before, "after": disk_read_mb_s(a.model)},
        "ubatch": stats["tokens"].get("ubatch"),
        "first_s": rows[0]["total_s"],
        "later_s_median": statistics.median(r["total_s"] for r in later) if later else None,
        "later_evaluated_median": statistics.median(r["tokens_evaluated"] - r["tokens_cached"] for r in later)
        if later else None,
        "peak_rss_bytes": stats["memory"]["peak_rss_bytes"], "budget_bytes": stats["budget_bytes"],
        "server_exit_code": code_, "requests": rows,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: report[k] for k in ("first_s", "later_s_median", "later_evaluated_median", "ubatch")}))


if __name__ == "__main__":
    main()
