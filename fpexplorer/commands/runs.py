"""`fpexplorer runs`: read run logs written by `fpexplorer train` or the monitor API.

Every verb streams each log once (plus a short re-read of its last tenth for the final
loss): memory stays the same whatever the size of the files.
"""

from __future__ import annotations

import argparse
import json

HELP = "summarize, compare and check run logs (JSON Lines from `fpexplorer train`)"

# `runs check` exit statuses: 2 is the CLI's usage error.
EXIT_OK = 0
EXIT_DAMAGED = 1  # a log has problems (damaged lines, a newer schema, unreadable)
EXIT_INCOMPLETE = 3  # a log has no end record (the job was killed, or still runs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    summarize = verbs.add_parser("summarize", help="print a summary of each run")
    summarize.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    summarize.add_argument("--json", action="store_true", help="print the summaries as JSON")
    compare = verbs.add_parser(
        "compare", help="one Markdown table row per run (file, task): loss, zeros, skips, scale"
    )
    compare.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    check = verbs.add_parser(
        "check",
        help=(
            f"report damage in run logs; exit status {EXIT_DAMAGED} when any has problems, "
            f"{EXIT_INCOMPLETE} when any lacks its end record (killed), else {EXIT_OK}"
        ),
    )
    check.add_argument("runs", nargs="+", metavar="RUN.jsonl")


def run(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from fpexplorer.errors import UsageError
    from fpexplorer.training.runlog import encode_json_line
    from fpexplorer.training.summary import format_summary, format_table, summarize_file

    for name in args.runs:
        if not Path(name).is_file():
            raise UsageError(f"no such run log: {name}")
    if args.verb == "check":
        status = EXIT_OK
        for name in args.runs:
            summary = summarize_file(name)
            problems = summary.problems
            if problems:
                state = f"{len(problems)} problem(s)"
            elif not summary.complete:
                state = "not ok: no end record (the job was killed, or still runs)"
            else:
                state = "ok"
            print(f"{summary.path}: {summary.steps} steps, {summary.status}, {state}")
            for problem in problems:
                print(f"  {problem}")
            if problems:
                status = EXIT_DAMAGED
            elif not summary.complete and status == EXIT_OK:
                status = EXIT_INCOMPLETE
        return status
    if args.verb == "compare":
        print(format_table([summarize_file(name) for name in args.runs]))
        return 0
    for index, name in enumerate(args.runs):
        summary = summarize_file(name)  # one at a time: printed, then let go
        if args.json:
            print(json.dumps(json.loads(encode_json_line(dataclasses.asdict(summary))), indent=1))
        else:
            print(("\n" if index else "") + format_summary(summary))
    return 0
