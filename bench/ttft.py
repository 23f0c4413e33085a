#!/usr/bin/env python3
"""Time to first token of a long prompt: `generate -n 1` with paged configurations (cold
cache, under a cgroup cap equal to the budget, alternating, `--runs` each) against warm
unpaged prefill at the same ubatch (the compute bound). Every paged run's logits must
equal the unpaged run's at the same ubatch.

    python3 bench/ttft.py -m W1.gguf --budget-mb 4096 -f bench/w1-prompt-2000.txt \
        --config old-default='-ub 128' --config default= --runs 3 --out validate/ttft-w1-4g.json

`--config-bin LABEL=PATH` runs that configuration with another build (before against
after, side by side); the warm unpaged bound is always run with `--bin`.
"""
import argparse, hashlib, json, os, shlex, statistics, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import epmlib  # noqa: E402

MIB = 1 << 20


def generate(a, tmp, tag, flags, cap=None, exe=None):
    stats = os.path.join(tmp, tag + ".json")
    logits = os.path.join(tmp, tag + ".f32")
    # Two compute threads unless the configuration sets its own (`-t auto`, `--threads N`).
    threads = [] if any(f in ("-t", "--threads") or f.startswith("--threads=") for f in flags) else ["-t", "2"]
    cmd = [exe or a.bin, "generate", "-m", a.model, "-f", a.file, "-n", str(a.n), "-c", str(a.ctx), *threads,
           "--stats-file", stats, "--dump-logits", logits, *flags]
    if cap:
        cmd = cap.wrap(cmd)
    epmlib.run(cmd, capture_output=True, text=True)
    s = json.load(open(stats))
    digest = hashlib.sha256(open(logits, "rb").read()).hexdigest()
    prompt = s["tokens"]["prompt"]
    row = {
        "flags": " ".join(flags),
        "ubatch": s["tokens"]["ubatch"],
        "prompt_tokens": prompt,
        "prefill_s": prompt / s["tok_per_s"]["prefill"],
        "prefill_tok_s": s["tok_per_s"]["prefill"],
        # With -n above 1: the decode that follows the prompt (tokens after the first).
        "decode_tok_s": s["tok_per_s"].get("decode", 0.0),
        "read_bytes": s["io"]["read_bytes"],
        "peak_rss_bytes": s["memory"]["peak_rss_bytes"],
        "logits_sha256": digest,
        # The kernel's share: wall time in the advisor's calls, and how the reads went.
        "io": {k: s["io"].get(k, 0) for k in IO_KEYS},
        "whole_layer_reads": s["experts"].get("whole_layer_reads", 0),
    }
    return row


IO_KEYS = ("will_need_us", "evict_us", "whole_read_us", "folio_splits", "late_evictions")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--config", action="append", default=[], help="LABEL=FLAGS (paged)")
    ap.add_argument("--config-bin", action="append", default=[], help="LABEL=PATH: that config's build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-n", type=int, default=1, help="tokens generated (above 1: decode after the prompt too)")
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not epmlib.Cgroup.available():
        sys.exit("needs a writable cgroup v1 memory controller for the cap")
    configs = [(c.split("=", 1)[0], shlex.split(c.split("=", 1)[1])) for c in a.config]
    exes = dict(c.split("=", 1) for c in a.config_bin)
    unknown = set(exes) - {label for label, _ in configs}
    if unknown:
        sys.exit(f"--config-bin names no --config: {sorted(unknown)}")
    tmp = tempfile.mkdtemp(prefix="epm-ttft-")
    rows = {label: [] for label, _ in configs}
    budget = ["--ram-budget-mb", str(a.budget_mb)]
    for r in range(a.runs):
        for label, flags in configs:
            epmlib.drop_cache(a.model)
            with epmlib.Cgroup(a.budget_mb * MIB, tag=f"ttft-{label}") as cap:
                row = generate(a, tmp, f"{label}-{r}", budget + flags, cap, exes.get(label))
                row["bin"] = exes.get(label, a.bin)
                row.update(cap.facts())
            rows[label].append(row)
            print(json.dumps({label: row}), file=sys.stderr)
    # The compute bound: unpaged, warm (the file read once before), at each ubatch used.
    unpaged = {}
    for u in sorted({row["ubatch"] for rs in rows.values() for row in rs}):
        epmlib.run(["cat", a.model], stdout=open(os.devnull, "w"))
        unpaged[u] = generate(a, tmp, f"unpaged-{u}", ["--no-pager", "-ub", str(u)])
    summary = {}
    all_passed = True
    for label, rs in rows.items():
        med = statistics.median(x["prefill_s"] for x in rs)
        u = rs[0]["ubatch"]
        same = all(x["logits_sha256"] == unpaged[x["ubatch"]]["logits_sha256"] for x in rs)
        within = all(x["peak_rss_bytes"] <= a.budget_mb * MIB and x["oom_kills"] == 0 for x in rs)
        all_passed &= same and within
        summary[label] = {
            "ubatch": u,
            "prefill_s_median": round(med, 1),
            "prefill_s_runs": [round(x["prefill_s"], 1) for x in rs],
            "read_gb_median": round(statistics.median(x["read_bytes"] for x in rs) / 1e9, 1),
            "decode_tok_s_median": round(statistics.median(x["decode_tok_s"] for x in rs), 3),
            "against_warm_unpaged_same_ubatch": round(med / unpaged[u]["prefill_s"], 3),
            "logits_equal_unpaged_same_ubatch": same,
            "within_budget_no_oom": within,
        }
    first = configs[0][0]
    for label in summary:
        summary[label]["against_" + first] = round(
            summary[label]["prefill_s_median"] / summary[first]["prefill_s_median"], 3)
    report = {
        "command": "python3 bench/ttft.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
        "machine": epmlib.machine(),
        "model": a.model,
        "budget_mb": a.budget_mb,
        "all_passed": all_passed,
        "summary": summary,
        "warm_unpaged": {str(u): {k: row[k] for k in ("prefill_s", "prefill_tok_s", "logits_sha256")}
                         for u, row in unpaged.items()},
        "runs": rows,
    }
    epmlib.write_report(a.out, report, tmp=tmp, summary_keys=["summary", "warm_unpaged", "all_passed"])


if __name__ == "__main__":
    main()
