"""The Python `mcp` SDK's `Client` as a host over Streamable HTTP, for the
tests of `hintgate run --listen`.

Usage: http_host.py SPEC_JSON
SPEC_JSON: {"url": "http://127.0.0.1:PORT/mcp", "token": TOKEN | null,
            "mode": "legacy" | "2026-07-28" | "auto",
            "answer": "accept" | "decline" | null,
            "calls": [{"name": ..., "arguments": {...}}]}

It lists the tools, makes each call in order and prints one JSON report.
"""

import anyio
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from common import SPEC, callback, report


async def main():
    headers = {"Authorization": f"Bearer {SPEC['token']}"} if SPEC.get("token") else None
    http = create_mcp_http_client(headers=headers)
    transport = streamable_http_client(SPEC["url"], http_client=http)
    async with Client(transport, mode=SPEC.get("mode", "legacy"), elicitation_callback=callback()) as client:
        await report(client)
    await http.aclose()


anyio.run(main)
