"""The monitor's module hooks against plain torch: the forward finiteness check (a sum, and
the exact check when the sum is not finite) against `torch.isfinite`, and the activation
gradients received through the output's autograd node against `Tensor.register_hook` (an
in-place op after the module, a module returning its input, a tuple output, a leaf output)."""

from __future__ import annotations

import copy
import gc
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from monitor_helpers import flat
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.monitor.amp_monitor import (
    _SAVED_TENSOR_TAP,
    _all_finite,
    _saved_tensor_hooks_in_use,
)
from fpexplorer.training.monitor.device import bytes_by_dtype
from fpexplorer.training.monitor.plan import HostPack

INF, NAN = float("inf"), float("nan")


def finiteness_cases(dtype: torch.dtype) -> list[torch.Tensor]:
    big = torch.finfo(dtype).max
    return [
        torch.randn(1000, dtype=torch.float32).to(dtype),
        torch.tensor([1.0, INF, 2.0]).to(dtype),
        torch.tensor([-INF, 1.0]).to(dtype),
        torch.tensor([INF, -INF]).to(dtype),
        torch.tensor([0.0, NAN]).to(dtype),
        torch.full((4096,), big, dtype=dtype),  # finite; a sum in the dtype overflows
        torch.tensor([big, -big, big, big], dtype=dtype),
        torch.tensor([big, big, NAN], dtype=dtype),
        torch.empty(0, dtype=dtype),
        torch.zeros(3, 5, dtype=dtype).t(),  # not contiguous
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_all_finite_equals_isfinite(dtype: torch.dtype) -> None:
    for tensor in finiteness_cases(dtype):
        assert _all_finite(tensor) == bool(torch.isfinite(tensor).all()), tensor


class Pair(nn.Module):
    """A module whose output is a tuple (the monitor follows its first tensor)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x + 1


class First(nn.Module):
    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return pair[0] * 3 + pair[1]


class Table(nn.Module):
    """Returns its parameter itself: an output with no autograd node (a leaf)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = Table()
        self.a = nn.Linear(6, 6)
        self.relu = nn.ReLU(inplace=True)  # modifies module a's output in place
        self.same = nn.Identity()  # returns its input: two modules, one tensor
        self.pair = Pair()
        self.first = First()
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(self.embed(x) * x)
        h = self.same(self.relu(h))
        return self.b(self.first(self.pair(h)))


def test_activation_gradients_are_those_tensor_hooks_receive(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    captured: dict[str, list[torch.Tensor]] = {}

    def capture(name: str) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            tensor = output[0] if isinstance(output, tuple) else output
            tensor.register_hook(lambda g: captured.setdefault(name, []).append(g.clone()))

        return hook

    for name, module in model.named_modules():
        if name and next(module.children(), None) is None:
            module.register_forward_hook(capture(name))
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        loss = model(torch.randn(4, 6)).square().mean() * 5
        loss.backward()
        optimizer.step()
        record = flat(monitor.step(loss))
    layers = {layer["name"]: layer for layer in record["layers"]}
    assert set(captured) == {"embed", "a", "relu", "same", "pair", "first", "b"}
    for name, grads in captured.items():
        assert layers[name]["amax"] == max(float(g.abs().max()) for g in grads), name
    total = sum(g.numel() for grads in captured.values() for g in grads)
    hist = record["act_hist"]
    assert sum(hist["counts"]) + hist["zero"] + hist["inf"] + hist["nan"] == total
    assert record.get("first_nonfinite_forward") is None


def test_a_finite_output_whose_sum_overflows_is_not_named(tmp_path: Path) -> None:
    # Module "0" outputs values near float32's maximum (finite; their sum is not), module
    # "1" multiplies them past it: "1" is where the forward pass overflowed.
    model = nn.Sequential(nn.Linear(4, 64), nn.Linear(64, 2))
    with torch.no_grad():
        model[0].weight.fill_(0.0)
        model[0].bias.fill_(3e38)
        model[1].weight.fill_(1.0)
        model[1].bias.fill_(0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        optimizer.step()
        record = flat(monitor.step(loss))
    assert record.get("first_nonfinite_forward") == "1"


def test_memory_figures_equal_those_counted_by_hand(tmp_path: Path) -> None:
    # Activations: the distinct tensors autograd saves for backward inside the model's
    # forward (not the parameters), counted here by a saved-tensor hook of the test's own on
    # the same forward pass (under BF16 autocast: BF16 copies of inputs and weights).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    params = {p.data_ptr() for p in model.parameters()}
    inputs = torch.randn(16, 8)
    saved: dict[tuple[int, torch.dtype], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in params:
            size = tensor.numel() * tensor.element_size()
            saved.setdefault((tensor.data_ptr(), tensor.dtype), size)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(inputs)
    by_dtype: dict[str, int] = {}
    for (_, dtype), size in saved.items():
        name = str(dtype).removeprefix("torch.")
        by_dtype[name] = by_dtype.get(name, 0) + size
    records = []
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(inputs).float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            records.append(monitor.step(loss))
    weights = sum(p.numel() * 4 for p in model.parameters())
    first = records[0].stats.memory if records[0].stats else None
    last = records[-1].stats.memory if records[-1].stats else None
    assert first is not None and last is not None
    assert first.activations == last.activations == by_dtype
    assert set(by_dtype) == {"bfloat16"} and by_dtype["bfloat16"] > 0
    assert last.params == {"float32": weights} and last.grads == {"float32": weights}
    # Adam's two moments per weight and a float32 step count per parameter (made by the
    # first step, before the monitor reads them).
    state = 2 * weights + 4 * len(list(model.parameters()))
    assert first.optimizer == last.optimizer == {"float32": state}


def saved_bytes_by_hand(model: nn.Module, inputs: torch.Tensor) -> dict[str, int]:
    """The bytes autograd saves for backward in `model(inputs)` (not the parameters), by
    dtype, counted by a saved-tensor hook of the test's own."""
    params = {p.data_ptr() for p in model.parameters()}
    saved: dict[tuple[int, torch.dtype], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in params:
            saved.setdefault((tensor.data_ptr(), tensor.dtype), tensor.numel() * 4)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(inputs)
    return {"float32": sum(saved.values())} if saved else {}


def test_two_monitors_on_one_model_both_count_the_saved_activations(tmp_path: Path) -> None:
    # Saved-tensor hooks are a stack of which autograd calls only the top pair: the first
    # monitor's activations read {} while the second's were right (this failed before).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    expected = saved_bytes_by_hand(model, inputs)
    assert expected["float32"] > 0
    first = AmpMonitor(model, optimizer, None, out=tmp_path / "first.jsonl", stats_every=1)
    second = AmpMonitor(model, optimizer, None, out=tmp_path / "second.jsonl", stats_every=1)
    seen: list[tuple[dict[str, int], ...]] = []
    for step in range(3):
        if step == 2:
            second.close()  # the first goes on measuring alone
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitors = (first,) if step == 2 else (first, second)
        memories = [monitor.step(loss).stats for monitor in monitors]
        seen.append(tuple(m.memory.activations if m and m.memory else {} for m in memories))
    first.close()
    assert seen == [(expected, expected), (expected, expected), (expected,)]
    # Every monitor gone: autograd's stack holds no hook of theirs (none is called).
    assert saved_bytes_by_hand(model, inputs) == expected


def test_a_monitor_on_a_submodule_counts_its_own_forwards_saved_activations(
    tmp_path: Path,
) -> None:
    # Two monitors whose forwards nest (one on the model, one on its first block): each
    # counts what autograd saved while its own forward ran, the inner one only its block's,
    # though both read the one list of saved tensors (from where each joined it).
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 32), nn.GELU())
    model = nn.Sequential(block, nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    whole, inner = saved_bytes_by_hand(model, inputs), saved_bytes_by_hand(block, inputs)
    assert whole["float32"] > inner["float32"] > 0
    outer = AmpMonitor(model, optimizer, None, out=tmp_path / "outer.jsonl", stats_every=1)
    nested = AmpMonitor(block, optimizer, None, out=tmp_path / "nested.jsonl", stats_every=1)
    seen = []
    for _ in range(2):
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        memories = [monitor.step(loss).stats for monitor in (outer, nested)]
        seen.append(tuple(m.memory.activations if m and m.memory else {} for m in memories))
    nested.close()
    outer.close()
    assert seen == [(whole, inner), (whole, inner)]
    assert saved_bytes_by_hand(model, inputs) == whole  # nothing of theirs left in autograd


def test_a_forward_where_saved_tensor_hooks_are_disabled_leaves_the_monitor_as_it_was(
    tmp_path: Path,
) -> None:
    # torch refuses saved-tensor hooks while they are disabled (as some of its own transforms
    # do): that forward fails, and the monitor counts the next one as usual (nothing joined,
    # nothing left to leave).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    expected = saved_bytes_by_hand(model, inputs)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        torch._C._autograd._saved_tensors_hooks_disable("disabled by the test")
        try:
            with pytest.raises(RuntimeError, match="disabled by the test"):
                model(inputs)
        finally:
            torch._C._autograd._saved_tensors_hooks_enable()
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stats = monitor.step(loss).stats
    assert stats is not None and stats.memory is not None
    assert stats.memory.activations == expected
    assert saved_bytes_by_hand(model, inputs) == expected  # nothing of the monitor's left


class ForwardOnAnotherThread(nn.Module):
    """Passes its input on; on its first call runs `model` forward and backward on another
    thread, to the end, while the caller's forward waits in the middle."""

    def __init__(self) -> None:
        super().__init__()
        self.model: nn.Module | None = None
        self.inputs = torch.randn(16, 8)
        self.ran = False
        self.error: BaseException | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.ran and self.model is not None:
            self.ran = True
            model = self.model

            def other() -> None:
                try:
                    model(self.inputs).sum().backward()
                except BaseException as error:  # reported by the test
                    self.error = error

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        return x


def _saved_activations_of_steps(
    model: nn.Module, inputs: torch.Tensor, steps: int, tmp_path: Path
) -> list[dict[str, int] | None]:
    """Each statistics step's saved-activation bytes by dtype, in a plain SGD loop under a
    monitor; after each step the thread's tap is left and holds nothing."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    seen = []
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for _ in range(steps):
            loss = model(inputs).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stats = monitor.step(loss).stats
            seen.append(stats.memory.activations if stats and stats.memory else None)
            assert _SAVED_TENSOR_TAP.joined == 0 and not _SAVED_TENSOR_TAP.saved
    return seen


def test_a_forward_on_another_thread_ending_inside_the_monitored_one_leaves_its_tap_alone(
    tmp_path: Path,
) -> None:
    # The tap and torch's saved-tensor hook stack are per thread. The other thread's forward
    # end left the tap of its own thread (never joined: -1 from then on) and not the
    # caller's: that step's activations read {}, and the caller's tap stayed joined for good,
    # holding every tensor saved in every later forward (this failed before; the code before
    # this session raised "list.remove(x): x not in list" in the other thread instead).
    torch.manual_seed(0)
    spawner = ForwardOnAnotherThread()
    model = nn.Sequential(nn.Linear(8, 32), spawner, nn.GELU(), nn.Linear(32, 4))
    inputs = torch.randn(16, 8)
    expected = saved_bytes_by_hand(model, inputs)  # no thread yet: `model` not given
    spawner.model = model
    seen = _saved_activations_of_steps(model, inputs, 3, tmp_path)
    assert spawner.ran and spawner.error is None
    assert seen == [expected] * 3
    assert saved_bytes_by_hand(model, inputs) == expected  # nothing of the monitor's left


class WaitsMidForward(nn.Module):
    """On its first call, stops in the middle of its forward (after saving a tensor for
    backward) until `go_on` is set, having set `reached`."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 32)
        self.last = nn.Linear(32, 4)
        self.reached = threading.Event()
        self.go_on = threading.Event()
        self.waited = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.first(x))
        if not self.reached.is_set():
            self.reached.set()
            self.waited = self.go_on.wait(timeout=60)  # False only when the test is stuck
        return self.last(hidden)


def test_close_on_another_thread_mid_forward_leaves_the_forwards_thread_untapped(
    tmp_path: Path,
) -> None:
    # The tap is per thread and only its thread can leave it; close() removed the
    # forward-end hook that would have: the forward's thread stayed joined for good, its
    # tap holding every tensor autograd saved there from then on, after the monitor was
    # gone (this failed before: 5 more tensors held a step, the tap's hooks left on
    # torch's stack). Nothing is counted into the closed monitor either.
    torch.manual_seed(0)
    model = WaitsMidForward()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    monitor = AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1)
    seen: list[tuple[int, int, bool, bool]] = []  # each step, on the forward's thread
    errors: list[BaseException] = []

    hidden: list[weakref.ref[torch.Tensor]] = []
    model.first.register_forward_hook(
        lambda module, args, output: hidden.append(weakref.ref(output))
    )

    def train() -> None:
        try:
            for _ in range(3):
                loss = model(inputs).square().mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                del loss
                seen.append((
                    _SAVED_TENSOR_TAP.joined,
                    len(_SAVED_TENSOR_TAP.saved),
                    _saved_tensor_hooks_in_use() is None,
                    hidden[-1]() is None,  # saved for GELU's backward, freed with the graph
                ))  # fmt: skip
        except BaseException as error:  # reported by the test
            errors.append(error)

    thread = threading.Thread(target=train)
    thread.start()
    assert model.reached.wait(timeout=60)
    monitor.close()  # the forward is in its middle, on the other thread
    model.go_on.set()
    thread.join()
    assert not errors and model.waited
    assert seen == [(0, 0, True, True)] * 3
    assert monitor._pass.saved == {}  # the closed monitor counted nothing
    assert saved_bytes_by_hand(model, inputs)  # this thread's tap untouched too
    assert _SAVED_TENSOR_TAP.joined == 0 and not _SAVED_TENSOR_TAP.saved


class DropsASideGraph(nn.Module):
    """Makes a side graph in its forward and drops it (no backward goes through it),
    `rounds` times; `freed` says, for each, whether what it saved was freed at once."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.first = nn.Linear(8, 32)
        self.wide = nn.Linear(32, 256)
        self.last = nn.Linear(32, 4)
        self.rounds = rounds
        self.freed: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.first(x))
        for _ in range(self.rounds):
            side = torch.tanh(self.wide(hidden))  # tanh saves its output for backward
            output = weakref.ref(side)
            del side  # the side graph, and what it saved, dropped
            self.freed.append(output() is None)
        return self.last(hidden)


def test_a_graph_dropped_inside_the_forward_frees_what_it_saved_at_once(tmp_path: Path) -> None:
    # On statistics steps the tap held every tensor saved in the forward to its end, and
    # the outputs it packed for good (the output's grad_fn held the packed output: a cycle
    # through C++ no garbage collection frees): a side graph dropped in the forward, or a
    # validation pass under grad, stayed alive, and was counted as saved activations
    # though no backward holds it (this failed before: none freed, 37376 bytes counted
    # for 4608, the validation pass's Tanh output alive after gc.collect()).
    torch.manual_seed(0)
    model = DropsASideGraph(rounds=0)
    inputs = torch.randn(16, 8)
    expected = saved_bytes_by_hand(model, inputs)  # what the backward holds
    model.rounds = 2
    model(inputs)
    assert model.freed == [True, True]  # without the monitor
    model.freed = []
    seen = _saved_activations_of_steps(model, inputs, 3, tmp_path)
    assert model.freed == [True] * 6
    assert seen == [expected] * 3
    # A validation pass under grad on a statistics step, its output dropped.
    validated = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
    outputs: list[weakref.ref[torch.Tensor]] = []
    validated[1].register_forward_hook(lambda module, args, out: outputs.append(weakref.ref(out)))
    optimizer = torch.optim.SGD(validated.parameters(), lr=1e-3)
    with AmpMonitor(validated, optimizer, None, out=tmp_path / "val.jsonl", stats_every=1):
        validated(inputs)
        gc.collect()
        assert outputs[-1]() is None  # saved by Tanh (its output), freed with the graph


class ChangesASavedTensor(nn.Module):
    """Changes in place the output Tanh saved for its backward (a bug of the model's, which
    autograd reports when backward reads it)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 32)
        self.last = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.first(x))
        hidden.add_(1.0)
        return self.last(hidden)


