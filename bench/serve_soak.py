#!/usr/bin/env python3
"""Soak `epm-run serve`: a fixed number of requests from concurrent clients against a
paged model at its minimum budget plus a margin, inside a cgroup v1 cap equal to the
budget. The mix: streaming and not, malformed bodies, clients that hang up mid-stream, and
half the requests sharing a long system prompt. Passes with 0 OOM kills, no 5xx but 503,
and RSS drift under 2% between the first and the last hundred requests, counted after
--warmup requests that let the expert cache fill to its budget. Bounded in count
(--requests) and time (--timeout).

    python3 bench/serve_soak.py [--bin target/release/epm-run] [--requests 1000] [--clients 4]
        [--out validate/serve-soak.json]
"""
import argparse, http.client, json, os, random, signal, statistics, subprocess, sys
import threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import Cgroup, machine, start_server, synth_mini  # noqa: E402

SYSTEM = ("You are the assistant of a coding agent working in a large repository. You can call "
          "the tools read_file, write_file, list_dir, run_tests and search_code. Think about what "
          "the user wants, say which tool you will use and why, then use it. Keep every answer "
          "short, never invent file names, and ask when something is unclear. ") * 6
WORDS = "alpha beta gamma delta river stone cloud paper engine garden silver orange quiet rapid".split()


def rss(pid):
    """(VmRSS, RssAnon, RssFile) of a process, in bytes."""
    try:
        f = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open(f"/proc/{pid}/status")
             if l.startswith(("VmRSS:", "RssAnon:", "RssFile:"))}
        return f["VmRSS"], f["RssAnon"], f["RssFile"]
    except (OSError, KeyError):
        return None


