#!/usr/bin/env python3
"""Fault soak of `epm-run serve`: a `-mini` at its plan minimum inside a cgroup v1 cap equal
to the budget, 4 clients and 1,000 requests, with faults injected while it serves:

- 5% clients that stall mid-stream (read the first event, then hold the connection
  without reading for --stall-s seconds);
- 2% slow bodies (the headers, then the body a few bytes at a time over --slow-s seconds);
- 10% malformed requests;
- the stats file on a tiny tmpfs (256 KiB), filled up while SIGUSR2 asks for stats writes;
- a period of --throttle-s seconds with the server's reads throttled to 20 MB/s (blkio);
- at the end, the model file replaced under the running server.

It passes when there are 0 OOM kills and no 5xx but 503; stalled and slow clients delay no
other request (the other requests' p99 latency while a stall or slow body is open is within
--delay-factor of the p99 when none is); every request after the replacement gets a 503
that names the file; the server exits 0 on SIGTERM with a complete stats file (the tmpfs is
emptied first); and RSS drifts under 2% between the first and the last hundred requests.
Bounded in count (--requests) and time (--timeout); loopback only. Needs root (tmpfs,
cgroups). The record goes to --out.

    python3 bench/serve_faults.py [--bin target/release/epm-run] [--out validate/serve-faults.json]
"""
import argparse, http.client, json, os, random, signal, socket, statistics, subprocess, sys
import threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
sys.path.insert(0, HERE)
from epmlib import Cgroup, machine, start_server, synth_mini  # noqa: E402
from serve_soak import request, rss  # noqa: E402

BLKIO = "/sys/fs/cgroup/blkio"


