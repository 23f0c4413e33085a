#!/usr/bin/env python3
"""Measure the core paging loop and record it in validate/core-paging.json.

Synthesizes the `tiny` preset with 64 experts (or the model given with -m), runs it unpaged
and paged at the minimum budget from `plan`, at minimum + 24 MiB and at 4 GiB, each paged
run inside a cgroup v1 memory cap equal to its budget where the controller is writable, and
records tokens/logits identity, peak RSS split, evictions, hit rate and tok/s.

    python3 tools/validate_core.py [--bin target/release/epm-run] [--out validate/core-paging.json]
"""
import argparse, hashlib, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import Cgroup, machine, run, stats_decode  # noqa: E402

MIB = 1 << 20
PROMPT = "The quick brown fox jumps over the lazy dog, and the pager reads each expert"


def run_capped(cmd, cgroup=None):
    return run(cgroup.wrap(cmd) if cgroup else cmd, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/core-paging.json")
    ap.add_argument("-n", type=int, default=64)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "tiny64.gguf")
    run_capped([a.bin, "synth", "--preset", "tiny", "--experts", "64", "-o", model])
    plan = json.loads(run_capped([a.bin, "plan", "-m", model, "-c", "1024", "--json"]))
    min_mb = -(-plan["min_budget_bytes"] // MIB)
    rows = []
    ref = None
    for label, flags in [("unpaged", ["--no-pager"]), ("paged-min", ["--ram-budget-mb", str(min_mb)]),
                         ("paged-min+24", ["--ram-budget-mb", str(min_mb + 24)]), ("paged-4096", ["--ram-budget-mb", "4096"])]:
        stats, logits = os.path.join(tmp, label + ".json"), os.path.join(tmp, label + ".logits")
        cmd = [a.bin, "generate", "-m", model, "-p", PROMPT, "-n", str(a.n), "-c", "1024", "-t", "2",
               "--stats-file", stats, "--dump-logits", logits] + flags
        budget = int(flags[1]) * MIB if flags[0] == "--ram-budget-mb" else None
        cg = Cgroup(budget, label) if budget and Cgroup.available() else None
        run_capped(cmd, cg)
        s = json.load(open(stats))
        digest = hashlib.sha256(open(logits, "rb").read()).hexdigest()
        if ref is None:
            ref = (s["tokens"]["generated_ids"], digest)
        row = {
            "config": label,
            "command": " ".join(cmd),
            "budget_bytes": budget,
            "expert_budget_bytes": s["expert_budget_bytes"],
            "tokens_identical": s["tokens"]["generated_ids"] == ref[0],
            "logits_sha256": digest,
            "logits_identical": digest == ref[1],
            "distinct_generated_tokens": len(set(s["tokens"]["generated_ids"])),
            "experts": s["experts"],
            "memory": s["memory"],
            "io": s["io"],
            "tok_per_s": s["tok_per_s"],
            "within_budget": budget is None or s["memory"]["peak_rss_bytes"] <= budget,
        }
        if cg:
            row["cgroup"] = cg.facts()
            cg.close()
        elif budget:
            row["cgroup"] = {"cap": "none (no writable cgroup v1 memory controller)"}
        rows.append(row)
    out = {
        "what": "core paging loop on the synthetic tiny preset with 64 experts (synthetic weights)",
        "command": "python3 tools/validate_core.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "plan": plan,
        "runs": rows,
        "all_identical": all(r["tokens_identical"] and r["logits_identical"] for r in rows),
        "all_within_budget": all(r["within_budget"] for r in rows),
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(out, open(a.out, "w"), indent=2)
    print(json.dumps({k: out[k] for k in ("all_identical", "all_within_budget")}))
    for r in rows:
        m = r["memory"]
        print(f'{r["config"]:<14} peak {m["peak_rss_bytes"]/MIB:7.1f} MiB (anon {m["peak_rss_anon_bytes"]/MIB:5.1f}, file {m["peak_rss_file_bytes"]/MIB:6.1f})'
              f' budget {(r["budget_bytes"] or 0)/MIB:6.0f}  decode hit {stats_decode(r)["cache_hit_rate"] or 0:.3f} evict {r["experts"]["evictions"]:5d}'
              f'  prefill {r["tok_per_s"]["prefill"]:6.1f} decode {r["tok_per_s"]["decode"]:6.1f} tok/s')
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
