"""Synthetic run-log records that follow the schema, for benchmarks and panel tests.

No torch: this is a stand-in job that writes records as fast as asked (e.g. 20,000 steps
for the memory figure) through the real RunWriter, to stdout and a run file, so the panel's
real code path (QProcess -> parse -> RunModel -> plots) is exercised without training.
The numbers imitate dynamic loss scaling: the scale doubles after `growth_interval` clean
steps and halves on an overflow, which skips the step.

`quant=` adds the statistics of quantized linear layers (`QuantTensorStats`, for the
panel's Low precision page) as a low-precision recipe would report them:

- "fp8-delayed": FP8 with delayed per-tensor scaling (Transformer Engine's style: the
  scale comes from the largest amax of the previous `AMAX_HISTORY` statistics steps). One
  layer's input spikes 16x for a few steps: the lagging scale lets it saturate, and once
  the spike has passed the history keeps the scale too small, so more values flush;
- "fp8-dynamic": the same amaxes with current scaling (scale = 448 / amax of the step
  itself): nothing saturates (the side-by-side reference);
- "mxfp4": MXFP4 blocks of 32 with E8M0 scales: no per-tensor scale, the block scales by
  binade, flushed shares that grow with depth (most in the output gradients).

The numbers are invented but consistent (shares in [0, 1], scales that follow the rule).

    python -m fpexplorer.gui.training.synthetic --steps 20000 --out run.jsonl --stream
    python -m fpexplorer.gui.training.synthetic --steps 500 --quant fp8-delayed --out q.jsonl
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

from fpexplorer.training.config import SYNTHETIC_TASK
from fpexplorer.training.precision import find_precision_mode
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
    QuantTensorStats,
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


QUANT_RECIPES = ("fp8-delayed", "fp8-dynamic", "mxfp4")
AMAX_HISTORY = 16  # statistics steps a delayed scale looks back over
E4M3_MAX = 448.0  # float8_e4m3fn's largest finite value
E5M2_MAX = 57344.0  # float8_e5m2's largest finite value


def quant_layer_names(count: int) -> tuple[str, ...]:
    """Names of a small transformer's linears, as `named_modules` spells them."""
    names = []
    for block in range(count):
        kind = ("attn.wqkv", "attn.wo", "mlp.w1", "mlp.w2")[block % 4]
        names.append(f"blocks.{block // 4}.{kind}")
    return tuple(names)


