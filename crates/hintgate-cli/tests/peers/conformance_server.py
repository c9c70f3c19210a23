"""The upstream server for the official conformance suite's server scenarios.

It offers every tool, prompt and resource the suite's server scenarios
expect (`conformance list --server`), written with the Python `mcp` SDK's
low-level server so the wire shapes are exactly the ones the scenarios
check.

    conformance_server.py              speaks MCP on stdio (what hintgate runs)
    conformance_server.py --legacy-only  on stdio, serves only the
                                       initialize handshake: a client that
                                       probes the era (hintgate does) is
                                       refused `server/discover` and settles
                                       on 2025-11-25
    conformance_server.py --http PORT  serves Streamable HTTP at
                                       http://127.0.0.1:PORT/mcp (0 picks a
                                       free port) and prints that URL on
                                       stderr once it listens; with
                                       --legacy-only, a `server/discover`
                                       POST is refused (method not found),
                                       so a client settles on the legacy era

Over HTTP the SDK does its own Host/Origin checks (DNS rebinding) and
keeps an in-memory event store, so a stream the server closes mid-call
(`test_reconnection`) can be resumed with Last-Event-ID.

Every tool only reads: each says so with `readOnlyHint`, so a gateway that
trusts this server's annotations runs them without asking anyone.

Resource subscriptions follow the era too: a legacy client subscribes with
`resources/subscribe`, a 2026-07-28 client with a `subscriptions/listen`
stream naming the URI in `resourceSubscriptions`. `test_touch_watched`
announces that `test://watched-resource` changed to both (what a change of
the resource would do), and log messages go to a 2026-07-28 request only
when its `_meta` names a level (the SDK's rule).

Server-to-client questions (sampling, elicitation) follow the era the
client chose: a legacy client (2025-06-18, 2025-11-25) is sent the request
in the middle of the call; a 2026-07-28 client gets an input-required
result and the answer comes back in the retry's `inputResponses`.
"""

import argparse
import io
import json
import socket
import struct
import sys
import warnings
import wave
import zlib
from base64 import b64encode

import anyio
import mcp_types as types
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Logging, sampling and `logging/setLevel` are deprecated in the 2026-07-28
# era, but the scenarios are legacy-era ones that exercise them.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def _png_pixel():
    """A 1x1 red PNG, built here rather than pasted."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav_silence():
    """A short mono 8 kHz WAV of silence."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 80)
    return buffer.getvalue()


PNG = _png_pixel()
PNG_BASE64 = b64encode(PNG).decode()
WAV_BASE64 = b64encode(_wav_silence()).decode()

LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
NO_ARGUMENTS = {"type": "object", "properties": {}}


class State:
    """What one server process remembers across requests."""

    def __init__(self):
        self.log_level = "debug"
        self.subscriptions = set()


STATE = State()

# What 2026-07-28 listen streams are told: each stream gets the events it
# asked for.
BUS = InMemorySubscriptionBus()


# === tools ===


def text(value):
    return {"type": "text", "text": value}


def image():
    return {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}


def tool(name, description, input_schema=None):
    return {
        "name": name,
        "description": description,
        "inputSchema": input_schema or NO_ARGUMENTS,
        "annotations": READ_ONLY,
    }


def string_arguments(*names):
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": list(names),
    }


TOOLS = [
    tool("test_simple_text", "Returns one text block."),
    tool("test_image_content", "Returns one PNG image."),
    tool("test_audio_content", "Returns one WAV clip."),
    tool("test_embedded_resource", "Returns one embedded text resource."),
    tool("test_multiple_content_types", "Returns text, an image and an embedded resource."),
    tool("test_tool_with_logging", "Logs three messages while it runs."),
    tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 while it runs."),
    tool("test_error_handling", "Always fails with a tool error."),
    tool("test_sampling", "Asks the client's model to answer a prompt.", string_arguments("prompt")),
    tool("test_elicitation", "Asks the user for a user name and an email address.", string_arguments("message")),
    tool("test_elicitation_sep1034_defaults", "Asks the user for fields that all have defaults (SEP-1034)."),
    tool("test_elicitation_sep1330_enums", "Asks the user to pick from every kind of enum (SEP-1330)."),
    tool("test_touch_watched", "Announces that test://watched-resource changed to its subscribers."),
    tool("test_reconnection", "Closes its SSE stream mid-call, then answers on the resumed stream (SEP-1699)."),
    tool(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
]

SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}

