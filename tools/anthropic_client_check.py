#!/usr/bin/env python3
"""Drive `epm-run serve`'s `/v1/messages` with the official `anthropic` Python SDK (pip
install anthropic): messages.create and messages.stream with text, tool use with
tool_choice {"type": "any"} (the input validated against the tool's schema with
jsonschema), count_tokens, prompt-cache reuse in usage, and the SDK's own error types for a
bad request and a wrong key; structured outputs (messages.parse with a pydantic model,
streamed and not), and models.list / models.retrieve; a prompt beyond the context refused in Anthropic's words
(`prompt is too long: N tokens > M maximum`). The current SDK takes no temperature/top_p/top_k arguments,
so they go through extra_body. Then `thinking` with a `budget_tokens`, on a second server
whose template opens the reasoning block as Qwen3.5's does: the thinking block is the
unbudgeted reply's first tokens, and a text block follows. Compaction (beta): the
`compact_20260112` context edit past its trigger (the compaction block first, a next turn
sent with it), and the tool runner's `compact_before_next_turn()` (the `compaction`
parameter: the block alone, `stop_reason` "compaction", the runner's history replaced by
it). Starts the servers on free loopback ports; the record goes to --out.

    python3 tools/anthropic_client_check.py [--bin target/release/epm-run] [--out F]
"""
import argparse, os, platform, re, signal, sys

from typing import Literal

import anthropic
import jsonschema
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import start_server, synth_mini, write_report  # noqa: E402

