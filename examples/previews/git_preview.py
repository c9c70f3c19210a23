#!/usr/bin/env python3
"""An example previewer for hintgate: what a call of the reference git
server (`mcp-server-git`) would do to one repository.

    [[previews]]
    server = "git"
    tool = "git_*"
    command = ["python3", "/path/to/git_preview.py", "/path/to/repository"]

It runs as a persistent previewer: hintgate writes one JSON object a line,
each a question about one tool call a person is about to be asked about
(docs/preview-request.schema.json), and it answers each with one JSON
object a line naming the question's `id` (docs/preview-answer.schema.json):

    {"id": "7", "kind": "diff", "text": "..."}   or   {"id": "7", "none": "why"}

What it shows:

  - git_commit: the staged diff, which the commit would record;
  - git_add: the diff of the files it would stage;
  - git_reset: the staged diff, which it would unstage.

It only reads, and only the repository it is given (the one the server
serves): a call naming another `repo_path` gets no preview. Git runs with
external diff drivers, text conversion and fsmonitor off, so a repository's
own configuration runs nothing. Only answers go to stdout.
"""

import json
import os
import subprocess
import sys

REPOSITORY = os.path.realpath(sys.argv[1])
# Keeps an answer under hintgate's 64 KiB line limit.
MAX_TEXT = 48 * 1024


def git(*args):
    """`git` in the repository, reading only, with nothing of the
    repository's configuration run."""
    done = subprocess.run(
        [
            "git",
            "-c", "core.fsmonitor=false",
            "-c", "core.hooksPath=/dev/null",
            "-C", REPOSITORY,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=5,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_OPTIONAL_LOCKS": "0"},
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"git exited with {done.returncode}")
    return done.stdout


def diff(*args):
    return git("diff", "--no-ext-diff", "--no-textconv", "--no-color", *args)


def preview(tool, arguments):
    """The preview of one call: (kind, text), or (None, why there is none)."""
    repo = arguments.get("repo_path")
    if not isinstance(repo, str) or os.path.realpath(repo) != REPOSITORY:
        return None, "the call names another repository than the one this previewer reads"
    if tool == "git_commit":
        staged = diff("--cached")
        return ("diff", staged) if staged else (None, "nothing is staged: the commit would record nothing")
    if tool == "git_add":
        files = arguments.get("files")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            return None, "`files` is not a list of paths"
        # `--` ends the options: a file named like an option stays a path.
        changes = diff("--", *files)
        untracked = git("ls-files", "--others", "--exclude-standard", "--", *files)
        text = changes + "".join(f"new file: {name}\n" for name in untracked.splitlines())
        return ("diff", text) if text else (None, "the files have no changes to stage")
    if tool == "git_reset":
        staged = diff("--cached")
        return ("diff", staged) if staged else (None, "nothing is staged: nothing would be unstaged")
    return None, f"no preview for {tool}"


def answer(question):
    qid = question.get("id")
    try:
        kind, text = preview(question["tool"]["name"], question.get("arguments") or {})
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        return {"id": qid, "none": f"git failed: {err}"}
    if kind is None:
        return {"id": qid, "none": text}
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "\n[cut: the rest is longer than this previewer shows]\n"
    return {"id": qid, "kind": kind, "text": text}


for line in sys.stdin:
    try:
        reply = answer(json.loads(line))
    except (ValueError, KeyError, TypeError) as err:
        print(f"git_preview: cannot read a question: {err}", file=sys.stderr)
        continue
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