USER_SCHEMA = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


class NeedInput(Exception):
    """A 2026-07-28 client has not answered the question yet."""

    def __init__(self, key, request):
        super().__init__(key)
        self.key = key
        self.request = request


def is_modern(ctx):
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def ask(ctx, params, key, method, request_params):
    """Asks the client one question and returns its answer as a dict.

    A legacy client is sent the request now, on the call's own stream; a
    2026-07-28 client finds the question in an input-required result and
    answers it in its retry."""
    if is_modern(ctx):
        answers = params.input_responses or {}
        if key in answers:
            answer = answers[key]
            return answer if isinstance(answer, dict) else answer.model_dump(by_alias=True, exclude_none=True)
        raise NeedInput(key, {"method": method, "params": request_params})
    if method == "elicitation/create":
        result = await ctx.session.elicit_form(
            request_params["message"], request_params["requestedSchema"], related_request_id=ctx.request_id
        )
    else:
        result = await ctx.session.create_message(
            messages=[
                types.SamplingMessage(role="user", content=types.TextContent(type="text", text=message["content"]["text"]))
                for message in request_params["messages"]
            ],
            max_tokens=request_params["maxTokens"],
            related_request_id=ctx.request_id,
        )
    return result.model_dump(by_alias=True, exclude_none=True)


async def log(ctx, level, message):
    if LOG_LEVELS.index(level) < LOG_LEVELS.index(STATE.log_level):
        return
    await ctx.session.send_log_message(level, message, logger="conformance", related_request_id=ctx.request_id)


async def progress(ctx, value):
    await ctx.session.report_progress(value, 100, f"{value} of 100")


async def elicitation_tool(ctx, params, message, schema):
    answer = await ask(
        ctx, params, "elicitation", "elicitation/create", {"message": message, "requestedSchema": schema}
    )
    content = json.dumps(answer.get("content") or {}, sort_keys=True)
    return [text(f"Elicitation completed: action={answer.get('action')}, content={content}")]


async def run_tool(ctx, params):
    """The content of one tool's result; raises ValueError for a tool error."""
    name = params.name
    arguments = params.arguments or {}
    if name == "test_simple_text":
        return [text("This is a simple text response for testing.")]
    if name == "test_image_content":
        return [image()]
    if name == "test_audio_content":
        return [{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]
    if name == "test_embedded_resource":
        return [
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    if name == "test_multiple_content_types":
        return [
            text("Multiple content types test:"),
            image(),
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json.dumps({"test": "data", "value": 123}),
                },
            },
        ]
    if name == "test_tool_with_logging":
        await log(ctx, "info", "Tool execution started")
        await anyio.sleep(0.05)
        await log(ctx, "info", "Tool processing data")
        await anyio.sleep(0.05)
        await log(ctx, "info", "Tool execution completed")
        return [text("Tool with logging executed successfully")]
    if name == "test_tool_with_progress":
        await progress(ctx, 0)
        await anyio.sleep(0.05)
        await progress(ctx, 50)
        await anyio.sleep(0.05)
        await progress(ctx, 100)
        return [text("Tool with progress executed successfully")]
    if name == "test_error_handling":
        raise ValueError("This tool intentionally returns an error for testing")
    if name == "test_touch_watched":
        uri = "test://watched-resource"
        if is_modern(ctx):
            await BUS.publish(ResourceUpdated(uri=uri))
        elif uri in STATE.subscriptions:
            await ctx.session.send_resource_updated(uri)
        return [text(f"Touched {uri}")]
    if name == "test_sampling":
        answer = await ask(
            ctx,
            params,
            "sampling",
            "sampling/createMessage",
            {"messages": [{"role": "user", "content": text(str(arguments.get("prompt", "")))}], "maxTokens": 100},
        )
        content = answer.get("content") or {}
        reply = content.get("text", "") if isinstance(content, dict) else ""
        return [text(f"LLM response: {reply}")]
    if name == "test_elicitation":
        answer = await ask(
            ctx,
            params,
            "elicitation",
            "elicitation/create",
            {"message": str(arguments.get("message", "")), "requestedSchema": USER_SCHEMA},
        )
        content = json.dumps(answer.get("content") or {}, sort_keys=True)
        return [text(f"User response: action={answer.get('action')}, content={content}")]
    if name == "test_elicitation_sep1034_defaults":
        return await elicitation_tool(ctx, params, "Please provide user information", SEP1034_SCHEMA)
    if name == "test_elicitation_sep1330_enums":
        return await elicitation_tool(
            ctx, params, "Please select values using different enum schema types", SEP1330_SCHEMA
        )
    if name == "test_reconnection":
        await log(ctx, "info", "Before disconnect")
        # Over Streamable HTTP with an event store this ends the POST's SSE
        # stream; the client resumes it with Last-Event-ID and receives the
        # rest. On stdio there is no stream to close.
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        await anyio.sleep(0.2)
        await log(ctx, "info", "After reconnect")
        return [text("Reconnection test completed")]
    if name == "json_schema_2020_12_tool":
        return [text(f"Received: {json.dumps(arguments, sort_keys=True)}")]
    raise LookupError(name)


