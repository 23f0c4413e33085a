#!/usr/bin/env python3
"""Check that `plan`'s minimum budget is a promise on full-size models: run `generate` at
exactly that budget (rounded up to MiB) for each model and context size, and record the
measured reserve, peak RSS and outcome in validate/plan-promise.json.

    python3 tools/validate_plan.py MODEL.gguf [MODEL.gguf ...] [--ctx 1024 --ctx 4096]
"""
import argparse, json, os, subprocess, sys, tempfile

MIB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--ctx", type=int, action="append")
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/plan-promise.json")
    a = ap.parse_args()
    rows = []
    for model in a.models:
        for ctx in a.ctx or [1024, 4096]:
            plan = json.loads(subprocess.run([a.bin, "plan", "-m", model, "-c", str(ctx), "--json"],
                                             check=True, capture_output=True, text=True).stdout)
            budget = -(-plan["min_budget_bytes"] // MIB)
            stats = os.path.join(tempfile.mkdtemp(), "s.json")
            cmd = [a.bin, "generate", "-m", model, "-p", "The quick brown fox", "-n", "8", "-c", str(ctx),
                   "--ram-budget-mb", str(budget), "--stats-file", stats]
            p = subprocess.run(cmd, capture_output=True, text=True)
            s = json.load(open(stats)) if os.path.exists(stats) else {}
            row = {"model": os.path.basename(model), "ctx": ctx, "command": " ".join(cmd),
                   "plan_min_budget_bytes": plan["min_budget_bytes"], "plan_reserve_bytes": plan["reserve_bytes"],
                   "ubatch_working_set_bytes": plan["ubatch_working_set_bytes"], "exit_code": p.returncode,
                   "measured_reserve_bytes": s.get("memory", {}).get("reserve_bytes"),
                   "peak_rss_bytes": s.get("memory", {}).get("peak_rss_bytes"),
                   "budget_bytes": budget * MIB}
            row["kept"] = p.returncode == 0 and row["peak_rss_bytes"] is not None and row["peak_rss_bytes"] <= budget * MIB
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("model", "ctx", "exit_code", "kept")}))
    json.dump({"command": "python3 tools/validate_plan.py " + " ".join(sys.argv[1:]), "runs": rows,
               "all_kept": all(r["kept"] for r in rows)}, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
