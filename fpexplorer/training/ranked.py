"""Runs of several ranks on disk: finding their logs, and what they say together.
Torch-free (the GUI and `fpexplorer runs` use it).

A torch.distributed run (`fpexplorer train --nproc-per-node N`, or a user's torchrun
script with `AmpMonitor`) leaves, in one folder, the merged log `RUN.jsonl` (written by
rank 0) and one log per rank, `RUN.rank-K.jsonl`. `find_run` accepts that folder, the
merged log or any rank's log, and names all of them. `summarize_ranked` reads each once
(constant memory, `summary.summarize_file`) plus the merged log's rank figures once more:
per-rank summaries, the merged one, the slowest rank (the straggler the job waited for)
and where the ranks disagreed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fpexplorer.formats.decimal import figure_text
from fpexplorer.training.records import EndRecord, HeaderRecord, StepRecord
from fpexplorer.training.runlog import RecordStream
from fpexplorer.training.summary import READ_CHUNK_BYTES, RunSummary, loss_text, summarize_file

_RANK_LOG = re.compile(r"^(?P<stem>.+)\.rank-(?P<rank>\d+)(?P<suffix>\.jsonl)$")


class NoRunError(ValueError):
    """A path that holds no run log (the message is one line)."""


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The logs of one run: the merged (or only) log, and each rank's own, by rank."""

    merged: Path
    ranks: tuple[Path, ...] = ()

    @property
    def ranked(self) -> bool:
        return bool(self.ranks)


def _rank_logs(merged: Path) -> tuple[Path, ...]:
    """The rank logs beside `merged` (none where its folder cannot be listed).

    Names are compared as strings before any Path is made: opening 500 logs of one
    folder looked through it 500 times, a Path per entry, 1.2 s for the lot."""
    found: dict[int, Path] = {}
    prefix = merged.stem + ".rank-"
    try:
        entries = os.scandir(merged.parent)
    except OSError:  # not a folder, or not listable (the log itself may still be readable)
        return ()
    with entries:
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            match = _RANK_LOG.match(entry.name)
            if match and match.group("stem") == merged.stem and entry.is_file():
                found[int(match.group("rank"))] = merged.parent / entry.name
    return tuple(found[rank] for rank in sorted(found))


def find_run(path: str | os.PathLike[str]) -> RunFiles:
    """The logs of the run at `path`: a run log, a rank's log, or a folder holding one
    run's logs. Raises NoRunError when there is none (or a folder holds several), or when
    `path` cannot be looked at (a folder without the permission to list it or pass it)."""
    try:
        return _find_run(Path(path))
    except NoRunError:
        raise
    except OSError as error:
        # Path.is_dir() raises for EACCES (it hides only "no such file" errors) and
        # iterdir() for a folder that cannot be listed: one line, not a traceback.
        raise NoRunError(f"cannot read {path}: {error.strerror or error}") from None


def _find_run(path: Path) -> RunFiles:
    if path.is_dir():
        files = [item for item in path.iterdir() if item.is_file()]
        stems = {
            match.group("stem")
            for item in files
            if (match := _RANK_LOG.match(item.name)) is not None
        }
        if not stems:
            logs = sorted(item for item in files if item.suffix == ".jsonl")
            if len(logs) == 1:
                return RunFiles(logs[0])
            if not logs:
                raise NoRunError(f"{path} holds no run log (no .jsonl file)" + _runs_below(path))
            names = ", ".join(item.name for item in logs[:3]) + (", ..." if len(logs) > 3 else "")
            raise NoRunError(
                f"{path} holds {len(logs)} .jsonl files ({names}) and no RUN.rank-K.jsonl: name one"
            )
        if len(stems) > 1:
            raise NoRunError(f"{path} holds several runs ({', '.join(sorted(stems))}): name one")
        path = path / f"{stems.pop()}.jsonl"
        return RunFiles(path, _rank_logs(path))
    match = _RANK_LOG.match(path.name)
    if match is not None and path.is_file():
        merged = path.with_name(match.group("stem") + match.group("suffix"))
        return RunFiles(merged, _rank_logs(merged))
    if not path.is_file():
        if path.is_symlink():  # is_file() follows the link: say where it went wrong
            raise NoRunError(f"{path} is a symbolic link to no file (a missing target or a loop)")
        if path.exists():  # a device, a FIFO: reading it could block or never end
            raise NoRunError(f"{path} is not a regular file")
        raise NoRunError(f"no such run log: {path}")
    return RunFiles(path, _rank_logs(path))


