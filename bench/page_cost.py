#!/usr/bin/env python3
"""What watching the pager costs: the hook's time per decode token and decode tok/s of a
server with a client on `/pager/stream` (what the page reads, 4 events a second) against
the same server with none. Alternating, cold cache before every run, the server inside a
cgroup v1 cap equal to its budget; one completion per run (W1's prompt by default).

    python3 bench/page_cost.py -m qwen3-30b-a3b-skew0.6.gguf --budget-mb 4096 --runs 3 \
        -n 32 --out validate/page-cost-w1-4g.json [--bin target/release/epm-run]
"""
import argparse, http.client, json, os, signal, statistics, sys, threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import Cgroup, drop_cache, machine, request_json, start_server  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def watch(port, stop, counts):
    """Read the pager stream until `stop` is set, counting its events."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/pager/stream")
    r = c.getresponse()
    while not stop.is_set():
        line = r.fp.readline()
        if not line:
            return
        if line.startswith(b"event: pager"):
            counts[0] += 1
    c.close()


def one_run(a, prompt, watched):
    drop_cache(a.model)
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", "4096", "--ram-budget-mb", str(a.budget_mb)]
    with Cgroup(a.budget_mb << 20, "page-cost") as cg:
        proc, port = start_server(cg.wrap(cmd), timeout_s=900)
        stop, counts = threading.Event(), [0]
        watcher = None
        if watched:
            watcher = threading.Thread(target=watch, args=(port, stop, counts), daemon=True)
            watcher.start()
        try:
            body = {"prompt": prompt, "max_tokens": a.n, "temperature": 0}
            text = request_json(port, "POST", "/v1/completions", body, timeout=3600)[1]["choices"][0]["text"]
            s = request_json(port, "GET", "/stats")[1]
        finally:
            stop.set()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        steps = max(s["io"]["decode_steps"], 1)
        return {"watched": watched, "stream_events": counts[0], "text": text,
                "hook_decode_ms_per_step": s["hook"]["decode_busy_us"] / steps / 1000,
                "decode_tok_s": s["tok_per_s"]["decode"], "prefill_tok_s": s["tok_per_s"]["prefill"],
                "decode_steps": steps, "peak_rss_bytes": s["memory"]["peak_rss_bytes"],
                "oom_kills": cg.oom_kills(), "cgroup_max_usage_bytes": cg.max_usage()}


def spread(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-f", "--prompt-file", default=os.path.join(HERE, "w1-prompt-128.txt"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not Cgroup.available():
        sys.exit("page_cost.py needs a writable cgroup v1 memory controller (run as root)")
    prompt = open(a.prompt_file).read()
    runs = []
    for rep in range(a.runs):
        for watched in (False, True):
            r = one_run(a, prompt, watched)
            r["rep"] = rep
            runs.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "text"}), flush=True)
    summary = {}
    for watched in (False, True):
        rs = [r for r in runs if r["watched"] == watched]
        summary["page open" if watched else "no page"] = {
            k: spread([r[k] for r in rs]) for k in ("hook_decode_ms_per_step", "decode_tok_s", "prefill_tok_s")}
    same = len({r["text"] for r in runs}) == 1
    report = {"what": "hook time per decode token and decode speed with a client on /pager/stream against none",
              "command": "python3 bench/page_cost.py " + " ".join(sys.argv[1:]), "machine": machine(),
              "same_text_everywhere": same, "summary": summary, "runs": runs}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(summary, indent=1))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
