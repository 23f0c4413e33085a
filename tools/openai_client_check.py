#!/usr/bin/env python3
"""Drive `epm-run serve` with the official `openai` Python package (pip install openai):
chat with and without streaming, plain completions, the model list, `n` choices (the second
as the next seed's request), an API key, the embeddings endpoint answering that it computes none, the client's own error types for a bad request and a wrong key, a logit bias, penalties, a
prompt of token ids, and a `suffix` (fill-in-the-middle: the model's FIM tokens around the
prompt and the suffix, checked against llama-server's `/completion` given those tokens); and what agents use: tool calls
(tool_choice required, streamed and not, arguments validated with jsonschema), structured
output parsed into a Pydantic model, logprobs with top_logprobs, and the Responses API
(with `responses.input_tokens.count` against the usage of the same request; a conversation
continued by `previous_response_id`, against the same conversation sent whole, then
`responses.retrieve`, `input_items.list` and `delete`; and Codex's request shape: a custom
`apply_patch` tool with a Lark grammar, a regex-format tool, and the hosted `web_search`;
log-probabilities over the Responses API against the chat's; `truncation: "auto"` on a
conversation longer than the context: whole turns left out from the oldest, and the next
turn reusing the cut prompt; `background: true` polled to the end, a dropped stream resumed
with `responses.stream(response_id=..., starting_after=...)`, and `responses.cancel`); the
Responses API's WebSocket mode (`responses.connect()`: see `socket_checks`); the
Conversations API (`conversations.create`, two responses in one against it sent whole, its
items paged through, added, read and deleted, its metadata updated) and `responses.compact`
on its items, whose output the next turn sends; then a response and a
conversation kept by one server retrieved and continued from the next one started on the
same state folder, and the conversation deleted; and a background response left running by the
first server finished by the second. Starts the servers itself on a free loopback port and stops them with SIGTERM;
the record goes to --out.

    python3 tools/openai_client_check.py [--bin target/release/epm-run] [--model M.gguf]
        [--out validate/serve-openai-client.json]
"""
import argparse, json, os, platform, re, signal, subprocess, sys, tempfile, time, urllib.error, urllib.request

import jsonschema
import openai
from pydantic import BaseModel, Field
from typing import Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import fresh_prompt_store, start_server, synth_mini, write_report  # noqa: E402


def raised(error, call, *args, **kwargs):
    """The `error` (an openai error type) that `call(*args, **kwargs)` raised, or None when it
    returned."""
    try:
        call(*args, **kwargs)
    except error as e:
        return e
    return None


def start(binary, model, extra):
    proc, port = start_server([binary, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2"] + extra, 60)
    return proc, f"http://127.0.0.1:{port}"


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": {
        "type": "object", "properties": {"offset": {"type": "integer", "minimum": -12, "maximum": 14}},
        "required": ["offset"], "additionalProperties": False}}},
]


class Pet(BaseModel):
    name: str = Field(max_length=10)
    age: int = Field(ge=0, le=30)
    kind: Literal["cat", "dog", "bird"]
    # A pattern, as Pydantic writes it into the schema; parse() checks the reply against it.
    tag: str = Field(pattern=r"^[A-Z]{2}-\d{2,3}$")