async def list_tools(ctx, params):
    return {"tools": TOOLS}


async def call_tool(ctx, params):
    try:
        content = await run_tool(ctx, params)
    except NeedInput as question:
        return {"resultType": "input_required", "inputRequests": {question.key: question.request}}
    except LookupError as unknown:
        return {"content": [text(f"Unknown tool: {unknown}")], "isError": True}
    except ValueError as failure:
        return {"content": [text(str(failure))], "isError": True}
    return {"content": content, "isError": False}


# === resources ===

STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "Watched resource content"

RESOURCES = [
    {
        "uri": "test://static-text",
        "name": "static-text",
        "description": "A static text resource",
        "mimeType": "text/plain",
    },
    {
        "uri": "test://static-binary",
        "name": "static-binary",
        "description": "A static binary resource (a PNG)",
        "mimeType": "image/png",
    },
    {
        "uri": "test://watched-resource",
        "name": "watched-resource",
        "description": "A resource a client may subscribe to",
        "mimeType": "text/plain",
    },
]

TEMPLATE_PREFIX = "test://template/"
TEMPLATE_SUFFIX = "/data"


async def list_resources(ctx, params):
    return {"resources": RESOURCES}


async def list_resource_templates(ctx, params):
    return {
        "resourceTemplates": [
            {
                "uriTemplate": "test://template/{id}/data",
                "name": "template-data",
                "description": "Data for one id",
                "mimeType": "application/json",
            }
        ]
    }


async def read_resource(ctx, params):
    uri = str(params.uri)
    if uri == "test://static-text":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT}]}
    if uri == "test://static-binary":
        return {"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG_BASE64}]}
    if uri == "test://watched-resource":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": WATCHED_TEXT}]}
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        resource_id = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if resource_id and "/" not in resource_id:
            data = {"id": resource_id, "templateTest": True, "data": f"Data for ID: {resource_id}"}
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(data)}]}
    raise MCPError(code=-32002, message=f"Resource not found: {uri}")


async def subscribe(ctx, params):
    STATE.subscriptions.add(str(params.uri))
    return {}


async def unsubscribe(ctx, params):
    STATE.subscriptions.discard(str(params.uri))
    return {}


# === prompts ===

