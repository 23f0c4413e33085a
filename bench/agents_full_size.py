#!/usr/bin/env python3
"""Constrained output on a full-size model within its budget: `epm-run serve` on MODEL at
--budget-mb inside a cgroup v1 cap equal to the budget answers a `tool_choice: "required"`
request and a `json_schema` request (each validated with jsonschema); then `generate` runs
the same prompt free and under a grammar that admits the free run's first tokens and then
only digits, and the logits of every position up to the first token the grammar changed
must be byte-identical. The record goes to --out.

    python3 bench/agents_full_size.py --model W1.gguf [--budget-mb 4096] [--out validate/agents-full-size-w1-4g.json]
"""
import argparse, json, os, signal, subprocess, sys, tempfile, time

import jsonschema

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import Cgroup, drop_cache, machine, request_json, start_server  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}}}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
          "required": ["name", "age", "tags"]}
PROMPT = "The history of the river begins"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget-mb", type=int, default=4096)
    ap.add_argument("--out", default="validate/agents-full-size-w1-4g.json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-agents-")
    rec = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "command": "python3 bench/agents_full_size.py " + " ".join(sys.argv[1:]),
           "machine": machine(), "model": a.model, "budget_mb": a.budget_mb}
    drop_cache(a.model)
    cg = Cgroup(a.budget_mb << 20, "agents")
    stats_file = os.path.join(tmp, "serve-stats.json")
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", "2048", "-t", "2", "--ram-budget-mb", str(a.budget_mb),
           "--stats-file", stats_file]
    proc, port = start_server(cg.wrap(cmd))
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    t = time.time()
    status, r = request_json(port, "POST", "/v1/chat/completions", {"messages": msgs, "tools": TOOLS,
                             "tool_choice": "required", "max_tokens": 120, "temperature": 0}, timeout=3600)
    calls = r["choices"][0]["message"].get("tool_calls") or []
    for c in calls:
        jsonschema.validate(json.loads(c["function"]["arguments"]), TOOLS[0]["function"]["parameters"])
    rec["tool_call"] = {"status": status, "seconds": time.time() - t, "finish_reason": r["choices"][0]["finish_reason"],
                        "tool_calls": calls, "usage": r["usage"]}
    t = time.time()
    status, r = request_json(port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "A person?"}],
                             "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
                             "max_tokens": 120, "temperature": 0}, timeout=3600)
    content = r["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), SCHEMA)
    rec["json_schema"] = {"status": status, "seconds": time.time() - t, "finish_reason": r["choices"][0]["finish_reason"],
                          "content": content, "usage": r["usage"]}
    proc.send_signal(signal.SIGTERM)
    rec["serve_exit_code"] = proc.wait(timeout=120)
    stats = json.load(open(stats_file))
    rec["serve_peak_rss_bytes"] = stats["memory"]["peak_rss_bytes"]
    rec["serve_cap"] = cg.facts()
    cg.close()

    # Logits: free, then under a grammar that admits the free run's first tokens.
    def generate(tag, n, extra):
        logits, st = os.path.join(tmp, f"{tag}.bin"), os.path.join(tmp, f"{tag}.json")
        drop_cache(a.model)
        with Cgroup(a.budget_mb << 20, f"gen-{tag}") as g:
            p = subprocess.run(g.wrap([a.bin, "generate", "-m", a.model, "-p", PROMPT, "-n", str(n), "-c", "1024", "-t", "2",
                                       "--ram-budget-mb", str(a.budget_mb), "--dump-logits", logits, "--stats-file", st] + extra),
                               capture_output=True, text=True, check=True)
            facts = g.facts()
        s = json.load(open(st))
        return p.stdout, s["tokens"]["generated_ids"], open(logits, "rb").read(), facts, s["memory"]["peak_rss_bytes"]
    prefix, _, _, _, _ = generate("prefix", 4, [])
    prefix = prefix.rstrip("\n")
    free_text, free_ids, free_logits, free_cap, free_peak = generate("free", 10, [])
    grammar = os.path.join(tmp, "g.gbnf")
    escaped = prefix.replace("\\", "\\\\").replace('"', '\\"')
    open(grammar, "w").write(f'root ::= "{escaped}" [0-9]{{6}}\n')
    text, ids, logits, cap, peak = generate("constrained", 10, ["--grammar", grammar])
    first = next((i for i, (x, y) in enumerate(zip(free_ids, ids)) if x != y), None)
    row = len(free_logits) // len(free_ids)
    equal_through = first is not None and all(
        logits[i * row:(i + 1) * row] == free_logits[i * row:(i + 1) * row] for i in range(first + 1))
    rec["logits"] = {"free_text": free_text, "constrained_text": text, "grammar_prefix": prefix,
                     "first_token_the_grammar_changed": first, "logits_equal_through_it": equal_through,
                     "positions_compared": None if first is None else first + 1,
                     "caps": {"free": free_cap, "constrained": cap}, "peak_rss_bytes": {"free": free_peak, "constrained": peak}}
    budget = a.budget_mb << 20
    rec["passed"] = (rec["tool_call"]["finish_reason"] == "tool_calls" and len(calls) == 1
                     and rec["json_schema"]["finish_reason"] == "stop" and rec["serve_exit_code"] == 0
                     and rec["serve_cap"]["oom_kills"] == 0 and rec["serve_peak_rss_bytes"] <= budget
                     and equal_through and first >= 3 and free_cap["oom_kills"] == 0 and cap["oom_kills"] == 0
                     and max(free_peak, peak) <= budget)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(rec, open(a.out, "w"), indent=2)
    print(json.dumps(rec, indent=1))
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if rec["passed"] else 1)


if __name__ == "__main__":
    main()
