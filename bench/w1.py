#!/usr/bin/env python3
"""Workload W1 end to end (issue #5): the synthetic qwen3-30b-a3b with calibrated routing
skew, 2 threads, ctx 4096, a 125-token prompt and 64 generated tokens (and a 1,997-token
prompt for prefill), cold cache before each run, budgets 4 and 8 GiB. Every figure comes
from `epm-run ab` runs (alternating configurations, byte-exact output checks) plus
`probe-io`; the P1-P6 ratios, the machine and the commands go to --out.

    bench/w1.sh [--out validate/perf-w1.json] [--runs 3] [--budgets-mb 4096,8192]
"""
import argparse, json, math, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
from epmlib import ab_row_ok, read_trace, stats_decode  # noqa: E402
import epmlib  # noqa: E402
PROMPT = os.path.join(HERE, "w1-prompt-128.txt")
LONG_PROMPT = os.path.join(HERE, "w1-prompt-2000.txt")
MIB = 1 << 20
PREFILL_UBATCH = 512


def run(cmd, **kw):
    return epmlib.run(cmd, text=True, **kw)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


REUSE = False
REUSED = []


def ab(binary, model, tmp, name, budgets, runs, extra):
    out = os.path.join(tmp, name + ".json")
    cmd = [binary, "ab", "-m", model, "-c", "4096", "-t", "2", "--runs", str(runs), "--out", out]
    for b in budgets:
        cmd += ["--budget-mb", str(b)]
    if not (REUSE and os.path.exists(out)):
        run(cmd + extra, stdout=subprocess.DEVNULL)
    else:
        REUSED.append(name)
    report = json.load(open(out))
    report["command"] = " ".join(cmd + extra)
    return report


def rows(report, config, budget=None):
    return [r for r in report["rows"] if r["config"] == config and ab_row_ok(r)
            and (budget is None or r["budget_mb"] == budget)]


