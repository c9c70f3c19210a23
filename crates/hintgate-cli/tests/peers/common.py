"""What the SDK host scripts share: the spec, the scripted person, the server."""

import json
import os
import sys

import mcp_types as types
from mcp.client.stdio import StdioServerParameters

SPEC = json.loads(sys.argv[1])
ASKED = []


async def elicit(context, params):
    """Answers every question as the spec says, and remembers what was asked."""
    ASKED.append(params.message)
    if SPEC["answer"] == "accept":
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
