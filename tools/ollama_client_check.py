#!/usr/bin/env python3
"""Drive `epm-run serve`'s Ollama endpoints with the official `ollama` Python client (pip
install ollama): chat streamed and not, generate, sampling options, loading only (no
messages, no prompt), fill-in-the-middle with `suffix` (the same text as OpenAI's
completions give for it), list, show (with the `insert` capability), ps, chat with `format=` a JSON
schema (validated with jsonschema), chat with tools, and log-probabilities (the same as the
OpenAI chat's for the conversation, streamed too); a conversation longer than the context,
cut at its oldest turns (the next turn reusing the cut prompt); `embed` answers 404 saying it computes
no embeddings, and `pull` that it runs one model file and pulls none. Starts the server on a free loopback
port; the record goes to --out.

    python3 tools/ollama_client_check.py [--bin target/release/epm-run] [--out F]
"""
import argparse, importlib.metadata, json, os, platform, signal, sys, urllib.request

import jsonschema
import ollama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import start_server, synth_mini, write_report  # noqa: E402

PET = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                        "age": {"type": "integer", "minimum": 0, "maximum": 30},
                                        "kind": {"type": "string", "enum": ["cat", "dog"]}},
       "required": ["name", "age", "kind"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                          "required": ["city"]}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/serve-ollama-client.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-ollama-")
    proc, port = start_server([a.bin, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2"], 60)
    checks = {}
    try:
        client = ollama.Client(host=f"http://127.0.0.1:{port}")
        greedy = {"temperature": 0, "num_predict": 12}
        msgs = [{"role": "user", "content": "Name a colour."}]
        r = client.chat(model="qwen3-30b-a3b-mini", messages=msgs, options=greedy)
        checks["chat"] = {"content": r.message.content, "done_reason": r.done_reason, "eval_count": r.eval_count}
        # `think` as a level: thinking on (Qwen3's template ignores the level itself), so the
        # same prompt as `think=True`.
        levels = {str(t): client.chat(model="m", messages=msgs, think=t, options=greedy).prompt_eval_count
                  for t in [True, False, "high"]}
        checks["think"] = levels
        parts = [c.message.content for c in client.chat(model="whatever:latest", messages=msgs, options=greedy,
                                                        stream=True)]
        checks["chat_stream"] = {"content": "".join(parts), "same_as_not_streamed": "".join(parts) == r.message.content}
        g = client.generate(model="m", prompt="Once upon a time", options=greedy)
        checks["generate"] = {"response": g.response, "done": g.done}
        # min_p 1 keeps only the likeliest token, so sampling at temperature 2 gives the greedy
        # reply; the penalties are accepted by the names the client sends.
        g2 = client.generate(model="m", prompt="Once upon a time",
                             options={"temperature": 2.0, "min_p": 1.0, "seed": 3, "num_predict": 12})
        gp = client.generate(model="m", prompt="Once upon a time",
                             options={"temperature": 0, "num_predict": 12, "repeat_penalty": 1.2,
                                      "repeat_last_n": -1, "presence_penalty": 0.5, "frequency_penalty": 0.5})
        checks["sampling_options"] = {"min_p_1_is_greedy": g2.response == g.response, "penalized": gp.response,
                                      "penalized_done": gp.done}
        # Nothing to generate: clients warm the model up this way (and unload it with
        # keep_alive 0); the answer is at once, done with done_reason load or unload.
        warm = client.chat(model="m", messages=[])
        warm_g = client.generate(model="m")
        cold = client.generate(model="m", keep_alive=0)
        checks["load_only"] = {"chat": [warm.done, warm.done_reason], "generate": [warm_g.done, warm_g.done_reason],
                               "unload": [cold.done, cold.done_reason]}
        # Fill-in-the-middle: the model's FIM tokens around the prompt and the suffix, as
        # OpenAI's completions lay them out too.
        fim = client.generate(model="m", prompt="def area(r):\n    return ", suffix="\n\nprint(area(2))\n",
                              options=greedy)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                     headers={"content-type": "application/json"},
                                     data=json.dumps({"prompt": "def area(r):\n    return ",
                                                      "suffix": "\n\nprint(area(2))\n", "max_tokens": 12,
                                                      "temperature": 0}).encode())
        with urllib.request.urlopen(req) as resp:
            openai_text = json.load(resp)["choices"][0]["text"]
        checks["suffix"] = {"response": fim.response, "done_reason": fim.done_reason,
                            "same_as_openai_completions": fim.response == openai_text}
        # Log-probabilities (`logprobs`, `top_logprobs`): the OpenAI chat's for the same
        # conversation, and streamed with the lines.
        lp = client.chat(model="m", messages=msgs, options=greedy, logprobs=True, top_logprobs=2)
        lp_tokens = [(x.token, x.logprob, [t.token for t in x.top_logprobs]) for x in lp.logprobs]
        streamed_lp = [x.token for part in client.chat(model="m", messages=msgs, options=greedy, logprobs=True,
                                                       top_logprobs=2, stream=True) for x in (part.logprobs or [])]
        body = json.dumps({"messages": msgs, "max_tokens": 12, "temperature": 0, "logprobs": True,
                           "top_logprobs": 2}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        openai_lp = [(x["token"], x["logprob"], [t["token"] for t in x["top_logprobs"]])
                     for x in json.load(urllib.request.urlopen(req))["choices"][0]["logprobs"]["content"]]
        checks["logprobs"] = {"tokens": [t for t, _, _ in lp_tokens], "same_as_openai": lp_tokens == openai_lp,
                              "streamed_same": streamed_lp == [t for t, _, _ in lp_tokens]}
        checks["list"] = [m.model for m in client.list().models]
        s = client.show("m")
        checks["show"] = {"family": s.details.family, "quantization": s.details.quantization_level,
                          "parameter_size": s.details.parameter_size, "capabilities": s.capabilities}
        checks["ps"] = [m.model for m in client.ps().models]
        pets = []
        for seed in range(3):
            r = client.chat(model="m", messages=[{"role": "user", "content": "A pet?"}], format=PET,
                            options={"temperature": 1.0, "seed": seed, "num_predict": 200})
            v = json.loads(r.message.content)
            jsonschema.validate(v, PET)
            pets.append(v)
        checks["format_schema"] = pets
        r = client.chat(model="m", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER],
                        options={"temperature": 0, "num_predict": 8})
        checks["tools"] = {"content": r.message.content, "tool_calls": [t.model_dump() for t in r.message.tool_calls or []]}
        try:
            client.chat(model="m", messages=[{"role": "wizard", "content": "x"}])
            checks["bad_request"] = "no error"
        except ollama.ResponseError as e:
            checks["bad_request"] = {"status": e.status_code, "error": e.error}
        # A conversation longer than the slot (2,048 tokens) loses its oldest turns, as
        # Ollama's does, and the next turn keeps the same cut: its prompt is mostly reused.
        convo = [{"role": "system", "content": "Be brief."}]
        for i in range(40):
            convo += [{"role": "user", "content": f"Question {i}: tell me about rivers, lakes and the sea."},
                      {"role": "assistant", "content": f"Answer {i}: rivers flow to lakes, and lakes to the sea."}]
        convo.append({"role": "user", "content": "Which river is longest?"})
        first_cut = client.chat(model="m", messages=convo, stream=False, options={"num_predict": 8, "temperature": 0})
        convo += [{"role": "assistant", "content": first_cut.message.content},
                  {"role": "user", "content": "And the widest?"}]
        second_cut = client.chat(model="m", messages=convo, stream=False, options={"num_predict": 8, "temperature": 0})
        checks["truncation"] = {"done": [first_cut.done_reason, second_cut.done_reason],
                                "prompt_eval_count": [first_cut.prompt_eval_count, second_cut.prompt_eval_count]}
        try:
            client.embed(model="m", input="x")
            checks["embed"] = "no error"
        except ollama.ResponseError as e:
            checks["embed"] = {"status": e.status_code, "error": e.error}
        try:
            client.pull("qwen3:30b")
            checks["pull"] = "no error"
        except ollama.ResponseError as e:
            checks["pull"] = {"status": e.status_code, "error": e.error}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    ok = (checks["chat_stream"]["same_as_not_streamed"] and checks["chat"]["eval_count"] == 12
          and checks["generate"]["done"] and checks["list"] and checks["show"]["family"] == "qwen3moe"
          and len(checks["format_schema"]) == 3 and checks["sampling_options"]["min_p_1_is_greedy"]
          and checks["sampling_options"]["penalized_done"]
          and checks["load_only"] == {"chat": [True, "load"], "generate": [True, "load"], "unload": [True, "unload"]}
          and checks["suffix"]["same_as_openai_completions"] and checks["suffix"]["response"]
          and "insert" in checks["show"]["capabilities"]
          and checks["think"]["high"] == checks["think"]["True"] != checks["think"]["False"]
          and isinstance(checks["bad_request"], dict) and checks["bad_request"]["status"] == 400
          and checks["logprobs"]["same_as_openai"] and checks["logprobs"]["streamed_same"]
          and len(checks["logprobs"]["tokens"]) == 12
          and checks["truncation"]["done"] == ["length", "length"]
          and 0 < checks["truncation"]["prompt_eval_count"][1] < checks["truncation"]["prompt_eval_count"][0] // 2
          and isinstance(checks["embed"], dict) and checks["embed"]["status"] == 404
          and "computes no embeddings" in checks["embed"]["error"]
          and isinstance(checks["pull"], dict) and checks["pull"]["status"] == 404
          and "pulls, creates, copies, pushes and deletes no models" in checks["pull"]["error"]
          and code == 0)
    report = {"what": "epm-run serve's Ollama endpoints driven by the official ollama Python client",
              "command": "python3 tools/ollama_client_check.py " + " ".join(sys.argv[1:]),
              "ollama_version": importlib.metadata.version("ollama"), "python": platform.python_version(),
              "server_exit_code": code, "all_passed": ok, "checks": checks}
    write_report(a.out, report, tmp)


if __name__ == "__main__":
    main()
