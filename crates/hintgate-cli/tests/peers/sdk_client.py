"""The Python `mcp` SDK's `Client` as a host, for the gateway's tests.

Usage: sdk_client.py SPEC_JSON
SPEC_JSON: {"command": [...], "mode": "auto" | "legacy" | "2026-07-28",
            "answer": "accept" | "decline" | null,
            "calls": [{"name": ..., "arguments": {...}}]}

`mcp.Client` in auto mode probes `server/discover` and speaks 2026-07-28
when it is offered, driving input-required results itself; in legacy mode it
uses the initialize handshake. It prints one JSON report.
"""

import anyio
from mcp.client.client import Client

from common import SPEC, callback, report, server


async def main():
    async with Client(server(), mode=SPEC.get("mode", "auto"), elicitation_callback=callback()) as client:
        await report(client)


anyio.run(main)
