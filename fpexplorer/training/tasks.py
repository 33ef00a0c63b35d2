"""Built-in training tasks and user task files. Needs torch.

Every task is seeded and deterministic, downloads nothing (data are generated, or read from
text that ships with Python), and is small enough that every precision mode runs at several
steps per second on a 2-core CPU, where FP16 matmuls are emulated and ~40x slower than FP32.

A user task is `path/to/file.py:factory`. `factory()` returns `(model, batches, loss_fn)`:
- `model`: a `torch.nn.Module`;
- `batches`: an iterable of `(inputs, target)` pairs (a list or a DataLoader is re-iterated
  when it runs out; a one-shot iterator ends the job when exhausted);
- `loss_fn(output, target)`: returns a scalar tensor.
The factory may accept any of the keyword arguments `seed`, `batch_size` and `device`.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fpexplorer.training.config import TASK_NAMES, TASK_SAMPLES, split_user_task

LossFn = Callable[[Any, Any], torch.Tensor]


class TaskError(Exception):
    """A task could not be built (bad file, factory missing, wrong return value)."""


@dataclass(frozen=True, slots=True)
class Task:
    """A model, an endless (or finite) stream of `(inputs, target)` batches and a loss."""

    name: str
    model: nn.Module
    batches: Iterator[tuple[Any, Any]]
    loss_fn: LossFn
    lr: float
    batch_size: int
    optimizer: str  # "sgd" | "adam"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class TaskSettingsError(ValueError):
    """Settings a built-in task cannot run with (found once its data exists): the run
    fails with this one line, without a traceback (there is no bug to trace)."""


def _sample_forever(
    inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Random batches without replacement within an epoch, reshuffled every epoch.

    Raises TaskSettingsError at once for a batch larger than the dataset: an epoch would
    hold no batch, and the loop below would reshuffle forever without yielding one."""
    count = inputs.shape[0]
    if batch_size > count:
        raise TaskSettingsError(
            f"the batch size {batch_size} is larger than the task's dataset ({count} samples)"
        )
    return _epochs(inputs, targets, batch_size, _generator(seed + 1))


def _epochs(
    inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    count = inputs.shape[0]
    while True:
        order = torch.randperm(count, generator=generator)
        for start in range(0, count - batch_size + 1, batch_size):
            index = order[start : start + batch_size]
            yield inputs[index], targets[index]


# -- mlp: two interleaved spirals --------------------------------------------------------


def make_mlp(seed: int, batch_size: int | None) -> Task:
    generator = _generator(seed)
    per_class = TASK_SAMPLES["mlp"] // 2
    t = torch.rand(per_class, generator=generator) * 3 * math.pi + 0.5
    points = []
    labels = []
    for label, sign in enumerate((1.0, -1.0)):
        xy = torch.stack([t * torch.cos(t), t * torch.sin(t)], dim=1) * sign / 10
        points.append(xy + 0.03 * torch.randn(per_class, 2, generator=generator))
        labels.append(torch.full((per_class,), label, dtype=torch.long))
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)
    )  # fmt: skip
    size = batch_size or 128
    batches = _sample_forever(torch.cat(points), torch.cat(labels), size, seed)
    return Task("mlp", model, batches, F.cross_entropy, lr=1e-2, batch_size=size, optimizer="adam")


# -- underflow: gradients below FP16's smallest subnormal -------------------------------


def make_underflow(seed: int, batch_size: int | None) -> Task:
    """A regression whose targets, and so whose errors, are small (e.g. a loss term with a
    small weight, or outputs in physical units): d loss / d output = 2 (y - t) / N is tiny,
    and it shrinks further through the tanh layers. Adam is invariant to gradient scale, so
    in FP32 the network trains as well as at any scale; in FP16 without loss scaling a large
    share of the activation gradients is below 2**-24 and becomes exactly zero."""
    generator = _generator(seed)
    features, width, outputs, samples = 32, UNDERFLOW_WIDTH, 16, TASK_SAMPLES["underflow"]
    inputs = torch.randn(samples, features, generator=generator)
    teacher = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, outputs))
    with torch.no_grad():
        for layer in teacher:
            if isinstance(layer, nn.Linear):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator))
                layer.weight.mul_(1.5 / math.sqrt(layer.in_features))
                layer.bias.zero_()
        targets = teacher(inputs) * UNDERFLOW_TARGET_SCALE
    torch.manual_seed(seed)
    head = nn.Linear(width, outputs)
    model = nn.Sequential(
        nn.Linear(features, width), nn.Tanh(),
        nn.Linear(width, width), nn.Tanh(),
        nn.Linear(width, width), nn.Tanh(),
        head,
    )  # fmt: skip
    with torch.no_grad():  # start near zero output: the errors are then the targets' size
        head.weight.mul_(UNDERFLOW_HEAD_INIT)
        head.bias.zero_()
    size = batch_size or 256
    batches = _sample_forever(inputs, targets, size, seed)
    return Task("underflow", model, batches, F.mse_loss, lr=1e-3, batch_size=size,
                optimizer="adam")  # fmt: skip


