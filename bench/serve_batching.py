#!/usr/bin/env python3
"""Aggregate decode with K sessions at once: `epm-run serve --parallel K` on MODEL at
--budget-mb inside a cgroup v1 cap equal to the budget, cold cache, K different
completions of --tokens tokens sent together (temperature 0). Aggregate decode tok/s is
the server's generated tokens over its decode-step time (every step batches the active
slots); K = 1, 2, 4 alternate within each of --runs repetitions. The record (medians, and
each run) goes to --out.

    python3 bench/serve_batching.py --model W1.gguf [--budget-mb 4096] [--runs 3] [--out F]
"""
import argparse, json, os, signal, statistics, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import Cgroup, drop_cache, machine, request_json, start_server  # noqa: E402

PROMPTS = [
    "The history of the river valley begins with",
    "A recipe for bread starts when the baker",
    "In the old observatory on the hill, the astronomer",
    "The engineers tested the bridge by",
]


def one(a, k, tmp, rep):
    drop_cache(a.model)
    stats_file = os.path.join(tmp, f"stats-{rep}-{k}.json")
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", str(1024 * k), "-t", "2", "--parallel", str(k),
           "--ram-budget-mb", str(a.budget_mb), "--stats-file", stats_file]
    with Cgroup(a.budget_mb << 20, f"batch-{k}") as cg:
        proc, port = start_server(cg.wrap(cmd))
        results = [None] * k

        def send(i):
            t = time.time()
            status, r = request_json(port, "POST", "/v1/completions", {"prompt": PROMPTS[i], "max_tokens": a.tokens,
                                                                         "temperature": 0}, timeout=3600)
            results[i] = {"status": status, "seconds": time.time() - t, "tokens": r["usage"]["completion_tokens"]}

        threads = [threading.Thread(target=send, args=(i,)) for i in range(k)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        facts = cg.facts()
    s = json.load(open(stats_file))
    decode_s = s["tok_per_s"]["decode"] and s["tokens"]["generated"] / s["tok_per_s"]["decode"]
    return {"k": k, "rep": rep, "exit_code": code, "wall_s": wall, "requests": results, "cap": facts,
            "generated": s["tokens"]["generated"], "aggregate_decode_tok_s": s["tok_per_s"]["decode"],
            "decode_s": decode_s, "decode_cache_hit_rate": s["experts"]["decode"]["cache_hit_rate"],
            "decode_read_bytes": s["io"]["decode_read_bytes"], "decode_steps": s["io"]["decode_steps"],
            "peak_rss_bytes": s["memory"]["peak_rss_bytes"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget-mb", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--out", default="validate/serve-batching-w1-4g.json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-batch-")
    ks = [int(x) for x in a.ks.split(",")]
    runs = []
    for rep in range(a.runs):
        for k in ks:
            r = one(a, k, tmp, rep)
            print(f"rep {rep} K={k}: {r['aggregate_decode_tok_s']:.2f} tok/s aggregate, hit {r['decode_cache_hit_rate']:.3f}",
                  flush=True)
            runs.append(r)
    med = {k: statistics.median(r["aggregate_decode_tok_s"] for r in runs if r["k"] == k) for k in ks}
    ratios = {f"K{k}_over_K1": [r["aggregate_decode_tok_s"] / next(x["aggregate_decode_tok_s"] for x in runs
                                                                  if x["k"] == 1 and x["rep"] == r["rep"])
                                for r in runs if r["k"] == k] for k in ks if k != 1}
    budget = a.budget_mb << 20
    report = {"what": __doc__.split("\n\n")[0].replace("\n", " "),
              "command": "python3 bench/serve_batching.py " + " ".join(sys.argv[1:]), "machine": machine(),
              "model": a.model, "budget_mb": a.budget_mb, "tokens_per_request": a.tokens,
              "median_aggregate_decode_tok_s": med,
              "ratios_by_rep": ratios, "median_ratios": {k: statistics.median(v) for k, v in ratios.items()},
              "median_decode_cache_hit_rate": {k: statistics.median(r["decode_cache_hit_rate"] for r in runs if r["k"] == k)
                                               for k in ks},
              "all_ok": all(r["exit_code"] == 0 and r["cap"]["oom_kills"] == 0 and r["peak_rss_bytes"] <= budget
                            and all(q["status"] == 200 and q["tokens"] == a.tokens for q in r["requests"]) for r in runs),
              "runs": runs}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({k: report[k] for k in ("median_aggregate_decode_tok_s", "median_ratios",
                                              "median_decode_cache_hit_rate", "all_ok")}, indent=1))
    sys.exit(0 if report["all_ok"] else 1)


if __name__ == "__main__":
    main()