def agent_checks(client):
    """Tool calls, structured output and logprobs through the client's own types."""
    out = {}
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    msgs = [{"role": "user", "content": "What is the weather in Paris, and the time in Rome?"}]
    calls = []
    for seed in range(5):
        r = client.chat.completions.create(model="any", messages=msgs, tools=TOOLS, tool_choice="required",
                                           max_tokens=300, temperature=1.0, seed=seed)
        m = r.choices[0].message
        for tc in m.tool_calls or []:
            jsonschema.validate(json.loads(tc.function.arguments), schemas[tc.function.name])
        calls.append({"finish_reason": r.choices[0].finish_reason,
                      "calls": [(tc.function.name, tc.function.arguments) for tc in m.tool_calls or []]})
    out["tools"] = calls
    stream = client.chat.completions.create(model="any", messages=msgs, tools=TOOLS, tool_choice="required",
                                            max_tokens=300, temperature=1.0, seed=7, stream=True)
    acc, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            e = acc.setdefault(d.index, {"name": "", "arguments": ""})
            e["name"] += d.function.name or ""
            e["arguments"] += d.function.arguments or ""
    for e in acc.values():
        jsonschema.validate(json.loads(e["arguments"]), schemas[e["name"]])
    out["tools_stream"] = {"finish_reason": finish, "calls": list(acc.values())}
    # Structured output into a Pydantic model (the client builds the strict JSON schema).
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    pets = []
    for seed in range(3):
        r = parse(model="any", messages=[{"role": "user", "content": "Describe a pet."}], response_format=Pet,
                  max_tokens=200, temperature=1.0, seed=seed)
        pet = r.choices[0].message.parsed
        pets.append(pet.model_dump() if pet else None)
    out["parsed"] = pets
    lr = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                        temperature=0, logprobs=True, top_logprobs=5)
    lps = lr.choices[0].logprobs.content
    sorted_ok = all(all(a.logprob >= b.logprob for a, b in zip(t.top_logprobs, t.top_logprobs[1:])) for t in lps)
    greedy_ok = all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 for t in lps)
    out["logprobs"] = {"tokens": len(lps), "top": len(lps[0].top_logprobs), "sorted": sorted_ok,
                       "sampled_is_top_when_greedy": greedy_ok, "first": lps[0].model_dump()}
    # The Responses API: text, and a required function tool, streamed and not.
    rtools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
               "parameters": t["function"]["parameters"]} for t in TOOLS]
    r = client.responses.create(model="any", input="Name a colour.", instructions="Be brief.",
                                max_output_tokens=12, temperature=0)
    text = r.output_text
    with client.responses.stream(model="any", input="Name a colour.", instructions="Be brief.",
                                 max_output_tokens=12, temperature=0) as s:
        for _ in s:
            pass
        streamed = s.get_final_response().output_text
    r = client.responses.create(model="any", input="Weather in Paris?", tools=rtools, tool_choice="required",
                                max_output_tokens=300, temperature=1.0)
    fcs = [o for o in r.output if o.type == "function_call"]
    for f in fcs:
        jsonschema.validate(json.loads(f.arguments), schemas[f.name])
    # The input token count of the same request, through the client's own method.
    counted = client.responses.input_tokens.count(model="any", input="Weather in Paris?", tools=rtools,
                                                  tool_choice="required").input_tokens
    deltas, done_calls = 0, []
    stream = client.responses.create(model="any", input="Time?", tools=rtools, tool_choice="required",
                                     max_output_tokens=300, temperature=1.0, stream=True)
    for ev in stream:
        if ev.type == "response.function_call_arguments.delta":
            deltas += 1
        if ev.type == "response.completed":
            done_calls = [o for o in ev.response.output if o.type == "function_call"]
    for f in done_calls:
        jsonschema.validate(json.loads(f.arguments), schemas[f.name])
    out["responses"] = {"text": text, "streamed_same": streamed == text, "status": r.status,
                        "function_calls": [(f.name, f.arguments) for f in fcs],
                        "stream_argument_deltas": deltas, "stream_calls": [(f.name, f.arguments) for f in done_calls],
                        "input_tokens": r.usage.input_tokens, "input_tokens_counted": counted}
    # A custom tool (freeform input): its call is the chat's call of a function of one
    # string, streamed as input deltas; its output goes back as the chat's tool message.
    custom = [{"type": "custom", "name": "apply_patch", "description": "Apply a patch to the files."}]
    as_function = [{"type": "function", "function": {"name": "apply_patch", "description": "Apply a patch to the files.",
                    "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                                   "required": ["input"], "additionalProperties": False}}}]
    pick = {"type": "custom", "name": "apply_patch"}
    cr = client.responses.create(model="any", input="Fix the typo.", tools=custom, tool_choice=pick,
                                 max_output_tokens=300, temperature=0)
    ccalls = [o for o in cr.output if o.type == "custom_tool_call"]
    chat_call = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Fix the typo."}], tools=as_function,
        tool_choice={"type": "function", "function": {"name": "apply_patch"}}, max_tokens=300,
        temperature=0).choices[0].message.tool_calls[0]
    with client.responses.stream(model="any", input="Fix the typo.", tools=custom, tool_choice=pick,
                                 max_output_tokens=300, temperature=0) as s:
        input_deltas = sum(1 for ev in s if ev.type == "response.custom_tool_call_input.delta")
        streamed_calls = [o for o in s.get_final_response().output if o.type == "custom_tool_call"]
    cont = client.responses.create(model="any", tools=custom, max_output_tokens=4, temperature=0, input=[
        {"role": "user", "content": "Fix the typo."}, ccalls[0].model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": ccalls[0].call_id, "output": "Done."}])
    chat_cont = client.chat.completions.create(model="any", tools=as_function, max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Fix the typo."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": ccalls[0].call_id, "type": "function", "function": {
            "name": "apply_patch", "arguments": json.dumps({"input": ccalls[0].input})}}]},
        {"role": "tool", "tool_call_id": ccalls[0].call_id, "content": "Done."}])
    out["custom_tool"] = {"calls": [(c.name, c.input) for c in ccalls],
                          "chat_input": json.loads(chat_call.function.arguments)["input"],
                          "stream_input_deltas": input_deltas,
                          "streamed_same": [c.input for c in streamed_calls] == [c.input for c in ccalls],
                          "continued_input_tokens": cont.usage.input_tokens,
                          "chat_prompt_tokens": chat_cont.usage.prompt_tokens}
    custom_ok = (len(ccalls) == 1 and ccalls[0].input == out["custom_tool"]["chat_input"] and input_deltas >= 1
                 and out["custom_tool"]["streamed_same"] and cont.usage.input_tokens == chat_cont.usage.prompt_tokens)
    # Log-probabilities over the Responses API (`include` and `top_logprobs`): the chat's
    # for the same conversation, and streamed with the text deltas.
    lp_args = dict(model="any", input="Name a colour.", max_output_tokens=6, temperature=0, top_logprobs=2,
                   include=["message.output_text.logprobs"], store=False)
    rl = client.responses.create(**lp_args)
    cl = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Name a colour."}],
                                        max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    r_lp = [(x.token, x.logprob, [t.token for t in x.top_logprobs])
            for o in rl.output if o.type == "message" for x in o.content[0].logprobs]
    c_lp = [(x.token, x.logprob, [t.token for t in x.top_logprobs]) for x in cl.choices[0].logprobs.content]
    with client.responses.stream(**lp_args) as s:
        streamed_lp = [x.token for ev in s if ev.type == "response.output_text.delta" for x in ev.logprobs]
    out["responses_logprobs"] = {"tokens": [t for t, _, _ in r_lp], "same_as_chat": r_lp == c_lp,
                                 "streamed": streamed_lp}
    logprobs_ok = (r_lp == c_lp and len(r_lp) == rl.usage.output_tokens
                   and streamed_lp == [t for t, _, _ in r_lp])
    # Codex's request shape: a function, its `apply_patch` as a custom tool with a Lark
    # grammar, and the hosted `web_search` (left out: this server runs no hosted tools). A
    # call's input is a sentence of the grammar whatever the weights; a regex format
    # constrains the same way. The grammar here is bounded so that a random model ends it.
    patch_lark = "\n".join([
        'start: "*** Begin Patch" LF hunk ~ 1..2 "*** End Patch"',
        'hunk: "*** Delete File: " NAME LF | "*** Add File: " NAME LF ("+" WORD LF) ~ 1..2',
        r'NAME: /[a-z]{1,6}\.py/', "WORD: /[a-z ]{0,8}/", "%import common.LF"])
    patch_re = (r"\*\*\* Begin Patch\n((\*\*\* Delete File: [a-z]{1,6}\.py\n)|"
                r"(\*\*\* Add File: [a-z]{1,6}\.py\n(\+[a-z ]{0,8}\n){1,2})){1,2}\*\*\* End Patch")
    codex_tools = [{"type": "function", **TOOLS[0]["function"]},
                   {"type": "custom", "name": "apply_patch", "description": "Edit files. This is a FREEFORM tool.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": patch_lark}},
                   {"type": "web_search", "external_web_access": False}]
    patches = []
    for seed in range(3):
        pr = client.responses.create(model="any", input="Delete old.py.", tools=codex_tools, tool_choice=pick,
                                     max_output_tokens=400, temperature=1.0, store=False,
                                     extra_body={"seed": seed})
        patches += [o.input for o in pr.output if o.type == "custom_tool_call"]
    dated = client.responses.create(
        model="any", input="When?", max_output_tokens=200, temperature=1.0, store=False, extra_body={"seed": 1},
        tools=[{"type": "custom", "name": "date", "format": {"type": "grammar", "syntax": "regex",
                                                          "definition": r"\d{4}-\d{2}-\d{2}"}}], tool_choice="required")
    dates = [o.input for o in dated.output if o.type == "custom_tool_call"]
    # Chat Completions' own custom tools: the same grammar, the call a `custom` tool call;
    # sent back, it is the template's function call of one string.
    chat_custom = [{"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files.",
                    "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": patch_lark}}}}]
    cc = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Delete old.py."}],
                                        tools=chat_custom, tool_choice={"type": "custom", "custom": {"name": "apply_patch"}},
                                        max_tokens=400, temperature=0).choices[0].message.tool_calls[0]
    back = client.chat.completions.create(model="any", tools=chat_custom, max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Delete old.py."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": cc.id, "type": "custom", "custom": {"name": "apply_patch", "input": cc.custom.input}}]},
        {"role": "tool", "tool_call_id": cc.id, "content": "Done."}])
    counted_as_function = client.chat.completions.create(model="any", max_tokens=4, temperature=0, tools=[
        {"type": "function", "function": {"name": "apply_patch",
         "description": "Edit files.\n\nIts input is raw text (not JSON) in this Lark grammar:\n" + patch_lark,
         "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
                        "additionalProperties": False}}}], messages=[
        {"role": "user", "content": "Delete old.py."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": cc.id, "type": "function", "function": {
            "name": "apply_patch", "arguments": json.dumps({"input": cc.custom.input})}}]},
        {"role": "tool", "tool_call_id": cc.id, "content": "Done."}])
    chat_custom_ok = (cc.type == "custom" and re.fullmatch(patch_re, cc.custom.input) is not None
                      and back.usage.prompt_tokens == counted_as_function.usage.prompt_tokens)
    # Codex's own apply_patch grammar, unbounded: llama.cpp's sampler takes what it compiles to.
    codex_grammar = "\n".join([
        'start: begin_patch hunk+ end_patch', 'begin_patch: "*** Begin Patch" LF', 'end_patch: "*** End Patch" LF?',
        'hunk: add_hunk | delete_hunk | update_hunk', 'add_hunk: "*** Add File: " filename LF add_line+',
        'delete_hunk: "*** Delete File: " filename LF',
        'update_hunk: "*** Update File: " filename LF change_move? change?', 'filename: /(.+)/',
        'add_line: "+" /(.*)/ LF -> line', 'change_move: "*** Move to: " filename LF',
        'change: (change_context | change_line)+ eof_line?', 'change_context: ("@@" | "@@ " /(.+)/) LF',
        'change_line: ("+" | "-" | " ") /(.*)/ LF', 'eof_line: "*** End of File" LF', '%import common.LF'])
    full = client.responses.create(model="any", input="Fix it.", max_output_tokens=4, store=False, tools=[
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                             "definition": codex_grammar}}])
    # A grammar this server cannot hold (`%ignore`) leaves the input free, as for a tool's
    # schema keyword: the request is served.
    loose = client.responses.create(model="any", input="x", max_output_tokens=4, store=False, tools=[
        {"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "lark",
                                                   "definition": 'start: "a"+\n%ignore " "'}}])
    out["codex_shape"] = {"patches": patches, "dates": dates, "loose_status": loose.status,
                          "chat_custom_call": [cc.type, cc.custom.input], "chat_custom_ok": chat_custom_ok,
                          "codex_grammar_status": full.status}
    codex_ok = (len(patches) == 3 and all(re.fullmatch(patch_re, p) for p in patches)
                and len(dates) == 1 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", dates[0]) is not None
                and loose.status in ("completed", "incomplete") and full.status in ("completed", "incomplete")
                and chat_custom_ok)
    # Stored responses: a second turn by `previous_response_id` evaluates what the
    # conversation sent whole would, and answers the same; then read back, listed, deleted.
    first = client.responses.create(model="any", input="Name a colour.", max_output_tokens=8, temperature=0)
    chained = client.responses.create(model="any", input="And another?", previous_response_id=first.id,
                                      max_output_tokens=8, temperature=0)
    whole = client.responses.create(model="any", max_output_tokens=8, temperature=0, store=False, input=[
        {"role": "user", "content": "Name a colour."}, *[o.model_dump() for o in first.output],
        {"role": "user", "content": "And another?"}])
    got = client.responses.retrieve(chained.id)
    listed = client.responses.input_items.list(chained.id)
    client.responses.delete(first.id)
    gone = raised(openai.NotFoundError, client.responses.retrieve, first.id) is not None
    broken = raised(openai.BadRequestError, client.responses.create, model="any", input="x",
                    previous_response_id=chained.id, max_output_tokens=2)
    broken_refused = broken is not None and "no longer stored" in str(broken)
    out["stored_responses"] = {
        "chained_input_tokens": chained.usage.input_tokens, "whole_input_tokens": whole.usage.input_tokens,
        "same_reply": chained.output_text == whole.output_text,
        "cached_tokens": chained.usage.input_tokens_details.cached_tokens,
        "retrieved_same": got.output_text == chained.output_text, "listed_items": len(listed.data),
        "deleted_is_404": gone, "broken_chain_is_400": broken_refused}
    stored_ok = (chained.usage.input_tokens == whole.usage.input_tokens and chained.output_text == whole.output_text
                 and got.output_text == chained.output_text and len(listed.data) == 1 and gone and broken_refused)
    # truncation "auto": a conversation longer than the slot (2,048 tokens) loses its oldest
    # turns, whole, and keeps the instructions; one more turn keeps the same cut, so its
    # prompt reuses the previous one's.
    convo = []
    for i in range(40):
        convo += [{"role": "user", "content": f"Question {i}: tell me about rivers, lakes and the sea."},
                  {"role": "assistant", "content": f"Answer {i}: rivers flow to lakes, and lakes to the sea."}]
    ask = convo + [{"role": "user", "content": "Which river is longest?"}]
    try:
        client.responses.create(model="any", input=ask, instructions="Be brief.", max_output_tokens=8)
        refused = False
    except openai.BadRequestError as e:
        # As OpenAI words it, which agents read to compact the conversation.
        refused = e.code == "context_length_exceeded" and "maximum context length is 2048 tokens" in e.message
    first_cut = client.responses.create(model="any", input=ask, instructions="Be brief.", max_output_tokens=8,
                                        temperature=0, truncation="auto")
    kept_from = [k for k in range(0, len(ask), 2) if client.responses.input_tokens.count(
        model="any", input=ask[k:], instructions="Be brief.").input_tokens == first_cut.usage.input_tokens]
    longer = ask + [{"role": "assistant", "content": "The Nile."}, {"role": "user", "content": "And the widest?"}]
    second_cut = client.responses.create(model="any", input=longer, instructions="Be brief.", max_output_tokens=8,
                                         temperature=0, truncation="auto")
    out["truncation"] = {"disabled_refused": refused, "status": first_cut.status, "echoed": first_cut.truncation,
                         "input_tokens": first_cut.usage.input_tokens, "kept_from_item": kept_from,
                         "next_turn_input_tokens": second_cut.usage.input_tokens,
                         "next_turn_cached": second_cut.usage.input_tokens_details.cached_tokens}
    truncation_ok = (refused and first_cut.truncation == "auto" and 0 < first_cut.usage.input_tokens <= 2048 - 8
                     and len(kept_from) == 1 and kept_from[0] > 0
                     and second_cut.usage.input_tokens_details.cached_tokens >= 512)
    # Background mode: answered at once, queued, and polled to the reply the foreground
    # gives; streamed, a stream dropped early is resumed with the client's own helper
    # (which replays from the start and skips what it saw); a long one is cancelled.
    ask = dict(model="any", input="Name a colour.", max_output_tokens=8, temperature=0)
    foreground = client.responses.create(**ask)
    bg = client.responses.create(**ask, background=True)
    queued_status = bg.status
    deadline = time.monotonic() + 60
    while bg.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        bg = client.responses.retrieve(bg.id)
    dropped = client.responses.create(**ask, background=True, stream=True)
    head = []
    for ev in dropped:
        head.append(ev)
        if len(head) == 4:
            break
    dropped.close()
    with client.responses.stream(response_id=head[0].response.id, starting_after=head[-1].sequence_number) as st:
        rest = [e.sequence_number for e in st]
        resumed = st.get_final_response()
    long = client.responses.create(**{**ask, "max_output_tokens": 1500}, background=True)
    cancelled = client.responses.cancel(long.id)
    out["background"] = {"created_status": queued_status, "final_status": bg.status,
                         "same_reply": bg.output_text == foreground.output_text,
                         "head": [e.type for e in head], "resumed_from": rest[:1],
                         "resumed_same_reply": resumed.output_text == foreground.output_text,
                         "cancelled": cancelled.status, "retrieved_after_cancel": client.responses.retrieve(long.id).status}
    background_ok = (queued_status == "queued" and bg.status == foreground.status
                     and bg.output_text == foreground.output_text and head[0].type == "response.created"
                     and rest[:1] == [head[-1].sequence_number + 1] and resumed.output_text == foreground.output_text
                     and out["background"]["cancelled"] == "cancelled"
                     and out["background"]["retrieved_after_cancel"] == "cancelled")
    responses_ok = (streamed == text and len(fcs) == 1 and len(done_calls) == 1 and deltas >= 1
                    and r.usage.input_tokens > 0 and counted == r.usage.input_tokens and stored_ok and custom_ok
                    and codex_ok and logprobs_ok and truncation_ok and background_ok)
    out["all_passed"] = (responses_ok and all(c["finish_reason"] == "tool_calls" and len(c["calls"]) == 1 for c in calls)
                         and out["tools_stream"]["finish_reason"] == "tool_calls" and len(acc) == 1
                         and all(p is not None for p in pets)
                         and len(lps) == lr.usage.completion_tokens and sorted_ok and greedy_ok
                         and len(lps[0].top_logprobs) == 5)
    return out


