#!/usr/bin/env python3
"""Malformed-request fuzz of `epm-run serve`: a `-mini` serves --requests requests, each a
valid request to one of its endpoints (chat, completions, Anthropic messages, Responses,
Ollama, llama.cpp's native ones) with one to three of its fields deleted or replaced by a
value of another type or range (null, negative and huge numbers, NaN, empty and 5,000-
character strings, nested arrays and objects), an unknown field added, streaming turned on,
or the body cut, emptied or made invalid UTF-8. Seeded, so a run is repeatable.

It passes when no request gets a 5xx or a dropped connection, none takes over --slow-s
seconds, every 4xx body is a JSON error with a message, the server still answers /health
after the last request, and it exits 0 on SIGTERM. Bounded in count (--requests) and time
(--timeout); loopback only. The record goes to --out.

    python3 bench/serve_fuzz.py [--bin target/release/epm-run] [--requests 1000] [--seed 1]
        [--out validate/serve-fuzz.json]
"""
import argparse, copy, http.client, json, os, random, signal, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from epmlib import machine, start_server, synth_mini, write_report  # noqa: E402

tool = {"type": "function", "function": {"name": "get_weather", "description": "w",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
BASES = {
    "/v1/chat/completions": {"model": "m", "max_tokens": 4, "messages": [
        {"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"x\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
        "tools": [tool], "tool_choice": "auto", "logprobs": True, "top_logprobs": 2, "temperature": 0.5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
        "stream": False, "stop": ["\n"], "seed": 3},
    "/v1/completions": {"model": "m", "prompt": "Once", "max_tokens": 4, "suffix": "x", "echo": False, "logprobs": 2, "stop": "z"},
    "/v1/messages": {"model": "m", "max_tokens": 4, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "x"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]}]}],
        "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["x"], "stream": False},
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "s"},
    "/v1/responses": {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
                      "instructions": "s", "max_output_tokens": 16, "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}},
                                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                 "definition": 'start: "*** Begin Patch" LF /(.+)/ LF\n%import common.LF'}},
                                {"type": "web_search"}],
                      "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}, "reasoning": {"effort": "low"}, "store": True},
    "/v1/responses/input_tokens": {"model": "m", "input": "hi"},
    "/api/chat": {"model": "m", "messages": [{"role": "user", "content": "hi", "images": []}], "stream": False,
                  "options": {"num_predict": 4, "temperature": 0.3, "top_k": 3, "stop": ["x"]}, "format": "json", "think": False,
                  "tools": [tool]},
    "/api/generate": {"model": "m", "prompt": "hi", "suffix": "x", "stream": False, "raw": False, "options": {"num_predict": 4}, "system": "s", "template": None, "context": [1, 2]},
    "/api/show": {"model": "m"},
    "/completion": {"prompt": "hi", "n_predict": 4, "n_probs": 2, "stream": False, "cache_prompt": True, "samplers": ["top_k", "temperature"], "grammar": "root ::= \"a\"", "logit_bias": [[1, -1.0]], "return_tokens": True},
    "/infill": {"input_prefix": "def f(", "input_suffix": ")", "input_extra": [{"filename": "a.py", "text": "x=1"}], "n_predict": 4},
    "/tokenize": {"content": "hello", "add_special": True, "with_pieces": True},
    "/detokenize": {"tokens": [1, 2, 3]},
    "/apply-template": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/chat/completions/input_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}
# Values of other types and ranges than a field expects.
WEIRD = [None, True, False, 0, -1, 1, 2**31, 2**63, -2**63, 1e308, -1e308, 0.5, float("nan"), "", "x", "\u0000",
         "\ud7ff" * 3, "a" * 5000, [], [None], [1, "a"], {}, {"a": 1}, {"type": None}, [{}], [[[]]]]