class _QuantImitation:
    """Invents one statistics step's `QuantTensorStats` for every layer and role."""

    def __init__(self, recipe: str, layers: int, steps: int, rng: random.Random) -> None:
        if recipe not in QUANT_RECIPES:
            raise ValueError(f"unknown quantization recipe {recipe!r}; one of {QUANT_RECIPES}")
        self.recipe = recipe
        self.names = quant_layer_names(layers)
        self.rng = rng
        self.spike_layer = self.names[len(self.names) // 2]
        self.spike_steps = range(int(0.55 * steps), int(0.55 * steps) + max(steps // 40, 3))
        self.history: dict[tuple[str, str], list[float]] = {}

    def amax(self, index: int, role: str, step: int) -> float:
        base = {"input": 2.0 - 0.25 * index, "weight": -2.0 - 0.1 * index,
                "grad_output": -13.0 - 0.4 * index}[role]  # fmt: skip
        value: float = 2.0 ** (
            base + 0.3 * math.sin(step / 17.0 + index) + self.rng.uniform(-0.1, 0.1)
        )
        if role == "input" and self.names[index] == self.spike_layer and step in self.spike_steps:
            value *= 16.0  # an outlier batch: this layer's input spikes
        return value

    def entries(self, step: int) -> tuple[QuantTensorStats, ...]:
        out = []
        for index, layer in enumerate(self.names):
            for role in ("input", "weight", "grad_output"):
                amax = self.amax(index, role, step)
                if self.recipe == "mxfp4":
                    out.append(self._block(index, layer, role, amax))
                else:
                    out.append(self._per_tensor(layer, role, amax))
        return tuple(out)

    def _per_tensor(self, layer: str, role: str, amax: float) -> QuantTensorStats:
        fmt, top = (
            ("float8_e5m2", E5M2_MAX) if role == "grad_output" else ("float8_e4m3fn", E4M3_MAX)
        )
        history = self.history.setdefault((layer, role), [])
        # Delayed: the largest amax of the previous steps (the step's own amax is not yet
        # known when its cast happens); current: the step's own amax.
        reference = max(history) if self.recipe == "fp8-delayed" and history else amax
        history.append(amax)
        del history[:-AMAX_HISTORY]
        scale = top / reference
        ratio = amax / reference  # > 1: values above the scaled range saturate
        saturated = min(0.02 * math.log2(ratio), 1.0) if ratio > 1 else 0.0
        # A scale set by an old, larger amax leaves the small values below the format's
        # subnormals: the flushed share grows with the lost headroom.
        flushed = min(1e-4 * 2.0 ** max(-math.log2(ratio), 0.0), 1.0)
        base = 31.0 if fmt == "float8_e4m3fn" else 25.0
        sqnr = base - (5.0 * math.log2(ratio) if ratio > 1 else 0.0) + self.rng.uniform(-0.4, 0.4)
        return QuantTensorStats(
            layer=layer, role=role, format=fmt, amax=amax, scale=scale,
            saturated=saturated, flushed=flushed, sqnr_db=max(sqnr, 1.0),
        )  # fmt: skip

    def _block(self, index: int, layer: str, role: str, amax: float) -> QuantTensorStats:
        # E8M0 block scales: a power of two per block of 32, about amax_block / 4 (E2M1's
        # largest binade); the blocks spread over a few binades under the tensor's amax.
        top = math.floor(math.log2(amax)) - 2
        blocks = 4096 if role != "weight" else 2048
        weights = [0.5**k for k in range(8)]
        total = sum(weights)
        counts = [int(blocks * w / total) for w in weights][::-1]
        depth = index / max(len(self.names) - 1, 1)
        share = {"input": 0.01 + 0.03 * depth, "weight": 0.04, "grad_output": 0.12 + 0.2 * depth}
        flushed = share[role] * self.rng.uniform(0.95, 1.05)
        return QuantTensorStats(
            layer=layer, role=role, format="float4_e2m1fn", amax=amax, scale=None,
            scale_hist=Histogram(lo=top - 7, counts=tuple(counts)),
            saturated=0.0, flushed=min(flushed, 1.0),
            sqnr_db=15.5 - 8.0 * flushed + self.rng.uniform(-0.3, 0.3),
        )  # fmt: skip


def synthetic_records(
    steps: int,
    *,
    precision: str = "fp16",
    stats_every: int = 10,
    growth_interval: int = 200,
    seed: int = 0,
    overflow_every: int = 997,
    quant: str | None = None,
    quant_layers: int = 6,
) -> Iterator[Record]:
    """header, `steps` step records, end — all plausible and within the schema.

    `quant`: one of QUANT_RECIPES adds quantized-layer statistics for `quant_layers`
    linears on every statistics step (see the module docstring)."""
    rng = random.Random(seed)
    imitation = (
        _QuantImitation(quant, quant_layers, steps, random.Random(seed + 1))
        if quant is not None
        else None
    )
    config = {
        "task": SYNTHETIC_TASK,
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
    if quant is not None and quant.startswith("fp8"):
        config["fp8_scaling"] = quant.removeprefix("fp8-")
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
    # A mode this version's table lacks (a newer recipe named in a test) runs unscaled.
    mode = find_precision_mode(precision)
    dynamic = mode is not None and mode.scaler == "dynamic"
    master_weights = mode is None or mode.master_weights
    scale = 65536.0 if dynamic else 1.0
    tracker = 0
    started = time.perf_counter()
    for step in range(steps):
        # Gradients shrink as the loss falls; an occasional spike overflows at the scale.
        grad_log2 = -12.0 - 6.0 * step / max(steps, 1)
        # Spikes overflow now and then; and as a real scaler's, once the scale has grown
        # until the largest scaled gradient, 2^(grad_log2 + 4) times the scale, passes
        # FP16's largest value (without this the scale grew to infinity after some 250,000
        # steps, and the next statistics step raised OverflowError).
        saturated = grad_log2 + 4 + math.log2(scale) >= 16
        overflow = dynamic and (step % overflow_every == overflow_every - 1 or saturated)
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
                    share=0.05 if master_weights else 0.3,
                    kind="fp16_would_lose" if master_weights else "actual",
                ),
                memory=Memory(
                    params={"float32": 49380},
                    grads={"float32": 49380},
                    optimizer={"float32": 49380},
                    activations={"float16": 131072, "float32": 8192},
                    peak_device=None,
                ),
                quant=imitation.entries(step) if imitation is not None else (),
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
    parser.add_argument(
        "--precision", default=None, help="default: the --quant recipe's mode, else fp16"
    )
    parser.add_argument("--stats-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quant", choices=QUANT_RECIPES, default=None)
    parser.add_argument("--quant-layers", type=int, default=6)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between steps")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    # A demo of FP8 or MXFP4 layers labelled "fp16" reads as a run that had none.
    quant_mode = args.quant.split("-")[0] if args.quant else "fp16"
    with RunWriter(args.out, echo=sys.stdout if args.stream else None) as writer:
        for record in synthetic_records(
            args.steps,
            precision=args.precision or quant_mode,
            stats_every=args.stats_every,
            seed=args.seed,
            quant=args.quant,
            quant_layers=args.quant_layers,
        ):
            writer.write(record)
            if args.delay and isinstance(record, StepRecord):
                time.sleep(args.delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