def socket_events(conn, until=("response.completed", "error")):
    """The events `conn` receives up to and including the first of type `until`."""
    seen = []
    for ev in conn:
        seen.append(ev)
        if ev.type in until:
            break
    return seen


def socket_checks(client, base):
    """The Responses API's WebSocket mode (`client.responses.connect()`): the text and events
    of an HTTP stream, a `store: false` response continued on the socket by
    `previous_response_id` as the whole conversation sent over HTTP would be (and a stored
    response after it continued over HTTP), a warm-up
    (`generate: false`) continued from with its prompt found evaluated, requests sent back to back answered in order, a
    `stream_id` echoed, errors as `error` events that leave the socket open (the code a
    client resends the whole conversation on), a closed socket cancelling its response, and
    a plain GET answered with how to connect."""
    args = dict(model="any", input="Name a colour.", instructions="Be brief.", max_output_tokens=12,
                temperature=0, store=False)
    with client.responses.stream(**args) as s:
        http_kinds = [ev.type for ev in s]
        http_text = s.get_final_response().output_text
    out = {}
    with client.responses.connect() as conn:
        conn.response.create(**args)
        events = socket_events(conn)
        first = events[-1].response
        out["same_as_http"] = {"kinds": [e.type for e in events] == http_kinds,
                               "text": first.output_text == http_text, "status": first.status}
        conn.response.create(model="any", input="And another?", previous_response_id=first.id,
                             max_output_tokens=8, temperature=0, store=False, stream_id="lane-1")
        events = socket_events(conn)
        chained = events[-1].response
        # Instructions are not carried over by `previous_response_id`: the whole has none.
        whole = client.responses.create(model="any", max_output_tokens=8, temperature=0,
                                        store=False, input=[{"role": "user", "content": "Name a colour."},
                                                            *[o.model_dump() for o in first.output],
                                                            {"role": "user", "content": "And another?"}])
        out["unstored_chain"] = {"input_tokens": [chained.usage.input_tokens, whole.usage.input_tokens],
                                 "same_reply": chained.output_text == whole.output_text,
                                 "stream_id_on_every_event": all(getattr(e, "stream_id", None) == "lane-1"
                                                                 for e in events)}
        # Over HTTP the unstored response is unknown, with the code that says to resend.
        unknown = raised(openai.BadRequestError, client.responses.create, model="any", input="x",
                         previous_response_id=chained.id, max_output_tokens=2)
        out["unstored_unknown_over_http"] = unknown is not None and unknown.code == "previous_response_not_found"
        # A stored response that continues the unstored one keeps the conversation before it:
        # continued over HTTP, it is the whole conversation.
        conn.response.create(model="any", input="And one more?", previous_response_id=chained.id,
                             max_output_tokens=8, temperature=0, store=True)
        stored = socket_events(conn)[-1].response
        later = client.responses.create(model="any", input="Which one is brightest?", previous_response_id=stored.id,
                                        max_output_tokens=8, temperature=0, store=False)
        whole = client.responses.create(model="any", max_output_tokens=8, temperature=0, store=False, input=[
            {"role": "user", "content": "Name a colour."}, *[o.model_dump() for o in first.output],
            {"role": "user", "content": "And another?"}, *[o.model_dump() for o in chained.output],
            {"role": "user", "content": "And one more?"}, *[o.model_dump() for o in stored.output],
            {"role": "user", "content": "Which one is brightest?"}])
        out["stored_after_unstored"] = {"input_tokens": [later.usage.input_tokens, whole.usage.input_tokens],
                                        "same_reply": later.output_text == whole.output_text}
        # A warm-up evaluates its prompt ahead (long enough for whole ubatches to be kept):
        # the turn that continues it finds them in the slot's cache.
        long_instructions = "Answer briefly, in plain words, and name one colour only. " * 30
        conn.response.create(model="any", input="Name a colour.", instructions=long_instructions, generate=False,
                             store=False)
        warm = socket_events(conn)[-1].response
        conn.response.create(model="any", input="And another?", previous_response_id=warm.id,
                             instructions=long_instructions, max_output_tokens=8, temperature=0, store=False)
        after_warm = socket_events(conn)[-1].response
        both_sent = client.responses.create(model="any", instructions=long_instructions, max_output_tokens=8,
                                            temperature=0, store=False,
                                            input=[{"role": "user", "content": "Name a colour."},
                                                   {"role": "user", "content": "And another?"}])
        out["warm_up"] = {"output": len(warm.output), "status": warm.status,
                          "evaluated_ahead": after_warm.usage.input_tokens_details.cached_tokens,
                          "input_tokens": [after_warm.usage.input_tokens, both_sent.usage.input_tokens],
                          "same_reply": after_warm.output_text == both_sent.output_text}
        conn.response.create(model="any", input="x", previous_response_id="resp_gone", max_output_tokens=2)
        missing = socket_events(conn)[-1]
        conn.send({"type": "response.create", "model": "any", "input": "x", "background": True})
        background = socket_events(conn)[-1]
        conn.send({"type": "response.cancel"})
        unknown_type = socket_events(conn)[-1]
        out["errors"] = {"missing": [missing.type, missing.status, missing.error.code, missing.error.param],
                         "background": [background.type, background.status, background.error.param],
                         "unknown_type": [unknown_type.type, unknown_type.status, unknown_type.error.param]}
        conn.response.create(model="any", input="One.", max_output_tokens=3, temperature=0, store=False)
        conn.response.create(model="any", input="Two.", max_output_tokens=3, temperature=0, store=False)
        both = [e for e in socket_events(conn) + socket_events(conn) if e.type == "response.completed"]
        by_http = [client.responses.create(model="any", input=t, max_output_tokens=3, temperature=0,
                                           store=False).output_text for t in ("One.", "Two.")]
        out["back_to_back"] = {"answered": len(both), "distinct": len({r.response.id for r in both}) == 2,
                               "in_order": [r.response.output_text for r in both] == by_http}
        conn.response.create(model="any", input="Tell me a long story.", max_output_tokens=600, temperature=0)
        for ev in conn:
            if ev.type == "response.output_text.delta":
                break
    # The closed socket's response stops: the slot goes idle well short of 600 tokens.
    deadline, slot = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        req = urllib.request.Request(base + "/slots", headers={"Authorization": "Bearer sekrit"})
        with urllib.request.urlopen(req) as resp:
            slot = json.load(resp)[0]
        if not slot["is_processing"]:
            break
        time.sleep(0.05)
    out["closed_cancels"] = {"idle": not slot["is_processing"], "decoded": slot["n_decoded"]}
    try:
        urllib.request.urlopen(urllib.request.Request(base + "/v1/responses",
                                                      headers={"Authorization": "Bearer sekrit"}))
        out["plain_get"] = "no error"
    except urllib.error.HTTPError as e:
        out["plain_get"] = {"status": e.code, "says": "WebSocket" in e.read().decode()}
    ok = (out["same_as_http"]["kinds"] and out["same_as_http"]["text"]
          and out["unstored_chain"]["input_tokens"][0] == out["unstored_chain"]["input_tokens"][1]
          and out["unstored_chain"]["same_reply"] and out["unstored_chain"]["stream_id_on_every_event"]
          and out["unstored_unknown_over_http"]
          and out["stored_after_unstored"]["input_tokens"][0] == out["stored_after_unstored"]["input_tokens"][1]
          and out["stored_after_unstored"]["same_reply"]
          and out["warm_up"]["output"] == 0 and out["warm_up"]["status"] == "completed"
          and out["warm_up"]["input_tokens"][0] == out["warm_up"]["input_tokens"][1]
          and out["warm_up"]["same_reply"] and out["warm_up"]["evaluated_ahead"] >= 256
          and out["errors"]["missing"] == ["error", 400, "previous_response_not_found", "previous_response_id"]
          and out["errors"]["background"] == ["error", 400, "background"]
          and out["errors"]["unknown_type"] == ["error", 400, "type"]
          and out["back_to_back"]["answered"] == 2 and out["back_to_back"]["distinct"]
          and out["back_to_back"]["in_order"]
          and out["closed_cancels"]["idle"] and out["closed_cancels"]["decoded"] < 600
          and isinstance(out["plain_get"], dict) and out["plain_get"] == {"status": 400, "says": True})
    return out, ok


