#!/usr/bin/env python3
"""Routing traces of every -mini architecture, replayed through the cache policies.

For each -mini preset (plain, hybrid, grouped-expert and two-shard routing alike) and each
routing model (today's popularity skew, and skew with temporal locality, as calibrated in
validate/routing-calibration*.json), this synthesizes the model, generates --tokens tokens
from W1's prompt with a routing trace (the budget holds every expert: nothing is paged, so
the trace is the model's routing alone), and replays it with `epm-run sim` at caches of
10%, 20% and 40% of the experts. One JSON with every table.

    python3 bench/sim_minis.py [--bin target/release/epm-run] [--tokens 288]
        [--out validate/sim-minis.json]
"""
import argparse, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PRESETS = ["qwen3-30b-a3b-mini", "smallthinker-4b-mini", "qwen3.6-35b-a3b-mini",
           "minicpm-v4.7-35b-a3b-mini", "ling-3.0-flash-mini"]
SHARES = [0.1, 0.2, 0.4]


def routing_models():
    """(name, synth flags) of the two calibrated routing models."""
    best = {}
    for f in ["routing-calibration.json", "routing-calibration-2.json"]:
        path = os.path.join(ROOT, "validate", f)
        if not os.path.exists(path):
            continue
        for c in json.load(open(path))["candidates"]:
            kind = "locality" if c["routing_locality"] > 0 else "skew"
            if kind not in best or c["max_error_points"] < best[kind]["max_error_points"]:
                best[kind] = c
    models = [("skew", ["--routing-skew", "0.6"])]  # W1's skew (validate/skew-calibration.json)
    if "locality" in best:
        c = best["locality"]
        models.append(("locality", ["--routing-skew", str(c["routing_skew"]),
                                    "--routing-locality", str(c["routing_locality"]),
                                    "--topic-span", str(c["topic_span"])]))
    return models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/epm-run"))
    ap.add_argument("--tokens", type=int, default=288)
    ap.add_argument("--out", default=os.path.join(ROOT, "validate", "sim-minis.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-sim-minis-")
    report = {"what": "cache policies replayed on routing traces of every -mini architecture",
              "command": "python3 bench/sim_minis.py " + " ".join(sys.argv[1:]),
              "tokens": a.tokens, "shares": SHARES, "runs": []}
    for preset in PRESETS:
        for name, flags in routing_models():
            model = os.path.join(tmp, f"{preset}.gguf")
            trace = os.path.join(tmp, f"{preset}-{name}.trace")
            run([a.bin, "synth", "--preset", preset, "-o", model] + flags, stdout=subprocess.DEVNULL)
            first = sorted(f for f in os.listdir(tmp) if f.startswith(preset) and f.endswith(".gguf"))[0]
            run([a.bin, "generate", "-m", os.path.join(tmp, first), "-f",
                 os.path.join(ROOT, "bench", "w1-prompt-128.txt"), "-n", str(a.tokens), "-c", "4096",
                 "-t", "2", "--ram-budget-mb", "20000", "--no-predict", "--trace-file", trace],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            probe = os.path.join(tmp, "probe.json")
            run([a.bin, "sim", "--trace", trace, "--capacity-experts", "1", "--policies", "lru",
                 "--out", probe], stdout=subprocess.DEVNULL)
            p = json.load(open(probe))
            total = p["n_layers"] * p["n_expert"]
            caps = ",".join(str(max(1, int(total * s))) for s in SHARES)
            out = os.path.join(tmp, f"sim-{preset}-{name}.json")
            run([a.bin, "sim", "--trace", trace, "--capacity-experts", caps, "--out", out],
                stdout=subprocess.DEVNULL)
            sim = json.load(open(out))
            report["runs"].append({"preset": preset, "routing": name, "synth_flags": flags,
                                   "n_layers": sim["n_layers"], "n_expert": sim["n_expert"],
                                   "rows": sim["rows"]})
            for f in os.listdir(tmp):
                if f.endswith(".gguf"):
                    os.remove(os.path.join(tmp, f))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=1)
    for r in report["runs"]:
        for row in r["rows"]:
            pol = row["policies"]
            print(f'{r["preset"]:28} {r["routing"]:9} share {row["capacity_share"]:.2f} '
                  + " ".join(f'{k}={v["hit_rate"]:.3f}' for k, v in pol.items()))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
