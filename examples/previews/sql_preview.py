#!/usr/bin/env python3
"""An example previewer for hintgate: the plan of an SQL statement, from an
`EXPLAIN QUERY PLAN` on a read-only connection to the SQLite database a
SQL tool works on.

    [[previews]]
    server = "sqlite"
    tool = "write_query"
    command = ["python3", "/path/to/sql_preview.py", "/path/to/data.db"]

It runs as a persistent previewer (docs/preview-request.schema.json in,
docs/preview-answer.schema.json out): for a call whose `query` argument is
one SQL statement, it answers the plan SQLite would follow (which tables it
scans or searches, by which index), and, for an UPDATE or DELETE with a
WHERE clause, how many rows the WHERE clause matches now.

The database is opened read-only (`mode=ro`, and `PRAGMA query_only`), so
nothing the statement says can change it; EXPLAIN only plans; and the row
count is a SELECT built from the statement's own table and WHERE clause,
read with the same read-only connection. Only one statement is read: a
text with several is answered with no preview.
"""

import json
import re
import sqlite3
import sys

DATABASE = sys.argv[1]
QUERY_ARGUMENT = sys.argv[2] if len(sys.argv) > 2 else "query"
COUNTED = re.compile(
    r"^\s*(?:DELETE\s+FROM|UPDATE)\s+([A-Za-z_][A-Za-z0-9_]*)\b.*?\bWHERE\b(.*)$",
    re.IGNORECASE | re.DOTALL,
)


def connect():
    connection = sqlite3.connect(f"file:{DATABASE}?mode=ro", uri=True)
    connection.execute("PRAGMA query_only = ON")
    return connection


def preview(arguments):
    query = arguments.get(QUERY_ARGUMENT)
    if not isinstance(query, str) or not query.strip():
        return None, f"the call has no `{QUERY_ARGUMENT}` text"
    if not sqlite3.complete_statement(query.rstrip().rstrip(";") + ";") or query.strip().rstrip(";").count(";"):
        return None, "the query is not one complete statement"
    connection = connect()
    try:
        plan = connection.execute("EXPLAIN QUERY PLAN " + query).fetchall()
        lines = [f"plan: {detail}" for (_id, _parent, _unused, detail) in plan] or ["plan: (none)"]
        counted = COUNTED.match(query.strip().rstrip(";"))
        if counted:
            table, where = counted.group(1), counted.group(2)
            (rows,) = connection.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()
            lines.append(f"rows its WHERE clause matches now in {table}: {rows}")
        return "text", "\n".join(lines) + "\n"
    except sqlite3.Error as err:
        return None, f"SQLite cannot plan it: {err}"
    finally:
        connection.close()


for line in sys.stdin:
    try:
        question = json.loads(line)
        kind, text = preview(question.get("arguments") or {})
    except (ValueError, TypeError) as err:
        print(f"sql_preview: cannot read a question: {err}", file=sys.stderr)
        continue
    reply = {"id": question.get("id")}
    if kind is None:
        reply["none"] = text
    else:
        reply.update(kind=kind, text=text)
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