def conversation_checks(client):
    """The Conversations API through the client's own resources: a conversation made with a
    first item and metadata, two responses in it against the same conversation sent whole,
    its items paged through by the client's iterator, an item added, read and deleted, and
    its metadata replaced. Returns the record, whether it passed, and the conversation."""
    conv = client.conversations.create(items=[{"type": "message", "role": "system", "content": "Be brief."}],
                                       metadata={"topic": "colours"})
    ask = dict(model="any", max_output_tokens=8, temperature=0)
    first = client.responses.create(**ask, input="Name a colour.", conversation=conv.id)
    second = client.responses.create(**ask, input="And another?", conversation={"id": conv.id})
    whole = client.responses.create(**ask, store=False, input=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
        *[o.model_dump() for o in first.output], {"role": "user", "content": "And another?"}])
    # Two at a time: the iterator asks for the pages after the first by `after`.
    items = list(client.conversations.items.list(conv.id, limit=2, order="asc"))
    added = client.conversations.items.create(conv.id, items=[{"type": "message", "role": "user",
                                                               "content": "An aside."}])
    aside = client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    client.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    item_gone = raised(openai.NotFoundError, client.conversations.items.retrieve, added.data[0].id,
                       conversation_id=conv.id) is not None
    updated = client.conversations.update(conv.id, metadata={"topic": "shapes"})
    both = raised(openai.BadRequestError, client.responses.create, **ask, input="x", conversation=conv.id,
                  previous_response_id=first.id)
    both_refused = both is not None and "both given" in both.message
    # Compacted, as Codex compacts a conversation near the context's end: its user messages
    # and one compaction item, which the next turn sends as its input.
    compacted = client.responses.compact(model="any", input=[i.model_dump(exclude_none=True) for i in items])
    after_compaction = client.responses.create(**ask, input=[
        *[o.model_dump(exclude_none=True, warnings=False) for o in compacted.output],
        {"role": "user", "content": "Go on."}])
    record = {"id": conv.id, "responses_name_it": [first.conversation.id, second.conversation.id],
              "second_input_tokens": second.usage.input_tokens, "whole_input_tokens": whole.usage.input_tokens,
              "same_reply": second.output_text == whole.output_text,
              "items": [[i.type, getattr(i, "role", None)] for i in items],
              "aside": aside.content[0].text, "item_deleted_is_404": item_gone,
              "metadata": updated.metadata, "with_previous_response_id_is_400": both_refused,
              "compacted": [[o.type, getattr(o, "role", None)] for o in compacted.output],
              "after_compaction": [after_compaction.status, after_compaction.usage.input_tokens]}
    ok = (record["responses_name_it"] == [conv.id, conv.id]
          and second.usage.input_tokens == whole.usage.input_tokens and record["same_reply"]
          and len(items) == 3 + len(first.output) + len(second.output)
          and [i.type for i in items[:2]] == ["message", "message"] and items[1].role == "user"
          and aside.content[0].text == "An aside." and item_gone and updated.metadata == {"topic": "shapes"}
          and both_refused and compacted.object == "response.compaction"
          and record["compacted"] == [["message", "user"]] * 2 + [["compaction", None]]
          and compacted.output[-1].encrypted_content.strip() != ""
          and after_compaction.status in ("completed", "incomplete"))
    return record, ok, conv, second


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--model")
    ap.add_argument("--out", default="validate/serve-openai-client.json")
    a = ap.parse_args()
    if a.model:
        tmp, model = tempfile.mkdtemp(prefix="epm-openai-"), a.model
    else:
        tmp, model = synth_mini(a.bin, "epm-openai-")
    plan = json.loads(subprocess.run([a.bin, "plan", "-m", model, "-c", "2048", "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    budget = -(-plan["min_budget_bytes"] // (1 << 20)) + 16
    # Stored responses outlive the server: the next one on the same state folder reads them.
    server_args = ["--ram-budget-mb", str(budget), "--api-key", "sekrit", "--prompt-cache-dir", fresh_prompt_store()]
    proc, base = start(a.bin, model, server_args)
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
        # Sampling settings through the client's own arguments: a large logit bias picks its
        # token every time, and the prompt's token ids give what its text gives.
        def tokenize(text, add_special):
            req = urllib.request.Request(base + "/tokenize", method="POST",
                                         data=json.dumps({"content": text, "add_special": add_special}).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": "Bearer sekrit"})
            with urllib.request.urlopen(req) as f:
                return json.load(f)["tokens"]
        word = tokenize("hello", False)
        forced = client.completions.create(model="any", prompt="Once upon a time", max_tokens=3, temperature=0,
                                           logit_bias={str(word[0]): 100}).choices[0].text
        ids = tokenize("Once upon a time", True)
        by_ids = client.completions.create(model="any", prompt=ids, max_tokens=12, temperature=0).choices[0].text
        penalized = client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0,
                                                   presence_penalty=1.5, frequency_penalty=0.5)
        checks["sampling"] = {"forced": forced, "forced_token": word[0],
                              "forced_repeats": len(word) == 1 and forced == "hello" * 3,
                              "token_prompt_same_as_text": by_ids == checks["completion"]["text"],
                              "penalized_finish_reason": penalized.choices[0].finish_reason}
        prefix, suffix = "def area(r):\n    return ", "\n\nprint(area(2))\n"
        fim = client.completions.create(model="any", prompt=prefix, suffix=suffix, max_tokens=12, temperature=0)
        [pre], [suf], [mid] = (tokenize(t, False) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
        layout = [pre] + tokenize(prefix, False) + [suf] + tokenize(suffix, False) + [mid]
        req = urllib.request.Request(base + "/completion", method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer sekrit"},
                                     data=json.dumps({"prompt": layout, "n_predict": 12, "temperature": 0}).encode())
        with urllib.request.urlopen(req) as resp:
            by_layout = json.load(resp)["content"]
        checks["fill_in_the_middle"] = {"text": fim.choices[0].text, "prompt_tokens": fim.usage.prompt_tokens,
                                        "same_as_the_layout": fim.choices[0].text == by_layout
                                        and fim.usage.prompt_tokens == len(layout)}
        checks["models"] = [m.id for m in client.models.list().data]
        try:
            client.chat.completions.create(model="any", messages=msgs, max_tokens=100000)
            checks["bad_request"] = "no error"
        except openai.BadRequestError as e:
            checks["bad_request"] = {"status": e.status_code, "message": e.message, "code": e.code}
        # A wrong type in a sampling field: the error names the field, as `param` too.
        try:
            client.chat.completions.create(model="any", messages=msgs, max_tokens=4, temperature="hot")
            checks["wrong_type"] = "no error"
        except openai.BadRequestError as e:
            checks["wrong_type"] = {"status": e.status_code, "message": e.message, "param": e.param}
        try:
            openai.OpenAI(base_url=base + "/v1", api_key="wrong").models.list()
            checks["wrong_key"] = "no error"
        except openai.AuthenticationError as e:
            checks["wrong_key"] = {"status": e.status_code, "message": e.message}
        several = client.chat.completions.create(model="any", messages=msgs, max_tokens=6, n=2,
                                                 temperature=1.0, seed=11)
        second = client.chat.completions.create(model="any", messages=msgs, max_tokens=6,
                                                temperature=1.0, seed=12)
        checks["choices"] = {"indexes": [c.index for c in several.choices],
                             "second_same_as_seed_after": several.choices[1].message.content
                             == second.choices[0].message.content,
                             "completion_tokens": several.usage.completion_tokens}
        try:
            client.embeddings.create(model="any", input="x")
            checks["embeddings"] = "no error"
        except openai.NotFoundError as e:
            checks["embeddings"] = {"status": e.status_code, "message": e.message}
        checks["agents"] = agent_checks(client)
        checks["websocket"], socket_ok = socket_checks(client, base)
        checks["conversations"], conversations_ok, conv, in_conv = conversation_checks(client)
        kept = client.responses.create(model="any", input="Name a colour.", max_output_tokens=8, temperature=0)
        # Left running when the server stops: the next server runs it again.
        unfinished = client.responses.create(model="any", input="Tell me a long story.", max_output_tokens=900,
                                             temperature=0, background=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    proc, base = start(a.bin, model, server_args)
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="sekrit")
        got = client.responses.retrieve(kept.id)
        chained = client.responses.create(model="any", input="And another?", previous_response_id=kept.id,
                                          max_output_tokens=8, temperature=0)
        resumed = client.responses.retrieve(unfinished.id)
        deadline = time.monotonic() + 120
        while resumed.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.1)
            resumed = client.responses.retrieve(unfinished.id)
        # The conversation too: its metadata, and a response in it after the earlier ones.
        same_conv = client.conversations.retrieve(conv.id)
        before = len(list(client.conversations.items.list(conv.id)))
        later = client.responses.create(model="any", input="And a third?", conversation=conv.id,
                                        max_output_tokens=8, temperature=0)
        after = len(list(client.conversations.items.list(conv.id)))
        client.conversations.delete(conv.id)
        conv_gone = raised(openai.NotFoundError, client.conversations.retrieve, conv.id) is not None
        checks["stored_across_restart"] = {"retrieved_same": got.output_text == kept.output_text,
                                           "continued": chained.previous_response_id == kept.id
                                           and chained.usage.input_tokens > kept.usage.input_tokens,
                                           "conversation_kept": same_conv.metadata == {"topic": "shapes"},
                                           "conversation_continued": later.usage.input_tokens
                                           > in_conv.usage.input_tokens and after == before + 1 + len(later.output),
                                           "conversation_deleted_is_404": conv_gone,
                                           "background_run_again": resumed.status == "incomplete"
                                           and resumed.usage.output_tokens == 900}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = max(code, proc.wait(timeout=30))
    ok = (checks["chat_stream"]["same_as_non_streaming"] and checks["chat"]["usage"]["completion_tokens"] > 0
          and isinstance(checks["bad_request"], dict) and checks["bad_request"]["status"] == 400
          and checks["bad_request"]["code"] == "context_length_exceeded"
          and isinstance(checks["wrong_type"], dict) and checks["wrong_type"]["param"] == "temperature"
          and "invalid `temperature`" in checks["wrong_type"]["message"]
          and isinstance(checks["wrong_key"], dict) and checks["wrong_key"]["status"] == 401
          and checks["choices"]["indexes"] == [0, 1] and checks["choices"]["second_same_as_seed_after"]
          and isinstance(checks["embeddings"], dict) and "computes no embeddings" in checks["embeddings"]["message"]
          and checks["models"] and code == 0 and checks["agents"]["all_passed"] and conversations_ok
          and checks["sampling"]["forced_repeats"] and checks["sampling"]["token_prompt_same_as_text"]
          and checks["fill_in_the_middle"]["same_as_the_layout"] and socket_ok
          and all(checks["stored_across_restart"].values()))
    report = {"what": "epm-run serve driven by the official openai Python client",
              "command": "python3 tools/openai_client_check.py " + " ".join(sys.argv[1:]),
              "openai_version": openai.__version__, "python": platform.python_version(),
              "server_exit_code": code, "all_passed": ok, "checks": checks}
    write_report(a.out, report, tmp)


if __name__ == "__main__":
    main()
