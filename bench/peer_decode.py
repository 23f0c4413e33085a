#!/usr/bin/env python3
"""EPM against a peer that streams experts (BigMoeOnEdge's `bmoe-cli --moe-stream`), side by
side: the same model, prompt, token count, threads and context, each run from a cold page
cache inside a cgroup v1 cap equal to the budget, the two alternating, `--runs` each.
Reports decode (and prefill, where the peer prints it) tok/s, the cap's facts and each
side's generated text. The peer's build is the caller's (its recipe is in STATUS.md);
nothing of it is part of this project.

    python3 bench/peer_decode.py -m W1.gguf --budget-mb 8192 --peer-bin PATH/bmoe-cli \
        --peer-cache-mb 6000 -f bench/w1-prompt-128.txt -n 32 --runs 3 --out validate/peer-decode-w1-8g.json
"""
import argparse, json, os, re, shlex, statistics, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import epmlib  # noqa: E402

MIB = 1 << 20


def run_epm(a, tmp, rep, cap):
    stats = os.path.join(tmp, f"epm-{rep}.json")
    cmd = [a.bin, "generate", "-m", a.model, "-f", a.prompt_file, "-n", str(a.n), "-c", str(a.ctx),
           "-t", str(a.threads), "--ram-budget-mb", str(a.budget_mb), "--stats-file", stats]
    out = epmlib.run(cap.wrap(cmd), capture_output=True, text=True)
    s = json.load(open(stats))
    return {"decode_tok_s": s["tok_per_s"]["decode"], "prefill_tok_s": s["tok_per_s"]["prefill"],
            "peak_rss_bytes": s["memory"]["peak_rss_bytes"], "text": out.stdout,
            "decode_read_mb_per_step": s["io"]["decode_read_bytes"] / max(s["io"]["decode_steps"], 1) / 1e6}


def run_peer(a, rep, cap):
    prompt = open(a.prompt_file).read()
    cmd = [a.peer_bin, "-m", a.model, "-p", prompt, "-n", str(a.n), "-t", str(a.threads), "-c", str(a.ctx),
           "--temp", "0", "--ubatch", str(a.peer_ubatch), "--moe-stream", "--cache-mb", str(a.peer_cache_mb)]
    out = epmlib.run(cap.wrap(cmd), capture_output=True, text=True, check=False)
    m = re.search(r"generation: (\d+) tokens, ([\d.]+) s/token \(([\d.]+) tok/s\)", out.stdout)
    if out.returncode != 0 or not m:
        return {"exit_code": out.returncode, "error": (out.stderr or out.stdout)[-2000:]}
    body = out.stdout.split("\n\ngeneration:")[0]
    return {"exit_code": 0, "decode_tok_s": float(m.group(3)), "generated": int(m.group(1)),
            "text": body[len(prompt):] if body.startswith(prompt) else body,
            "summary_lines": [l for l in out.stdout.splitlines()[-30:] if ":" in l][:20]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--peer-bin", required=True)
    ap.add_argument("--peer-cache-mb", type=int, required=True)
    ap.add_argument("--peer-ubatch", type=int, default=128)
    ap.add_argument("-f", "--prompt-file", default="bench/w1-prompt-128.txt")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not epmlib.Cgroup.available():
        sys.exit("needs a writable cgroup v1 memory controller for the cap")
    tmp = tempfile.mkdtemp(prefix="epm-peer-")
    rows = {"epm": [], "peer": []}
    for rep in range(a.runs):
        for side in ("epm", "peer") if rep % 2 else ("peer", "epm"):
            epmlib.drop_cache(a.model)
            with epmlib.Cgroup(a.budget_mb * MIB, tag=f"peer-{side}") as cap:
                row = run_epm(a, tmp, rep, cap) if side == "epm" else run_peer(a, rep, cap)
                row.update(cap.facts())
            rows[side].append(row)
            print(json.dumps({side: {k: v for k, v in row.items() if k not in ("text", "summary_lines")}}),
                  file=sys.stderr, flush=True)
    ok = {side: [r for r in rs if "decode_tok_s" in r] for side, rs in rows.items()}
    med = {side: statistics.median(r["decode_tok_s"] for r in rs) if rs else None for side, rs in ok.items()}
    report = {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "command": "python3 bench/peer_decode.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
        "machine": epmlib.machine(),
        "model": a.model,
        "budget_mb": a.budget_mb,
        "median_decode_tok_s": med,
        "epm_over_peer": med["epm"] / med["peer"] if med["epm"] and med["peer"] else None,
        "per_rep_epm_over_peer": [e["decode_tok_s"] / p["decode_tok_s"]
                                  for e, p in zip(rows["epm"], rows["peer"]) if "decode_tok_s" in p],
        "texts_equal": [e.get("text", "").strip() == p.get("text", "").strip()
                        for e, p in zip(rows["epm"], rows["peer"])],
        "epm_within_budget_no_oom": all(r["peak_rss_bytes"] <= a.budget_mb * MIB and r.get("oom_kills", 0) == 0
                                        for r in rows["epm"]),
        "runs": rows,
    }
    report["all_passed"] = report["epm_within_budget_no_oom"] and all(len(rs) == a.runs for rs in ok.values())
    epmlib.write_report(a.out, report, tmp=tmp, summary_keys=["all_passed", "median_decode_tok_s", "epm_over_peer",
                                                              "per_rep_epm_over_peer", "texts_equal"])


if __name__ == "__main__":
    main()
