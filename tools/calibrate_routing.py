#!/usr/bin/env python3
"""Calibrate the synthetic routing models against published replays of real routing.

Published figures (Qwen3-30B-A3B traces, prior-art section 6): at a 3000 MiB cache with
each token's best 6 experts, LRU 70.6%, LFU 71.3%, Belady 87.8%; with all 8, LRU 53% at
2000 MiB and 76% at 4000 MiB. Capacities are shares of qwen3-30b-a3b's expert bytes.

For each candidate (routing skew, locality, topic span) this synthesizes qwen3-30b-a3b with
fewer layers (routing is per layer, so shares carry over), generates --tokens tokens from
W1's prompt with a routing trace (every expert fits the budget: nothing is paged), and
replays the trace with `epm-run sim` at those shares. The candidate whose figures are
nearest (largest absolute error, in points) wins; both models are recorded: today's
popularity skew alone, and skew with temporal locality.

    python3 tools/calibrate_routing.py [--bin target/release/epm-run] [--layers 6]
        [--tokens 320] [--grid skew,locality,span;...] [--out validate/routing-calibration.json]
"""
import argparse, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = os.path.join(ROOT, "bench", "w1-prompt-128.txt")
# Expert bytes of the full qwen3-30b-a3b preset, in MiB (validate/synth.json).
FULL_EXPERT_MIB = 16742.0
TARGETS = [  # (top_k, cache MiB, policy, published hit rate)
    (6, 3000, "lru", 0.706), (6, 3000, "lfu", 0.713), (6, 3000, "belady", 0.878),
    (8, 2000, "lru", 0.53), (8, 4000, "lru", 0.76),
]
DEFAULT_GRID = ("0.6,0,32;"  # today's model: popularity skew only
                "0.3,0.5,16;0.3,0.6,16;0.3,0.7,16;0.45,0.5,16;0.45,0.6,16;0.45,0.7,16;"
                "0.3,0.6,48;0.45,0.6,48;0.3,0.7,48;0.6,0.6,16;0.6,0.7,16")


def figures(binary, model, trace, layers, n_expert, tmp):
    """Hit rates at each target's capacity share."""
    out = {}
    for top_k in sorted({t[0] for t in TARGETS}):
        caps = sorted({mib for k, mib, _, _ in TARGETS if k == top_k})
        experts = [round(mib / FULL_EXPERT_MIB * layers * n_expert) for mib in caps]
        js = os.path.join(tmp, f"sim-{top_k}.json")
        run([binary, "sim", "--trace", trace, "--capacity-experts", ",".join(map(str, experts)),
             "--top-k", str(top_k), "--policies", "lru,lfu,lfu-decay,lfu-decay-0.97,lfu-decay-0.99,arc,2q,per-layer-lfu,belady",
             "--out", js], stdout=subprocess.DEVNULL)
        rows = json.load(open(js))["rows"]
        for mib, row in zip(caps, rows):
            for name, v in row["policies"].items():
                out[f"top{top_k}@{mib}MiB/{name}"] = v["hit_rate"]
    return out


def error(fig):
    return max(abs(fig[f"top{k}@{mib}MiB/{p}"] - want) for k, mib, p, want in TARGETS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/epm-run"))
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=320)
    ap.add_argument("--grid", default=DEFAULT_GRID)
    ap.add_argument("--keep-traces", help="copy the chosen models' traces here")
    ap.add_argument("--out", default=os.path.join(ROOT, "validate", "routing-calibration.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-calibrate-")
    rows = []
    for cand in a.grid.split(";"):
        skew, locality, span = cand.split(",")
        model = os.path.join(tmp, "m.gguf")
        run([a.bin, "synth", "--preset", "qwen3-30b-a3b", "--layers", str(a.layers), "--routing-skew", skew,
             "--routing-locality", locality, "--topic-span", span, "-o", model], stdout=subprocess.DEVNULL)
        trace = os.path.join(tmp, f"trace-{skew}-{locality}-{span}.bin")
        run([a.bin, "generate", "-m", model, "-f", PROMPT, "-n", str(a.tokens), "-c", "4096", "-t", "2",
             "--ram-budget-mb", "20000", "--no-predict", "--trace-file", trace], stdout=subprocess.DEVNULL)
        fig = figures(a.bin, model, trace, a.layers, 128, tmp)
        rows.append({"routing_skew": float(skew), "routing_locality": float(locality), "topic_span": int(span),
                     "figures": fig, "max_error_points": 100 * error(fig), "trace": trace})
        print(cand, "max error %.1f points" % rows[-1]["max_error_points"], flush=True)
        os.remove(model)
    skew_only = [r for r in rows if r["routing_locality"] == 0]
    with_locality = [r for r in rows if r["routing_locality"] > 0]
    best = min(with_locality, key=lambda r: r["max_error_points"]) if with_locality else None
    base = min(skew_only, key=lambda r: r["max_error_points"]) if skew_only else None
    if a.keep_traces:
        os.makedirs(a.keep_traces, exist_ok=True)
        for name, r in (("skew", base), ("locality", best)):
            if r:
                dst = os.path.join(a.keep_traces, f"calibration-{name}.trace")
                subprocess.run(["cp", r["trace"], dst], check=True)
    report = {
        "what": "synthetic routing models against published replays of real Qwen3-30B-A3B routing",
        "command": "python3 tools/calibrate_routing.py " + " ".join(sys.argv[1:]),
        "targets": [{"top_k": k, "cache_mib": mib, "cache_share": mib / FULL_EXPERT_MIB, "policy": p, "published": w}
                    for k, mib, p, w in TARGETS],
        "layers": a.layers, "generated_tokens": a.tokens, "prompt": os.path.relpath(PROMPT, ROOT),
        "chosen": {"skew_only": base and {k: base[k] for k in ("routing_skew", "routing_locality", "topic_span", "max_error_points")},
                   "with_locality": best and {k: best[k] for k in ("routing_skew", "routing_locality", "topic_span", "max_error_points")}},
        "within_3_points": best is not None and best["max_error_points"] <= 3.0,
        "candidates": [{k: v for k, v in r.items() if k != "trace"} for r in rows],
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps(report["chosen"], indent=1))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