def paths(obj, prefix=()):
    """Every path to a value inside `obj`, the root included."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths(v, prefix + (i,))


def setp(obj, path, value, delete=False):
    """`obj` with the value at `path` replaced by `value`, or deleted."""
    if not path:
        return value
    cur = obj
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return obj


def mutate(rnd, base):
    """A copy of the request `base` with one to three fields changed."""
    body = copy.deepcopy(base)
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        ps = [p for p in paths(body)]
        p = rnd.choice(ps)
        r = rnd.random()
        if r < 0.15 and p:
            body = setp(body, p, None, delete=True)
        elif r < 0.25 and isinstance(body, dict):
            body[rnd.choice(["stream", "n", "max_tokens", "logprobs", "tool_choice", "stream_options", "parallel_tool_calls", "n_predict", "keep_alive", "id_slot", "cache_prompt", "previous_response_id", "min_p", "top_p", "top_k", "typical_p", "repeat_penalty", "presence_penalty", "mirostat", "dry_multiplier", "n_probs", "grammar", "json_schema"])] = rnd.choice(WEIRD + [True, 5, -5, 0])
        else:
            body = setp(body, p, copy.deepcopy(rnd.choice(WEIRD)))
    return body


def send(port, path, raw, timeout):
    """POST `raw`; returns (status, body, seconds); status -1 for a dropped connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.time()
    try:
        c.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read(), time.time() - t0
    except Exception as e:  # noqa: BLE001 (any failure of the exchange is what is counted)
        return -1, repr(e).encode(), time.time() - t0
    finally:
        c.close()


def body_of(rnd, path):
    """The raw body of one fuzzed request to `path`."""
    if rnd.random() < 0.08:
        return rnd.choice([b"", b"{", b"[]", b"null", b"\xff\xfe", json.dumps(BASES[path])[:-3].encode(),
                           b'{"model":"m"}' * 2])
    body = mutate(rnd, BASES[path])
    if rnd.random() < 0.3 and isinstance(body, dict):
        body["stream"] = True
    return json.dumps(body, allow_nan=True).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slow-s", type=float, default=60.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="the whole run's limit, seconds")
    ap.add_argument("--out", default="validate/serve-fuzz.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-fuzz-")
    cmd = [a.bin, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2"]
    proc, port = start_server(cmd, 120)
    rnd = random.Random(a.seed)
    statuses, failures, per_endpoint = {}, [], {}
    deadline = time.time() + a.timeout
    done = 0
    try:
        for _ in range(a.requests):
            if time.time() > deadline:
                break
            path = rnd.choice(list(BASES))
            raw = body_of(rnd, path)
            st, data, dt = send(port, path, raw, a.slow_s + 30)
            done += 1
            statuses[str(st)] = statuses.get(str(st), 0) + 1
            per_endpoint.setdefault(path, {}).setdefault(str(st), 0)
            per_endpoint[path][str(st)] += 1
            bad = st >= 500 or st < 0 or dt > a.slow_s
            if 400 <= st < 500:
                try:
                    err = json.loads(data)
                    message = err.get("error", {}).get("message") if isinstance(err.get("error"), dict) else err.get("error")
                    bad = bad or not message
                except ValueError:
                    bad = True
            if bad:
                failures.append({"path": path, "status": st, "seconds": round(dt, 1),
                                 "body": raw[:600].decode("utf-8", "replace"), "answer": data[:300].decode("utf-8", "replace")})
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/health")
        healthy = c.getresponse().status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
    report = {
        "what": "malformed-request fuzz of every endpoint of epm-run serve on a -mini",
        "command": "python3 bench/serve_fuzz.py " + " ".join(sys.argv[1:]), "machine": machine(),
        "server_command": " ".join(cmd), "seed": a.seed, "requests": done, "statuses": statuses,
        "per_endpoint": per_endpoint, "failures": failures[:20], "failure_count": len(failures),
        "healthy_after": healthy, "exit_code": code,
        "passed": done == a.requests and not failures and healthy and code == 0,
    }
    write_report(a.out, report, tmp, ["requests", "statuses", "failure_count", "healthy_after", "exit_code", "passed"])


if __name__ == "__main__":
    main()