def _runs_below(path: Path) -> str:
    """'; its folders hold runs (a, b, ...): name one' for a folder of run folders (the
    run directory, where each run of several ranks gets a folder); else ''."""
    found: list[str] = []
    for folder in sorted(item for item in path.iterdir() if item.is_dir()):
        try:
            if any(item.suffix == ".jsonl" for item in folder.iterdir()):
                found.append(folder.name)
        except OSError:
            continue  # a folder that cannot be listed holds no run we can name
        if len(found) > 3:
            break
    if not found:
        return ""
    names = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    return f"; its folders hold runs ({names}): name one"


@dataclass(frozen=True, slots=True)
class RankDisagreements:
    """What the merged log's exchanged steps say about the ranks."""

    world_size: int
    exchanged_steps: int  # steps whose figures the ranks exchanged
    scale_mismatch_steps: int  # loss scales differed between ranks (a bug)
    skip_disagreement_steps: int  # some ranks skipped, others did not (a bug)
    # "rank R, layer L" -> steps on which the overflow started there (the lowest rank).
    first_overflow: tuple[tuple[str, int], ...]
    rank_ends: tuple[tuple[int, str, str | None], ...]  # (rank, status, error) from the end
    rank_steps_per_s: tuple[float, ...]  # mean steps/s of each rank over the exchanged steps


@dataclass(frozen=True, slots=True)
class RankedSummary:
    files: RunFiles
    merged: RunSummary
    ranks: tuple[RunSummary, ...]
    disagreements: RankDisagreements | None  # None: the merged log has no rank figures

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `runs summarize --json`: the merged summary, each rank's (with
        its log's path), the disagreements."""
        return {
            "merged": dataclasses.asdict(self.merged),
            "ranks": [dataclasses.asdict(summary) for summary in self.ranks],
            "disagreements": (
                dataclasses.asdict(self.disagreements) if self.disagreements else None
            ),
        }


def first_overflow_text(step: StepRecord) -> str | None:
    """'rank 3, layer 5.wo' for a merged step where an overflow started; else None."""
    ranks = step.ranks
    if ranks is None or ranks.first_nonfinite_rank is None:
        return None
    where = f"rank {ranks.first_nonfinite_rank}"
    if ranks.first_nonfinite_layer:
        where += f", layer {ranks.first_nonfinite_layer}"
    return where


def rank_disagreements(path: str | os.PathLike[str]) -> RankDisagreements | None:
    """One streaming pass over a merged log's rank figures (constant memory)."""
    world = 0
    exchanged = mismatches = disagreements = 0
    origins: Counter[str] = Counter()
    rate_sums: list[float] = []
    rate_counts: list[int] = []
    ends: tuple[tuple[int, str, str | None], ...] = ()
    stream = RecordStream()
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(READ_CHUNK_BYTES)
            for record in stream.feed(chunk) if chunk else stream.finish():
                if isinstance(record, HeaderRecord) and record.ranks is not None:
                    world = record.ranks.world_size
                elif isinstance(record, EndRecord):
                    ends = tuple((end.rank, end.status, end.error) for end in record.ranks)
                elif isinstance(record, StepRecord) and record.ranks is not None:
                    figures = record.ranks
                    exchanged += 1
                    mismatches += figures.scale_mismatch
                    disagreements += len(set(figures.skipped)) > 1
                    where = first_overflow_text(record)
                    if where is not None:
                        origins[where] += 1
                    if len(rate_sums) < len(figures.steps_per_s):
                        grow = len(figures.steps_per_s) - len(rate_sums)
                        rate_sums += [0.0] * grow
                        rate_counts += [0] * grow
                    for rank, rate in enumerate(figures.steps_per_s):
                        if math.isfinite(rate):
                            rate_sums[rank] += rate
                            rate_counts[rank] += 1
            if not chunk:
                break
    if not world and not exchanged:
        return None
    rates = tuple(s / c if c else math.nan for s, c in zip(rate_sums, rate_counts, strict=True))
    return RankDisagreements(
        world_size=world or len(rates),
        exchanged_steps=exchanged,
        scale_mismatch_steps=mismatches,
        skip_disagreement_steps=disagreements,
        first_overflow=tuple(origins.most_common()),
        rank_ends=ends,
        rank_steps_per_s=rates,
    )


