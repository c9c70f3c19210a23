"""A real MCP host for the gateway's end-to-end tests: the Python `mcp` SDK.

Usage: sdk_host.py SPEC_JSON
SPEC_JSON: {"command": [...], "answer": "accept" | "decline" | null,
            "calls": [{"name": ..., "arguments": {...}}]}

It connects to `command` over stdio with `ClientSession` (the legacy era),
answers elicitation as `answer` says (no elicitation capability when null),
lists the tools, makes the calls, and prints one JSON report.
"""

import json

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from common import ASKED, SPEC, callback, server, text_of


async def main():
    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write, elicitation_callback=callback()) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            results = []
            for call in SPEC.get("calls", []):
                result = await session.call_tool(call["name"], call.get("arguments", {}))
                results.append({"isError": bool(result.is_error), "text": text_of(result)})
            extras = {}
            if SPEC.get("extras"):
                # Everything else the server offers, through the gateway.
                resources = await session.list_resources()
                extras["resources"] = len(resources.resources)
                if resources.resources:
                    read = await session.read_resource(resources.resources[0].uri)
                    extras["read"] = len(read.contents)
                prompts = await session.list_prompts()
                extras["prompts"] = [prompt.name for prompt in prompts.prompts]
                if "simple-prompt" in extras["prompts"]:
                    got = await session.get_prompt("simple-prompt", {})
                    extras["prompt_messages"] = len(got.messages)
                extras["ping"] = (await session.send_ping()) is not None
            report = {
                "extras": extras,
                "server": init.server_info.name,
                "protocol": init.protocol_version,
                "tools": {
                    tool.name: tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
                    for tool in listed.tools
                },
                "results": results,
                "asked": ASKED,
            }
            print(json.dumps(report))


anyio.run(main)
