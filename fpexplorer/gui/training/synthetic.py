"""Synthetic run-log records that follow the schema, for benchmarks and panel tests.

No torch: this is a stand-in job that writes records as fast as asked (e.g. 20,000 steps
for the memory figure) through the real RunWriter, to stdout and a run file, so the panel's
real code path (QProcess -> parse -> RunModel -> plots) is exercised without training.
The numbers imitate dynamic loss scaling: the scale doubles after `growth_interval` clean
steps and halves on an overflow, which skips the step.

    python -m fpexplorer.gui.training.synthetic --steps 20000 --out run.jsonl --stream
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

from fpexplorer.training.precision import precision_mode
from fpexplorer.training.records import (
    SCHEMA_VERSION,
    DeviceInfo,
    EndRecord,
    FormatRange,
    FormatShares,
    HeaderRecord,
    Histogram,
    LayerStats,
    LostUpdates,
    Memory,
    ModelInfo,
    Record,
    StepRecord,
    StepStats,
)
from fpexplorer.training.runlog import RunWriter

LAYERS = ("embed", "block0.fc1", "block0.fc2", "block1.fc1", "block1.fc2", "head")
FORMATS = {
    "float16": FormatRange(max=65504.0, min_normal=2.0**-14, min_subnormal=2.0**-24),
    "bfloat16": FormatRange(
        max=float.fromhex("0x1.fep127"), min_normal=2.0**-126, min_subnormal=2.0**-133
    ),
    "float8_e4m3fn": FormatRange(max=448.0, min_normal=2.0**-6, min_subnormal=2.0**-9),
    "float8_e5m2": FormatRange(max=57344.0, min_normal=2.0**-14, min_subnormal=2.0**-16),
}


def _histogram(
    rng: random.Random, centre: float, spread: float, total: int, **specials: Any
) -> Histogram:
    lo = math.floor(centre - 4 * spread)
    width = int(8 * spread) + 2
    weights = [math.exp(-(((lo + i + 0.5) - centre) ** 2) / (2 * spread**2)) for i in range(width)]
    norm = sum(weights)
    counts = tuple(int(total * w / norm * rng.uniform(0.9, 1.1)) for w in weights)
    zero = rng.randrange(0, total // 100 + 1)
    return Histogram(lo=lo, counts=counts, zero=zero, **specials)


def synthetic_records(
    steps: int,
    *,
    precision: str = "fp16",
    stats_every: int = 10,
    growth_interval: int = 200,
    seed: int = 0,
    overflow_every: int = 997,
) -> Iterator[Record]:
    """header, `steps` step records, end — all plausible and within the schema."""
    rng = random.Random(seed)
    config = {
        "task": "synthetic",
        "precision": precision,
        "device": "cpu",
        "steps": steps,
        "lr": 0.01,
        "batch_size": 64,
        "optimizer": "sgd",
        "seed": seed,
        "stats_every": stats_every,
        "init_scale": 65536.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": growth_interval,
        "loss_scale": 1024.0,
        "out": None,
        "stream": True,
    }
    yield HeaderRecord(
        schema=SCHEMA_VERSION,
        fpexplorer_version="synthetic",
        torch_version=None,
        started=time.strftime("%Y-%m-%dT%H:%M:%S"),
        config=config,
        device=DeviceInfo(type="cpu", name="synthetic"),
        model=ModelInfo(params=12345, layers=LAYERS),
        formats=FORMATS,
    )
    mode = precision_mode(precision)
    dynamic = mode.scaler == "dynamic"
    scale = 65536.0 if dynamic else 1.0
    tracker = 0
    started = time.perf_counter()
    for step in range(steps):
        # Gradients shrink as the loss falls; an occasional spike overflows at the scale.
        grad_log2 = -12.0 - 6.0 * step / max(steps, 1)
        overflow = dynamic and step % overflow_every == overflow_every - 1
        skipped = overflow
        loss = 2.5 * math.exp(-3.0 * step / max(steps, 1)) + 0.05 * rng.random()
        elapsed = time.perf_counter() - started
        stats: StepStats | None = None
        if stats_every and step % stats_every == 0:
            log2_scale = math.log2(scale)
            # Parameter gradients are recorded unscaled, activation gradients scaled.
            specials = {"inf": 17, "nan": 3} if overflow else {}
            grad_hist = _histogram(rng, grad_log2, 3.0, 12345, **specials)
            act_hist = _histogram(rng, grad_log2 + log2_scale - 4.0, 4.0, 50000, dtype="float16")
            layers = []
            for index, name in enumerate(LAYERS):
                amax = 2.0 ** (grad_log2 + log2_scale + 4 - index)
                bad = overflow and index >= 4
                layers.append(
                    LayerStats(
                        name=name,
                        grad_norm=amax / 10,
                        amax=math.inf if bad else amax,
                        headroom_log2=None if bad else math.log2(65504.0 / amax),
                        underflow_share=min(1.0, 0.02 * index),
                        nonfinite=bad,
                    )
                )
            stats = StepStats(
                grad_hist=grad_hist,
                act_hist=act_hist,
                act_zero_share=0.01,
                layers=tuple(layers),
                first_nonfinite="head" if overflow else None,
                format_shares={
                    name: FormatShares(underflow=0.01, subnormal=0.02, overflow=0.0)
                    for name in FORMATS
                },
                lost_updates=LostUpdates(
                    share=0.05 if mode.master_weights else 0.3,
                    kind="fp16_would_lose" if mode.master_weights else "actual",
                ),
                memory=Memory(
                    params={"float32": 49380},
                    grads={"float32": 49380},
                    optimizer={"float32": 49380},
                    activations={"float16": 131072, "float32": 8192},
                    peak_device=None,
                ),
            )
        yield StepRecord(
            step=step,
            loss=math.nan if overflow else loss,
            scale=scale,
            skipped=skipped,
            growth_tracker=tracker,
            lr=0.01,
            grad_norm=math.inf if overflow else 2.0**grad_log2 * 100,
            steps_per_s=(step + 1) / elapsed if elapsed > 0 else 0.0,
            time=elapsed,
            stats=stats,
        )
        if dynamic:
            if overflow:
                scale *= 0.5
                tracker = 0
            else:
                tracker += 1
                if tracker == growth_interval:
                    scale *= 2.0
                    tracker = 0
    yield EndRecord(
        status="completed", error=None, steps=steps, elapsed=time.perf_counter() - started
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--stats-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between steps")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    with RunWriter(args.out, echo=sys.stdout if args.stream else None) as writer:
        for record in synthetic_records(
            args.steps, precision=args.precision, stats_every=args.stats_every, seed=args.seed
        ):
            writer.write(record)
            if args.delay and isinstance(record, StepRecord):
                time.sleep(args.delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
