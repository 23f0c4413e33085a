#!/usr/bin/env python3
"""Two builds of epm-run compute the same: tokens and dumped logits byte for byte, on every
`-mini` preset and the tiny models, unpaged and paged at the plan's minimum. Used to check
the `cc` build of llama.cpp against the CMake build it replaced, to record the golden
logits digests that tests/kernels.rs compares with (`--golden`), and to check a refactor
against the build before it: `--synth` also compares the files each build synthesizes,
`--serve` also compares what `serve --parallel 1` answers (chat and completions, greedy).

    python3 tools/validate_build.py --bin OLD --bin NEW [--out validate/build-cc-vs-cmake.json]
        [--golden tests/golden/logits.json | --golden ''] [--synth] [--serve]
"""
import argparse, hashlib, json, os, platform, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import request_json, start_server  # noqa: E402

PRESETS = ["tiny", "tiny-dense", "tiny-split", "qwen3-30b-a3b-mini", "smallthinker-4b-mini",
           "qwen3.6-35b-a3b-mini", "minicpm-v4.7-35b-a3b-mini", "ling-3.0-flash-mini"]
PROMPT = "Hello world, the quick brown fox jumps over the lazy dog again"
N = "24"


def cpu_signature():
    """What decides the kernels `-march=native` builds: the CPU model and its flags."""
    info = open("/proc/cpuinfo").read().split("\n\n")[0]
    fields = {k.strip(): v for k, v in (l.split(":", 1) for l in info.splitlines() if ":" in l)}
    flags = fields.get("flags", "").split()
    model = fields.get("model name", "?").strip()
    return model, hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16]


def first_shard(dir, preset):
    p = os.path.join(dir, preset + ".gguf")
    if preset.endswith("-split") or preset.startswith("ling"):
        stem = os.path.join(dir, preset)
        return stem + "-00001-of-00002.gguf"
    return p


def run(binary, model, mode, tmp, tag):
    logits = os.path.join(tmp, tag + ".logits")
    stats = os.path.join(tmp, tag + ".json")
    cmd = [binary, "generate", "-m", model, "-p", PROMPT, "-n", N, "-c", "1024", "-t", "2",
           "--dump-logits", logits, "--stats-file", stats] + mode
    subprocess.run(cmd, check=True, capture_output=True)
    s = json.load(open(stats))
    return {"ids": s["tokens"]["generated_ids"],
            "logits_sha256": hashlib.sha256(open(logits, "rb").read()).hexdigest()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def served(binary, model, flags):
    """What a `--parallel 1` server answers: a chat reply and a completion, greedy."""
    proc, port = start_server([binary, "serve", "-m", model, "--port", "0", "-c", "1024", "-t", "2"] + flags, 120)
    try:
        _, chat = request_json(port, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": PROMPT}], "max_tokens": int(N), "temperature": 0})
        _, comp = request_json(port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": int(N), "temperature": 0})
        return {"chat": chat["choices"][0]["message"]["content"], "chat_usage": chat["usage"],
                "completion": comp["choices"][0]["text"], "completion_usage": comp["usage"]}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True)
    ap.add_argument("--out", default="validate/build-cc-vs-cmake.json")
    ap.add_argument("--golden", default="tests/golden/logits.json")
    ap.add_argument("--synth", action="store_true", help="compare the models each build synthesizes")
    ap.add_argument("--serve", action="store_true", help="compare what serve --parallel 1 answers")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-build-check-")
    rows, golden = [], {}
    for preset in PRESETS:
        split = []
        name = preset
        out = os.path.join(tmp, name + ".gguf")
        subprocess.run([a.bin[0], "synth", "--preset", preset, "-o", out] + split, check=True, capture_output=True)
        model = first_shard(tmp, name) if not os.path.exists(out) else out
        if a.synth:
            digests = []
            for i, b in enumerate(a.bin):
                d = os.path.join(tmp, f"synth-{i}")
                os.makedirs(d, exist_ok=True)
                o = os.path.join(d, name + ".gguf")
                subprocess.run([b, "synth", "--preset", preset, "-o", o], check=True, capture_output=True)
                digests.append(sorted(sha256(os.path.join(d, f)) for f in os.listdir(d)))
                subprocess.run(["rm", "-rf", d])
            same = all(x == digests[0] for x in digests)
            rows.append({"preset": preset, "mode": "synth", "identical": same, "files_sha256": digests})
            print(preset, "synth", "identical" if same else "DIFFERENT", flush=True)
        plan = json.loads(subprocess.run([a.bin[0], "plan", "-m", model, "-c", "1024", "--json"],
                                         check=True, capture_output=True, text=True).stdout)
        min_mb = -(-plan["min_budget_bytes"] // (1 << 20))
        modes = {"unpaged": ["--no-pager"]}
        if plan["expert_bytes"] > 0:
            modes["paged-min"] = ["--ram-budget-mb", str(min_mb)]
        for mode, flags in modes.items():
            results = [run(b, model, flags, tmp, f"{name}-{mode}-{i}") for i, b in enumerate(a.bin)]
            same = all(r == results[0] for r in results)
            rows.append({"preset": preset, "mode": mode, "identical": same,
                         "logits_sha256": [r["logits_sha256"] for r in results],
                         "tokens": results[0]["ids"]})
            golden[f"{preset}/{mode}"] = results[0]["logits_sha256"]
            print(preset, mode, "identical" if same else "DIFFERENT", flush=True)
            if a.serve:
                answers = [served(b, model, flags) for b in a.bin]
                same = all(x == answers[0] for x in answers)
                rows.append({"preset": preset, "mode": f"serve-{mode}", "identical": same, "answers": answers})
                print(preset, f"serve-{mode}", "identical" if same else "DIFFERENT", flush=True)
    model_name, flags = cpu_signature()
    report = {"what": "tokens and dumped logits of several epm-run builds, byte for byte",
              "command": "python3 tools/validate_build.py " + " ".join(sys.argv[1:]),
              "machine": {"cpu": model_name, "cpu_flags_sha256": flags, "kernel": platform.release()},
              "binaries": a.bin, "prompt": PROMPT, "n_predict": int(N),
              "checks": ["generate"] + (["synth"] if a.synth else []) + (["serve --parallel 1"] if a.serve else []),
              "all_identical": all(r["identical"] for r in rows), "runs": rows}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    if a.golden:
        os.makedirs(os.path.dirname(a.golden), exist_ok=True)
        g = json.load(open(a.golden)) if os.path.exists(a.golden) else {}
        g[flags] = {"cpu": model_name, "recorded_with": a.bin[0], "prompt": PROMPT,
                    "n_predict": int(N), "logits_sha256": golden}
        json.dump(g, open(a.golden, "w"), indent=2)
    print(json.dumps({"all_identical": report["all_identical"]}))
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if report["all_identical"] else 1)


if __name__ == "__main__":
    main()
