#!/usr/bin/env python3
"""Paged decode under small block-device readahead limits, for two epm-run builds side by
side (for example one that advises each expert range in a single MADV_WILLNEED call and one
that advises it in pieces of the device's readahead window). Sets the model's device to
--read-ahead-kb / --max-sectors-kb for the runs and restores both afterwards. Cold cache
before every run; alternating; medians to --out with the machine and the command.

    sudo python3 bench/readahead_window_ab.py -m MODEL.gguf --bin OLD --bin NEW \\
        [--budget-mb 8192] [--read-ahead-kb 128] [--max-sectors-kb 128] [--runs 2] [-n 8]
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile

from prefetch_ab import drop_cache
import epm_stats


def queue_dir(path):
    dev = os.stat(path).st_dev
    node = os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for q in (os.path.join(node, "queue"), os.path.join(os.path.dirname(node), "queue")):
        if os.path.isdir(q):
            return q
    sys.exit(f"no block-device queue in sysfs for {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", action="append", required=True, help="an epm-run build (repeat)")
    ap.add_argument("--budget-mb", type=int, default=8192)
    ap.add_argument("--read-ahead-kb", type=int, default=128)
    ap.add_argument("--max-sectors-kb", type=int, default=128)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("-p", "--prompt", default="The quick brown fox")
    ap.add_argument("--out", default="validate/readahead-window-decode.json")
    a = ap.parse_args()
    q = queue_dir(a.model)
    saved = {k: open(f"{q}/{k}").read().strip() for k in ("read_ahead_kb", "max_sectors_kb")}
    tmp = tempfile.mkdtemp()
    runs = {b: [] for b in a.bin}
    try:
        open(f"{q}/max_sectors_kb", "w").write(str(a.max_sectors_kb))
        open(f"{q}/read_ahead_kb", "w").write(str(a.read_ahead_kb))
        for rep in range(a.runs):
            for i, b in enumerate(a.bin):
                drop_cache(a.model)
                stats = os.path.join(tmp, f"{i}-{rep}.json")
                subprocess.run([b, "generate", "-m", a.model, "-p", a.prompt, "-n", str(a.n), "-c", "4096",
                                "-t", "2", "--ram-budget-mb", str(a.budget_mb), "--stats-file", stats],
                               check=True, capture_output=True)
                s = json.load(open(stats))
                steps = max(s["io"].get("decode_steps", 0), 1)
                runs[b].append({"decode_tok_s": s["tok_per_s"]["decode"],
                                "prefill_tok_s": s["tok_per_s"]["prefill"],
                                "decode_miss_bytes_per_step": epm_stats.decode(s)["miss_bytes"] / steps,
                                "decode_read_bytes_per_step": s["io"]["decode_read_bytes"] / steps,
                                "willneed_chunk_bytes": s["io"].get("willneed_chunk_bytes"),
                                "generated_ids": s["tokens"]["generated_ids"]})
                print(b, rep, {k: v for k, v in runs[b][-1].items() if k != "generated_ids"}, flush=True)
    finally:
        for k in ("max_sectors_kb", "read_ahead_kb"):
            open(f"{q}/{k}", "w").write(saved[k])
    ids = [r["generated_ids"] for rs in runs.values() for r in rs]
    summary = {b: {k: statistics.median(r[k] for r in rs)
                   for k in ("decode_tok_s", "prefill_tok_s", "decode_miss_bytes_per_step", "decode_read_bytes_per_step")}
               for b, rs in runs.items()}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    report = {"command": "python3 bench/readahead_window_ab.py " + " ".join(sys.argv[1:]),
              "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()},
              "device_settings": {"read_ahead_kb": a.read_ahead_kb, "max_sectors_kb": a.max_sectors_kb,
                                  "restored_to": saved},
              "same_tokens_everywhere": all(x == ids[0] for x in ids),
              "summary": summary, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
