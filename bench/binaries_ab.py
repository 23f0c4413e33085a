#!/usr/bin/env python3
"""Two (or more) builds of epm-run side by side on one workload: before against after.

Each repetition runs every binary in turn (alternating, so disk drift hits all alike),
each through its own `epm-run ab --configs epm`: a fresh child from a cold page cache
inside a cgroup cap equal to the budget, with the child's stats embedded in the report.
The generated tokens of every run must match the first binary's.

    python3 bench/binaries_ab.py --bin /path/before --bin target/release/epm-run \
        -m qwen3-30b-a3b-skew0.6.gguf --budget-mb 4096 -n 32 --runs 3 \
        --out validate/restructure-w1-4g.json [--arg=--no-predict ...] [--label before --label after]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from epmlib import add_build_args, build_labels, disk_read_mb_s, disk_steady, machine, stats_decode  # noqa: E402


def spread(xs):
    xs = sorted(x for x in xs if x is not None)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)} if xs else None


def main():
    ap = argparse.ArgumentParser()
    add_build_args(ap)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-c", type=int, default=4096)
    ap.add_argument("-t", "--threads", action="append",
                    help="compute threads (or auto), once for all binaries or once per --bin; default 2")
    ap.add_argument("-f", "--prompt-file", default=os.path.join(HERE, "w1-prompt-128.txt"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--arg", action="append", default=[], help="an extra generate flag for every binary")
    ap.add_argument("--bin-args", action="append",
                    help="extra generate flags of one binary (space-separated, '' for none); "
                         "once per --bin, in order: the same build with and without a flag")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    labels = build_labels(a)
    threads = a.threads or ["2"]
    threads = threads * len(a.bin) if len(threads) == 1 else threads
    assert len(threads) == len(a.bin), "one -t for all, or one per --bin"
    bin_args = a.bin_args or [""] * len(a.bin)
    assert len(bin_args) == len(a.bin), "one --bin-args per --bin"
    tmp = tempfile.mkdtemp(prefix="epm-binaries-ab-")
    runs = {l: [] for l in labels}
    ref_ids = None
    for rep in range(a.runs):
        for label, b, t, extra in zip(labels, a.bin, threads, bin_args):
            out = os.path.join(tmp, f"{label}-{rep}.json")
            cmd = [b, "ab", "-m", a.model, "--budget-mb", str(a.budget_mb), "--configs", "epm",
                   "-n", str(a.n), "-c", str(a.c), "-t", t, "-f", a.prompt_file,
                   "--runs", "1", "--out", out] + [f"--epm-arg={x}" for x in a.arg + extra.split()]
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
            disk_before = disk_read_mb_s(a.model)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            disk_after = disk_read_mb_s(a.model)
            row = json.load(open(out))["rows"][0]
            s = row["stats"]
            ids = s["tokens"]["generated_ids"]
            ref_ids = ref_ids or ids
            d = stats_decode(s)
            steps = max(s["io"]["decode_steps"], 1)
            r = {"decode_tok_s": row["decode_tok_s"], "prefill_tok_s": row["prefill_tok_s"],
                 "peak_rss_bytes": row["child"]["peak_rss_bytes"],
                 "cgroup_max_usage_bytes": row["cap_facts"]["max_usage_bytes"],
                 "oom_kills": row["cap_facts"]["oom_kills"], "cap": row["cap"],
                 "cgroup_limit_hits": row["cap_facts"].get("limit_hits"),
                 "cgroup_kernel_peak_bytes": s["memory"].get("cgroup_kernel_peak_bytes"),
                 "cgroup_deduction_peak_bytes": s["memory"].get("cgroup_deduction_peak_bytes"),
                 "within_budget": row["within_budget"], "same_tokens": ids == ref_ids,
                 "decode_read_bytes_per_step": s["io"]["decode_read_bytes"] / steps,
                 "decode_miss_bytes_per_step": d["miss_bytes"] / steps,
                 "decode_cache_hit_rate": d["cache_hit_rate"], "decode_resident_rate": d["resident_rate"],
                 "hook_decode_ms_per_step": s["hook"]["decode_busy_us"] / 1e3 / steps,
                 "advice_calls_ms_per_token": (s["io"]["will_need_us"] + s["io"]["evict_us"]) / 1e3
                 / max(s["tokens"]["prompt"] + s["tokens"]["generated"], 1),
                 "assist_calls": s["io"].get("assist_calls", 0),
                 "assist_steps_shared": s["io"].get("assist_steps_shared", 0),
                 "assist_steps_alone": s["io"].get("assist_steps_alone", 0),
                 "predicted_per_token": s["prediction"].get("experts_per_token"),
                 "rank_accuracy": s["prediction"].get("rank_accuracy", []),
                 "stray_cache_bytes_at_exit": s["experts"].get("stray_cache_bytes_at_exit"),
                 "disk_mb_s_before": disk_before, "disk_mb_s_after": disk_after}
            runs[label].append(r)
            print(label, rep, r, file=sys.stderr, flush=True)
    summary = {l: {k: spread([r[k] for r in rs]) for k in ("decode_tok_s", "prefill_tok_s",
                                                           "decode_read_bytes_per_step",
                                                           "hook_decode_ms_per_step")}
               for l, rs in runs.items()}
    first = labels[0]
    ratios = {l: {"decode_tok_s_over_" + first: summary[l]["decode_tok_s"]["median"] / summary[first]["decode_tok_s"]["median"],
                  "per_rep": [x["decode_tok_s"] / y["decode_tok_s"] for x, y in zip(runs[l], runs[first])]}
              for l in labels[1:]}
    report = {"what": "the same workload through several epm-run builds, alternating, cold, capped",
              "command": "python3 bench/binaries_ab.py " + " ".join(sys.argv[1:]),
              "machine": machine(), "model": a.model, "budget_mb": a.budget_mb, "n_predict": a.n,
              "binaries": dict(zip(labels, a.bin)), "bin_args": dict(zip(labels, bin_args)), "threads": dict(zip(labels, threads)), "summary": summary, "ratios": ratios,
              "all_same_tokens": all(r["same_tokens"] for rs in runs.values() for r in rs),
              "all_within_budget": all(r["within_budget"] for rs in runs.values() for r in rs),
              # Times compare only while the disk kept its speed.
              "disk_steady": disk_steady([r[k] for rs in runs.values() for r in rs
                                          for k in ("disk_mb_s_before", "disk_mb_s_after")]),
              "runs": runs}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({"summary": {l: summary[l]["decode_tok_s"] for l in labels}, "ratios": ratios,
                      "all_same_tokens": report["all_same_tokens"], "disk_steady": report["disk_steady"]}, indent=1))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
