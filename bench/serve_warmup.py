#!/usr/bin/env python3
"""An agent's first turn over the Responses API's WebSocket mode, with and without a
warm-up: the agent opens the socket at start and sends its instructions (a system prompt of
about --system-tokens tokens) and the session's context with `generate: false`, the user
types for --think-s seconds, then the first turn continues the warm-up by
`previous_response_id`. Without the warm-up the same turn carries the instructions and the
context itself after the same wait (the same prompt: the same tokens must come out). Records the first
turn's time to first token (its first streamed text), its prompt and cached tokens, with
a fresh server (cold page cache, empty prompt store) per run, the two ways alternating.

    python3 bench/serve_warmup.py -m W1.gguf --budget-mb 4096 [--runs 3] [--think-s 150]
        [--system-tokens 2000] [--out validate/serve-warmup-w1-4g.json]
"""
import argparse, os, statistics, sys, time

import openai

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
sys.path.insert(0, HERE)
from epmlib import disk_read_mb_s, drop_cache, machine, start_server, write_report  # noqa: E402
from serve_agent import prompt_tokens, system_prompt  # noqa: E402

FIRST_TURN = "List the crates and say what each one does."
# What an agent sends ahead with its instructions: the session's context, as a user message.
SESSION_CONTEXT = "Environment: a Rust workspace under /work/project; the shell is bash; the network is off."


def sized_instructions(port, tokens):
    """Instructions of about `tokens` tokens, as the model's tokenizer counts them."""
    per_word = 1.35
    for _ in range(3):
        text = system_prompt(tokens, per_word)
        n = prompt_tokens(port, [{"role": "system", "content": text}, {"role": "user", "content": FIRST_TURN}])
        if abs(n - tokens) <= tokens * 0.05:
            break
        per_word *= n / tokens
    return text


def first_turn(conn, **create):
    """Send the turn on `conn`; its time to first text, and its completed response."""
    t0 = time.time()
    conn.response.create(**create)
    ttft = None
    for ev in conn:
        if ev.type in ("response.output_text.delta", "response.reasoning_text.delta") and ttft is None:
            ttft = time.time() - t0
        if ev.type == "error":
            raise SystemExit(f"the first turn failed: {ev.error.message}")
        if ev.type == "response.completed":
            return ttft, time.time() - t0, ev.response


def one_run(a, warm):
    drop_cache(a.model)
    # start_server gives each server a fresh prompt store: every run starts cold.
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-c", str(a.ctx), "-t", "2",
           "--ram-budget-mb", str(a.budget_mb)]
    proc, port = start_server(cmd)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=3600)
        instructions = sized_instructions(port, a.system_tokens)
        turn = dict(model="any", instructions=instructions, max_output_tokens=a.max_tokens, temperature=0,
                    store=False)
        with client.responses.connect() as conn:
            warm_id = None
            if warm:
                conn.response.create(model="any", input=SESSION_CONTEXT, instructions=instructions,
                                     generate=False, store=False)
                for ev in conn:
                    if ev.type == "error":
                        raise SystemExit(f"the warm-up failed: {ev.error.message}")
                    if ev.type == "response.completed":
                        warm_id = ev.response.id
                        break
            time.sleep(a.think_s)  # the user typing the first message
            # The same conversation either way: the context, then the first message.
            if warm_id:
                turn.update(previous_response_id=warm_id, input=FIRST_TURN)
            else:
                turn.update(input=[{"role": "user", "content": SESSION_CONTEXT},
                                   {"role": "user", "content": FIRST_TURN}])
            ttft, total, r = first_turn(conn, **turn)
        return {"warm_up": warm, "ttft_s": ttft, "total_s": total, "input_tokens": r.usage.input_tokens,
                "cached_tokens": r.usage.input_tokens_details.cached_tokens,
                "output_tokens": r.usage.output_tokens, "text": r.output_text}
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--think-s", type=float, default=150)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    disk_before = disk_read_mb_s(a.model)
    rows = []
    for rep in range(a.runs):
        for warm in (True, False):
            row = one_run(a, warm)
            row["rep"] = rep
            print(row, flush=True)
            rows.append(row)
    by = {w: [r for r in rows if r["warm_up"] == w] for w in (True, False)}
    med = {w: statistics.median(r["ttft_s"] for r in by[w]) for w in (True, False)}
    report = {
        "what": "an agent's first turn over the WebSocket after --think-s seconds, with its instructions sent "
                "ahead as a warm-up (generate: false) or with the turn",
        "command": "python3 bench/serve_warmup.py " + " ".join(sys.argv[1:]),
        "machine": machine(), "disk_read_mb_s": {"before": disk_before, "after": disk_read_mb_s(a.model)},
        "ttft_s_median": {"warm_up": med[True], "none": med[False]},
        "ratio_of_medians": med[True] / med[False],
        "pairs": [w["ttft_s"] / n["ttft_s"] for w, n in zip(by[True], by[False])],
        "same_text": len({r["text"] for r in rows}) == 1,
        "runs": rows,
    }
    report["passed"] = report["same_text"] and all(r["ttft_s"] is not None for r in rows)
    write_report(a.out, report)


if __name__ == "__main__":
    main()
