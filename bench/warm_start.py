#!/usr/bin/env python3
"""The first request after a restart, with and without the warm start (`serve` reads the
experts that earlier runs selected most into the expert cache while idle; `--no-warm-start`
starts cold). Each variant has its own state folder, seeded by one untimed session of
--seed-requests short chats (so both have the same expert heat to start from); then each
timed run drops the model from the page cache, starts the server under a cgroup cap of the
budget, waits --idle-s seconds (a user typing; 0: the request is sent the moment the server
is ready), and sends one short chat it has not seen, streamed: time to first token, total,
and the warm start's own figures from `/stats`. Variants alternate, --runs each; the same
tokens come back in every run.

With --read-first, each timed run starts after the model was read whole through the page
cache (as `cat`, a checksum or an upstream run reads it: more of it cached than the budget
holds) rather than dropped from it. With --compare-bin, the variants are two builds, both
with their warm start (`after`: --bin, `before`: the other), each seeding its own state.
With --chat, the timed run is `generate --chat` instead of a server, reading the heat the
seeding server left (`--heat-dir` the server's state folder): the first turn is typed
--idle-s seconds after its `> ` prompt appears, and timed from the line sent to the reply's
first byte and to the next `> `.

    python3 bench/warm_start.py -m W1.gguf --budget-mb 8192 --idle-s 15 --runs 3 \\
        --out validate/warm-start-w1-8g.json
    python3 bench/warm_start.py -m W1.gguf --budget-mb 8192 --idle-s 0 --runs 3 --read-first \\
        --compare-bin /path/to/before/epm-run --out validate/keep-hottest-w1-8g.json
    python3 bench/warm_start.py -m W1.gguf --budget-mb 8192 --idle-s 15 --runs 3 --chat \\
        --out validate/warm-start-chat-w1-8g.json
"""
import argparse, http.client, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import (Cgroup, disk_read_mb_s, drop_cache, machine, read_through_cache, request_json,  # noqa: E402
                    start_server)

SEED = ["Tell me about the rivers of France and where they flow.", "Write a haiku about autumn leaves.",
        "How do I reverse a list in Python?", "What is the capital of Australia, and why not Sydney?"]
TIMED = "What do owls eat in the winter months, and how do they find it under snow?"


def chat_stream(port, text, max_tokens):
    """One streamed chat: (seconds to the first content chunk, seconds in all, the text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first, parts = None, []
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            raise SystemExit(f"the stream ended with an error: {ev['error']}")
        for ch in ev.get("choices", []):
            if ch["delta"].get("content") or ch["delta"].get("reasoning_content"):
                first = first or time.time() - t0
                parts.append(ch["delta"].get("content") or "")
    return first, time.time() - t0, "".join(parts)


def chat_cmd(binary, model, budget_mb, state, cold, max_tokens, stats):
    cmd = [binary, "generate", "--chat", "-m", model, "--ram-budget-mb", str(budget_mb),
           "-n", str(max_tokens), "--temp", "0", "--stats-file", stats]
    return cmd + (["--no-warm-start"] if cold else ["--heat-dir", state])


def until_prompt(out):
    """Read `out` up to the chat's next `> `: the bytes before it and when its first came."""
    got, first = b"", None
    while not got.endswith(b"> "):
        b = out.read(1)
        if not b:
            raise SystemExit("generate --chat ended early")
        first = first or time.time()
        got += b
    return got[:-2], first


