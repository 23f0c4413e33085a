#!/usr/bin/env python3
"""The first request after a server restart: an agent's session (bench/serve_agent.py: a
2,000-token system message and short turns) against a server that was stopped and started
again, as a laptop user or a supervisor does. Each build runs --runs times from a cold page
cache with its own prompt-store folder (--bin NAME=PATH, repeat; builds alternate); before
its first timed run a build's folder is seeded by one untimed session, so a build whose
store outlives its run starts the timed runs with what that session left.

    python3 bench/serve_restart.py -m qwen3-30b-a3b.gguf --budget-mb 4096 \\
        --bin before=/root/bins/before --bin after=target/release/epm-run --runs 3 \\
        --out validate/serve-restart-w1-4g.json

With --kill-after-idle-s S, every session (the seed too) ends with SIGKILL after S idle
seconds instead of SIGTERM, as the OOM killer or a power cut ends a server: the next one
finds only what was put aside while idle. --arg NAME=FLAG (repeat) gives one build's server
a flag of its own, e.g. --arg before=--prompt-cache-idle-s=0 to compare one binary with
and without saves while idle.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from epmlib import machine  # noqa: E402


def session(binary, model, budget_mb, store, requests, out, kill_after_idle_s=None, server_args=()):
    """One serve_agent.py session against `binary` with its store in `store`; its report."""
    cmd = [sys.executable, os.path.join(HERE, "serve_agent.py"), "--bin", binary, "-m", model,
           "--budget-mb", str(budget_mb), "--requests", str(requests), "--out", out,
           "--server-arg=--prompt-cache-dir", f"--server-arg={store}"]
    cmd += [f"--server-arg={f}" for f in server_args]
    if kill_after_idle_s is not None:
        # -v: the server logs how long its saves while idle took.
        cmd += ["--kill-after-idle-s", str(kill_after_idle_s), "--server-arg=-v"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out)), " ".join(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2, help="requests per timed session")
    ap.add_argument("--out", required=True)
    ap.add_argument("--kill-after-idle-s", type=float, help="end each session by SIGKILL after this many idle seconds")
    ap.add_argument("--arg", action="append", default=[], help="NAME=FLAG: a server flag for one build (repeat)")
    a = ap.parse_args()
    bins = dict(b.split("=", 1) for b in a.bin)
    extra = {name: [f.split("=", 1)[1] for f in a.arg if f.split("=", 1)[0] == name] for name in bins}
    end = {"kill_after_idle_s": a.kill_after_idle_s}
    work = tempfile.mkdtemp(prefix="serve-restart-", dir=os.path.dirname(os.path.abspath(a.model)))
    try:
        stores = {name: os.path.join(work, name) for name in bins}
        seeds, commands = {}, {}
        for name, binary in bins.items():
            os.makedirs(stores[name])
            report, _ = session(binary, a.model, a.budget_mb, stores[name], 2, os.path.join(work, f"seed-{name}.json"),
                                server_args=extra[name], **end)
            seeds[name] = {"first_ttft_s": report["first_ttft_s"], "prompt_store": report["prompt_store"],
                           "idle_saves": report.get("idle_saves")}
            print(name, "seed", seeds[name], flush=True)
        runs = {name: [] for name in bins}
        for rep in range(a.runs):
            for name, binary in bins.items():
                report, commands[name] = session(binary, a.model, a.budget_mb, stores[name], a.requests,
                                                 os.path.join(work, f"{name}-{rep}.json"),
                                                 server_args=extra[name], **end)
                first = report["requests"][0]
                row = {"rep": rep, "first_ttft_s": first["ttft_s"], "first_cached_tokens": first["cached_tokens"],
                       "first_prompt_tokens": first["prompt_tokens"], "first_read_bytes": first["read_bytes"],
                       "later_ttft_s_median": report["later_ttft_s_median"], "load_s": report["load_s"],
                       "prompt_store": report["prompt_store"], "peak_rss_bytes": report["peak_rss_bytes"],
                       "budget_bytes": report["budget_bytes"], "disk_read_mb_s": report["disk_read_mb_s"],
                       "server_exit_code": report["server_exit_code"], "ended_by": report.get("ended_by"),
                       "idle_saves": report.get("idle_saves")}
                runs[name].append(row)
                print(name, row, flush=True)
        summary = {name: {"first_ttft_s_median": statistics.median(r["first_ttft_s"] for r in rows),
                          "first_ttft_s": [r["first_ttft_s"] for r in rows],
                          "first_cached_tokens": [r["first_cached_tokens"] for r in rows],
                          "first_read_gb": [round(r["first_read_bytes"] / 1e9, 2) for r in rows]}
                   for name, rows in runs.items()}
        names = list(bins)
        if len(names) == 2:
            b, c = (summary[n]["first_ttft_s_median"] for n in names)
            summary[f"{names[1]}_over_{names[0]}"] = c / b
        report = {"what": "time to the first token of the first request after a server restart (an agent's "
                          "2,000-token system message and a short turn), cold page cache, each build with its "
                          "own prompt-store folder seeded by one untimed session",
                  "command": "python3 bench/serve_restart.py " + " ".join(sys.argv[1:]),
                  "session_commands": commands, "machine": machine(), "seeds": seeds,
                  "summary": summary, "runs": runs}
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        json.dump(report, open(a.out, "w"), indent=2)
        print(json.dumps(summary, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