PROMPTS = [
    {"name": "test_simple_prompt", "description": "A prompt without arguments"},
    {
        "name": "test_prompt_with_arguments",
        "description": "A prompt with two required arguments",
        "arguments": [
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "description": "A prompt that embeds a resource",
        "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
    },
    {"name": "test_prompt_with_image", "description": "A prompt with an image"},
]


async def list_prompts(ctx, params):
    return {"prompts": PROMPTS}


def user(content):
    return {"role": "user", "content": content}


async def get_prompt(ctx, params):
    arguments = params.arguments or {}
    if params.name == "test_simple_prompt":
        return {"messages": [user(text("This is a simple prompt for testing."))]}
    if params.name == "test_prompt_with_arguments":
        first, second = arguments.get("arg1", ""), arguments.get("arg2", "")
        return {"messages": [user(text(f"Prompt with arguments: arg1='{first}', arg2='{second}'"))]}
    if params.name == "test_prompt_with_embedded_resource":
        resource = {
            "uri": arguments.get("resourceUri", ""),
            "mimeType": "text/plain",
            "text": "Embedded resource content for testing.",
        }
        return {
            "messages": [
                user({"type": "resource", "resource": resource}),
                user(text("Please process the embedded resource above.")),
            ]
        }
    if params.name == "test_prompt_with_image":
        return {"messages": [user(image()), user(text("Please analyze the image above."))]}
    raise MCPError(code=-32602, message=f"Unknown prompt: {params.name}")


# === completion and logging ===

COMPLETIONS = {"arg1": ["paris", "park", "party", "test-one", "test-two"], "arg2": ["world", "word"]}


async def complete(ctx, params):
    candidates = COMPLETIONS.get(params.argument.name, [])
    values = [value for value in candidates if value.startswith(params.argument.value)]
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


async def set_level(ctx, params):
    STATE.log_level = params.level
    return {}


def era_result(handler):
    """A 2026-07-28 result names its type; a legacy one has no such field."""

    async def handle(ctx, params):
        result = await handler(ctx, params)
        if is_modern(ctx) and "resultType" not in result:
            result = {**result, "resultType": "complete"}
        return result

    return handle


def build_server():
    server = Server(
        "hintgate-conformance-fixture",
        version="1.0.0",
        # 2026-07-28 list and read results carry freshness hints: none of
        # this server's answers may be cached.
        cache_hints={method: CacheHint() for method in CACHEABLE_METHODS},
        on_list_tools=era_result(list_tools),
        on_call_tool=era_result(call_tool),
        on_list_resources=era_result(list_resources),
        on_list_resource_templates=era_result(list_resource_templates),
        on_read_resource=era_result(read_resource),
        on_subscribe_resource=era_result(subscribe),
        on_unsubscribe_resource=era_result(unsubscribe),
        on_list_prompts=era_result(list_prompts),
        on_get_prompt=era_result(get_prompt),
        on_completion=era_result(complete),
        on_set_logging_level=era_result(set_level),
        on_subscriptions_listen=ListenHandler(BUS),
    )
    return server


# === transports ===


async def serve_stdio(server, legacy_only):
    async with stdio_server() as (read, write):
        if not legacy_only:
            await server.run(read, write, server.create_initialization_options())
            return
        # The handshake-only loop: anything before `initialize`, such as a
        # `server/discover` probe, is refused.
        async with server.lifespan(server) as state:
            await serve_loop(
                server, read, write, lifespan_state=state, init_options=server.create_initialization_options()
            )


class MemoryEventStore(EventStore):
    """Every event of every stream, in memory, so a closed stream resumes."""

    def __init__(self):
        self.events = []

    async def store_event(self, stream_id, message):
        self.events.append((stream_id, message))
        return str(len(self.events))

    async def replay_events_after(self, last_event_id, send_callback):
        try:
            last = int(last_event_id)
            stream_id = self.events[last - 1][0]
        except (ValueError, IndexError):
            return None
        for number, (stream, message) in enumerate(self.events[last:], start=last + 1):
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, str(number)))
        return stream_id


def refuse_discover(app):
    """An ASGI app that answers a POST of `server/discover` with "method not
    found" (the legacy era's answer) and passes everything else to `app`."""

    async def legacy_only(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(chunk.get("body", b"") for chunk in chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "server/discover":
            answer = json.dumps(
                {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -32601, "message": "Method not found"}}
            ).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": answer})
            return
        replay = iter(chunks)

        async def again():
            return next(replay, None) or await receive()

        await app(scope, again, send)

    return legacy_only


async def serve_http(server, port, legacy_only=False):
    import uvicorn

    app = server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=100, host="127.0.0.1")
    if legacy_only:
        app = refuse_discover(app)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    bound = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning")
    http = uvicorn.Server(config)
    sys.stderr.write(f"serving MCP at http://127.0.0.1:{bound}/mcp\n")
    sys.stderr.flush()
    await http.serve(sockets=[listener])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument(
        "--legacy-only",
        action="store_true",
        help="serve only the initialize handshake (2025-11-25 and older): on stdio anything before it is "
        "refused, over HTTP `server/discover` is",
    )
    args = parser.parse_args()
    server = build_server()
    if args.http is None:
        anyio.run(serve_stdio, server, args.legacy_only)
    else:
        anyio.run(serve_http, server, args.http, args.legacy_only)


if __name__ == "__main__":
    main()
