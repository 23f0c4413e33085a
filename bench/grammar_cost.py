#!/usr/bin/env python3
"""What a constraint costs per token: the same chat request free and with a `json_schema`
response format, greedy and sampled (temperature 0.7), several seeds, against one fresh
server. Under a schema the token the free chain picks is checked first and the grammar
runs over the whole vocabulary only when it is refused; on random weights (synthetic
models) the free choice is mostly refused, so this is near the worst case.

    python3 bench/grammar_cost.py -m mini.gguf --out validate/grammar-cost-mini.json
"""
import argparse, json, os, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import epmlib  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days", "units"],
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                         "units": {"enum": ["metric", "imperial"]}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--budget-mb", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-t", "2", "--ram-budget-mb", str(a.budget_mb)]
    proc, port = epmlib.start_server(cmd)
    rows = {}
    try:
        for temperature in (0.0, 0.7):
            for constrained in (False, True):
                key = f"t={temperature} {'schema' if constrained else 'free'}"
                for seed in range(a.seeds):
                    body = {"messages": [{"role": "user", "content": "The weather in Paris for 3 days, as JSON."}],
                            "max_tokens": a.max_tokens, "temperature": temperature, "seed": seed}
                    if constrained:
                        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}
                    t = time.time()
                    status, r = epmlib.request_json(port, "POST", "/v1/chat/completions", body, timeout=600)
                    if status != 200:
                        sys.exit(f"{key}: HTTP {status}: {json.dumps(r)[:300]}")
                    elapsed = time.time() - t
                    tokens = r["usage"]["completion_tokens"]
                    choice = r["choices"][0]
                    row = {"seed": seed, "s": elapsed, "tokens": tokens, "ms_per_token": elapsed * 1e3 / max(tokens, 1),
                           "finish_reason": choice["finish_reason"]}
                    if constrained and choice["finish_reason"] == "stop":
                        # A finished constrained reply must be an object of the schema's keys.
                        try:
                            row["valid"] = sorted(json.loads(choice["message"]["content"])) == sorted(SCHEMA["required"])
                        except ValueError:
                            row["valid"] = False
                    rows.setdefault(key, []).append(row)
                print(key, [round(x["ms_per_token"], 2) for x in rows[key]], file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    summary = {k: round(statistics.median(x["ms_per_token"] for x in v), 2) for k, v in rows.items()}
    epmlib.write_report(a.out, {
        "command": "python3 bench/grammar_cost.py " + " ".join(sys.argv[1:]),
        "machine": epmlib.machine(), "model": a.model,
        "what": "whole request time per completion token (ms), median over seeds; one warm server",
        "all_passed": all(x.get("valid", True) for v in rows.values() for x in v),
        "ms_per_token_median": summary, "runs": rows,
    }, summary_keys=["ms_per_token_median", "all_passed"])


if __name__ == "__main__":
    main()
