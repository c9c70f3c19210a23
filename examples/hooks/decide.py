#!/usr/bin/env python3
"""An example decision hook for hintgate (`[gateway] decide_command`).

It runs as a persistent hook: hintgate starts it once and writes one JSON
object a line, each a question about one tool call; it answers each with one
JSON object a line, naming the question's `id`:

    {"id": "7", "verdict": "allow" | "ask" | "deny" | "abstain", "reason": "..."}

The shapes are in docs/hook-request.schema.json and
docs/hook-answer.schema.json. Only answers go to stdout; logs go to stderr.
At the end of its input it exits.

What this one decides (an example policy to adapt):

  - deny any call whose arguments mention a path under ~/.ssh, ~/.aws or
    ~/.gnupg, whatever the server and tool;
  - allow writes of the filesystem server `fs` inside the project directory
    ($HINTGATE_PROJECT, default: the directory hintgate was started in),
    without a prompt: the project is under version control;
  - ask about every call of a tool that hintgate would let run but that
    reaches outside this machine after the session read private data
    (hintgate already asks then; this only adds its own words);
  - abstain for everything else: hintgate's own steps decide.

    [gateway]
    decide_command = ["python3", "/path/to/decide.py"]
"""

import json
import os
import sys

PROJECT = os.path.realpath(os.environ.get("HINTGATE_PROJECT", os.getcwd()))
SECRET_DIRS = [os.path.expanduser(p) for p in ("~/.ssh", "~/.aws", "~/.gnupg")]
WRITE_TOOLS = {"write_file", "edit_file", "create_directory"}


def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)


def inside(path, root):
    path = os.path.realpath(os.path.expanduser(path))
    return path == root or path.startswith(root + os.sep)


def decide(question):
    arguments = question.get("arguments") or {}
    for text in strings(arguments):
        for secret in SECRET_DIRS:
            if secret in os.path.expanduser(text):
                return "deny", f"the arguments name {secret}"
    server = question["server"]["name"]
    tool = question["tool"]["name"]
    if server == "fs" and tool in WRITE_TOOLS:
        path = arguments.get("path")
        if isinstance(path, str) and inside(path, PROJECT):
            return "allow", "a write inside the project, which is under version control"
        return "ask", "a write outside the project"
    return "abstain", ""


for line in sys.stdin:
    try:
        question = json.loads(line)
        verdict, reason = decide(question)
        answer = {"id": question["id"], "verdict": verdict}
        if reason:
            answer["reason"] = reason
    except Exception as err:  # a question this hook cannot read: say so
        print(f"decide.py: {err}", file=sys.stderr)
        answer = {"id": None, "verdict": "deny", "reason": "the hook could not read the question"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