def request(port, kind, rnd):
    """One request of `kind`; returns a record."""
    shared = rnd.random() < 0.5
    user = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12)))
    messages = ([{"role": "system", "content": SYSTEM}] if shared else []) + [{"role": "user", "content": user}]
    body = {"messages": messages, "max_tokens": rnd.randint(4, 20), "temperature": 0}
    if kind in ("stream", "disconnect"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    data = json.dumps(body)
    if kind == "malformed":
        data = rnd.choice(['{"messages": [', '{"messages": "hello"}', '{"messages": [{"role": "user"}], "max_tokens": "x"}'])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.time()
    rec = {"kind": kind, "shared_prompt": shared}
    try:
        conn.request("POST", "/v1/chat/completions", body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        rec["status"] = resp.status
        if kind == "disconnect" and resp.status == 200:
            resp.fp.readline()  # the first event line, then hang up
            conn.close()
            rec["latency_s"] = time.time() - t0
            return rec
        raw = resp.read().decode()
        rec["latency_s"] = time.time() - t0
        if resp.status == 200:
            if kind == "stream":
                events = [l[6:] for l in raw.splitlines() if l.startswith("data: ")]
                usage = next(json.loads(e)["usage"] for e in events if e != "[DONE]" and "usage" in json.loads(e))
            else:
                usage = json.loads(raw)["usage"]
            rec["completion_tokens"] = usage["completion_tokens"]
            rec["prompt_tokens"] = usage["prompt_tokens"]
            rec["cached_tokens"] = usage["prompt_tokens_details"]["cached_tokens"]
    except Exception as e:
        rec["status"] = 0
        rec["error"] = repr(e)
        rec["latency_s"] = time.time() - t0
    finally:
        conn.close()
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--margin", type=float, default=0.2)
    ap.add_argument("--timeout", type=float, default=3600, help="stop sending after this many seconds")
    ap.add_argument("--warmup", type=int, default=50,
                    help="requests sent first and not counted: the expert cache fills to its budget")
    ap.add_argument("--out", default="validate/serve-soak.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-soak-")
    plan = json.loads(subprocess.run([a.bin, "plan", "-m", model, "-c", str(a.ctx), "--parallel", str(a.parallel), "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    min_mb = -(-plan["min_budget_bytes"] // (1 << 20))
    budget_mb = int(min_mb * (1 + a.margin) + 0.999)
    cg = Cgroup(budget_mb << 20, "soak")
    stats_file = os.path.join(tmp, "stats.json")
    cmd = [a.bin, "serve", "-m", model, "--port", "0", "-c", str(a.ctx), "-t", "2", "--parallel", str(a.parallel),
           "--queue", "16", "--ram-budget-mb", str(budget_mb), "--stats-file", stats_file]
    proc, port = start_server(cg.wrap(cmd))
    kinds = ["stream"] * 425 + ["plain"] * 425 + ["malformed"] * 100 + ["disconnect"] * 50
    random.Random(7).shuffle(kinds)
    kinds = (kinds * (a.requests // len(kinds) + 1))[: a.requests]
    warm_rnd = random.Random(99)
    warmup = [request(port, "plain", warm_rnd) for _ in range(a.warmup)]
    lock = threading.Lock()
    records = [None] * a.requests
    next_i = [0]
    started = time.time()

    def client(cid):
        rnd = random.Random(100 + cid)
        while True:
            with lock:
                i = next_i[0]
                if i >= a.requests or time.time() - started > a.timeout:
                    return
                next_i[0] += 1
            rec = request(port, kinds[i], rnd)
            rec["index"] = i
            m = rss(proc.pid)
            if m:
                rec["server_rss_bytes"], rec["server_rss_anon_bytes"], rec["server_rss_file_bytes"] = m
            records[i] = rec

    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - started
    metrics = ""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
    except OSError:
        pass
    proc.send_signal(signal.SIGTERM)
    exit_code = proc.wait(timeout=60)
    oom, max_usage = cg.oom_kills(), cg.max_usage()
    cg.close()
    done = [r for r in records if r]
    ok = [r for r in done if r["status"] == 200 and "completion_tokens" in r]
    statuses = {}
    for r in done:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    bad_5xx = sum(n for s, n in statuses.items() if s.startswith("5") and s != "503")
    lat = sorted(r["latency_s"] for r in ok)
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None
    first = [r["server_rss_bytes"] for r in done[:100] if r.get("server_rss_bytes")]
    last = [r["server_rss_bytes"] for r in done[-100:] if r.get("server_rss_bytes")]
    drift = abs(statistics.mean(last) - statistics.mean(first)) / statistics.mean(first) if first and last else None
    shared = [r for r in ok if r["shared_prompt"]]
    hit_share = (sum(r["cached_tokens"] for r in shared) / max(sum(r["prompt_tokens"] for r in shared), 1))
    malformed_ok = all(r["status"] == 400 for r in done if r["kind"] == "malformed")
    stats = json.load(open(stats_file)) if os.path.exists(stats_file) else None
    passed = (oom == 0 and bad_5xx == 0 and drift is not None and drift < 0.02 and malformed_ok
              and exit_code == 0 and statuses.get("0", 0) == 0 and len(done) == a.requests
              and all(r["status"] == 200 for r in warmup))
    report = {
        "what": "serve soak: concurrent clients, mixed requests, paged model inside a cgroup cap equal to the budget",
        "command": "python3 bench/serve_soak.py " + " ".join(sys.argv[1:]),
        "machine": machine(), "server_command": " ".join(cmd), "budget_mb": budget_mb, "plan_min_mb": min_mb,
        "requests": len(done), "clients": a.clients, "wall_s": wall, "statuses": statuses,
        "warmup_requests": a.warmup, "warmup_statuses": sorted({r["status"] for r in warmup}),
        "kinds": {k: kinds.count(k) for k in set(kinds)},
        "latency_s": {"p50": q(0.5), "p99": q(0.99), "of": "successful requests, send to last byte"},
        "completion_tokens_per_s": sum(r["completion_tokens"] for r in ok) / wall,
        "prefix_cache_hit_share": {"cached_over_prompt_tokens_of_shared_prompt_requests": hit_share,
                                   "shared_requests_with_a_hit": sum(1 for r in shared if r["cached_tokens"] > 0) / max(len(shared), 1)},
        "rss_first_100_mean_bytes": statistics.mean(first) if first else None,
        "rss_last_100_mean_bytes": statistics.mean(last) if last else None,
        "rss_drift": drift, "oom_kills": oom,
        "rss_mean_by_hundred_mib": [
            {k: statistics.mean(r[f"server_{k}_bytes"] for r in done[i:i + 100] if r.get(f"server_{k}_bytes")) / (1 << 20)
             for k in ("rss", "rss_anon", "rss_file")} for i in range(0, len(done), 100)], "cgroup_max_usage_bytes": max_usage,
        "within_budget": max_usage <= budget_mb << 20, "server_exit_code": exit_code,
        "other_5xx": bad_5xx, "malformed_all_400": malformed_ok, "passed": passed,
        "server_stats": {k: stats[k] for k in ("experts", "tokens", "memory", "tok_per_s")} if stats else None,
        "metrics_at_end": metrics,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({k: report[k] for k in ("requests", "wall_s", "statuses", "latency_s", "completion_tokens_per_s",
                                              "prefix_cache_hit_share", "rss_drift", "oom_kills", "passed")}, indent=1))
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
