#!/usr/bin/env python3
"""Decode speed against the context a generation decodes after: `generate -n N` after a
short and a long prompt, paged (cold cache, under a cgroup cap equal to the budget) and
unpaged (warm: the file read once before), alternating, `--runs` each. With `--server`,
also `serve`, paged and unpaged: a fresh server per run (paged under the same cap), one
llama.cpp-native `/completion` of the same prompt, and the figures from its `/stats`; the
server adds no fall of its own when its slowdown matches `generate`'s in the same mode.
Reports seconds per decoded token, the decode cache hit rate and the bytes read per decode
step, and how much decode slows from the short to the long prompt, paged and unpaged:
paging adds no fall of its own when the paged slowdown (in seconds per token) is no larger
than the unpaged one.

    python3 bench/context_decode.py -m W1.gguf --budget-mb 8192 \
        --prompt short=bench/w1-prompt-128.txt --prompt long=bench/w1-prompt-2000.txt \
        --flags='-ub 512' [--label after --label-bin before=OLD/epm-run] [--server] --runs 3 \
        --out validate/context-decode-w1-8g.json
"""
import argparse, json, os, shlex, statistics, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import epmlib  # noqa: E402

MIB = 1 << 20


def run_one(a, exe, tmp, tag, prompt, flags, cap=None):
    stats = os.path.join(tmp, tag + ".json")
    cmd = [exe, "generate", "-m", a.model, "-f", prompt, "-n", str(a.n), "-c", str(a.ctx), "-t", "2",
           "--stats-file", stats, *shlex.split(a.flags), *flags]
    if cap:
        cmd = cap.wrap(cmd)
    epmlib.run(cmd, capture_output=True, text=True)
    return figures(json.load(open(stats)))


