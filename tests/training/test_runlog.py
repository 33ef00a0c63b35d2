"""The run log: round trip, non-finite floats, incremental reading, damage reported not raised."""

from __future__ import annotations

import json
import math
from pathlib import Path

from fpexplorer.training.runlog import (
    SCHEMA_VERSION,
    EndRecord,
    HeaderRecord,
    RunReader,
    RunWriter,
    StepRecord,
    encode_record,
    load_run,
    parse_record,
)

HEADER = {
    "type": "header", "schema": SCHEMA_VERSION, "fpexplorer": "0.1.0", "torch": "2.13.0",
    "started": "2026-01-01T00:00:00+00:00",
    "config": {"task": "mlp", "precision": "fp16", "init_scale": 65536.0},
    "device": {"type": "cpu", "name": "x86_64"},
    "model": {"params": 10, "layers": ["fc1", "fc2"]},
    "formats": {"float16": {"max": 65504.0, "min_normal": 2.0**-14, "min_subnormal": 2.0**-24}},
}  # fmt: skip


def _step(i: int, loss: float = 1.0, **extra: object) -> dict[str, object]:
    return {
        "type": "step", "step": i, "loss": loss, "scale": 65536.0, "skipped": False,
        "growth_tracker": i, "lr": 0.1, "grad_norm": 0.5, "steps_per_s": 10.0, "time": 0.1 * i,
        **extra,
    }  # fmt: skip


FULL_STATS = {
    "grad_hist": {"lo": -30, "counts": [1, 0, 2], "zero": 3, "inf": 0, "nan": 1},
    "act_hist": {"lo": -20, "counts": [4], "zero": 5, "inf": 1, "nan": 0, "dtype": "float16"},
    "act_zero_share": 0.5,
    "layers": [{"name": "fc1", "grad_norm": 0.1, "amax": 2.0, "headroom_log2": 14.9,
                "underflow_share": 0.25, "nonfinite": False},
               {"name": "fc2", "grad_norm": "NaN", "amax": "Infinity", "headroom_log2": None,
                "underflow_share": 0.0, "nonfinite": True}],
    "first_nonfinite": "fc2",
    "format_shares": {"float16": {"underflow": 0.1, "subnormal": 0.2, "overflow": 0.0}},
    "lost_updates": {"share": 0.3, "kind": "fp16_would_lose"},
    "memory": {"params": {"float32": 40}, "grads": {"float32": 40}, "optimizer": {},
               "activations": {"float16": 100}, "peak_device": None},
}  # fmt: skip


