"""The Python `mcp` SDK's `Client` as a host, for the gateway's tests.

Usage: sdk_client.py SPEC_JSON
SPEC_JSON: {"command": [...], "mode": "auto" | "legacy" | "2026-07-28",
            "answer": "accept" | "decline" | null,
            "calls": [{"name": ..., "arguments": {...}}]}

`mcp.Client` in auto mode probes `server/discover` and speaks 2026-07-28
when it is offered, driving input-required results itself; in legacy mode it
uses the initialize handshake. It prints one JSON report.
"""

import json
import os
import sys

import anyio
import mcp_types as types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

SPEC = json.loads(sys.argv[1])
ASKED = []


async def elicit(context, params):
    ASKED.append(params.message)
    if SPEC["answer"] == "accept":
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")


def text_of(result):
    return [block.text for block in result.content if getattr(block, "type", "") == "text"]


async def main():
    command = SPEC["command"]
    # The SDK passes servers a minimal environment; the gateway also needs
    # the test's (HINTGATE_STATE_DIR keeps its state in the test's directory).
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    callback = elicit if SPEC.get("answer") else None
    async with Client(server, mode=SPEC.get("mode", "auto"), elicitation_callback=callback) as client:
        listed = await client.list_tools()
        results = []
        for call in SPEC.get("calls", []):
            result = await client.call_tool(call["name"], call.get("arguments", {}))
            results.append({"isError": bool(result.is_error), "text": text_of(result)})
        print(json.dumps({
            "protocol": client.protocol_version,
            "tools": sorted(tool.name for tool in listed.tools),
            "results": results,
            "asked": ASKED,
        }))


anyio.run(main)
