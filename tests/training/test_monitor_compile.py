"""`AmpMonitor` on a compiled model (`torch.compile`, fullgraph or not, and a compiled
function calling the model): no crash, no graph break, no recompile after warm-up, the same
records as the uncompiled model where they are measured, and the activation statistics
marked as not measured (never zeros)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.monitor.amp_monitor import COMPILED_MODEL, COMPILED_MODEL_UNCHECKED
from fpexplorer.training.summary import format_summary, format_table, summarize_file

STEPS = 5

# Inductor's own import of torch.jit (torch's warning, not ours).
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)


def small_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 4))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 8, generator=generator), torch.randint(0, 4, (16,), generator=generator))
        for _ in range(STEPS)
    ]


def run(
    path: Path,
    compile_model: Callable[[nn.Module], tuple[Callable[..., torch.Tensor], nn.Module]] | None,
    *,
    autocast: bool,
    stats_every: int,
    frames_after_step: list[int] | None = None,
    counter: CompileCounterWithBackend | None = None,
    grad_binades: list[dict[int, int]] | None = None,
    overflow_at: int | None = None,
) -> list[dict[str, Any]]:
    """A loop with a GradScaler (growing every 2 steps: the scale changes) and the monitor;
    `compile_model` gives (what the loop calls, what the monitor watches). `grad_binades`
    receives each step's parameter gradients counted by binade by numpy."""
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    forward, watched = compile_model(model) if compile_model is not None else (model, model)
    with AmpMonitor(watched, optimizer, scaler, out=path, stats_every=stats_every) as monitor:
        for step, (inputs, target) in enumerate(batches()):
            if step == overflow_at:  # finite, but the LayerNorm's variance overflows
                inputs = inputs * 1e38
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = nn.functional.cross_entropy(forward(inputs), target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)
            if grad_binades is not None:
                grad_binades.append(binades([p.grad for p in model.parameters()]))
            if frames_after_step is not None and counter is not None:
                frames_after_step.append(counter.frame_count)
    return [json.loads(line) for line in path.read_text().splitlines()]


def binades(tensors: list[torch.Tensor | None]) -> dict[int, int]:
    """floor(log2 |x|) -> count of the finite non-zero values, by numpy (the oracle)."""
    values = np.concatenate([t.detach().numpy().ravel() for t in tensors if t is not None])
    values = values[np.isfinite(values) & (values != 0)]
    _, exponent = np.frexp(np.abs(values).astype(np.float64))  # |x| = m * 2**e, m in [.5, 1)
    found, count = np.unique(exponent - 1, return_counts=True)
    return dict(zip(found.tolist(), count.tolist(), strict=True))


def recorded_binades(histogram: dict[str, Any]) -> dict[int, int]:
    return {
        histogram["lo"] + index: count for index, count in enumerate(histogram["counts"]) if count
    }


def fresh_counter() -> CompileCounterWithBackend:
    """A frame counter over inductor, with dynamo's caches and counters emptied: each test
    counts its own compilations."""
    torch._dynamo.reset()
    counters.clear()
    return CompileCounterWithBackend("inductor")


def steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if record["type"] == "step"]


@pytest.mark.slow  # inductor compiles the model (a C++ compiler run, cached after the first)
@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "default"])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
def test_a_compiled_model_records_what_the_uncompiled_one_does_without_recompiling(
    tmp_path: Path, fullgraph: bool, autocast: bool
) -> None:
    # Before: fullgraph=True stopped at the first statistics step with dynamo's "Could not
    # guard on data-dependent expression" (the forward hooks' host reads); without it, every
    # forward broke the graph at each layer's hook and the hooks recompiled.
    counter = fresh_counter()
    frames: list[int] = []

    def compiled(model: nn.Module) -> tuple[Callable[..., torch.Tensor], nn.Module]:
        wrapper = torch.compile(model, backend=counter, fullgraph=fullgraph)
        return wrapper, wrapper

    plain_binades: list[dict[int, int]] = []
    our_binades: list[dict[int, int]] = []
    plain = run(tmp_path / "plain.jsonl", None, autocast=autocast, stats_every=2,
                grad_binades=plain_binades)  # fmt: skip
    ours = run(tmp_path / "compiled.jsonl", compiled, autocast=autocast, stats_every=2,
               frames_after_step=frames, counter=counter, grad_binades=our_binades)  # fmt: skip
    # Two graphs, each compiled once: step 0's, with the leaf outputs' checks, and step 1's,
    # without them; no recompile after (hooks added and removed per statistics step would).
    assert frames == [1, 2, 2, 2, 2]
    assert sum(counters["graph_break"].values()) == 0
    assert ours[0]["config"]["precision"] == plain[0]["config"]["precision"]
    assert ours[0]["model"] == plain[0]["model"]
    # Compiled code sums in another order (and in bf16, rounds at other places).
    tolerance = 2e-2 if autocast else 1e-5
    compared = zip(steps(ours), steps(plain), our_binades, plain_binades, strict=True)
    for mine, theirs, mine_expected, theirs_expected in compared:
        for key in ("scale", "skipped", "growth_tracker", "lr"):
            assert mine[key] == theirs[key], key
        for key in ("loss", "grad_norm", "grad_amax"):
            assert mine[key] == pytest.approx(theirs[key], rel=tolerance), key
        assert ("stats" in mine) == ("stats" in theirs)
        if "stats" not in mine:
            continue
        stats, their_stats = mine["stats"], theirs["stats"]
        # Measured outside the graph: the parameter gradients, exactly (numpy's count of
        # each run's own gradients; compiled code rounds otherwise, so they differ a little).
        assert recorded_binades(stats["grad_hist"]) == mine_expected
        assert recorded_binades(their_stats["grad_hist"]) == theirs_expected
        norms = [layer.get("grad_norm") for layer in stats["layers"]]
        their_norms = [layer.get("grad_norm") for layer in their_stats["layers"]]
        assert [n is None for n in norms] == [n is None for n in their_norms]
        assert [n for n in norms if n is not None] == pytest.approx(
            [n for n in their_norms if n is not None], rel=tolerance
        )
        assert stats["lost_updates"]["kind"] == their_stats["lost_updates"]["kind"]
        assert stats["memory"]["params"] == their_stats["memory"]["params"]
        # What the compiled graph saved for backward, seen from the wrapper's hooks.
        assert sum(stats["memory"]["activations"].values()) > 0
        # Inside the graph: not measured, and said so, not zeros.
        assert stats["activations_not_measured"] == COMPILED_MODEL
        assert "act_hist" not in stats and "act_zero_share" not in stats
        # Checked inside the graph: whether each layer's output was finite (none was).
        assert "first_nonfinite_forward" not in stats
        assert their_stats["act_hist"]["counts"]  # the uncompiled run has them
        assert "activations_not_measured" not in their_stats
    # What `fpexplorer runs summarize|compare` print: "not measured", never a zero share.
    summary = summarize_file(tmp_path / "compiled.jsonl")
    assert "act grads  not measured (compiled model)" in format_summary(summary)
    assert "| not measured " in format_table([summary])
    assert "act grads  zero " in format_summary(summarize_file(tmp_path / "plain.jsonl"))


