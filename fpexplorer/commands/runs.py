"""`fpexplorer runs`: read run logs written by `fpexplorer train` or the monitor API."""

from __future__ import annotations

import argparse
import json

HELP = "summarize, compare and check run logs (JSON Lines from `fpexplorer train`)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    summarize = verbs.add_parser("summarize", help="print a summary of each run")
    summarize.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    summarize.add_argument("--json", action="store_true", help="print the summaries as JSON")
    compare = verbs.add_parser(
        "compare", help="one Markdown table row per run: loss, zeros, skipped steps, scale"
    )
    compare.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    check = verbs.add_parser(
        "check", help="report damage in run logs; exit status 1 when any has problems"
    )
    check.add_argument("runs", nargs="+", metavar="RUN.jsonl")


def run(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from fpexplorer.cli import UsageError
    from fpexplorer.training.runlog import load_run
    from fpexplorer.training.summary import format_summary, format_table, summarize

    for name in args.runs:
        if not Path(name).is_file():
            raise UsageError(f"no such run log: {name}")
    loaded = [load_run(name) for name in args.runs]
    if args.verb == "check":
        bad = 0
        for run_log in loaded:
            state = "ok" if not run_log.problems else f"{len(run_log.problems)} problem(s)"
            print(f"{run_log.path}: {len(run_log.steps)} steps, {run_log.status}, {state}")
            for problem in run_log.problems:
                print(f"  {problem}")
            bad += bool(run_log.problems)
        return 1 if bad else 0
    summaries = [summarize(run_log) for run_log in loaded]
    if args.verb == "compare":
        print(format_table(summaries))
        return 0
    if args.json:
        from fpexplorer.training.runlog import encode_json_line

        for summary in summaries:
            print(json.dumps(json.loads(encode_json_line(dataclasses.asdict(summary))), indent=1))
        return 0
    print("\n\n".join(format_summary(summary) for summary in summaries))
    return 0