def disk_device(path):
    """`major:minor` of the block device under `path` (the whole disk, for blkio)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sys_dev = os.path.realpath(f"/sys/dev/block/{major}:{minor}")
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(os.path.dirname(sys_dev), "dev")) as f:
            return f.read().strip()
    return f"{major}:{minor}"


class Throttle:
    """A blkio v1 cgroup that limits reads of one disk; processes join it while it lasts."""

    def __init__(self, device, mbps):
        self.dir = os.path.join(BLKIO, f"epm-faults-{os.getpid()}")
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, "blkio.throttle.read_bps_device"), "w") as f:
            f.write(f"{device} {int(mbps * 1e6)}")

    def add(self, pid):
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def close(self, pids):
        for p in pids:
            try:
                with open(os.path.join(BLKIO, "cgroup.procs"), "w") as f:
                    f.write(str(p))
            except OSError:
                pass
        for _ in range(100):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.05)


def stall(port, rnd, hold_s):
    """A streaming request whose client reads one event and then stops reading."""
    body = json.dumps({"messages": [{"role": "user", "content": "tell a long story"}], "max_tokens": 24,
                       "temperature": 0, "stream": True})
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        first = s.recv(256)
        status = int(first.split(b" ")[1]) if first.startswith(b"HTTP/1.1") else 0
        time.sleep(hold_s)
        return {"kind": "stall", "status": status, "latency_s": time.time() - t0}
    finally:
        s.close()


def slow_body(port, rnd, over_s):
    """A request whose body arrives a few bytes at a time."""
    body = json.dumps({"messages": [{"role": "user", "content": "slow"}], "max_tokens": 4, "temperature": 0}).encode()
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    try:
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        step = max(1, len(body) // 10)
        for i in range(0, len(body), step):
            s.sendall(body[i:i + step])
            time.sleep(over_s / 10)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        status = int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1") else 0
        return {"kind": "slow_body", "status": status, "latency_s": time.time() - t0}
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--stall-s", type=float, default=3.0)
    ap.add_argument("--slow-s", type=float, default=2.0)
    ap.add_argument("--throttle-s", type=float, default=30.0)
    ap.add_argument("--throttle-mbps", type=float, default=20.0)
    ap.add_argument("--delay-factor", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=3000)
    ap.add_argument("--out", default="validate/serve-faults.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-faults-")
    plan = json.loads(subprocess.run([a.bin, "plan", "-m", model, "-c", str(a.ctx), "--parallel", str(a.parallel), "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    budget_mb = -(-plan["min_budget_bytes"] // (1 << 20))
    # The stats file on a 256 KiB tmpfs, later filled up.
    stats_dir = os.path.join(tmp, "stats")
    os.mkdir(stats_dir)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", stats_dir], check=True)
    stats_file = os.path.join(stats_dir, "stats.json")
    cg = Cgroup(budget_mb << 20, "faults")
    cmd = [a.bin, "serve", "-m", model, "--port", "0", "-c", str(a.ctx), "-t", "2", "--parallel", str(a.parallel),
           "--queue", "32", "--ram-budget-mb", str(budget_mb), "--stats-file", stats_file]
    proc, port = start_server(cg.wrap(cmd))
    n = a.requests
    kinds = (["stall"] * 50 + ["slow_body"] * 20 + ["malformed"] * 100 + ["stream"] * 415 + ["plain"] * 415)
    random.Random(11).shuffle(kinds)
    kinds = (kinds * (n // len(kinds) + 1))[:n]
    warm_rnd = random.Random(98)
    warmup = [request(port, "plain", warm_rnd) for _ in range(a.warmup)]
    lock = threading.Lock()
    records = [None] * n
    next_i = [0]
    open_faults = [0]
    events = []
    started = time.time()

    def client(cid):
        rnd = random.Random(200 + cid)
        while True:
            with lock:
                i = next_i[0]
                if i >= n or time.time() - started > a.timeout:
                    return
                next_i[0] += 1
            k = kinds[i]
            t_start = time.time()
            if k in ("stall", "slow_body"):
                with lock:
                    open_faults[0] += 1
                try:
                    rec = stall(port, rnd, a.stall_s) if k == "stall" else slow_body(port, rnd, a.slow_s)
                finally:
                    with lock:
                        open_faults[0] -= 1
            else:
                with lock:
                    during = open_faults[0] > 0
                rec = request(port, k, rnd)
                rec["during_fault"] = during
            rec["index"], rec["t"] = i, t_start - started
            m = rss(proc.pid)
            if m:
                rec["server_rss_bytes"] = m[0]
            records[i] = rec

    def faults():
        """The stats tmpfs filled and stats asked for; the disk throttled for a while."""
        time.sleep(20)
        filler = os.path.join(stats_dir, "filler")
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        events.append({"t": time.time() - started, "event": "stats tmpfs full"})
        for _ in range(3):
            os.kill(proc.pid, signal.SIGUSR2)
            time.sleep(1)
        events.append({"t": time.time() - started, "event": "3 SIGUSR2 stats writes on the full tmpfs"})
        time.sleep(10)
        dev = disk_device(model)
        pids = [int(p) for p in open(os.path.join(cg.dir, "cgroup.procs")).read().split()]
        thr = Throttle(dev, a.throttle_mbps)
        for p in pids:
            try:
                thr.add(p)
            except OSError:
                pass
        # The model's cached pages dropped, so that the server's next reads meet the throttle.
        subprocess.run(["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"], check=False)
        events.append({"t": time.time() - started, "event": f"reads throttled to {a.throttle_mbps} MB/s on {dev}"})
        time.sleep(a.throttle_s)
        thr.close(pids)
        events.append({"t": time.time() - started, "event": "throttle removed"})
        os.remove(filler)
        events.append({"t": time.time() - started, "event": "stats tmpfs emptied"})

    injector = threading.Thread(target=faults)
    injector.start()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    injector.join()
    wall = time.time() - started
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    write_failures = next((float(l.split()[-1]) for l in metrics.splitlines()
                           if l.startswith('epm_output_write_failures_total{file="stats"}')), 0.0)
    # The model file replaced under the running server, as a re-download does.
    fresh = os.path.join(tmp, "new.gguf")
    subprocess.run([a.bin, "synth", "--preset", "qwen3-30b-a3b-mini", "--seed", "2", "-o", fresh], check=True,
                   stdout=subprocess.DEVNULL)
    os.rename(fresh, model)
    time.sleep(0.5)
    after = []
    for _ in range(5):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        after.append({"status": r.status, "message": body.get("error", {}).get("message", "")})
    proc.send_signal(signal.SIGTERM)
    exit_code = proc.wait(timeout=120)
    oom, max_usage = cg.oom_kills(), cg.max_usage()
    cg.close()
    stats = None
    try:
        stats = json.load(open(stats_file))
    except (OSError, ValueError):
        pass
    subprocess.run(["umount", stats_dir], check=False)
    done = [r for r in records if r]
    statuses = {}
    for r in done:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    bad_5xx = sum(v for s, v in statuses.items() if s.startswith("5") and s != "503")
    normal = [r for r in done if r["kind"] in ("plain", "stream") and r["status"] == 200]
    throttle = next((e["t"] for e in events if e["event"].startswith("reads throttled")), None)
    unthrottle = next((e["t"] for e in events if e["event"] == "throttle removed"), None)
    in_throttle = lambda r: throttle is not None and throttle - 2 <= r["t"] <= (unthrottle or 1e9)
    calm = sorted(r["latency_s"] for r in normal if not r["during_fault"] and not in_throttle(r))
    faulty = sorted(r["latency_s"] for r in normal if r["during_fault"] and not in_throttle(r))
    p99 = lambda xs: xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else None
    p50 = lambda xs: xs[len(xs) // 2] if xs else None
    first = [r["server_rss_bytes"] for r in done[:100] if r.get("server_rss_bytes")]
    last = [r["server_rss_bytes"] for r in done[-100:] if r.get("server_rss_bytes")]
    drift = abs(statistics.mean(last) - statistics.mean(first)) / statistics.mean(first) if first and last else None
    model_name = os.path.basename(model)
    replaced_ok = all(x["status"] == 503 and model_name in x["message"] for x in after)
    no_delay = (p99(faulty) is not None and p99(calm) is not None and p99(faulty) <= a.delay_factor * p99(calm))
    malformed_ok = all(r["status"] == 400 for r in done if r["kind"] == "malformed")
    stalls_ok = all(r["status"] == 200 for r in done if r["kind"] in ("stall", "slow_body"))
    passed = (oom == 0 and bad_5xx == 0 and statuses.get("0", 0) == 0 and len(done) == n and malformed_ok
              and stalls_ok and no_delay and replaced_ok and exit_code == 0 and stats is not None
              and stats.get("complete") is True and drift is not None and drift < 0.02 and write_failures >= 1
              and all(r["status"] == 200 for r in warmup))
    report = {
        "what": "serve fault soak: stalled and slow clients, malformed requests, a full stats disk, a throttled "
                "disk and a replaced model file, a -mini at its plan minimum inside a cgroup cap equal to the budget",
        "command": "python3 bench/serve_faults.py " + " ".join(sys.argv[1:]),
        "machine": machine(), "server_command": " ".join(cmd), "budget_mb": budget_mb,
        "requests": len(done), "clients": a.clients, "wall_s": wall, "statuses": statuses,
        "kinds": {k: kinds.count(k) for k in sorted(set(kinds))}, "fault_events": events,
        "latency_s": {"calm_p50": p50(calm), "calm_p99": p99(calm), "during_stall_or_slow_body_p50": p50(faulty),
                      "during_stall_or_slow_body_p99": p99(faulty), "samples_calm": len(calm), "samples_during": len(faulty),
                      "of": "plain and streaming requests that succeeded, outside the throttle window"},
        "stats_write_failures_counted": write_failures,
        "after_model_replaced": after, "rss_drift": drift, "oom_kills": oom,
        "cgroup_max_usage_bytes": max_usage, "within_budget": max_usage <= budget_mb << 20,
        "server_exit_code": exit_code, "stats_complete": stats.get("complete") if stats else None,
        "other_5xx": bad_5xx, "malformed_all_400": malformed_ok, "stalled_and_slow_all_200": stalls_ok,
        "stalls_delay_none": no_delay, "replaced_model_503_names_file": replaced_ok, "passed": passed,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps({k: report[k] for k in ("requests", "wall_s", "statuses", "latency_s", "rss_drift", "oom_kills",
                                              "stalls_delay_none", "replaced_model_503_names_file", "server_exit_code",
                                              "stats_complete", "passed")}, indent=1))
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