def chat_after_idle(cmd, idle_s, text):
    """Start `cmd` (a `generate --chat`), wait for its first `> `, idle `idle_s` seconds, type
    `text`: (seconds to the prompt, to the reply's first byte, to its end, the reply)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        until_prompt(p.stdout)
        ready = time.time() - t0
        time.sleep(idle_s)
        sent = time.time()
        p.stdin.write(text.encode() + b"\n")
        p.stdin.flush()
        reply, first = until_prompt(p.stdout)
        done = time.time()
        p.stdin.close()
        if p.wait(timeout=120) != 0:
            raise SystemExit(f"{' '.join(cmd)} exited with {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
    return ready, first - sent, done - sent, reply.decode(errors="replace")


def serve_cmd(binary, model, budget_mb, state, cold):
    cmd = [binary, "serve", "-m", model, "--port", "0", "--ram-budget-mb", str(budget_mb),
           "--prompt-cache-mb", "0", "--prompt-cache-dir", state]
    return cmd + (["--no-warm-start"] if cold else [])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--idle-s", type=float, default=15)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed-requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--read-first", action="store_true",
                    help="read the model whole through the page cache before each timed start, not drop it")
    ap.add_argument("--compare-bin", help="compare --bin (after) with this build (before), both warm")
    ap.add_argument("--chat", action="store_true", help="time `generate --chat` instead of a server")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="warm-start-", dir=os.path.dirname(os.path.abspath(a.model)))
    # name -> (binary, cold)
    if a.compare_bin:
        variants = {"after": (a.bin, False), "before": (a.compare_bin, False)}
    else:
        variants = {"warm": (a.bin, False), "cold": (a.bin, True)}
    first, second = variants
    rows, commands = [], {}
    try:
        for name, (binary, _) in variants.items():
            state = os.path.join(work, name)
            os.makedirs(state)
            with Cgroup(a.budget_mb << 20, f"seed-{name}") as cg:
                drop_cache(a.model)
                proc, port = start_server(cg.wrap(serve_cmd(binary, a.model, a.budget_mb, state, cold=False)))
                for text in SEED[:a.seed_requests]:
                    chat_stream(port, text, a.max_tokens)
                proc.terminate()
                proc.wait(timeout=120)
        for run in range(a.runs):
            for name, (binary, cold) in variants.items():
                state = os.path.join(work, name)
                stats = os.path.join(work, "stats.json")
                if a.chat:
                    cmd = chat_cmd(binary, a.model, a.budget_mb, state, cold, a.max_tokens, stats)
                else:
                    cmd = serve_cmd(binary, a.model, a.budget_mb, state, cold)
                commands[name] = " ".join(cmd)
                disk = disk_read_mb_s(a.model)
                with Cgroup(a.budget_mb << 20, f"{name}-{run}") as cg:
                    drop_cache(a.model)
                    if a.read_first:
                        read_through_cache(a.model, chunk=1 << 20)
                    if a.chat:
                        ready, ttft, total, text = chat_after_idle(cg.wrap(cmd), a.idle_s, TIMED)
                        with open(stats) as f:
                            after = json.load(f)
                        # Nothing but the warm start runs before the first turn.
                        before = {"experts": {"warm_start": None,
                                              "prompt": {"misses": 0, "cache_hits": 0, "miss_bytes": 0}},
                                  "prefetch": {"prompt": {"issued_bytes": 0}}}
                    else:
                        t0 = time.time()
                        proc, port = start_server(cg.wrap(cmd))
                        ready = time.time() - t0
                        time.sleep(a.idle_s)
                        _, before = request_json(port, "GET", "/stats")
                        ttft, total, text = chat_stream(port, TIMED, a.max_tokens)
                        _, after = request_json(port, "GET", "/stats")
                        proc.terminate()
                        proc.wait(timeout=120)
                    facts = cg.facts()
                row = {"variant": name, "run": run, "ready_s": round(ready, 2), "ttft_s": round(ttft, 2),
                       "start_to_first_token_s": round(ready + a.idle_s + ttft, 2),
                       "total_s": round(total, 2), "text": text, "disk_mb_s_before": disk,
                       "warm_start_at_request": before["experts"]["warm_start"],
                       "warm_start_after": after["experts"]["warm_start"],
                       "prompt_misses": after["experts"]["prompt"]["misses"] - before["experts"]["prompt"]["misses"],
                       # The prompt's selections found cached (the warm start's among them), and
                       # the bytes it read: its misses and its reads ahead.
                       "prompt_cache_hits": (after["experts"]["prompt"]["cache_hits"]
                                             - before["experts"]["prompt"]["cache_hits"]),
                       "prompt_read_bytes": (after["experts"]["prompt"]["miss_bytes"]
                                             - before["experts"]["prompt"]["miss_bytes"]
                                             + after["prefetch"]["prompt"]["issued_bytes"]
                                             - before["prefetch"]["prompt"]["issued_bytes"]),
                       "decode_hit_rate": after["experts"]["decode"]["cache_hit_rate"],
                       "peak_rss_bytes": after["memory"]["peak_rss_bytes"], "cgroup": facts,
                       # A live server's stats have no exit audit (written when it stops).
                       "stray_cache_bytes_at_exit": (after["experts"]["stray_cache_bytes_at_exit"]
                                                     if a.chat else None)}
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("variant", "run", "ready_s", "ttft_s", "total_s", "warm_start_at_request",
                                                       "prompt_misses", "prompt_cache_hits", "prompt_read_bytes")}),
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {n: {k: statistics.median(r[k] for r in rows if r["variant"] == n)
               for k in ("ready_s", "ttft_s", "total_s", "start_to_first_token_s", "prompt_cache_hits",
                         "prompt_read_bytes")}
           for n in variants}
    same = len({r["text"] for r in rows}) == 1
    what = ("the first request after a restart, this build against another, both with the warm start"
            if a.compare_bin else "the first request after a restart, warm start against --no-warm-start")
    if a.chat:
        what = what.replace("the first request after a restart", "the first turn of `generate --chat`")
    if a.read_first:
        what += ", the model read whole through the page cache before each start"
    ttft_key, total_key = f"ttft_ratio_{first}_over_{second}", f"total_ratio_{first}_over_{second}"
    report = {"what": what,
              "command": "python3 bench/warm_start.py " + " ".join(sys.argv[1:]), "server_commands": commands,
              "machine": machine(), "budget_mb": a.budget_mb, "idle_s": a.idle_s, "medians": med,
              "stray_cache_bytes_at_exit": (max(r["stray_cache_bytes_at_exit"] for r in rows)
                                            if a.chat else None),
              ttft_key: round(med[first]["ttft_s"] / med[second]["ttft_s"], 3),
              total_key: round(med[first]["total_s"] / med[second]["total_s"], 3),
              "same_text_every_run": same,
              "within_budget": all(r["peak_rss_bytes"] <= a.budget_mb << 20 for r in rows),
              "oom_kills": sum(r["cgroup"]["oom_kills"] for r in rows), "runs": rows}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps({k: report[k] for k in ("medians", ttft_key, total_key, "same_text_every_run",
                                             "within_budget", "oom_kills")}, indent=1))


if __name__ == "__main__":
    main()
