#!/usr/bin/env python3
"""llama.cpp's compute buffer against the plan's estimate, per model and ubatch: what this
build's context reserves (`memory.compute_buffer_bytes` of the stats, from llama.cpp's own
memory breakdown) and, with `--before`, what an older build reserved (the size llama.cpp
logs with `-vv`). Unpaged, a one-token prompt, ctx --ctx.

    python3 bench/compute_buffer.py -m W1.gguf -m other.gguf --ubatch 128 --ubatch 512 \
        [--before OLD/epm-run] --out validate/compute-buffer.json
"""
import argparse, json, os, re, shlex, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import epmlib  # noqa: E402

LOGGED = re.compile(r"CPU compute buffer size = +([0-9.]+) MiB")


def reported(exe, model, ubatch, ctx, tmp):
    """This build's compute buffer, from its stats."""
    stats = os.path.join(tmp, "s.json")
    epmlib.run([exe, "generate", "-m", model, "-p", "hi", "-n", "1", "-c", str(ctx), "-ub", str(ubatch),
                "--no-pager", "--stats-file", stats], capture_output=True, text=True)
    return json.load(open(stats))["memory"]["compute_buffer_bytes"]


def logged(exe, model, ubatch, ctx):
    """An older build's compute buffer, from llama.cpp's own log line."""
    p = epmlib.run([exe, "-vv", "generate", "-m", model, "-p", "hi", "-n", "1", "-c", str(ctx),
                    "-ub", str(ubatch), "--no-pager"], capture_output=True, text=True)
    m = LOGGED.search(p.stderr)
    if not m:
        sys.exit(f"{exe} logged no compute buffer size")
    return round(float(m.group(1)) * epmlib.MIB)


def estimate(exe, model, ubatch, ctx):
    p = epmlib.run([exe, "plan", "-m", model, "--ram-budget-mb", "100000", "-ub", str(ubatch), "-c", str(ctx),
                    "--json"], capture_output=True, text=True)
    return json.loads(p.stdout)["compute_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--ubatch", action="append", type=int, required=True)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--before", help="an older build, to compare its compute buffer")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-compute-")
    rows = []
    for model in a.model:
        for u in a.ubatch:
            row = {"model": os.path.basename(model), "ubatch": u,
                   "reported_bytes": reported(a.bin, model, u, a.ctx, tmp),
                   "estimate_bytes": estimate(a.bin, model, u, a.ctx)}
            row["estimate_over_reported"] = round(row["estimate_bytes"] / row["reported_bytes"], 2)
            if a.before:
                row["before_bytes"] = logged(a.before, model, u, a.ctx)
                row["before_over_reported"] = round(row["before_bytes"] / row["reported_bytes"], 2)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    report = {
        "command": "python3 bench/compute_buffer.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
        "machine": epmlib.machine(),
        "ctx": a.ctx,
        # all_passed: the plan's estimate is at least what llama.cpp reserved, in every row.
        "all_passed": all(r["estimate_bytes"] >= r["reported_bytes"] for r in rows),
        "rows": rows,
    }
    epmlib.write_report(a.out, report, tmp=tmp, summary_keys=["all_passed"])


if __name__ == "__main__":
    main()
