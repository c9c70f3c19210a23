"""What the SDK host scripts share: the spec, the scripted person, the server."""

import json
import os
import sys

import mcp_types as types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

SPEC = json.loads(sys.argv[1])
ASKED = []


async def elicit(context, params):
    """Answers every question as the spec says, and remembers what was asked.

    With `meet` in the spec ({"mine": PATH, "theirs": PATH}), a question is
    answered only once another host has been asked one too: this host
    writes its file, then waits for the other's (at most a minute, then it
    answers anyway, so a test that fails does not hang). `answers`
    (optional) gives the answer to each question in turn, `answer` the
    rest; `on_ask` (optional) writes a file while question `ask` (from 0)
    is open, as someone else working on it meanwhile would."""
    ASKED.append(params.message)
    asked = len(ASKED) - 1
    meet = SPEC.get("meet")
    if meet:
        import anyio

        with open(meet["mine"], "w") as mine:
            mine.write(params.message)
        for _ in range(3000):
            if os.path.exists(meet["theirs"]):
                break
            await anyio.sleep(0.02)
    for change in SPEC.get("on_ask", []):
        if change.get("ask", 0) == asked:
            with open(change["write"], "w") as file:
                file.write(change["content"])
    answers = SPEC.get("answers") or []
    answer = answers[asked] if asked < len(answers) else SPEC["answer"]
    if answer == "accept":
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")


def callback():
    """The elicitation callback, or None for a host without elicitation."""
    return elicit if SPEC.get("answer") else None


def text_of(result):
    return [block.text for block in result.content if getattr(block, "type", "") == "text"]


def server():
    """The command under test. The SDK passes servers a minimal environment;
    the gateway also needs the test's (HINTGATE_STATE_DIR keeps its state in
    the test's directory)."""
    command = SPEC["command"]
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


async def report(client):
    """Lists the tools, makes each call of the spec in order, and prints one
    JSON report of what came back and what the person was asked."""
    listed = await client.list_tools()
    results = []
    for call in SPEC.get("calls", []):
        # A JSON-RPC error answer is reported as such (`error`), not raised.
        try:
            result = await client.call_tool(call["name"], call.get("arguments", {}))
        except MCPError as err:
            results.append({"isError": True, "error": str(err), "text": []})
            continue
        results.append({"isError": bool(result.is_error), "text": text_of(result)})
    print(json.dumps({
        "protocol": client.protocol_version,
        "tools": sorted(tool.name for tool in listed.tools),
        "results": results,
        "asked": ASKED,
    }))
