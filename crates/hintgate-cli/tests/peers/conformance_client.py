"""The client under test for the official conformance suite's client scenarios.

The suite runs `conformance_client.py <server-url>` with MCP_CONFORMANCE_SCENARIO
set. This script is a host (the Python `mcp` SDK's ClientSession) whose server
is `hintgate run --trust trusted --url <server-url>`: the suite checks what
reaches its server through the gateway. HINTGATE_BIN names the binary.

The host approves the gateway's own questions and answers a server's
elicitation by accepting every field's default (SEP-1034).
"""

import os
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

URL = sys.argv[-1]
SCENARIO = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")


async def elicit(context, params):
    schema = params.requested_schema
    properties = schema.get("properties", {}) if isinstance(schema, dict) else schema.properties
    if "approve" in properties:
        # The gateway's question about a call: approve it.
        return types.ElicitResult(action="accept", content={"approve": True})
    content = {}
    for key, field in properties.items():
        field = field if isinstance(field, dict) else field.model_dump(by_alias=True, exclude_none=True)
        if "default" in field:
            content[key] = field["default"]
    return types.ElicitResult(action="accept", content=content)


async def main():
    server = StdioServerParameters(
        command=os.environ["HINTGATE_BIN"],
        args=["run", "--name", "conformance", "--trust", "trusted", "--url", URL],
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            await session.list_tools()
            if SCENARIO == "tools_call":
                result = await session.call_tool("add_numbers", {"a": 2, "b": 3})
                print(result.content[0].text)
            elif SCENARIO == "elicitation-sep1034-client-defaults":
                result = await session.call_tool("test_client_elicitation_defaults", {})
                print(result.content[0].text)


anyio.run(main)
