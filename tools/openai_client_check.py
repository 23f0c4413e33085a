#!/usr/bin/env python3
"""Drive `epm-run serve` with the official `openai` Python package (pip install openai):
chat with and without streaming, plain completions, the model list, an API key, and the
client's own error types for a bad request and a wrong key. Starts the server itself on a
free loopback port and stops it with SIGTERM; the record goes to --out.

    python3 tools/openai_client_check.py [--bin target/release/epm-run] [--model M.gguf]
        [--out validate/serve-openai-client.json]
"""
import argparse, json, os, platform, signal, subprocess, sys, tempfile

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import start_server  # noqa: E402


def start(binary, model, extra):
    proc, port = start_server([binary, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2"] + extra, 60)
    return proc, f"http://127.0.0.1:{port}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--model")
    ap.add_argument("--out", default="validate/serve-openai-client.json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epm-openai-")
    model = a.model or os.path.join(tmp, "qwen3-30b-a3b-mini.gguf")
    if not a.model:
        subprocess.run([a.bin, "synth", "--preset", "qwen3-30b-a3b-mini", "-o", model], check=True,
                       stdout=subprocess.DEVNULL)
    plan = json.loads(subprocess.run([a.bin, "plan", "-m", model, "-c", "2048", "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    budget = -(-plan["min_budget_bytes"] // (1 << 20)) + 16
    proc, base = start(a.bin, model, ["--ram-budget-mb", str(budget), "--api-key", "sekrit"])
    checks = {}
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="sekrit")
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
        r = client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0)
        checks["chat"] = {"content": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason,
                          "usage": r.usage.model_dump()}
        stream = client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        parts, usage = [], None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage:
                usage = chunk.usage.model_dump()
        checks["chat_stream"] = {"content": "".join(parts), "chunks": len(parts), "usage": usage,
                                 "same_as_non_streaming": "".join(parts) == r.choices[0].message.content}
        c = client.completions.create(model="any", prompt="Once upon a time", max_tokens=12, temperature=0)
        checks["completion"] = {"text": c.choices[0].text, "finish_reason": c.choices[0].finish_reason}
        checks["models"] = [m.id for m in client.models.list().data]
        try:
            client.chat.completions.create(model="any", messages=msgs, max_tokens=100000)
            checks["bad_request"] = "no error"
        except openai.BadRequestError as e:
            checks["bad_request"] = {"status": e.status_code, "message": e.message}
        try:
            openai.OpenAI(base_url=base + "/v1", api_key="wrong").models.list()
            checks["wrong_key"] = "no error"
        except openai.AuthenticationError as e:
            checks["wrong_key"] = {"status": e.status_code, "message": e.message}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    ok = (checks["chat_stream"]["same_as_non_streaming"] and checks["chat"]["usage"]["completion_tokens"] > 0
          and isinstance(checks["bad_request"], dict) and checks["bad_request"]["status"] == 400
          and isinstance(checks["wrong_key"], dict) and checks["wrong_key"]["status"] == 401
          and checks["models"] and code == 0)
    report = {"what": "epm-run serve driven by the official openai Python client",
              "command": "python3 tools/openai_client_check.py " + " ".join(sys.argv[1:]),
              "openai_version": openai.__version__, "python": platform.python_version(),
              "server_exit_code": code, "all_passed": ok, "checks": checks}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=2)
    print(json.dumps(report, indent=1))
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
