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

import anyio
from mcp.client.client import Client

from common import ASKED, SPEC, callback, server, text_of


async def main():
    async with Client(server(), mode=SPEC.get("mode", "auto"), elicitation_callback=callback()) as client:
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
