#!/usr/bin/env python3
"""Synthesize every full-size preset, record file and expert sizes (from `plan --json`)
against the real models' figures, and the synthesis time, in validate/synth.json.

    python3 tools/validate_synth.py [--bin target/release/epm-run] [--dir /work/models] [--keep]
"""
import argparse, json, os, platform, subprocess, sys, time

GIB = 1 << 30
# Real GGUF sizes (shared/prior-art.md, section 2): expert bytes and file bytes.
REAL = {
    "smallthinker-4b": (2_194_145_280, 2_630_212_704),
    "qwen3-30b-a3b": (16.3 * GIB, 17.3 * GIB),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--dir", default="/tmp/epm-synth")
    ap.add_argument("--out", default="validate/synth.json")
    ap.add_argument("--keep", action="store_true", help="keep the models")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows = []
    for preset, (real_expert, real_file) in REAL.items():
        path = os.path.join(a.dir, preset + ".gguf")
        cmd = [a.bin, "synth", "--preset", preset, "-o", path]
        t0 = time.time()
        subprocess.run(cmd, check=True, capture_output=True)
        secs = time.time() - t0
        plan = json.loads(subprocess.run([a.bin, "plan", "-m", path, "--json"], check=True, capture_output=True, text=True).stdout)
        size = plan["model_bytes"]
        rows.append({
            "preset": preset,
            "command": " ".join(cmd),
            "seconds": round(secs, 2),
            "mb_per_s": round(size / 1e6 / secs, 1),
            "file_bytes": size,
            "expert_bytes": plan["expert_bytes"],
            "real_file_bytes": int(real_file),
            "real_expert_bytes": int(real_expert),
            "file_ratio": round(size / real_file, 4),
            "expert_ratio": round(plan["expert_bytes"] / real_expert, 4),
            "n_moe_layers": plan["n_moe_layers"],
            "n_expert": plan["n_expert"],
            "n_expert_used": plan["n_expert_used"],
        })
        print(json.dumps(rows[-1]))
        if not a.keep:
            os.remove(path)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    out = {"command": "python3 tools/validate_synth.py " + " ".join(sys.argv[1:]),
           "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()},
           "presets": rows}
    json.dump(out, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