UNDERFLOW_TARGET_SCALE = 2.0**-10
# The output layer's initial weights are torch's default times this. With the default
# init the outputs start far from the tiny targets, the errors are large, and FP16
# without loss scaling loses little (benchmarks/underflow_table.py --head-init 1 measures
# it); the effect this task shows needs outputs that start at the targets' size.
UNDERFLOW_HEAD_INIT = 2.0**-10
UNDERFLOW_WIDTH = 16


# -- overflow: activations beyond 65504 --------------------------------------------------


class FeedForward(nn.Module):
    """A transformer feed-forward block with a residual, as in T5: rare outlier tokens make
    the hidden activations exceed FP16's 65504."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.wi = nn.Linear(width, hidden)
        self.act = nn.ReLU()
        self.wo = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.wo(self.act(self.wi(x)))  # type: ignore[no-any-return]


def make_overflow(seed: int, batch_size: int | None) -> Task:
    """Classify tokens by direction. Most inputs have entries of size ~64, but one token in
    OVERFLOW_OUTLIER_RATE is OVERFLOW_OUTLIER_FACTOR times larger, like the rare huge
    activations of T5: the input still fits FP16, but the feed-forward block's hidden
    activations exceed 65504, become inf in FP16 and the loss turns NaN. FP32 and BF16 shrug
    it off (LayerNorm follows); FP16 with dynamic scaling skips those steps and backs off the
    scale each time; FP16 without a scaler steps with NaN gradients and never recovers."""
    generator = _generator(seed)
    width, hidden, classes, samples = 32, 128, 8, TASK_SAMPLES["overflow"]
    inputs = torch.randn(samples, width, generator=generator) * OVERFLOW_INPUT_SCALE
    outliers = torch.rand(samples, generator=generator) < OVERFLOW_OUTLIER_RATE
    inputs[outliers] *= OVERFLOW_OUTLIER_FACTOR
    directions = torch.randn(width, classes, generator=generator)
    labels = (inputs / inputs.norm(dim=1, keepdim=True) @ directions).argmax(dim=1)
    torch.manual_seed(seed)
    block = FeedForward(width, hidden)
    with torch.no_grad():  # T5-style unscaled initialisation of the input projection
        block.wi.weight.normal_(0.0, 1.0)
    model = nn.Sequential(block, nn.LayerNorm(width), nn.Linear(width, classes))
    size = batch_size or 64
    batches = _sample_forever(inputs, labels, size, seed)
    return Task("overflow", model, batches, F.cross_entropy, lr=1e-3, batch_size=size,
                optimizer="adam")  # fmt: skip


OVERFLOW_INPUT_SCALE = 64.0
OVERFLOW_OUTLIER_FACTOR = 128.0
OVERFLOW_OUTLIER_RATE = 1 / 1024


# -- transformer: a character-level language model --------------------------------------


def training_text() -> str:
    """Docstrings of standard-library modules: ships with every Python, needs no download."""
    import argparse
    import collections
    import csv
    import dataclasses
    import decimal
    import fractions
    import functools
    import heapq
    import itertools
    import json
    import logging
    import pathlib
    import random
    import statistics
    import string
    import textwrap
    import typing

    modules = [
        argparse, collections, csv, dataclasses, decimal, fractions, functools, heapq,
        itertools, json, logging, pathlib, random, statistics, string, textwrap, typing,
    ]  # fmt: skip
    text = "\n".join(module.__doc__ or "" for module in modules)
    printable = "".join(ch for ch in text if 32 <= ord(ch) < 127 or ch == "\n")
    if len(printable) < 4096:  # python -OO strips docstrings: fall back to generated text
        words = ["float", "half", "scale", "loss", "grad", "bits", "range", "round", "even"]
        rng = _generator(0)
        picks = torch.randint(len(words), (4096,), generator=rng).tolist()
        printable = " ".join(words[i] for i in picks)
    return printable


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(batch, length, width)
        return self.proj(out)  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(self.act(self.up(self.norm2(x))))  # type: ignore[no-any-return]


class CharTransformer(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.norm(self.blocks(x)))  # type: ignore[no-any-return]


def _language_model_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def make_transformer(
    seed: int, batch_size: int | None, width: int = 64, layers: int = 2, context: int = 32
) -> Task:
    text = training_text()
    alphabet = sorted(set(text))
    lookup = {ch: i for i, ch in enumerate(alphabet)}
    data = torch.tensor([lookup[ch] for ch in text], dtype=torch.long)
    size = batch_size or 16
    torch.manual_seed(seed)
    # The output layer's width rounded up to a multiple of 16 (the unused logits only learn
    # to stay low), as language models pad their vocabularies: FP8 matmul kernels need
    # sizes divisible by 16, so the fp8 modes can quantize the head too.
    vocab = -(-len(alphabet) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    model = CharTransformer(vocab, width, heads=4, layers=layers, context=context)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = _generator(seed + 1)
        while True:
            starts = torch.randint(len(data) - context - 1, (size,), generator=generator)
            window = torch.stack([data[s : s + context + 1] for s in starts.tolist()])
            yield window[:, :-1], window[:, 1:]

    return Task("transformer", model, batches(), _language_model_loss, lr=3e-3,
                batch_size=size, optimizer="adam")  # fmt: skip


VOCAB_MULTIPLE = 16


# -- regression: updates too small for FP16 weights --------------------------------------


def make_regression(seed: int, batch_size: int | None) -> Task:
    """Linear regression whose weights sit near 1, where an FP16 ulp is 2**-10: the SGD
    updates lr * g are mostly below half of that, so FP16 weights never move while FP32
    master weights accumulate them (the paper's second technique)."""
    generator = _generator(seed)
    features, samples = 64, TASK_SAMPLES["regression"]
    true_weights = 1.0 + 0.05 * torch.randn(features, 1, generator=generator)
    inputs = torch.randn(samples, features, generator=generator)
    targets = inputs @ true_weights + 0.01 * torch.randn(samples, 1, generator=generator)
    # One linear inside a module, not the bare nn.Linear: the quantized modes swap the
    # linears inside a model and cannot replace the model itself.
    linear = nn.Linear(features, 1, bias=False)
    with torch.no_grad():
        linear.weight.fill_(1.0)
    model = nn.Sequential(linear)
    size = batch_size or 64
    batches = _sample_forever(inputs, targets, size, seed)
    return Task("regression", model, batches, F.mse_loss, lr=2e-3, batch_size=size,
                optimizer="sgd")  # fmt: skip


BUILTIN_TASKS: dict[str, Callable[[int, int | None], Task]] = {
    "mlp": make_mlp,
    "underflow": make_underflow,
    "overflow": make_overflow,
    "transformer": make_transformer,
    "regression": make_regression,
}
assert set(BUILTIN_TASKS) == set(TASK_NAMES), "config.TASKS and tasks.BUILTIN_TASKS disagree"


# -- user tasks --------------------------------------------------------------------------


def load_user_factory(spec: str) -> Callable[..., Any]:
    """The factory function named by `path/to/file.py:factory`. Raises TaskError."""
    parts = split_user_task(spec)
    if parts is None:
        raise TaskError(f"not a task file: {spec!r} (expected path/to/file.py:factory)")
    path, name = Path(parts[0]), parts[1]
    if not path.is_file():
        raise TaskError(f"task file not found: {path}")
    module_name = f"fpexplorer_user_task_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise TaskError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)  # errors in the user's file propagate as they are
    factory = getattr(module, name, None)
    if not callable(factory):
        raise TaskError(f"{path} has no function {name!r}")
    return factory  # type: ignore[no-any-return]


def _rebatching(batches: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """Re-iterate a re-iterable source (list, DataLoader) forever; a one-shot iterator ends."""
    while True:
        iterator = iter(batches)
        produced = False
        for batch in iterator:
            produced = True
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise TaskError("a batch must be an (inputs, target) pair")
            yield batch[0], batch[1]
        if iterator is batches or not produced:
            return


def make_user_task(
    spec: str, seed: int, batch_size: int | None, device: torch.device, lr: float | None
) -> Task:
    factory = load_user_factory(spec)
    offered = {"seed": seed, "batch_size": batch_size, "device": device}
    try:
        parameters = inspect.signature(factory).parameters
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        kwargs = {k: v for k, v in offered.items() if accepts_any or k in parameters}
        declared = parameters.get("batch_size")
        if batch_size is None and declared is not None and declared.default is not declared.empty:
            # No --batch-size: the factory's own default applies (`batch_size=32` was called
            # with None); one that requires it, or takes **options, still gets None.
            kwargs.pop("batch_size", None)
    except (TypeError, ValueError):
        kwargs = {}
    torch.manual_seed(seed)
    made = factory(**kwargs)
    if not isinstance(made, (tuple, list)) or len(made) != 3:
        raise TaskError(f"{spec} must return (model, batches, loss_fn)")
    model, batches, loss_fn = made
    if not isinstance(model, nn.Module):
        raise TaskError(f"{spec}: the model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TaskError(f"{spec}: loss_fn must be callable")
    if not isinstance(batches, Iterable):
        raise TaskError(f"{spec}: batches must be iterable")
    return Task(spec, model, _rebatching(batches), loss_fn, lr=lr or 1e-3,
                batch_size=batch_size or 0, optimizer="adam")  # fmt: skip


def make_task(
    name: str, seed: int, batch_size: int | None, device: torch.device, lr: float | None = None
) -> Task:
    """A built-in task by name, or a user task `path/to/file.py:factory`."""
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name](seed, batch_size)
    return make_user_task(name, seed, batch_size, device, lr)
