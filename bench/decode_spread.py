#!/usr/bin/env python3
"""Many short warm decodes per build, alternating: the spread of decode speed, not only
its median. A run that decodes at less than half the build's median is counted as an
outlier (a scheduler's misplacement of compute threads shows up so, not in a median of 3).

No cgroup cap and no cache drop: the model is small and stays cached, so the runs differ
only in how their threads were scheduled.

    python3 bench/decode_spread.py --bin /path/before --bin target/release/epm-run \
        --label before --label after -m mini.gguf --budget-mb 2000 -n 256 --runs 15 \
        --out validate/compute-pool-mini-spread-xeon.json
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from epmlib import add_build_args, build_labels, machine  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    add_build_args(ap)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("-p", "--prompt", default="Tell me a story")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--timeout-s", type=int, default=120, help="per run")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    labels = build_labels(a)
    speeds = {label: [] for label in labels}
    tokens = {}
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        for rep in range(a.runs):
            for label, exe in zip(labels, a.bin):
                cmd = [exe, "generate", "-m", a.model, "--ram-budget-mb", str(a.budget_mb),
                       "-t", a.threads, "-p", a.prompt, "-n", str(a.n),
                       "--stats-file", stats_path]
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True, timeout=a.timeout_s)
                with open(stats_path) as f:
                    s = json.load(f)
                speeds[label].append(s["tok_per_s"]["decode"])
                tokens.setdefault(label, s["tokens"]["generated_ids"])
                print(f"rep {rep} {label}: {s['tok_per_s']['decode']:.1f} tok/s", file=sys.stderr)
    summary = {}
    for label, xs in speeds.items():
        med = statistics.median(xs)
        summary[label] = {"median": med, "min": min(xs), "max": max(xs), "n": len(xs),
                          "below_half_the_median": sum(x < med / 2 for x in xs)}
    first = tokens[labels[0]]
    report = {
        "what": "warm decode speed of each build over many runs, alternating: its spread",
        "command": "python3 " + " ".join(sys.argv),
        "machine": machine(),
        "model": a.model, "budget_mb": a.budget_mb, "n_predict": a.n, "threads": a.threads,
        "binaries": dict(zip(labels, a.bin)),
        "summary": summary,
        "decode_tok_s": speeds,
        "all_same_tokens": all(t == first for t in tokens.values()),
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