@pytest.mark.slow  # inductor compiles the step
@pytest.mark.parametrize("kind", ["function", "module.compile"])
def test_a_compiled_function_or_module_compile_runs_without_recompiling(
    tmp_path: Path, kind: str
) -> None:
    # A compiled function calling the model: the monitor cannot see it when it starts; its
    # hooks find themselves being traced, do nothing there, and stay in place (removing one
    # would recompile). `model.compile()` traces the model's own hooks too.
    counter = fresh_counter()
    frames: list[int] = []

    def compiled(model: nn.Module) -> tuple[Callable[..., torch.Tensor], nn.Module]:
        if kind == "function":
            return torch.compile(lambda x: model(x), backend=counter, fullgraph=True), model
        model.compile(backend=counter)  # fullgraph=True: torch finds no frame in Sequential
        return model, model

    records = run(tmp_path / f"{kind}.jsonl", compiled, autocast=True, stats_every=2,
                  frames_after_step=frames, counter=counter)  # fmt: skip
    assert frames == [1] * STEPS
    assert records[-1]["status"] == "completed"
    assert records[0]["config"]["precision"] == "bf16"  # read in the traced hook
    with_stats = [record["stats"] for record in steps(records) if "stats" in record]
    assert len(with_stats) == 3  # steps 0, 2, 4
    for stats in with_stats:  # its hooks are traced: no check of the outputs either
        assert stats["activations_not_measured"] == COMPILED_MODEL_UNCHECKED
        assert "act_hist" not in stats
        assert stats["grad_hist"]["counts"]


@pytest.mark.slow  # inductor compiles the model
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
def test_a_compiled_models_forward_overflow_is_named_as_uncompiled(
    tmp_path: Path, autocast: bool
) -> None:
    # The leaf outputs' extremes are taken inside the graph on statistics steps (one graph
    # with the checks, one without: no recompile after both have run once).
    counter = fresh_counter()
    frames: list[int] = []

    def compiled(model: nn.Module) -> tuple[Callable[..., torch.Tensor], nn.Module]:
        wrapper = torch.compile(model, backend=counter, fullgraph=True)
        return wrapper, wrapper

    plain = run(tmp_path / "plain.jsonl", None, autocast=autocast, stats_every=2, overflow_at=2)
    ours = run(tmp_path / "compiled.jsonl", compiled, autocast=autocast, stats_every=2,
               frames_after_step=frames, counter=counter, overflow_at=2)  # fmt: skip
    assert frames == [1, 2, 2, 2, 2]
    named = [record["stats"].get("first_nonfinite_forward") for record in steps(ours)[::2]]
    their_named = [record["stats"].get("first_nonfinite_forward") for record in steps(plain)[::2]]
    assert named == their_named == [None, "2", None]
    assert [record["skipped"] for record in steps(ours)] == [False, False, True, False, False]


def test_importing_the_monitor_does_not_load_dynamo() -> None:
    # The tap's hooks were marked for dynamo to skip at import, which loaded torch._dynamo
    # (some 0.7 s of every `fpexplorer train` start and every user's import): they are
    # marked when dynamo is first seen loaded instead.
    import subprocess
    import sys

    code = (
        "import fpexplorer.training.monitor, fpexplorer.training.job\n"
        "import sys; print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
