#!/usr/bin/env python3
"""Aggregate decode with K sessions at once: `epm-run serve --parallel K` on MODEL at
--budget-mb inside a cgroup v1 cap equal to the budget, cold cache, K different
completions of --tokens tokens sent together (temperature 0). Aggregate decode tok/s is
the server's generated tokens over its decode-step time (every step batches the active
slots); K = 1, 2, 4 alternate within each of --runs repetitions. The record (medians, and
each run) goes to --out.

    python3 bench/serve_batching.py --model W1.gguf [--budget-mb 4096] [--runs 3] [--out F] \
        [--bin PATH | --bin LABEL=PATH --bin LABEL=PATH ...]

With --unpaged, the same runs without the pager (`--no-pager`) and with the model warm in
the page cache (read once before the first run, never dropped): the compute's own bound on
batching; --budget-mb is then only the cap, which must hold the whole model.

With several builds, each repetition runs every build at every K in turn, and each build's
texts must equal the first build's at the same K.
"""
import argparse, json, os, signal, statistics, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import (Cgroup, disk_read_mb_s, disk_steady, drop_cache, machine, read_through_cache,  # noqa: E402
                    request_json, start_server)

PROMPTS = [
    "The history of the river valley begins with",
    "A recipe for bread starts when the baker",
    "In the old observatory on the hill, the astronomer",
    "The engineers tested the bridge by",
]


def one(a, exe, label, k, tmp, rep):
    if a.unpaged:
        read_through_cache(a.model)
    else:
        drop_cache(a.model)
    disk_before = disk_read_mb_s(a.model)
    stats_file = os.path.join(tmp, f"stats-{label}-{rep}-{k}.json")
    cmd = [exe, "serve", "-m", a.model, "--port", "0", "-c", str(1024 * k), "-t", "2", "--parallel", str(k),
           "--stats-file", stats_file] + (
        ["--no-pager"] if a.unpaged else ["--ram-budget-mb", str(a.budget_mb)])
    with Cgroup(a.budget_mb << 20, f"batch-{k}") as cg:
        proc, port = start_server(cg.wrap(cmd))
        results = [None] * k

        def send(i):
            t = time.time()
            status, r = request_json(port, "POST", "/v1/completions", {"prompt": PROMPTS[i], "max_tokens": a.tokens,
                                                                         "temperature": 0}, timeout=3600)
            results[i] = {"status": status, "seconds": time.time() - t, "tokens": r["usage"]["completion_tokens"],
                          "text": r["choices"][0]["text"]}

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
    disk_after = disk_read_mb_s(a.model)
    s = json.load(open(stats_file))
    decode_s = s["tok_per_s"]["decode"] and s["tokens"]["generated"] / s["tok_per_s"]["decode"]
    steps = max(s["io"]["decode_steps"], 1)
    return {"build": label, "k": k, "rep": rep, "exit_code": code, "wall_s": wall, "requests": results, "cap": facts,
            "disk_mb_s_before": disk_before, "disk_mb_s_after": disk_after,
            "generated": s["tokens"]["generated"], "aggregate_decode_tok_s": s["tok_per_s"]["decode"],
            "decode_s": decode_s, "decode_cache_hit_rate": s["experts"]["decode"]["cache_hit_rate"],
            "decode_read_bytes": s["io"]["decode_read_bytes"], "decode_steps": s["io"]["decode_steps"],
            "peak_rss_bytes": s["memory"]["peak_rss_bytes"],
            "hook_decode_ms_per_step": s["hook"]["decode_busy_us"] / 1e3 / steps,
            "decode_read_mb_per_step": s["io"]["decode_read_bytes"] / 1e6 / steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", help="PATH or LABEL=PATH; repeat to compare builds "
                    "(default target/release/epm-run)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget-mb", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--out", default="validate/serve-batching-w1-4g.json")
    ap.add_argument("--unpaged", action="store_true", help="no pager, the model warm: the compute's bound")
    a = ap.parse_args()
    builds = [tuple(b.split("=", 1)) if "=" in b else ("this build", b)
              for b in (a.bin or ["target/release/epm-run"])]
    tmp = tempfile.mkdtemp(prefix="epm-batch-")
    ks = [int(x) for x in a.ks.split(",")]
    runs = []
    for rep in range(a.runs):
        for label, exe in builds:
            for k in ks:
                r = one(a, exe, label, k, tmp, rep)
                print(f"rep {rep} {label} K={k}: {r['aggregate_decode_tok_s']:.2f} tok/s aggregate, "
                      f"hit {r['decode_cache_hit_rate']:.3f}, hook {r['hook_decode_ms_per_step']:.0f} ms/step, "
                      f"disk {r['disk_mb_s_before']} -> {r['disk_mb_s_after']} MB/s", flush=True)
                runs.append(r)
    budget = a.budget_mb << 20
    first = builds[0][0]

    def texts(r):
        return [q["text"] for q in r["requests"]]

    per_build = {}
    for label, _ in builds:
        mine = [r for r in runs if r["build"] == label]
        med = {k: statistics.median(r["aggregate_decode_tok_s"] for r in mine if r["k"] == k) for k in ks}
        ratios = {f"K{k}_over_K1": [r["aggregate_decode_tok_s"] / next(x["aggregate_decode_tok_s"] for x in mine
                                                                      if x["k"] == 1 and x["rep"] == r["rep"])
                                    for r in mine if r["k"] == k] for k in ks if k != 1 and 1 in ks}
        per_build[label] = {
            "median_aggregate_decode_tok_s": med,
            "ratios_by_rep": ratios, "median_ratios": {k: statistics.median(v) for k, v in ratios.items()},
            "median_decode_cache_hit_rate": {k: statistics.median(r["decode_cache_hit_rate"] for r in mine if r["k"] == k)
                                             for k in ks},
            "median_hook_decode_ms_per_step": {k: statistics.median(r["hook_decode_ms_per_step"] for r in mine
                                                                    if r["k"] == k) for k in ks},
            "median_decode_read_mb_per_step": {k: statistics.median(r["decode_read_mb_per_step"] for r in mine
                                                                    if r["k"] == k) for k in ks},
        }
    same_texts = all(texts(r) == texts(next(x for x in runs if x["build"] == first and x["k"] == r["k"]))
                     for r in runs)
    report = {"what": __doc__.split("\n\n")[0].replace("\n", " "),
              "command": "python3 bench/serve_batching.py " + " ".join(sys.argv[1:]), "machine": machine(),
              "model": a.model, "budget_mb": a.budget_mb, "unpaged": a.unpaged, "tokens_per_request": a.tokens,
              "builds": dict(builds),
              **(per_build[first] if len(builds) == 1 else {"per_build": per_build}),
              "texts_equal_across_builds": same_texts,
              # Times compare only while the disk kept its speed (bytes and hit rates do not
              # depend on it).
              "disk_steady": disk_steady([r[k] for r in runs for k in ("disk_mb_s_before", "disk_mb_s_after")]),
              "all_ok": same_texts and all(r["exit_code"] == 0 and r["cap"]["oom_kills"] == 0 and r["peak_rss_bytes"] <= budget
                                           and all(q["status"] == 200 and q["tokens"] == a.tokens for q in r["requests"])
                                           for r in runs),
              "runs": runs}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({k: v for k, v in report.items() if k not in ("runs", "machine", "what")}, indent=1))
    sys.exit(0 if report["all_ok"] else 1)


if __name__ == "__main__":
    main()
