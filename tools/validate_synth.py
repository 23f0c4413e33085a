#!/usr/bin/env python3
"""Synthesize every full-size preset, record file and expert sizes (from `plan --json`)
against the real models' figures, and the synthesis time, in validate/synth.json. Presets
too big for the disk (ling-3.0-flash, 77 GB) are sized with `synth --dry-run` and timed
with fewer layers. With fio installed, the disk's sequential write bandwidth is probed
first, so the synthesis speed can be read as a fraction of it.

    python3 tools/validate_synth.py [--bin target/release/epm-run] [--dir /work/models] [--keep]
"""
import argparse, json, os, platform, subprocess, sys, time

GIB = 1 << 30
# Real GGUF sizes (shared/prior-art.md, section 2): expert bytes and file bytes.
REAL = {
    "smallthinker-4b": (2_194_145_280, 2_630_212_704),
    "qwen3-30b-a3b": (16.3 * GIB, 17.3 * GIB),
    "qwen3.6-35b-a3b": (18.22 * GIB, 22.1e9),
    "minicpm-v4.7-35b-a3b": (18.16 * GIB, 21_166_255_008),
    "ling-3.0-flash": (69.46 * GIB, 77_010_144_672),
    # ggml-org's MXFP4 GGUFs (12.8 GiB; about 60 GiB in three shards); expert bytes from
    # the published shapes: layers x experts x 3 x 2880 x 2880 at 17 bytes per 32.
    "gpt-oss-20b": (24 * 32 * 3 * 2880 * 2880 * 17 // 32, 12.8 * GIB),
    "gpt-oss-120b": (36 * 128 * 3 * 2880 * 2880 * 17 // 32, 60.6 * GIB),
}
# Presets whose full size is only computed (dry run); synthesis is timed at this many layers.
TIMED_AT_LAYERS = {"ling-3.0-flash": 12, "gpt-oss-120b": 8}


def dry_run(binary, preset, path, extra=()):
    out = subprocess.run([binary, "synth", "--preset", preset, "-o", path, "--dry-run", *extra],
                         check=True, capture_output=True, text=True).stdout
    last = out.strip().splitlines()[-1].split()
    return int(last[0]), int(last[5])  # "<file> bytes in <n> file(s), <expert> of them ..."


def disk_write_probe(directory):
    """fio sequential 8 MiB direct writes at queue depth 4 for 20 GiB (the sustained rate)."""
    if subprocess.run(["which", "fio"], capture_output=True).returncode != 0:
        return None
    target = os.path.join(directory, "fio-write-probe")
    cmd = ["fio", "--name=w", "--filename=" + target, "--rw=write", "--bs=8M", "--size=20G",
           "--direct=1", "--refill_buffers", "--iodepth=4", "--ioengine=libaio",
           "--end_fsync=1", "--output-format=json"]
    try:
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    finally:
        if os.path.exists(target):
            os.remove(target)
    return {"command": " ".join(cmd), "mb_per_s": round(out["jobs"][0]["write"]["bw_bytes"] / 1e6, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--dir", default="/tmp/epm-synth")
    ap.add_argument("--out", default="validate/synth.json")
    ap.add_argument("--keep", action="store_true", help="keep the models")
    ap.add_argument("--presets", help="comma-separated presets to run (default: all)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    disk = disk_write_probe(a.dir)
    rows = []
    wanted = a.presets.split(",") if a.presets else list(REAL)
    for preset, (real_expert, real_file) in REAL.items():
        if preset not in wanted:
            continue
        path = os.path.join(a.dir, preset + ".gguf")
        size, expert = dry_run(a.bin, preset, path)
        row = {
            "preset": preset,
            "file_bytes": size,
            "expert_bytes": expert,
            "real_file_bytes": int(real_file),
            "real_expert_bytes": int(real_expert),
            "file_ratio": round(size / real_file, 4),
            "expert_ratio": round(expert / real_expert, 4),
        }
        extra = []
        if preset in TIMED_AT_LAYERS:
            extra = ["--layers", str(TIMED_AT_LAYERS[preset])]
            row["sizes_from"] = "synth --dry-run (the full model does not fit this disk)"
        cmd = [a.bin, "synth", "--preset", preset, "-o", path, *extra]
        t0 = time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        secs = time.time() - t0
        files = [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("wrote ")]
        written = sum(os.path.getsize(f) for f in files)
        first = files[0]
        plan = json.loads(subprocess.run([a.bin, "plan", "-m", first, "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        if not extra:
            assert plan["model_bytes"] == size and plan["expert_bytes"] == expert, plan
        row.update({
            "command": " ".join(cmd),
            "files": len(files),
            "written_bytes": written,
            "seconds": round(secs, 2),
            "mb_per_s": round(written / 1e6 / secs, 1),
            "fraction_of_disk_write": round(written / 1e6 / secs / disk["mb_per_s"], 3) if disk else None,
            "n_moe_layers": plan["n_moe_layers"],
            "n_expert": plan["n_expert"],
            "n_expert_used": plan["n_expert_used"],
        })
        rows.append(row)
        print(json.dumps(row))
        if not a.keep or extra:
            for f in files:
                os.remove(f)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    out = {"command": "python3 tools/validate_synth.py " + " ".join(sys.argv[1:]),
           "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()},
           "disk_write": disk,
           "presets": rows}
    json.dump(out, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