def test_a_saved_tensor_changed_in_place_fails_backward_on_statistics_steps_too(
    tmp_path: Path,
) -> None:
    # Autograd checks a saved tensor's version only where no saved-tensor hooks packed it:
    # under the tap, backward read the changed values and made wrong gradients without a
    # word on statistics steps (this failed before: no error).
    torch.manual_seed(0)
    model = ChangesASavedTensor()
    inputs = torch.randn(16, 8)
    message = "modified by an inplace operation: .* is at version 1; expected version 0"
    with pytest.raises(RuntimeError, match=message):
        model(inputs).sum().backward()  # without the monitor
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1):
        with pytest.raises(RuntimeError, match=message):
            model(inputs).sum().backward()
    assert _SAVED_TENSOR_TAP.joined == 0 and not _SAVED_TENSOR_TAP.saved


class Recursive(nn.Module):
    """Applies itself once more inside its forward, by `self(...)` (as tree models recurse)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.outer = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, depth: int = 1) -> torch.Tensor:
        hidden = torch.tanh(self.inner(x))
        if depth:
            hidden = hidden + self(hidden, depth - 1)
        return torch.tanh(self.outer(hidden))


def test_a_model_that_calls_itself_in_its_forward_has_all_its_saved_activations_counted(
    tmp_path: Path,
) -> None:
    # The inner call's end ran the forward-end hook, which ended the tapping: what the rest
    # of the outer forward saved was not counted (2048 bytes of 3072; this failed before,
    # and in the code before this session too).
    torch.manual_seed(0)
    model = Recursive()
    inputs = torch.randn(16, 8)
    expected = saved_bytes_by_hand(model, inputs)
    seen = _saved_activations_of_steps(model, inputs, 2, tmp_path)
    assert seen == [expected] * 2
    assert saved_bytes_by_hand(model, inputs) == expected  # nothing of the monitor's left


class CountedCalls(nn.Module):
    """A small model that counts its forward calls (a checkpoint's recomputation is one)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 32)
        self.last = nn.Linear(32, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.last(torch.nn.functional.gelu(self.first(x)))


def test_a_model_run_under_other_saved_tensor_hooks_keeps_them_on_statistics_steps(
    tmp_path: Path,
) -> None:
    # The monitor's tap was entered on top of hooks already in place when the model's
    # forward began, and autograd calls only the top pair: `checkpoint(model, x)` (not
    # reentrant) kept every activation and ran no recomputation on statistics steps, and a
    # caller's own hooks (offloading, counting) were never called (this failed before, and
    # in the code before this session too). Their tensors are theirs: not counted.
    torch.manual_seed(0)
    model = CountedCalls()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    packed: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed.append(tensor.numel())
        return tensor

    def under_own_hooks() -> torch.Tensor:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            return model(inputs).square().mean()

    under_own_hooks()
    expected_packed, packed[:] = list(packed), []  # no monitor yet
    assert expected_packed
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for step in range(4):
            model.calls, packed[:] = 0, []
            if step % 2:
                loss = under_own_hooks()
            else:
                output = torch.utils.checkpoint.checkpoint(model, inputs, use_reentrant=False)
                loss = output.square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stats = monitor.step(loss).stats
            assert stats is not None and stats.memory is not None
            assert stats.memory.activations == {}
            if step % 2:
                assert packed == expected_packed  # every tensor went through their hooks
            else:
                assert model.calls == 2  # the forward, then its recomputation in backward
            assert _SAVED_TENSOR_TAP.joined == 0 and not _SAVED_TENSOR_TAP.saved


def test_a_compiled_model_run_eagerly_leaves_no_saved_tensor_held(tmp_path: Path) -> None:
    # `model.compile()` before the monitor: no forward-end hook (it would only be traced).
    # Run eagerly (dynamo disabled, as TORCHDYNAMO_DISABLE=1 does, or falling back), the
    # start hook still joined the tap, which nothing left: it held every tensor saved on the
    # thread from then on, step after step (this failed before: 5 more tensors a step).
    import torch._dynamo

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    model.compile(backend="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(16, 8)
    hidden: list[weakref.ref[torch.Tensor]] = []
    model[0].register_forward_hook(lambda module, args, output: hidden.append(weakref.ref(output)))
    monitor = AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1)
    with monitor, torch._dynamo.config.patch(disable=True):  # (pytest's monkeypatch deletes it)
        for _ in range(3):
            loss = model(inputs).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss)
            del loss
            assert hidden[-1]() is None  # saved by GELU for backward, freed with the graph
            assert _SAVED_TENSOR_TAP.joined == 0 and not _SAVED_TENSOR_TAP.saved


def test_forward_checks_read_on_the_host_and_on_the_device_keep_their_order(
    tmp_path: Path,
) -> None:
    # A flag read at once (a CPU output) and extremes kept on the device (any other output)
    # may mix in one forward pass (a model across devices): the first non-finite output in
    # forward order is still the one named. Extremes are CPU tensors here: the same code.
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.Linear(2, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1)
    finite_pair = torch.aminmax(torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    nan_pair = torch.aminmax(torch.tensor([1.0, NAN]))
    inf_pair = torch.aminmax(torch.tensor([INF, 0.0]))
    cases = {
        "host only": ([True, True, False, False], [1.0, 1.0, 0.0, 0.0]),
        "device only": ([finite_pair, inf_pair, nan_pair, finite_pair], [1.0, 0.0, 0.0, 1.0]),
        "mixed": ([finite_pair, True, nan_pair, False], [1.0, 1.0, 0.0, 0.0]),
        "mixed, finite": ([True, finite_pair, True, finite_pair], [1.0, 1.0, 1.0, 1.0]),
    }
    for name, (checks, expected) in cases.items():
        monitor._forward_checks = list(enumerate(checks))
        pack = HostPack(torch.device("cpu"))
        monitor._queue_forward_checks(pack)
        assert pack.fetch()["forward_finite"].tolist() == expected, name
    monitor._forward_checks = []
    monitor.close()


def test_bytes_by_dtype_counts_sparse_tensors_as_dense() -> None:
    # A sparse gradient (nn.Embedding(sparse=True)) has no nbytes: numel * element_size.
    embedding = nn.Embedding(10, 4, sparse=True)
    embedding(torch.tensor([1, 2])).sum().backward()
    grad = embedding.weight.grad
    assert grad is not None and grad.layout == torch.sparse_coo
    half = torch.zeros(3, 5, dtype=torch.float16).t()
    assert bytes_by_dtype([grad, half, torch.zeros(2)]) == {"float32": 168, "float16": 30}


def test_a_statistics_step_leaves_the_gradients_as_they_are(tmp_path: Path) -> None:
    # The monitor's saved-tensor hooks hand every saved tensor back unchanged in backward.
    torch.manual_seed(1)
    model = Net()
    twin = copy.deepcopy(model)
    inputs = torch.randn(4, 6)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        loss = model(inputs).square().mean()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    twin(inputs).square().mean().backward()
    for watched, plain in zip(model.parameters(), twin.parameters(), strict=True):
        assert watched.grad is not None and plain.grad is not None
        assert torch.equal(watched.grad, plain.grad)


class Shift(nn.Module):
    """x + a parameter of x's shape: where x needs no gradient, autograd hands the output's
    gradient itself on to the parameter, as its `.grad` (no copy)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(4, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.shift


class Weights(nn.Module):
    """Returns its parameter itself (a leaf output): its gradient becomes the `.grad`."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.ones(4, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights


class Shifted(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.add = Shift(width)
        self.scale = Weights(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.add(x) * self.scale(x)


def numpy_binades(values: list[torch.Tensor]) -> tuple[dict[int, int], int]:
    """(count by floor(log2 |x|) of the non-zero values, count of zeros), by numpy."""
    flat_values = np.concatenate([v.detach().double().numpy().ravel() for v in values])
    nonzero = flat_values[flat_values != 0]
    _, exponents = np.frexp(nonzero)
    found, counts = np.unique(exponents - 1, return_counts=True)
    zeros = int(flat_values.size - nonzero.size)
    return dict(zip(found.tolist(), counts.tolist(), strict=True)), zeros


# 6: counted in numpy at step(); 4096 (4 x 4096 = 2**14 elements): counted in the hook;
# "accelerator": counted in the hook by device operations only, as on CUDA.
@pytest.mark.parametrize("width", [6, 4096, "accelerator"])
def test_activation_gradients_are_counted_as_backward_made_them(
    tmp_path: Path, width: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A gradient that becomes a parameter's `.grad` is changed in place after backward (a
    # second backward adds to it, unscale_ and clipping multiply it): the activation
    # gradients recorded are those backward made, not what became of them by step().
    if width == "accelerator":
        from fpexplorer.training.monitor import kernels

        monkeypatch.setattr(kernels, "_HOST_BELOW", 0)
        monkeypatch.setattr(kernels, "_BINCOUNT_DEVICES", ())  # counts by index_add
        monkeypatch.setattr(kernels, "_READ_IN_HOOK_DEVICES", ())  # no host reads in hooks
        width = 6
    assert isinstance(width, int)
    torch.manual_seed(2)
    model = Shifted(width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    captured: dict[str, list[torch.Tensor]] = {}

    def capture(name: str) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            output.register_hook(lambda g: captured.setdefault(name, []).append(g.clone()))

        return hook

    for name in ("add", "scale"):
        model.get_submodule(name).register_forward_hook(capture(name))
    # The gradient of module "add" is `factors` (float32 subnormals, placed from the values,
    # and zeros among them).
    factors = torch.tensor([1e-40, 0.0, 1.0, 3.0] * width).reshape(4, width)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for _ in range(2):  # gradient accumulation: the second backward adds to the first
            loss = (model(torch.randn(4, width)) * factors).sum()
            loss.backward()
        for param in model.parameters():
            assert param.grad is not None
            param.grad.mul_(2.0**-20)  # as unscale_ or clipping would
        optimizer.step()
        record = flat(monitor.step(loss))
    layers = {layer["name"]: layer for layer in record["layers"]}
    for name, grads in captured.items():
        assert layers[name]["amax"] == max(float(g.abs().max()) for g in grads), name
    hist = record["act_hist"]
    binades, zeros = numpy_binades([g for grads in captured.values() for g in grads])
    recorded = {hist["lo"] + i: c for i, c in enumerate(hist["counts"]) if c}
    assert (recorded, hist["zero"], hist["inf"], hist["nan"]) == (binades, zeros, 0, 0)


def test_a_layer_whose_gradient_had_zeros_has_them_counted_first(tmp_path: Path) -> None:
    # The gradient into a ReLU's input has zeros (where the ReLU was off): after a
    # statistics step has seen them, the next counts them before its exponent fields (a
    # hint for speed); the records stay numpy's counts, and a layer without zeros gets no
    # hint.
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    captured: list[torch.Tensor] = []

    def capture(module: nn.Module, inputs: Any, output: Any) -> None:
        output.register_hook(lambda g: captured.append(g.clone()))

    for module in model:
        module.register_forward_hook(capture)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for step in range(3):
            captured.clear()
            optimizer.zero_grad()
            loss = model(torch.randn(128, 16)).square().mean()  # 128 x 256: counted in the hook
            loss.backward()
            optimizer.step()
            record = flat(monitor.step(loss))
            # "0", the Linear before the ReLU, only: from the second step on, a hinted count.
            assert monitor._zero_layers == {0}, step
            hist = record["act_hist"]
            binades, zeros = numpy_binades(captured)
            assert zeros > 0
            recorded = {hist["lo"] + i: c for i, c in enumerate(hist["counts"]) if c}
            assert (recorded, hist["zero"], hist["inf"], hist["nan"]) == (binades, zeros, 0, 0)


def _bytes_by_dtype(tensors: list[torch.Tensor]) -> dict[str, int]:
    """The test's own count: bytes of each dtype among `tensors`."""
    totals: dict[str, int] = {}
    for tensor in tensors:
        name = str(tensor.dtype).removeprefix("torch.")
        totals[name] = totals.get(name, 0) + tensor.numel() * tensor.element_size()
    return totals


def test_memory_figures_follow_a_layer_converted_and_a_reloaded_optimizer_mid_run(
    tmp_path: Path,
) -> None:
    # Step 2 converts the second layer to bfloat16 (its momentum stays float32); step 4
    # reloads the optimizer's state (load_state_dict casts it to the parameters' dtypes).
    # Neither changes how many parameters or state entries there are: the figures were
    # counted once and kept, and read float32 throughout.
    torch.manual_seed(0)
    first, second = nn.Linear(6, 5), nn.Linear(5, 3)
    model = nn.Sequential(first, nn.ReLU(), second)
    # One tensor at a time: float32 momentum steps bfloat16 weights (foreach would refuse).
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=False)
    seen, expected = [], []
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for step in range(6):
            if step == 2:
                second.to(torch.bfloat16)
            if step == 4:
                optimizer.load_state_dict(optimizer.state_dict())
            hidden = torch.relu(first(torch.randn(8, 6)))
            loss = second(hidden.to(second.weight.dtype)).float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            memory = monitor.step(loss).stats.memory  # type: ignore[union-attr]
            assert memory is not None
            seen.append((memory.params, memory.optimizer))
            state = [v for s in optimizer.state.values() for v in s.values()]
            expected.append((_bytes_by_dtype(list(model.parameters())), _bytes_by_dtype(state)))
    assert seen == expected
    assert "bfloat16" in seen[2][0] and "bfloat16" not in seen[3][1]
    assert "bfloat16" in seen[5][1]