WEATHER = {"name": "get_weather", "description": "Weather in a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}}


@anthropic.beta_tool
def city_time(city: str) -> str:
    """The time in a city."""
    return "12:00"


class Unit(pydantic.BaseModel):
    """A structured output: what parse() holds the answer to."""
    unit: Literal["celsius", "fahrenheit"]
    precise: bool


TIME = {"name": "get_time", "description": "Time in a zone", "input_schema": {
    "type": "object", "properties": {"offset": {"type": "integer", "minimum": -12, "maximum": 14}},
    "required": ["offset"]}}


def thinking_budget(binary, model, tmp):
    """`thinking.budget_tokens` against the same request without a budget, on a server whose
    template opens `<think>` in the generation prompt."""
    here = os.path.dirname(os.path.abspath(__file__))
    stock = open(os.path.join(here, "..", "crates", "synth", "src", "templates",
                              "qwen3-chatml.jinja")).read()
    closed = "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}"
    assert closed in stock, "the stock template changed"
    template = os.path.join(tmp, "think-open.jinja")
    with open(template, "w") as f:
        f.write(stock.replace(closed, closed.replace("    {%- endif %}", "    {%- else %}\n"
                                                      "        {{- '<think>\\n' }}\n    {%- endif %}")))
    proc, port = start_server([binary, "serve", "-m", model, "--port", "0", "-c", "1024", "-t", "2",
                               "--chat-template-file", template], 60)
    try:
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="none")
        msgs = [{"role": "user", "content": "Why is the sky blue?"}]
        greedy = {"temperature": 0, "top_k": 1}

        def ask(thinking):
            r = client.messages.create(model="any", max_tokens=24, messages=msgs, thinking=thinking,
                                       extra_body=greedy)
            text = lambda kind, field: "".join(getattr(b, field) for b in r.content if b.type == kind)
            return {"thinking": text("thinking", "thinking"), "text": text("text", "text"),
                    "output_tokens": r.usage.output_tokens}
        free = ask({"type": "enabled", "budget_tokens": 100})
        budgeted = ask({"type": "enabled", "budget_tokens": 5})
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    passed = (free["text"] == "" and budgeted["text"] != ""
              and 0 < len(budgeted["thinking"].strip()) < len(free["thinking"].strip())
              and free["thinking"].strip().startswith(budgeted["thinking"].strip()))
    return {"unbudgeted": free, "budget_5": budgeted, "passed": passed}, code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/serve-anthropic-client.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-anthropic-")
    proc, port = start_server([a.bin, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2",
                               "--api-key", "sekrit"], 60)
    base = f"http://127.0.0.1:{port}"
    checks = {}
    try:
        client = anthropic.Anthropic(base_url=base, api_key="sekrit")
        greedy = {"temperature": 0, "top_k": 1}
        msgs = [{"role": "user", "content": "Name a colour."}]
        r = client.messages.create(model="any", max_tokens=16, system="Be brief.", messages=msgs,
                                   extra_body=greedy)
        text = "".join(b.text for b in r.content if b.type == "text")
        checks["create"] = {"text": text, "stop_reason": r.stop_reason, "usage": r.usage.model_dump()}
        with client.messages.stream(model="any", max_tokens=16, system="Be brief.", messages=msgs,
                                    extra_body=greedy) as s:
            streamed = "".join(s.text_stream)
            final = s.get_final_message()
        checks["stream"] = {"text": streamed, "same_as_create": streamed == text,
                            "stop_reason": final.stop_reason, "usage": final.usage.model_dump()}
        schemas = {WEATHER["name"]: WEATHER["input_schema"], TIME["name"]: TIME["input_schema"]}
        uses = []
        for seed in range(5):
            r = client.messages.create(model="any", max_tokens=300, tools=[WEATHER, TIME],
                                       tool_choice={"type": "any"},
                                       messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       extra_body={"temperature": 1.0, "seed": seed})
            blocks = [b for b in r.content if b.type == "tool_use"]
            for b in blocks:
                jsonschema.validate(b.input, schemas[b.name])
            uses.append({"stop_reason": r.stop_reason, "tool_use": [(b.name, b.input) for b in blocks]})
        checks["tool_use"] = uses
        with client.messages.stream(model="any", max_tokens=300, tools=[WEATHER, TIME],
                                    tool_choice={"type": "tool", "name": "get_time"},
                                    messages=[{"role": "user", "content": "Time?"}],
                                    extra_body={"temperature": 1.0, "seed": 3}) as s:
            final = s.get_final_message()
        tb = [b for b in final.content if b.type == "tool_use"]
        for b in tb:
            jsonschema.validate(b.input, TIME["input_schema"])
        checks["tool_use_stream"] = {"stop_reason": final.stop_reason, "tool_use": [(b.name, b.input) for b in tb]}
        # The tool's result goes back; the second request reuses the first one's prefix.
        follow = [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                     "input": {"city": "Paris", "unit": "celsius"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21"}]}]
        r1 = client.messages.create(model="any", max_tokens=4, tools=[WEATHER], messages=follow, extra_body=greedy)
        r2 = client.messages.create(model="any", max_tokens=4, tools=[WEATHER], messages=follow, extra_body=greedy)
        checks["tool_result"] = {"usage_first": r1.usage.model_dump(), "usage_second": r2.usage.model_dump()}
        n = client.messages.count_tokens(model="any", messages=follow, tools=[WEATHER])
        checks["count_tokens"] = n.input_tokens
        # Structured outputs: the SDK's parse() with a pydantic model (output_config.format),
        # streamed and not; a schema a grammar cannot hold is a 400 that names the keyword.
        ask = [{"role": "user", "content": "Which unit?"}]
        parsed = client.messages.parse(model="any", max_tokens=64, messages=ask, output_format=Unit)
        with client.messages.stream(model="any", max_tokens=64, messages=ask, output_format=Unit,
                                    extra_body=greedy) as s:
            for _ in s:
                pass
            streamed = s.get_final_message().parsed_output
        try:
            client.messages.create(model="any", max_tokens=4, messages=ask, output_config={
                "format": {"type": "json_schema", "schema": {"type": "array", "uniqueItems": True}}})
            refused = "no error"
        except anthropic.BadRequestError as e:
            refused = e.body["error"]["message"]
        checks["structured_output"] = {"parsed": parsed.parsed_output.model_dump(), "stop_reason": parsed.stop_reason,
                                       "streamed": streamed.model_dump(), "refused": refused}
        try:
            client.messages.create(model="any", max_tokens=16, messages=[{"role": "wizard", "content": "x"}])
            checks["bad_request"] = "no error"
        except anthropic.BadRequestError as e:
            checks["bad_request"] = {"status": e.status_code, "type": e.body["error"]["type"]}
        try:
            anthropic.Anthropic(base_url=base, api_key="wrong").messages.create(
                model="any", max_tokens=4, messages=msgs)
            checks["wrong_key"] = "no error"
        except anthropic.AuthenticationError as e:
            checks["wrong_key"] = {"status": e.status_code, "type": e.body["error"]["type"]}
        # A conversation beyond the context (2,048 tokens), in Anthropic's words, whose counts
        # Claude Code reads to compact it.
        try:
            client.messages.create(model="any", max_tokens=8, messages=[
                {"role": "user", "content": "Tell me about rivers, lakes and the sea. " * 300}])
            checks["too_long"] = "no error"
        except anthropic.BadRequestError as e:
            m = re.match(r"prompt is too long: (\d+) tokens > (\d+) maximum", e.body["error"]["message"])
            checks["too_long"] = {"status": e.status_code, "type": e.body["error"]["type"],
                                  "counts": [int(m.group(1)), int(m.group(2))] if m else None}
        # Compaction: the context edit past its trigger, then the next turn sent with the
        # block; and the tool runner's own compaction between turns.
        turns = [{"role": "user", "content": "Name a river."},
                 {"role": "assistant", "content": "The Rhine."},
                 {"role": "user", "content": "And a lake?"}]
        edit = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1}}]}
        r = client.beta.messages.create(model="any", max_tokens=8, messages=turns, context_management=edit,
                                        betas=["compact-2026-01-12"], extra_body=greedy)
        following = turns + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                             {"role": "user", "content": "And a sea?"}]
        nxt = client.beta.messages.create(model="any", max_tokens=8, messages=following, extra_body=greedy)
        runner = client.beta.messages.tool_runner(model="any", max_tokens=8, tools=[city_time],
                                                  messages=[{"role": "user", "content": "Time in Paris?"}],
                                                  extra_body=greedy)
        yielded = []
        for msg in runner:
            yielded.append([msg.stop_reason, [b.type for b in msg.content]])
            if len(yielded) == 1:
                runner.compact_before_next_turn()
            if len(yielded) == 3:
                break
        # The history the runner goes on from (no public accessor: read where this SDK keeps it).
        thread = getattr(runner, "_thread", None)
        history = None if thread is None else [
            [m["role"], [b["type"] if isinstance(b, dict) else b.type for b in m["content"]]]
            for m in thread.messages]
        checks["compaction"] = {"edit_blocks": [b.type for b in r.content],
                                "next_turn": {"blocks": [b.type for b in nxt.content], "usage": nxt.usage.model_dump()},
                                "runner_yielded": yielded, "runner_history": history}
        listed = client.models.list()
        got = client.models.retrieve(listed.data[0].id)
        checks["models"] = {"ids": [m.id for m in listed.data], "has_more": listed.has_more,
                            "first_id": listed.first_id, "display_name": got.display_name,
                            "type": got.type, "created_at": str(got.created_at)}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    checks["thinking_budget"], think_code = thinking_budget(a.bin, model, tmp)
    u = checks["tool_result"]
    ok = (checks["stream"]["same_as_create"] and checks["create"]["usage"]["output_tokens"] > 0
          and all(x["stop_reason"] == "tool_use" and len(x["tool_use"]) == 1 for x in checks["tool_use"])
          and checks["tool_use_stream"]["stop_reason"] == "tool_use"
          and [t[0] for t in checks["tool_use_stream"]["tool_use"]] == ["get_time"]
          and u["usage_second"]["cache_read_input_tokens"] > 0
          and checks["count_tokens"] == u["usage_first"]["input_tokens"] + u["usage_first"]["cache_read_input_tokens"]
          and isinstance(checks["bad_request"], dict) and checks["bad_request"]["status"] == 400
          and isinstance(checks["wrong_key"], dict) and checks["wrong_key"]["status"] == 401
          and checks["thinking_budget"]["passed"]
          and isinstance(checks["too_long"], dict) and checks["too_long"]["type"] == "invalid_request_error"
          and checks["too_long"]["counts"] is not None and checks["too_long"]["counts"][0] > 2048
          and checks["too_long"]["counts"][1] == 2048
          and checks["models"]["has_more"] is False and checks["models"]["type"] == "model"
          and checks["models"]["first_id"] == checks["models"]["ids"][0] == checks["models"]["display_name"]
          and checks["models"]["created_at"] != "None"
          and checks["structured_output"]["stop_reason"] == "end_turn"
          and "`uniqueItems`" in checks["structured_output"]["refused"]
          and checks["compaction"]["edit_blocks"][:2] == ["compaction", "text"]
          and checks["compaction"]["next_turn"]["blocks"] == ["text"]
          and checks["compaction"]["runner_yielded"][1] == ["compaction", ["compaction"]]
          and checks["compaction"]["runner_history"] in (None, [["assistant", ["compaction"]]])
          and code == 0 and think_code == 0)
    report = {"what": "epm-run serve /v1/messages driven by the official anthropic Python SDK",
              "command": "python3 tools/anthropic_client_check.py " + " ".join(sys.argv[1:]),
              "anthropic_version": anthropic.__version__, "python": platform.python_version(),
              "server_exit_code": code, "all_passed": ok, "checks": checks}
    write_report(a.out, report, tmp)


if __name__ == "__main__":
    main()
