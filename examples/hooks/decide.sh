#!/bin/sh
# An example decision hook for hintgate, in plain shell, run once per call:
#
#   [gateway]
#   decide_command = ["/path/to/decide.sh"]
#   decide_command_mode = "per-call"
#
# hintgate writes one JSON object (the question, see
# docs/hook-request.schema.json) to its input and closes it; the hook writes
# one JSON object (its answer, docs/hook-answer.schema.json) and exits. A
# per-call hook may leave out the question's `id`.
#
# What this one decides: nothing that mentions `rm -rf` or `DROP TABLE`
# runs; while a change freeze is on (the file named by $HINTGATE_FREEZE
# exists), every other call is asked about; everything else is left to
# hintgate's own steps. It matches text rather than parsing JSON, which is
# coarse; a hook that needs to look at one field is better written in a
# language that reads JSON (see decide.py).

question=$(cat)

case $question in
  *'rm -rf'* | *'DROP TABLE'* | *'drop table'*)
    printf '%s\n' '{"verdict": "deny", "reason": "the arguments hold a destructive command"}'
    exit 0
    ;;
esac

if [ -n "${HINTGATE_FREEZE:-}" ] && [ -e "$HINTGATE_FREEZE" ]; then
  printf '%s\n' '{"verdict": "ask", "reason": "a change freeze is on"}'
  exit 0
fi

printf '%s\n' '{"verdict": "abstain"}'