def test_round_trip_with_non_finite_floats(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with RunWriter(path) as writer:
        writer.write(HEADER)
        writer.write(_step(0, loss=math.nan, **FULL_STATS))
        writer.write(_step(1, loss=math.inf))
        writer.write({"type": "end", "status": "completed", "error": None, "steps": 2,
                      "elapsed": 0.5})  # fmt: skip
    text = path.read_text()
    # Strict JSON: every line parses with non-finite constants refused.
    for line in text.splitlines():
        json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert '"loss":"NaN"' in text and '"loss":"Infinity"' in text
    run = load_run(path)
    assert run.problems == ()
    assert isinstance(run.header, HeaderRecord)
    assert run.header.layers == ("fc1", "fc2") and run.header.params == 10
    assert run.header.precision == "fp16"
    assert run.header.formats["float16"]["min_subnormal"] == 2.0**-24
    first, second = run.steps
    assert math.isnan(first.loss) and second.loss == math.inf
    assert first.grad_hist is not None and first.grad_hist.counts == (1, 0, 2)
    assert first.grad_hist.total == 7 and list(first.grad_hist.exponents) == [-30, -29, -28]
    assert first.act_hist is not None and first.act_hist.dtype == "float16"
    assert first.layers[1].amax == math.inf and math.isnan(first.layers[1].grad_norm)
    assert first.layers[1].headroom_log2 is None and first.layers[1].nonfinite
    assert first.first_nonfinite == "fc2"
    assert first.format_shares["float16"].subnormal == 0.2
    assert first.lost_updates is not None and first.lost_updates.kind == "fp16_would_lose"
    assert first.memory is not None and first.memory.total == 180
    assert first.has_stats and not second.has_stats
    assert run.end is not None and run.status == "completed" and run.end.steps == 2
    # .raw keeps the line as decoded, so fields this version does not know survive.
    assert first.raw["grad_hist"] == FULL_STATS["grad_hist"]


def test_parse_record_accepts_lines_dicts_and_ignores_unknown_types() -> None:
    line = encode_record(_step(3, extra_field=[1, 2]))
    record = parse_record(line)
    assert isinstance(record, StepRecord) and record.step == 3
    assert record.raw["extra_field"] == [1, 2]
    assert parse_record(json.loads(line)) == record
    assert parse_record('{"type": "note", "text": "from the future"}') is None
    end = parse_record({"type": "end", "status": "failed", "error": "boom", "steps": 0,
                        "elapsed": 0})  # fmt: skip
    assert isinstance(end, EndRecord) and end.error == "boom"


def test_reader_is_incremental_and_keeps_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    reader = RunReader(path)
    assert reader.read_new() == [] and reader.problems  # no file yet: reported
    reader.problems.clear()
    lines = [encode_record(HEADER), encode_record(_step(0)), encode_record(_step(1))]
    with open(path, "w") as handle:
        handle.write(lines[0] + "\n" + lines[1][:20])
        handle.flush()
        first = reader.read_new()
        assert [type(r) for r in first] == [HeaderRecord] and reader.partial_line
        handle.write(lines[1][20:] + "\n" + lines[2] + "\n")
        handle.flush()
        second = reader.read_new()
    assert [r.step for r in second if isinstance(r, StepRecord)] == [0, 1]
    assert reader.read_new() == [] and reader.problems == []


def test_torn_last_line_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(encode_record(HEADER) + "\n" + encode_record(_step(0)) + "\n"
                    + encode_record(_step(1))[:-7])  # fmt: skip
    run = load_run(path)
    assert len(run.steps) == 1 and run.end is None and run.status == "incomplete"
    assert run.problems == ("line 3: torn last line ignored",)


def test_damage_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(
        b"\xff\xfe garbage\n"
        + encode_record(HEADER).encode() + b"\n"
        + b"[1, 2]\n"
        + b'{"type": "step", "loss": 1.0}\n'
        + b'{"type": "step", "step": 0, "loss": "one"}\n'
        + encode_record(_step(0)).encode() + b"\n"
        + b'{"type": "end", "status": "exploded"}\n'
    )  # fmt: skip
    run = load_run(path)
    assert len(run.steps) == 1 and run.header is not None and run.end is None
    assert len(run.problems) == 5
    assert all(problem.startswith("line ") for problem in run.problems)
    assert "missing field 'step'" in run.problems[2]


def test_missing_and_empty_files(tmp_path: Path) -> None:
    missing = load_run(tmp_path / "nope.jsonl")
    assert missing.header is None and missing.problems and "cannot read" in missing.problems[0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert load_run(empty).problems == ("the file holds no records",)


def test_newer_schema_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(encode_record({**HEADER, "schema": SCHEMA_VERSION + 1}) + "\n")
    run = load_run(path)
    assert run.header is None and "newer than this reader" in run.problems[0]


def test_writer_survives_a_closed_echo_stream(tmp_path: Path) -> None:
    import io

    echo = io.StringIO()
    with RunWriter(tmp_path / "run.jsonl", echo=echo) as writer:
        writer.write(HEADER)
        echo.close()  # the reader went away
        writer.write(_step(0))
    run = load_run(tmp_path / "run.jsonl")
    assert run.header is not None and len(run.steps) == 1
