#!/usr/bin/env python3
"""Calibrate `synth --routing-skew` so that LRU hit rates on the synthetic qwen3-30b-a3b
resemble published figures for real MoE models: about 0.89 / 0.67 / 0.45 with 50% / 25% /
12.5% of each layer's experts resident.

For each candidate skew it synthesizes the preset with fewer layers (the router bias is per
layer, so per-layer popularity does not depend on depth), runs W1's decode (128-token prompt,
64 generated tokens) with a routing trace, and replays the decode steps of the trace through
a per-layer LRU of each capacity (the cache warmed by the prompt). Writes the table and the
chosen skew to validate/skew-calibration.json.

    python3 tools/calibrate_skew.py [--bin target/release/epm-run] [--skews 0,1,1.5,2,2.5,3]
"""
import argparse, json, os, subprocess, sys, tempfile
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import read_trace  # noqa: E402

TARGET = {0.5: 0.89, 0.25: 0.67, 0.125: 0.45}


def lru_hit_rate(records, n_expert, fraction, decode_from):
    """Per-layer LRU holding `fraction` of the experts; hits over decode-step accesses."""
    cap = max(1, int(round(n_expert * fraction)))
    caches, hits, total = {}, 0, 0
    for step, layer, tokens in records:
        cache = caches.setdefault(layer, OrderedDict())
        for ids in tokens:
            for e in set(ids):
                if step >= decode_from:
                    total += 1
                    hits += e in cache
                cache[e] = True
                cache.move_to_end(e)
                while len(cache) > cap:
                    cache.popitem(last=False)
    return hits / max(total, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--skews", default="0,1,1.5,2,2.5,3")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--prompt-file", default="bench/w1-prompt-128.txt")
    ap.add_argument("--out", default="validate/skew-calibration.json")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for skew in [float(s) for s in a.skews.split(",")]:
            model = os.path.join(tmp, "m.gguf")
            subprocess.run([a.bin, "synth", "--preset", "qwen3-30b-a3b", "--layers", str(a.layers),
                            "--routing-skew", str(skew), "-o", model], check=True, capture_output=True)
            trace = os.path.join(tmp, "t.bin")
            subprocess.run([a.bin, "generate", "-m", model, "-f", a.prompt_file, "-n", "64",
                            "-c", "4096", "-t", "2", "--ram-budget-mb", "16384",
                            "--trace-file", trace], check=True, capture_output=True)
            n_expert, _, records = read_trace(trace)
            # The prompt is evaluated in ubatches; every later step is one generated token.
            prompt_steps = next(s for s, _, t in records if len(t) == 1)
            rates = {f: lru_hit_rate(records, n_expert, f, prompt_steps) for f in TARGET}
            err = sum((rates[f] - TARGET[f]) ** 2 for f in TARGET)
            rows.append({"skew": skew, "lru_hit_rate": {str(f): round(r, 3) for f, r in rates.items()},
                         "squared_error": round(err, 4)})
            print(json.dumps(rows[-1]), flush=True)
            os.remove(model)
    best = min(rows, key=lambda r: r["squared_error"])
    out = {"command": "python3 tools/calibrate_skew.py " + " ".join(sys.argv[1:]),
           "method": "per-layer LRU replay of the decode steps of a routing trace "
                     f"(qwen3-30b-a3b --layers {a.layers}, W1 prompt, 64 generated tokens)",
           "target": {str(f): r for f, r in TARGET.items()},
           "chosen_skew": best["skew"], "candidates": rows}
    json.dump(out, open(a.out, "w"), indent=2)
    print("chosen skew", best["skew"])


if __name__ == "__main__":
    main()