def run_server(a, exe, prompt, cap=None, flags=None):
    """One fresh server (under `cap` when given): the prompt as one `/completion` of `-n`
    tokens, greedy. `flags` default to the budget's (paged)."""
    flags = flags if flags is not None else ["--ram-budget-mb", str(a.budget_mb)]
    cmd = [exe, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2", *flags, *shlex.split(a.flags)]
    cmd = cap.wrap(cmd) if cap else cmd
    proc, port = epmlib.start_server(cmd)
    try:
        status, body = epmlib.request_json(port, "POST", "/completion", {
            "prompt": open(prompt).read(), "n_predict": a.n, "temperature": 0}, timeout=3600)
        if status != 200 or body.get("tokens_predicted") != a.n:
            sys.exit(f"/completion: HTTP {status}: {json.dumps(body)[:300]}")
        status, s = epmlib.request_json(port, "GET", "/stats")
        if status != 200:
            sys.exit(f"/stats: HTTP {status}")
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    return figures(s)


def figures(s):
    """What one run's stats say about its decode."""
    steps = max(s["io"]["decode_steps"], 1)
    d = s["experts"]["decode"]
    return {
        "prompt_tokens": s["tokens"]["prompt"],
        "ubatch": s["tokens"]["ubatch"],
        "decode_s_per_token": 1 / s["tok_per_s"]["decode"],
        "decode_hit_rate": d["cache_hit_rate"],
        "decode_read_mb_per_step": s["io"]["decode_read_bytes"] / steps / 1e6,
        "peak_rss_bytes": s["memory"]["peak_rss_bytes"],
        "compute_buffer_bytes": s["memory"].get("compute_buffer_bytes", 0),
        "generated_ids": s["tokens"]["generated_ids"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--prompt", action="append", required=True, help="LABEL=FILE, shortest first")
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--label", default="this build")
    ap.add_argument("--label-bin", action="append", default=[], help="LABEL=PATH: another build, paged only")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--server", action="store_true", help="also `serve`, paged and unpaged, a fresh server per run")
    ap.add_argument("--flags", default="", help="flags for every run (e.g. '-ub 512': tokens are compared across runs)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not epmlib.Cgroup.available():
        sys.exit("needs a writable cgroup v1 memory controller for the cap")
    prompts = [p.split("=", 1) for p in a.prompt]
    builds = [(a.label, a.bin)] + [tuple(x.split("=", 1)) for x in a.label_bin]
    tmp = tempfile.mkdtemp(prefix="epm-ctxdec-")
    rows = {}

    def record(key, row):
        rows.setdefault(key, []).append(row)
        print(json.dumps({key: row}), file=sys.stderr)

    def cold_capped(key, run):
        """`run(cap)` from a cold cache under a cap equal to the budget, recorded as `key`
        with the disk's speed just before and after it."""
        epmlib.drop_cache(a.model)
        disk_before = epmlib.disk_read_mb_s(a.model)
        with epmlib.Cgroup(a.budget_mb * MIB, tag="ctxdec") as cap:
            row = run(cap)
            row.update(cap.facts())
        row.update(disk_mb_s_before=disk_before, disk_mb_s_after=epmlib.disk_read_mb_s(a.model))
        record(key, row)

    for r in range(a.runs):
        for plabel, pfile in prompts:
            for blabel, exe in builds:
                key = f"paged {blabel} {plabel}"
                cold_capped(key, lambda cap: run_one(a, exe, tmp, f"{key}-{r}".replace(" ", "_"), pfile,
                                                     ["--ram-budget-mb", str(a.budget_mb)], cap))
            if a.server:
                cold_capped(f"paged server {plabel}", lambda cap: run_server(a, a.bin, pfile, cap))
        # Unpaged runs are warm: the file is read once per repetition, not once per prompt.
        epmlib.run(["cat", a.model], stdout=open(os.devnull, "w"))
        for plabel, pfile in prompts:
            key = f"unpaged {plabel}"
            record(key, run_one(a, a.bin, tmp, f"{key}-{r}".replace(" ", "_"), pfile, ["--no-pager"]))
            if a.server:
                record(f"unpaged server {plabel}", run_server(a, a.bin, pfile, flags=["--no-pager"]))
    med = lambda key, field: statistics.median(x[field] for x in rows[key])  # noqa: E731
    summary = {key: {
        "decode_s_per_token_median": round(med(key, "decode_s_per_token"), 3),
        "decode_s_per_token_runs": [round(x["decode_s_per_token"], 3) for x in rs],
        "decode_hit_rate_median": med(key, "decode_hit_rate"),
        "decode_read_mb_per_step_median": round(med(key, "decode_read_mb_per_step"), 1),
        "ubatch": rs[0]["ubatch"],
        "prompt_tokens": rs[0]["prompt_tokens"],
    } for key, rs in rows.items()}
    # How each longer prompt slows decode against the shortest, per mode.
    short = prompts[0][0]
    falls = {}
    for mode in [f"paged {b}" for b, _ in builds] + ["paged server"] * a.server + ["unpaged"] + ["unpaged server"] * a.server:
        s_short = summary[f"{mode} {short}"]["decode_s_per_token_median"]
        for plabel, _ in prompts[1:]:
            s_long = summary[f"{mode} {plabel}"]["decode_s_per_token_median"]
            falls.setdefault(mode, {})[f"{plabel}_over_{short}"] = {
                "ratio": round(s_long / s_short, 3), "added_s_per_token": round(s_long - s_short, 3)}
    unpaged_ids = {p: rows[f"unpaged {p}"][0]["generated_ids"] for p, _ in prompts}
    same = all(x["generated_ids"] == unpaged_ids[key.rsplit(" ", 1)[1]] for key, rs in rows.items() for x in rs)
    within = all(x["peak_rss_bytes"] <= a.budget_mb * MIB and x.get("oom_kills", 0) == 0
                 for key, rs in rows.items() if key.startswith("paged") for x in rs)
    report = {
        "command": "python3 bench/context_decode.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
        "machine": epmlib.machine(),
        "model": a.model,
        "budget_mb": a.budget_mb,
        "all_passed": same and within,
        "tokens_equal_unpaged": same,
        "within_budget_no_oom": within,
        # Times compare only while the disk kept its speed.
        "disk_steady": epmlib.disk_steady([x[k] for key, rs in rows.items() if key.startswith("paged")
                                           for x in rs for k in ("disk_mb_s_before", "disk_mb_s_after")]),
        "falls": falls,
        "summary": summary,
        "runs": rows,
    }
    epmlib.write_report(a.out, report, tmp=tmp, summary_keys=["falls", "summary", "all_passed", "disk_steady"])


if __name__ == "__main__":
    main()