def trace_diversity(path):
    """Distinct (layer, expert) pairs over the decode steps of a routing trace."""
    _, _, records = read_trace(path)
    steps = {}
    for step, layer, tokens in records:
        n_tok, pairs = steps.setdefault(step, (len(tokens), set()))
        pairs.update((layer, e) for ids in tokens for e in ids)
    decode = [pairs for _, (n_tok, pairs) in sorted(steps.items()) if n_tok == 1]
    union = set().union(*decode) if decode else set()
    new = [len(b - a) / max(len(b), 1) for a, b in zip(decode, decode[1:])]
    return {"decode_steps": len(decode),
            "pairs_per_token": median([len(p) for p in decode]),
            "distinct_pairs_over_decode": len(union),
            "share_of_pairs_not_used_by_previous_token": round(median(new) or 0, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "validate", "perf-w1.json"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--budgets-mb", default="4096,8192")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "epm-run"))
    ap.add_argument("--model-dir", default=os.environ.get("EPM_MODELS", os.path.expanduser("~/.cache/epm/models")))
    ap.add_argument("--skip-ra128", action="store_true", help="skip P1 at read_ahead_kb=128")
    ap.add_argument("--kernel-runs", type=int, default=3,
                    help="repetitions of kernel paging at the machine's read_ahead_kb")
    ap.add_argument("--model", help="use this model instead of the W1 preset (for a dry run of the script)")
    ap.add_argument("--work-dir", default="/tmp/epm-w1", help="where the ab reports are kept")
    ap.add_argument("--reuse", action="store_true", help="reuse ab reports already in --work-dir")
    a = ap.parse_args()
    global REUSE
    REUSE = a.reuse
    budgets = [int(b) for b in a.budgets_mb.split(",")]
    os.makedirs(a.model_dir, exist_ok=True)
    calibration = os.path.join(ROOT, "validate", "skew-calibration.json")
    skew = json.load(open(calibration))["chosen_skew"] if os.path.exists(calibration) else 0.6
    model = a.model or os.path.join(a.model_dir, f"qwen3-30b-a3b-skew{skew}.gguf")
    if not os.path.exists(model):
        run([a.bin, "synth", "--preset", "qwen3-30b-a3b", "--routing-skew", str(skew), "-o", model])
    plan = json.loads(run([a.bin, "plan", "-m", model, "-c", "4096", "--json"], stdout=subprocess.PIPE).stdout)
    result = {"workload": "W1", "model": model, "routing_skew": skew,
              "settings": {"threads": 2, "ctx": 4096, "ubatch": 128, "prompt_tokens": 125,
                           "generated_tokens": 64, "long_prompt_tokens": 1997, "prefill_ubatch": PREFILL_UBATCH,
                           "budgets_mb": budgets, "runs": a.runs, "kernel_runs": a.kernel_runs,
                           "cold_cache": True},
              "command": "bench/w1.sh " + " ".join(sys.argv[1:])}
    os.makedirs(a.work_dir, exist_ok=True)
    if True:
        tmp = a.work_dir
        io = os.path.join(tmp, "io.json")
        if not (REUSE and os.path.exists(io)):
            run([a.bin, "probe-io", model, "--out", io], stdout=subprocess.DEVNULL)
        probe = json.load(open(io))
        bandwidth = max(r["mb_per_s"] for r in probe["results"] if r["block_bytes"] < 8 * MIB) * 1e6
        # Expert-sized random reads at each queue depth: the bandwidth "at the queue depth
        # used" is the one whose depth is nearest the misses in flight per routed layer.
        expert_block = max(r["block_bytes"] for r in probe["results"] if r["block_bytes"] < 8 * MIB)
        random_by_qd = {r["queue_depth"]: r["mb_per_s"] * 1e6 for r in probe["results"]
                        if r["pattern"] == "random" and r["block_bytes"] == expert_block}
        trace = os.path.join(tmp, "trace.bin")
        decode = ab(a.bin, model, tmp, "decode", budgets, a.runs,
                    ["-f", PROMPT, "-n", "64", "--configs", "reference,epm",
                     "--epm-arg=--trace-file=" + trace, "--epm-arg=--predict"])
        # Kernel paging at the machine's read_ahead_kb takes 10-13 minutes per 64-token run
        # here; it is I/O-bound and steady (within 4% over 3 runs before), so it runs
        # --kernel-runs times (each with its own reference for the byte-exact check).
        kernel = ab(a.bin, model, tmp, "kernel", budgets, a.kernel_runs,
                    ["-f", PROMPT, "-n", "64", "--configs", "reference,kernel"])
        ra128 = None if a.skip_ra128 else ab(
            a.bin, model, tmp, "ra128", budgets, a.runs,
            ["-f", PROMPT, "-n", "64", "--kernel-readahead-kb", "128", "--epm-arg=--predict"])
        # Prefill with half of the expert bytes resident, at ubatch 512: every ubatch selects
        # nearly all of a layer's experts, so fewer, bigger ubatches mean fewer reloads.
        plan512 = json.loads(run([a.bin, "plan", "-m", model, "-c", "4096", "--ubatch-size",
                                  str(PREFILL_UBATCH), "--json"], stdout=subprocess.PIPE).stdout)
        half = (plan512["reserve_bytes"] + plan512["expert_bytes"] // 2) // MIB
        prefill = ab(a.bin, model, tmp, "prefill", [half], a.runs,
                     ["-f", LONG_PROMPT, "-n", "2", "--configs", "reference,epm",
                      "--ubatch-size", str(PREFILL_UBATCH)])
        # Warm, whole model inside the budget: unpaged compute and EPM's own overhead. The
        # first repetition only warms the page cache.
        fits = (plan["reserve_bytes"] + plan["expert_bytes"]) // MIB + 1024
        warm = ab(a.bin, model, tmp, "warm", [fits], a.runs + 1,
                  ["-f", PROMPT, "-n", "64", "--configs", "reference,epm", "--warm"])
        warm_prefill = ab(a.bin, model, tmp, "warm-prefill", [fits], 2,
                          ["-f", LONG_PROMPT, "-n", "2", "--configs", "reference", "--warm",
                           "--ubatch-size", str(PREFILL_UBATCH)])
        # Upstream's time to first token on a cold file: it pre-faults the whole model.
        upstream = ab(a.bin, model, tmp, "upstream-ttft", [fits], a.runs,
                      ["-f", PROMPT, "-n", "1", "--configs", "kernel"])
        diversity = trace_diversity(trace)

    warm_rows = lambda c: [r for r in rows(warm, c) if r["rep"] > 0]
    unpaged_s_tok = 1 / median([r["decode_tok_s"] for r in warm_rows("reference")])
    epm_warm_s_tok = 1 / median([r["decode_tok_s"] for r in warm_rows("epm")])
    warm_unpaged_prefill = median([r["prefill_tok_s"] for r in rows(warm_prefill, "reference") if r["rep"] > 0])
    upstream_ttft = median([r["child"]["time_to_first_output_s"] for r in rows(upstream, "kernel")])
    per_budget = []
    for b in budgets:
        epm = rows(decode, "epm", b)
        epm_tok_s = [r["decode_tok_s"] for r in epm]
        kernel_tok_s = [r["decode_tok_s"] for r in rows(kernel, "kernel", b)]
        st = [r["stats"] for r in epm]
        decode_s_tok = 1 / median([r["decode_tok_s"] for r in epm])
        # With prediction, an expert reaches memory either as a demand miss or as a
        # speculative read. What decode needed is the demand misses plus the speculative reads
        # routing then selected; what EPM asked the disk for adds the wrong guesses.
        dec = [stats_decode(x) for x in st]
        steps = lambda x: max(x["io"]["decode_steps"], 1)
        miss_per_step = median([(d["miss_bytes"] + d["spec_useful_bytes"]) / steps(x) for d, x in zip(dec, st)])
        fetched_per_step = median([(d["miss_bytes"] + d["spec_issued_bytes"]) / steps(x) for d, x in zip(dec, st)])
        read_per_step = median([x["io"]["decode_read_bytes"] / steps(x) for x in st])
        io_bound = miss_per_step / bandwidth
        # Misses advised together per routed layer of a decode step (each expert's gate, up
        # and down ranges go out at once): the queue depth decode actually used.
        qd_used = median([(d["misses"] + d["spec_issued"])
                          / max(x["io"]["decode_steps"] * len(x["per_layer"]), 1) for d, x in zip(dec, st)])
        qd_probe = min(random_by_qd, key=lambda q: abs(math.log(q) - math.log(max(qd_used, 1e-9))))
        io_bound_qd = miss_per_step / random_by_qd[qd_probe]
        # None for reports written before the stats carried the hook's time.
        hook_s_tok = median([x["hook"]["decode_busy_us"] / 1e6 / max(x["io"]["decode_steps"], 1)
                             for x in st if "decode_busy_us" in x["hook"]])
        entry = {
            "budget_mb": b,
            "epm_decode_tok_s": 1 / decode_s_tok,
            "kernel_decode_tok_s": median(kernel_tok_s),
            "reference_decode_tok_s_cold": median([r["decode_tok_s"] for r in rows(decode, "reference", b)]),
            "epm_decode_resident_rate": median([d["resident_rate"] for d in dec]),
            "epm_decode_cache_hit_rate": median([d["cache_hit_rate"] for d in dec]),
            "epm_peak_rss_mb": max(r["child"]["peak_rss_bytes"] for r in epm) / MIB,
            "all_outputs_identical": all(r["tokens_match"] and r["logits_match"] for r in rows(kernel, "kernel", b) + epm),
            "P1_decode_epm_over_kernel": {"median": median(epm_tok_s) / median(kernel_tok_s),
                                          "min": min(epm_tok_s) / max(kernel_tok_s),
                                          "max": max(epm_tok_s) / min(kernel_tok_s),
                                          "epm_runs": len(epm_tok_s), "kernel_runs": len(kernel_tok_s)},
            "P2_decode_read_over_miss_bytes": read_per_step / max(fetched_per_step, 1),
            "decode_miss_bytes_per_token": miss_per_step,
            "decode_fetched_bytes_per_token": fetched_per_step,
            "decode_wasted_speculative_bytes_per_token": fetched_per_step - miss_per_step,
            "decode_read_bytes_per_token": read_per_step,
            "P3_decode_s_per_token_over_bound": decode_s_tok / max(unpaged_s_tok, io_bound),
            "P3_bound": {"unpaged_compute_s_per_token": unpaged_s_tok,
                         "miss_bytes_over_bandwidth_s_per_token": io_bound,
                         "bandwidth": "best of every probe (the strictest bound)"},
            "P3_at_queue_depth_used": {
                "decode_s_per_token_over_bound": decode_s_tok / max(unpaged_s_tok, io_bound_qd),
                "misses_in_flight_per_layer": qd_used,
                "probe_queue_depth": qd_probe,
                "probe_bandwidth_bytes_per_s": random_by_qd[qd_probe],
                "miss_bytes_over_bandwidth_s_per_token": io_bound_qd},
            "epm_decode_s_per_token": decode_s_tok,
            "hook_s_per_decode_token": hook_s_tok,
            "P5_ttft_epm_over_upstream": median([r["child"]["time_to_first_output_s"] for r in epm]) / upstream_ttft,
        }
        if ra128:
            entry["P1_ra128_decode_epm_over_kernel"] = next(
                x for x in ra128["summary"] if x["budget_mb"] == b)["decode_epm_over_kernel"]
        per_budget.append(entry)
    pre_epm = median([r["prefill_tok_s"] for r in rows(prefill, "epm")])
    pre_ref = median([r["prefill_tok_s"] for r in rows(prefill, "reference")])
    result.update({
        "machine": decode["machine"],
        "disk_read_bandwidth_bytes_per_s": bandwidth,
        "routing_diversity": diversity,
        "per_budget": per_budget,
        "P4_prefill": {"budget_mb": half, "epm_prefill_tok_s": pre_epm,
                       "unpaged_prefill_tok_s_warm": warm_unpaged_prefill,
                       "unpaged_prefill_tok_s_cold": pre_ref,
                       "epm_over_unpaged_warm": pre_epm / warm_unpaged_prefill,
                       "epm_over_unpaged_cold": pre_epm / pre_ref,
                       "identical": all(r["tokens_match"] and r["logits_match"] for r in rows(prefill, "epm"))},
        "P6_overhead": {"budget_mb": fits, "unpaged_decode_s_per_token_warm": unpaged_s_tok,
                        "epm_decode_s_per_token_warm": epm_warm_s_tok,
                        "overhead_fraction": epm_warm_s_tok / unpaged_s_tok - 1},
        "upstream_ttft_s": upstream_ttft,
        "reused_reports": REUSED,
        "ab_commands": [r["command"] for r in (decode, kernel, ra128, prefill, warm, warm_prefill, upstream) if r],
        "all_passed": all(r["all_passed"] for r in (decode, kernel, ra128, prefill, warm, warm_prefill, upstream) if r),
    })
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(result, open(a.out, "w"), indent=2)
    print(json.dumps({k: result[k] for k in ("per_budget", "P4_prefill", "P6_overhead")}, indent=2))


if __name__ == "__main__":
    main()
