#!/usr/bin/env python3
"""Drive `epm-run serve` with OpenAI's Agents SDK (pip install openai-agents), whose two ways
of keeping a conversation on the server both go through the Conversations API: an
`OpenAIConversationsSession` (the SDK reads the conversation's items before each turn and
adds the turn's items after it: `conversations.create`, `items.list`, `items.create`,
`items.delete` for `pop_item`, `conversations.delete` for `clear_session`), and
`Runner.run(..., conversation_id=...)` (the server adds each response's items). Each runs
two turns of a `Runner.run` on the Responses API; the second turn must see the first (more
input tokens, the first turn's items in the conversation). Then an
`OpenAIResponsesCompactionSession` compacted by force (`responses.compact`): its history
becomes the user messages and a compaction item, and a third turn runs on it. Last, the
server's own compaction, asked by `ModelSettings(context_management=...)` with a threshold
every conversation of two turns passes: the second turn's response opens with a compaction
item, the SDK's session keeps it, and a third turn runs on it. Starts the server on a free
loopback port and stops it with SIGTERM; the record goes to --out.

    python3 tools/agents_sdk_check.py [--bin target/release/epm-run] [--out F]
"""
import argparse, asyncio, os, platform, signal, sys
from typing import Literal

import agents
import openai
from agents import (Agent, ModelSettings, OpenAIConversationsSession, OpenAIResponsesCompactionSession,
                    OpenAIResponsesModel, Runner, SQLiteSession)
from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epmlib import start_server, synth_mini, write_report  # noqa: E402


class Colour(BaseModel):
    """The agent's answer. A structured output, so that the synthetic model's reply ends with
    its JSON rather than at the token limit: the SDK takes a reply cut off by
    `max_output_tokens` for a failure."""
    colour: Literal["red", "green", "blue"]


def input_tokens(result):
    return sum(r.usage.input_tokens for r in result.raw_responses)


async def checks(client):
    # No traces to OpenAI's servers: there are none to reach.
    agents.set_tracing_disabled(True)
    agent = Agent(name="brief", instructions="Be brief.",
                  model=OpenAIResponsesModel(model="any", openai_client=client),
                  model_settings=ModelSettings(max_tokens=64, temperature=0), output_type=Colour)
    # The SDK keeps the conversation through the items API.
    session = OpenAIConversationsSession(openai_client=client)
    first = await Runner.run(agent, "Name a colour.", session=session)
    second = await Runner.run(agent, "And another?", session=session)
    items = await session.get_items()
    latest = await session.get_items(limit=1)
    popped = await session.pop_item()
    after_pop = await session.get_items()
    conv_id = session.session_id
    await session.clear_session()
    try:
        await client.conversations.retrieve(conv_id)
        cleared = False
    except openai.NotFoundError:
        cleared = True
    session_record = {
        "input_tokens": [input_tokens(first), input_tokens(second)],
        "items": [[i.get("type"), i.get("role")] for i in items],
        "latest_is_last": latest == items[-1:], "popped_was_last": popped == items[-1],
        "items_after_pop": len(after_pop), "cleared_is_404": cleared}
    session_ok = (input_tokens(second) > input_tokens(first) and len(items) >= 4
                  and items[0].get("role") == "user" and session_record["latest_is_last"]
                  and session_record["popped_was_last"] and len(after_pop) == len(items) - 1 and cleared)
    # The server keeps the conversation: each response's items are added to it.
    conv = await client.conversations.create()
    one = await Runner.run(agent, "Name a colour.", conversation_id=conv.id)
    two = await Runner.run(agent, "And another?", conversation_id=conv.id)
    kept = [i async for i in client.conversations.items.list(conv.id, order="asc")]
    outputs = sum(len(r.output) for r in one.raw_responses + two.raw_responses)
    server_record = {"input_tokens": [input_tokens(one), input_tokens(two)],
                     "items": [[i.type, getattr(i, "role", None)] for i in kept], "outputs": outputs}
    server_ok = input_tokens(two) > input_tokens(one) and len(kept) == 2 + outputs
    # The SDK's compaction session: its history, kept by the SDK, replaced by what
    # `responses.compact` answers; the next turn runs on it.
    compacting = OpenAIResponsesCompactionSession(
        "compacting", SQLiteSession("compacting"), client=client,
        should_trigger_compaction=lambda _: False)
    await Runner.run(agent, "Name a colour.", session=compacting)
    await Runner.run(agent, "And another?", session=compacting)
    before = await compacting.get_items()
    await compacting.run_compaction({"force": True})
    compacted = await compacting.get_items()
    after = await Runner.run(agent, "And a third?", session=compacting)
    compaction_record = {"before": [[i.get("type"), i.get("role")] for i in before],
                         "compacted": [[i.get("type"), i.get("role")] for i in compacted],
                         "next_turn_output": after.final_output.colour}
    compaction_ok = (compaction_record["compacted"] == [["message", "user"]] * 2 + [["compaction", None]]
                     and compacted[-1].get("encrypted_content", "").strip() != "")
    # The server compacts by itself past the threshold the model settings give.
    managed_agent = agent.clone(model_settings=ModelSettings(
        max_tokens=64, temperature=0,
        context_management=[{"type": "compaction", "compact_threshold": 1}]))
    managed = SQLiteSession("managed")
    turns = [await Runner.run(managed_agent, q, session=managed)
             for q in ("Name a colour.", "And another?", "And a third?")]
    kept = await managed.get_items()
    managed_record = {
        "first_outputs": [[o.type for o in r.raw_responses[0].output] for r in turns],
        "session_items": [i.get("type") or i.get("role") for i in kept],
        "final_output": turns[-1].final_output.colour}
    managed_ok = (managed_record["first_outputs"][0][0] != "compaction"
                  and all(o[0] == "compaction" for o in managed_record["first_outputs"][1:])
                  and "compaction" in managed_record["session_items"])
    record = {"session": session_record, "conversation_id": server_record, "compaction": compaction_record,
              "context_management": managed_record}
    return record, session_ok and server_ok and compaction_ok and managed_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/epm-run")
    ap.add_argument("--out", default="validate/serve-agents-sdk.json")
    a = ap.parse_args()
    tmp, model = synth_mini(a.bin, "epm-agents-")
    proc, port = start_server([a.bin, "serve", "-m", model, "--port", "0", "-c", "2048", "-t", "2"], 60)
    try:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        record, ok = asyncio.run(checks(client))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    report = {"what": "epm-run serve driven by OpenAI's Agents SDK (Conversations API sessions)",
              "command": "python3 tools/agents_sdk_check.py " + " ".join(sys.argv[1:]),
              "openai_agents_version": agents.__version__ if hasattr(agents, "__version__") else None,
              "openai_version": openai.__version__, "python": platform.python_version(),
              "server_exit_code": code, "all_passed": ok and code == 0, "checks": record}
    write_report(a.out, report, tmp)


if __name__ == "__main__":
    main()