def missing_rank_logs(files: RunFiles) -> tuple[tuple[Path, ...], int]:
    """(the rank logs the merged log's run had and its folder lacks, its world size): a rank
    log deleted or never copied is not among `files.ranks`, which are the logs found."""
    if not files.merged.is_file():
        return (), 0
    try:
        found = rank_disagreements(files.merged)
    except OSError:
        return (), 0  # the merged log's own check says why it cannot be read
    if found is None or found.world_size < 2:
        return (), 0
    merged = files.merged
    present = {path.name for path in files.ranks}
    expected = (merged.with_name(f"{merged.stem}.rank-{rank}{merged.suffix}")
                for rank in range(found.world_size))  # fmt: skip
    return tuple(path for path in expected if path.name not in present), found.world_size


def summarize_ranked(files: RunFiles) -> RankedSummary:
    """The merged summary, each rank's, and the ranks' disagreements."""
    merged = summarize_file(files.merged)
    ranks = tuple(summarize_file(path) for path in files.ranks)
    rates = [item.steps_per_s for item in ranks if math.isfinite(item.steps_per_s)]
    if rates and len(rates) == len(ranks):
        # The job moves at its slowest rank's pace; the merged log's times are rank 0's.
        merged = dataclasses.replace(merged, steps_per_s=min(rates))
    disagreements = None
    if files.merged.is_file():
        try:
            disagreements = rank_disagreements(files.merged)
        except OSError:
            disagreements = None  # summarize_file already reported why it cannot be read
    return RankedSummary(files, merged, ranks, disagreements)


def format_ranked(summary: RankedSummary, merged_text: str) -> str:
    """`merged_text` (the merged log's summary) followed by the ranks' part."""
    lines = [merged_text]
    found = summary.disagreements
    if found is not None:
        lines.append(
            f"ranks      {found.world_size} (figures exchanged on {found.exchanged_steps} "
            f"steps)   scale mismatches {found.scale_mismatch_steps}"
            f"   skip disagreements {found.skip_disagreement_steps}"
        )
        if found.first_overflow:
            text = ", ".join(f"{where} ({count})" for where, count in found.first_overflow[:5])
            lines.append(f"overflow   started on: {text}")
        if found.rank_ends:
            text = ", ".join(f"rank {rank} {status}" for rank, status, _ in found.rank_ends)
            lines.append(f"ended      {text}")
    header = "  rank  status      steps   steps/s  final loss  skipped  log"
    lines.append(header)
    # The straggler by the rate the table shows (each rank's steps over their time).
    rates = [(item.steps_per_s, index) for index, item in enumerate(summary.ranks)
             if math.isfinite(item.steps_per_s)]  # fmt: skip
    slowest = min(rates)[1] if len(rates) > 1 else None
    for index, (rank_summary, path) in enumerate(zip(summary.ranks, summary.files.ranks,
                                                     strict=True)):  # fmt: skip
        match = _RANK_LOG.match(path.name)
        rank = int(match.group("rank")) if match else -1
        rate = rank_summary.steps_per_s
        final = rank_summary.final_loss
        # A log that holds no run (not a run log, a newer schema...) is not "incomplete".
        status = "not read" if rank_summary.unreadable is not None else rank_summary.status
        lines.append(
            f"  {rank:>4}  {status:<10}  {rank_summary.steps:>5}"
            f"  {figure_text(rate, decimals=2) if math.isfinite(rate) else '-':>8}"
            f"  {loss_text(final) if math.isfinite(final) else '-':>10}"
            f"  {rank_summary.skipped_steps:>7}  {path.name}"
            + ("  <- slowest" if index == slowest else "")
            + (f": {rank_summary.unreadable}" if rank_summary.unreadable is not None else "")
        )
    return "\n".join(lines)
