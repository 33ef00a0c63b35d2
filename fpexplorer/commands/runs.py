"""`fpexplorer runs`: read run logs written by `fpexplorer train` or the monitor API.

Every verb streams each log once (plus a short re-read of its last tenth for the final
loss): memory stays the same whatever the size of the files.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

HELP = "summarize, compare and check run logs (JSON Lines from `fpexplorer train`)"

# `runs check` exit statuses: 2 is the CLI's usage error.
EXIT_OK = 0
EXIT_DAMAGED = 1  # a log has problems (damaged lines, a newer schema, unreadable)
EXIT_INCOMPLETE = 3  # a log has no end record (the job was killed, or still runs)
# `runs summarize` and `compare`: a file named holds no run this fpexplorer can read (not
# a run log, empty, a newer schema, unreadable); the others are still printed.
EXIT_NOT_READ = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    summarize = verbs.add_parser(
        "summarize",
        help=f"print a summary of each run; exit status {EXIT_NOT_READ} when a file holds no "
        "run this fpexplorer can read (said in one line each)",
    )
    summarize.add_argument("runs", nargs="+", metavar="RUN.jsonl|DIR")
    summarize.add_argument("--json", action="store_true", help="print the summaries as JSON")
    compare = verbs.add_parser(
        "compare",
        help="one Markdown table row per run (file, task): loss, zeros, skips, scale; exit "
        f"status {EXIT_NOT_READ} when a file holds no run this fpexplorer can read",
    )
    compare.add_argument("runs", nargs="+", metavar="RUN.jsonl|DIR")
    check = verbs.add_parser(
        "check",
        help=(
            f"report damage in run logs; exit status {EXIT_DAMAGED} when any has problems, "
            f"{EXIT_INCOMPLETE} when any lacks its end record (killed), else {EXIT_OK}"
        ),
    )
    check.add_argument("runs", nargs="+", metavar="RUN.jsonl|DIR")
    replay = verbs.add_parser(
        "replay-scaler",
        help="predict the loss scale and skipped steps of an FP16 run under another scaler "
        "policy or other settings, from its logged gradient amax",
        description="Without --scaler: the run's own policy and settings, the options given "
        "changed. With --scaler: that policy's defaults, the options given changed.",
    )
    replay.add_argument("runs", nargs=1, metavar="RUN.jsonl|DIR")
    _add_scaler_arguments(replay)


# The TrainConfig fields that make a loss-scaling policy: replay-scaler takes them with the
# flags, types, choices and help `fpexplorer train` has (declared once, in TrainConfig).
SCALER_FIELDS = (
    "scaler", "init_scale", "growth_factor", "backoff_factor", "growth_interval",
    "hysteresis", "min_scale", "consecutive_hysteresis",
)  # fmt: skip


def _add_scaler_arguments(parser: argparse.ArgumentParser) -> None:
    from fpexplorer.training.config import option_flag, train_options

    kinds: dict[str, type] = {"int": int, "float": float}
    for name, spec, _default in train_options():
        if name not in SCALER_FIELDS:
            continue
        if spec.kind == "flag":
            parser.add_argument(option_flag(name), action="store_true", default=None,
                                help=spec.help)  # fmt: skip
            continue
        extra: dict[str, object] = {"type": kinds[spec.kind]} if spec.kind in kinds else {}
        if spec.kind == "choice":
            extra["choices"] = [choice.name for choice in spec.choices]
        parser.add_argument(
            option_flag(name), dest=name, default=None, help=f"{spec.help} (default: the run's)",
            **extra,  # type: ignore[arg-type]
        )  # fmt: skip


def _replay_scaler(args: argparse.Namespace, path: Path) -> int:
    """Stream the run once: its header gives the logged settings, each step is replayed."""
    import dataclasses

    from fpexplorer.errors import UsageError
    from fpexplorer.training.config import scaler_settings_problems
    from fpexplorer.training.records import EndRecord, HeaderRecord, StepRecord
    from fpexplorer.training.replay_scaler import ScalerReplay, format_replay
    from fpexplorer.training.runlog import READ_CHUNK_BYTES, RecordStream
    from fpexplorer.training.scaler_rules import resolve_settings, settings_from_config
    from fpexplorer.training.summary import no_run_reason, steps_text

    given = {name: getattr(args, name) for name in SCALER_FIELDS if name != "scaler"}
    stream = RecordStream()
    replay: ScalerReplay | None = None
    logged = None
    ended = False
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(READ_CHUNK_BYTES)
            records = stream.feed(chunk) if chunk else stream.finish()
            for record in records:
                if isinstance(record, HeaderRecord) and replay is None:
                    logged = settings_from_config(record.config)
                    if args.scaler is not None:
                        settings = resolve_settings(args.scaler, **given)
                    elif logged is not None:
                        chosen = {k: v for k, v in given.items() if v is not None}
                        settings = dataclasses.replace(logged, **chosen)
                    else:
                        raise UsageError(
                            f"{path}: no dynamic loss scaler in this run "
                            f"(precision {record.precision or '?'}): name one with --scaler"
                        )
                    problems = scaler_settings_problems(settings)
                    if problems:
                        # Say whose setting is wrong: the option given, or the run's own.
                        texts = [
                            text
                            if given.get(name) is not None
                            else f"{path}: the run's own setting: {text}"
                            for name, text in problems.items()
                        ]
                        raise UsageError("; ".join(texts))
                    replay = ScalerReplay(settings)
                elif isinstance(record, StepRecord):
                    if replay is None:
                        raise UsageError(f"{path}: no header record before the steps")
                    if record.grad_amax is None and replay.steps == 0:
                        raise UsageError(
                            f"{path}: its steps carry no gradient amax (a run without a loss "
                            "scale, or from an older fpexplorer): nothing to replay from"
                        )
                    replay.add(record)
                elif isinstance(record, EndRecord):
                    ended = True
            if not chunk:
                break
    if replay is None:
        if stream.refused_schema is not None or not stream.bytes_fed:
            raise UsageError(f"{path}: {no_run_reason(stream.refused_schema, stream.bytes_fed)}")
        raise UsageError(f"{path}: no header record: not a run log")
    print(f"{path}: {steps_text(replay.steps)}")
    print(format_replay(replay, logged))
    if not ended:
        print("no end record: the job was killed or still runs (its logged steps replayed)")
    for problem in stream.problems:
        print(f"  {problem}")
    return 0


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import sys
    from pathlib import Path

    from fpexplorer.errors import UsageError
    from fpexplorer.training.ranked import (
        NoRunError,
        find_run,
        format_ranked,
        missing_rank_logs,
        summarize_ranked,
    )
    from fpexplorer.training.runlog import encode_json_line
    from fpexplorer.training.summary import (
        RunSummary,
        format_summary,
        format_table,
        incomplete_reason,
        steps_text,
        summarize_file,
    )

    # A run of several ranks (a folder, its merged log or a rank's) stands for all its logs.
    try:
        runs = [find_run(name) for name in args.runs]
    except NoRunError as error:
        raise UsageError(str(error)) from None
    if args.verb == "replay-scaler":
        # A log named is replayed; a folder, from its run's merged log (the loss scale is
        # the same on every rank).
        given = Path(args.runs[0])
        path = given if given.is_file() else runs[0].merged
        if not path.is_file():
            raise UsageError(f"no such run log: {path}")
        return _replay_scaler(args, path)
    names = [str(path) for run in runs for path in (run.merged, *run.ranks)]
    if args.verb == "check":
        status = EXIT_OK
        for name in names:
            summary = summarize_file(name)
            problems = summary.problems
            if summary.unreadable is not None:
                print(f"{summary.path}: {summary.unreadable}, {summary.problem_count} problem(s)")
                for problem in problems:
                    print(f"  {problem}")
                status = EXIT_DAMAGED
                continue
            if problems:
                state = f"{summary.problem_count} problem(s)"
                if summary.torn_last_line:  # the problems do not say it any more
                    state += f"; {incomplete_reason(summary)}"
            elif not summary.complete:
                state = f"not ok: {incomplete_reason(summary)}"
            else:
                state = "ok"
            print(f"{summary.path}: {steps_text(summary.steps)}, {summary.status}, {state}")
            for problem in problems:
                print(f"  {problem}")
            if problems:
                status = EXIT_DAMAGED
            elif not summary.complete and status == EXIT_OK:
                status = EXIT_INCOMPLETE
        for files in runs:
            # A rank's log gone from the run's folder: "every log of the run" was ok without it.
            missing, world_size = missing_rank_logs(files)
            for path in missing:
                print(f"{path}: missing (the merged log's run had {world_size} ranks)")
                status = EXIT_DAMAGED
        return status
    status = EXIT_OK

    def readable(summary: RunSummary) -> bool:
        """Whether `summary` is of a run; else it is named on stderr in one line."""
        nonlocal status
        if summary.unreadable is None:
            return True
        sys.stderr.write(f"fpexplorer runs: error: {summary.path}: {summary.unreadable}\n")
        status = EXIT_NOT_READ
        return False

    if args.verb == "compare":
        summaries = [s for s in map(summarize_file, names) if readable(s)]
        if summaries:
            print(format_table(summaries))
        return status
    printed = 0
    for files in runs:
        if files.ranked:
            ranked = summarize_ranked(files)
            for item in (ranked.merged, *ranked.ranks):  # each named on stderr, exit 1
                readable(item)
            if args.json:
                print(json.dumps(json.loads(encode_json_line(ranked.to_dict())), indent=1))
            else:
                merged = ranked.merged
                head = (
                    format_summary(merged)
                    if merged.unreadable is None
                    # Its summary read "task ?", "incomplete after 0 steps (no end record:
                    # the job was killed...)" for a merged log that is not there.
                    else f"run        {merged.path}: not read ({merged.unreadable})"
                )
                text = format_ranked(ranked, head)
                print(("\n" if printed else "") + text)
            printed += 1
            continue
        summary = summarize_file(files.merged)  # one at a time: printed, then let go
        if not readable(summary):
            continue
        if args.json:
            print(json.dumps(json.loads(encode_json_line(dataclasses.asdict(summary))), indent=1))
        else:
            print(("\n" if printed else "") + format_summary(summary))
        printed += 1
    return status
