#!/usr/bin/env python3
"""Side-by-side, alternating comparison of how misses are read in (`--prefetch willneed`
vs `--prefetch populate` with several I/O thread counts), cold cache before every run.
Writes medians to the --out JSON with the machine and the command.

    python3 bench/prefetch_ab.py -m MODEL.gguf --budget-mb 4096 [--runs 3] [-n 16]
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import epm_stats  # noqa: E402


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


# The stats' `io` figures each run records (absent from older binaries' stats: None).
IO_KEYS = ("decode_read_bytes", "decode_steps", "will_need_us", "evict_us", "late_evictions", "redrops",
           "ahead_reads", "ahead_will_need_us", "ahead_cancelled")


def cached_bytes(path):
    """Bytes of `path` in the page cache after the run (util-linux fincore), or None."""
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("-c", type=int, default=1024)
    ap.add_argument("--ubatch-size", type=int, help="llama.cpp ubatch (default: epm-run's)")
    ap.add_argument("-t", "--threads", type=int, default=2, help="llama.cpp threads (2: every core here)")
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/prefetch.json")
    ap.add_argument("--modes", default="willneed,populate-2,populate-4,populate-8",
                    help="comma-separated: willneed, populate-2, populate-4, populate-8, predict, "
                         "predict-2, predict-3, predict-thread, predict-prefill-32, predict-prefill-all; ratios are against the first")
    ap.add_argument("-f", "--prompt-file", help="prompt from this file (default: a short sentence)")
    a = ap.parse_args()
    # Prediction is on by default: the read modes are compared without it.
    all_modes = {"willneed": ["--no-predict"],
                 "populate-2": ["--no-predict", "--prefetch", "populate", "--io-threads", "2"],
                 "populate-4": ["--no-predict", "--prefetch", "populate", "--io-threads", "4"],
                 "populate-8": ["--no-predict", "--prefetch", "populate", "--io-threads", "8"],
                 "predict": ["--predict"],
                 "predict-2": ["--predict", "--predict-depth", "2"],
                 "predict-3": ["--predict", "--predict-depth", "3"],
                 "predict-thread": ["--predict", "--ahead-thread"],
                 "predict-prefill-32": ["--predict", "--prefill-predict-tokens", "32"],
                 "predict-prefill-all": ["--predict", "--prefill-predict-tokens", "512"]}
    modes = [(m, all_modes[m]) for m in a.modes.split(",")]
    tmp = tempfile.mkdtemp()
    results = {m: [] for m, _ in modes}
    ref_ids = None
    for rep in range(a.runs):
        for name, flags in modes:
            drop_cache(a.model)
            stats = os.path.join(tmp, f"{name}-{rep}.json")
            prompt = ["-f", a.prompt_file] if a.prompt_file else ["-p", "The quick brown fox jumps over the lazy dog"]
            cmd = [a.bin, "generate", "-m", a.model] + prompt + ["-n", str(a.n), "-c", str(a.c), "-t", str(a.threads), "--ram-budget-mb", str(a.budget_mb),
                   "--stats-file", stats] + flags + (["--ubatch-size", str(a.ubatch_size)] if a.ubatch_size else [])
            subprocess.run(cmd, check=True, capture_output=True)
            s = json.load(open(stats))
            ids = s["tokens"]["generated_ids"]
            ref_ids = ref_ids or ids
            d = epm_stats.decode(s)
            results[name].append({"decode": s["tok_per_s"]["decode"], "prefill": s["tok_per_s"]["prefill"],
                                  "read_bytes_per_token": s["io"]["read_bytes_per_token"],
                                  "miss_bytes": epm_stats.total_misses(s)[1],
                                  "decode_cache_hit_rate": d["cache_hit_rate"],
                                  "decode_resident_rate": d["resident_rate"],
                                  "peak_rss_bytes": s["memory"]["peak_rss_bytes"], "same_tokens": ids == ref_ids,
                                  "prediction_coverage": d["coverage"], "prefetch": s["prefetch"],
                                  "decode_miss_bytes": d["miss_bytes"],
                                  **{k: s["io"].get(k) for k in IO_KEYS},
                                  "hook_decode_busy_us": s["hook"].get("decode_busy_us"),
                                  "stray_cache_bytes_at_exit": s["experts"].get("stray_cache_bytes_at_exit"),
                                  "model_cached_after_bytes": cached_bytes(a.model),
                                  "expert_budget_bytes": s["expert_budget_bytes"]})
            print(name, rep, results[name][-1], flush=True)
    summary = {}
    for name, rows in results.items():
        summary[name] = {k: statistics.median(r[k] for r in rows) for k in ("decode", "prefill", "read_bytes_per_token", "peak_rss_bytes")}
        first = modes[0][0]
        summary[name][f"decode_vs_{first}"] = summary[name]["decode"] / summary[first]["decode"]
        summary[name]["all_same_tokens"] = all(r["same_tokens"] for r in rows)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    json.dump({"command": "python3 bench/prefetch_ab.py " + " ".join(sys.argv[1:]),
               "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()},
               "budget_mb": a.budget_mb, "threads": a.threads, "ubatch": a.ubatch_size, "summary": summary, "runs": results},
              open(a.out, "w"), indent=2)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
