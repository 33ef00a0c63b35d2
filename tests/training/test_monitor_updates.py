"""The lost-update check (`monitor.updates`) against numpy: whether an update shows in FP16
for every FP16 pattern of the old weight (FP32 masters: old weights on and between the FP16
values, steps at and around half an FP16 ulp; FP16 weights: every pattern against its
neighbours, both zeros, infinities and NaN), and the counts of `LostUpdateCheck` for weights
and gradients of every dtype, sampled and not, against the formula applied to whole copies."""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor, updates
from fpexplorer.training.monitor.updates import LostUpdateCheck, UpdateSample, update_shows


def oracle_shows(old: np.ndarray, new: np.ndarray, *, fp16_weights: bool) -> np.ndarray:
    """The formula, in numpy: FP16 weights, new != old; others (float32 arrays),
    FP16(FP16(old) + (new - old)) != FP16(old), the sum in float32."""
    with np.errstate(over="ignore", invalid="ignore"):
        if fp16_weights:
            return new.astype(np.float16) != old.astype(np.float16)
        old16 = old.astype(np.float16)
        stepped = (old16.astype(np.float32) + (new - old)).astype(np.float16)
        return ~(stepped == old16)


def all_fp16_values() -> np.ndarray:
    """The float32 value of every FP16 pattern (both zeros, both infinities, all NaNs)."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def assert_shows(
    old: np.ndarray, new: np.ndarray, expected: np.ndarray, *, fp16_weights: bool
) -> None:
    nonfinite = torch.empty(old.shape, dtype=torch.bool)
    got = update_shows(torch.from_numpy(old.copy()), torch.from_numpy(new.copy()),
                       fp16_weights=fp16_weights, nonfinite=nonfinite).numpy()  # fmt: skip
    mismatch = np.flatnonzero(got != expected)
    assert mismatch.size == 0, (old[mismatch[:5]], new[mismatch[:5]])
    with np.errstate(over="ignore"):
        fp16_cannot_hold = ~np.isfinite(old.astype(np.float16))  # |old| > 65504, inf, NaN
    assert np.array_equal(nonfinite.numpy(), fp16_cannot_hold)


def fp32_master_cases() -> tuple[np.ndarray, np.ndarray]:
    """(old, new) float32 weights: every FP16 value, its float32 neighbours and points
    between FP16 values, stepped by nothing, the smallest subnormal, +-inf, NaN, huge steps
    and fractions of an FP16 ulp around the ties; then weights FP16 cannot hold."""
    fp16 = all_fp16_values()
    with np.errstate(over="ignore", invalid="ignore"):
        # The FP16 ulp above each value (NaN/inf for the specials, which the list covers).
        ulp = (np.nextafter(fp16.astype(np.float16), np.float16(np.inf)).astype(np.float32)
               - fp16)  # fmt: skip
        ulp = np.where(np.isfinite(ulp) & (ulp > 0), ulp, np.float32(2.0**-24))
    steps = [0.0, 2.0**-149, -(2.0**-149), 1e-30, np.inf, -np.inf, np.nan, 1e30, -1e30, 70000.0]
    relative = [0.5, -0.5, 0.25, -0.25, 0.75, -0.75, 1.0, -1.0, 2.0, 0.4999, 0.5001, -0.5001]
    cases_old, cases_new = [], []
    with np.errstate(over="ignore", invalid="ignore"):
        olds = [
            fp16,  # weights that are FP16 values
            np.nextafter(fp16, np.float32(np.inf)),  # and their float32 neighbours
            np.nextafter(fp16, np.float32(-np.inf)),
            fp16 + ulp * np.float32(0.5),  # FP16 midpoints: the ties
            fp16 + ulp * np.float32(0.3),
        ]
        for old in olds:
            for step in steps:
                cases_old.append(old)
                cases_new.append(old + np.float32(step))
            for fraction in relative:
                new = old + ulp * np.float32(fraction)
                cases_old += [old, old, old]
                cases_new += [new, np.nextafter(new, np.float32(np.inf)),
                              np.nextafter(new, np.float32(-np.inf))]  # fmt: skip
    # Finite weights whose FP16 value is inf (FP16(inf + d) is inf again for finite d), the
    # largest that is not, and steps of every kind from them.
    big = np.float32([65519.996, 65520.0, 65536.0, 1e5, 1e30, 3.4e38])
    big = np.concatenate([big, -big])
    with np.errstate(over="ignore", invalid="ignore"):
        for step in [*steps, -65536.0, -1e5, -3.4e38, 3.4e38, -1.0, 16.0]:
            cases_old.append(big)
            cases_new.append(big + np.float32(step))
    return np.concatenate(cases_old).astype(np.float32), np.concatenate(cases_new).astype(
        np.float32
    )


def test_fp32_master_updates_for_every_fp16_pattern() -> None:
    old, new = fp32_master_cases()
    expected = oracle_shows(old, new, fp16_weights=False)
    with np.errstate(over="ignore"):
        lost_at_inf = np.isinf(old.astype(np.float16)) & np.isfinite(old) & ~expected
    assert lost_at_inf.sum() > 20  # inf == inf: the update is lost
    assert_shows(old, new, expected, fp16_weights=False)
    # Both outcomes occur often: the cases straddle the rounding boundaries.
    assert 0.2 < expected.mean() < 0.8


def test_cpu_counts_of_float32_weights_for_every_fp16_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Float32 weights whose FP16 values are all finite are counted on a CPU without
    # `update_shows` (see `updates._count_on_cpu`): the same counts as the formula, on the
    # cases above, 2**20 weights at a time (no sample); the gradients have zeros of both
    # signs, inf and NaN.
    def general_path(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(updates, "update_shows", general_path)
    old, new = fp32_master_cases()
    with np.errstate(over="ignore"):
        finite = np.isfinite(old.astype(np.float16))
    old, new = old[finite], new[finite]
    check = LostUpdateCheck()
    size = updates.LOST_UPDATE_SAMPLE
    for start in range(0, old.size, size):
        before = torch.from_numpy(old[start : start + size].copy())
        param = before.clone().reshape(-1, 1) if start == 0 else before.clone()
        grad = gradients_for(param, start)
        check.keep([param])
        param.copy_(torch.from_numpy(new[start : start + size]).reshape(param.shape))
        counts = check.count([param], [grad])
        assert counts is not None and counts.dtype == torch.float32
        intended, applied, nonfinite = (int(c) for c in counts.tolist())
        expected_intended, expected_lost, expected_nonfinite = oracle_counts(
            [before], [param], [grad]
        )
        assert (intended, intended - applied, nonfinite) == (
            expected_intended, expected_lost, expected_nonfinite
        )  # fmt: skip
        assert 0 < expected_lost < expected_intended
        check.forget()


def test_fp16_weight_updates_for_every_pattern() -> None:
    patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    partners = [
        patterns,  # unchanged (NaN patterns included: NaN never equals itself)
        patterns + np.uint16(1),  # the neighbouring patterns (wrapping at the ends)
        patterns - np.uint16(1),
        patterns ^ np.uint16(0x8000),  # the sign flipped: +0 and -0 are equal
        np.full(65536, 0x0000, dtype=np.uint16),
        np.full(65536, 0x8000, dtype=np.uint16),
        np.full(65536, 0x7C00, dtype=np.uint16),  # +inf
        np.full(65536, 0xFC00, dtype=np.uint16),  # -inf
        np.full(65536, 0x7E00, dtype=np.uint16),  # NaN
        np.random.default_rng(0).integers(0, 65536, 65536).astype(np.uint16),
    ]
    old = np.tile(patterns, len(partners)).view(np.float16).astype(np.float32)
    new = np.concatenate(partners).view(np.float16).astype(np.float32)
    expected = oracle_shows(old, new, fp16_weights=True)
    assert_shows(old, new, expected, fp16_weights=True)


def oracle_counts(
    old: list[torch.Tensor], new: list[torch.Tensor], grads: list[torch.Tensor]
) -> tuple[int, int, int]:
    """(updates intended, lost, intended to weights whose FP16 value is inf/NaN) by the
    formula on whole concatenated copies, each weight in float32 (exact for 16-bit weights,
    rounded for float64, as `float()` rounds)."""
    fp16 = all(t.dtype == torch.float16 for t in old)
    old32 = np.concatenate([t.detach().float().numpy().ravel() for t in old])
    new32 = np.concatenate([t.detach().float().numpy().ravel() for t in new])
    changed = np.concatenate([(g.detach() != 0).numpy().ravel() for g in grads])
    shows = oracle_shows(old32, new32, fp16_weights=fp16)
    with np.errstate(over="ignore"):
        cannot_hold = ~np.isfinite(old32.astype(np.float16))
    return int(changed.sum()), int((changed & ~shows).sum()), int((changed & cannot_hold).sum())


def random_weights(
    dtype: torch.dtype, shape: tuple[int, ...], seed: int, beyond_fp16: bool = False
) -> torch.Tensor:
    """Weights around 1 +- 30; `beyond_fp16`: a third of them scaled past FP16's range and
    one inf and one NaN."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(shape, generator=generator, dtype=torch.float64) * 30 + 1
    if beyond_fp16:
        flat = weights.view(-1)
        flat[::3] *= 1e4  # |w| from a few thousand to a few million: both sides of 65504
        if flat.numel() > 6:
            flat[4], flat[5] = float("inf"), float("nan")
    return weights.to(dtype)


def step_of(weights: torch.Tensor, seed: int) -> torch.Tensor:
    """Weights after a step of assorted sizes (many lost in FP16, many not)."""
    generator = torch.Generator().manual_seed(seed)
    size = torch.exp2(torch.randint(-14, 2, weights.shape, generator=generator)).double()
    noise = torch.randn(weights.shape, generator=generator, dtype=torch.float64)
    return (weights.double() + size * noise).to(weights.dtype)


def gradients_for(weights: torch.Tensor, seed: int) -> torch.Tensor:
    """Gradients with zeros of both signs, and one inf and one NaN where there is room."""
    generator = torch.Generator().manual_seed(seed)
    grads = torch.randn(weights.shape, generator=generator).to(weights.dtype)
    flat = grads.view(-1)
    flat[::5] = 0.0
    flat[1::7] = -0.0
    if flat.numel() > 4:
        flat[2], flat[3] = float("inf"), float("nan")
    return grads


LAYOUTS = {
    "float32": [(torch.float32, (17, 9)), (torch.float32, (9,)), (torch.float32, ())],
    # Weights FP16 cannot hold (|w| > 65504, inf, NaN): counted apart (see random_weights).
    "float32 beyond FP16": [(torch.float32, (30, 7)), (torch.float32, (7,))],
    "float16": [(torch.float16, (33, 4)), (torch.float16, (4,))],
    "bfloat16": [(torch.bfloat16, (20, 6)), (torch.bfloat16, (6,))],
    "float64": [(torch.float64, (12, 5)), (torch.float64, (5,))],
    "mixed": [(torch.float16, (10, 3)), (torch.float32, (3, 7)), (torch.bfloat16, (8,))],
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_counts_equal_the_formula_on_whole_copies(layout: str) -> None:
    check = LostUpdateCheck()
    for step in range(3):  # the buffers are reused from step to step
        params = [random_weights(dtype, shape, 10 * step + i, "beyond" in layout)
                  for i, (dtype, shape) in enumerate(LAYOUTS[layout])]  # fmt: skip
        grads = [gradients_for(p, 100 + i) for i, p in enumerate(params)]
        old = [p.clone() for p in params]
        check.keep(params)
        for param, i in zip(params, range(len(params)), strict=True):
            param.copy_(step_of(param, 200 + i))  # the optimizer's step, in place
        counts = check.count(params, grads)
        assert counts is not None and counts.dtype == torch.float32
        intended, applied, nonfinite = (int(c) for c in counts.tolist())
        expected_intended, expected_lost, expected_nonfinite = oracle_counts(old, params, grads)
        assert (intended, intended - applied) == (expected_intended, expected_lost)
        assert nonfinite == expected_nonfinite
        assert 0 < expected_lost < expected_intended or layout == "float16"
        assert (expected_nonfinite > 0) == ("beyond" in layout)
        check.forget()


def test_no_counts_without_weights_kept_or_after_the_layout_changed() -> None:
    check = LostUpdateCheck()
    params = [torch.randn(4, 3), torch.randn(3)]
    grads = [torch.randn(4, 3), torch.randn(3)]
    assert check.count(params, grads) is None  # the optimizer was not called
    check.keep(params)
    assert check.count([params[0]], [grads[0]]) is None  # another set of parameters
    assert check.count(params, grads) is not None
    check.forget()
    assert check.count(params, grads) is None
    # A gradient of another shape but the same size is read in the weight's order.
    check.keep(params)
    counts = check.count(params, [grads[0].reshape(12), grads[1]])
    assert counts is not None and counts.tolist()[0] == 15


def test_a_sampled_model_counts_the_sample() -> None:
    # Beyond LOST_UPDATE_SAMPLE weights, the counts are those of the sampled elements.
    shapes = [(700, 1000), (1000,), (400, 1000)]  # 1.101M weights
    params = [random_weights(torch.float32, shape, i) for i, shape in enumerate(shapes)]
    grads = [gradients_for(p, 50 + i) for i, p in enumerate(params)]
    old = [p.clone() for p in params]
    check = LostUpdateCheck()
    check.keep(params)
    for i, param in enumerate(params):
        param.copy_(step_of(param, 70 + i))
    counts = check.count(params, grads)
    assert counts is not None and check.sampled
    sample = check.sample
    assert isinstance(sample, UpdateSample) and sample.size == updates.LOST_UPDATE_SAMPLE

    def picked(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [sample.gather([t.reshape(-1) for t in tensors])]  # torch.cat + index_select

    intended, applied, nonfinite = (int(c) for c in counts.tolist())
    expected = oracle_counts(picked(old), picked(params), picked(grads))
    assert (intended, intended - applied, nonfinite) == expected
    assert intended < sum(p.numel() for p in params)


def test_monitor_counts_lost_updates_of_sampled_fp16_weights(tmp_path: Path) -> None:
    # FP16 weights beyond the sample size: the share is measured on the sample, "actual".
    torch.manual_seed(7)
    model = nn.Linear(1100, 1000).half()
    with torch.no_grad():
        model.weight.mul_(40).add_(1.0)  # weights where FP16 ulps are large
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        for param in model.parameters():  # gradients set directly: FP16 matmuls are slow here
            param.grad = gradients_for(param.detach(), 3).half()
        old = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        record = monitor.step(0.0)
    figures = record.lost_updates
    params = [p.detach() for p in model.parameters()]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    intended, lost, _ = oracle_counts(old, params, grads)
    assert figures is not None and figures.kind == "actual" and figures.intended == intended
    assert figures.sampled is not None and figures.bound is not None
    assert abs(figures.share - lost / intended) <= figures.bound
    assert 0.05 < lost / intended < 0.95


def test_bfloat16_gradients_of_float32_weights() -> None:
    # ml_dtypes is the oracle for the gradients' zeros in a dtype numpy lacks.
    grads = [gradients_for(torch.empty(6, 4), 9).bfloat16()]
    params = [random_weights(torch.float32, (6, 4), 1)]
    old = [params[0].clone()]
    check = LostUpdateCheck()
    check.keep(params)
    params[0].copy_(step_of(params[0], 2))
    counts = check.count(params, grads)
    assert counts is not None
    as_bf16 = grads[0].view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    assert int(counts.tolist()[0]) == int(np.sum(as_bf16.astype(np.float32) != 0))
    assert counts.tolist()[0] - counts.tolist()[1] == oracle_counts(old, params, grads)[1]


@pytest.mark.parametrize("beyond", ["all", "some"])
def test_weights_fp16_cannot_hold_are_not_reported_as_updates_lost(
    tmp_path: Path, beyond: str
) -> None:
    # FP32 weights beyond FP16's range: FP16(w) is inf before and after the step, which the
    # share counted as an update lost ("FP16 weights would lose 100% of these updates to
    # rounding" when all were). The record counts them; the summary says what
    # is the case (this failed before; the panel's text: test_view_model).
    from fpexplorer.training.summary import format_summary, summarize_file

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    with torch.no_grad():
        if beyond == "all":
            model.weight.fill_(1e5)
            model.bias.fill_(-7e4)
        else:
            model.weight[0].fill_(65520.0)  # the first value FP16 rounds to inf
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    path = tmp_path / "run.jsonl"
    with AmpMonitor(model, optimizer, None, out=path, stats_every=1) as monitor:
        loss = model(torch.ones(2, 4)).square().mean()
        loss.backward()
        optimizer.step()
        record = monitor.step(loss)
    lost = record.lost_updates
    assert lost is not None and lost.intended == 15 and lost.kind == "fp16_would_lose"
    assert lost.nonfinite_weights == (15 if beyond == "all" else 4)
    text = format_summary(summarize_file(path))
    assert "would lose" not in text
    assert (
        "updates    lost to rounding: n/a (1 statistics step had weights FP16 cannot hold "
        "(|w| > 65504, or inf/NaN), left out)"
    ) in text


class ComplexWeights(nn.Module):
    """A complex weight and a real one beside it (the test sets their gradients itself)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(size)
        parts = torch.randn(size, 2, generator=generator) * 30 + 1
        self.weight = nn.Parameter(torch.complex(parts[:, 0], parts[:, 1]))
        self.bias = nn.Parameter(torch.randn(8, generator=generator) * 30)


def as_parts(values: np.ndarray) -> np.ndarray:
    """Each value's real part then its imaginary part, float32 (a real array as it is)."""
    if not np.iscomplexobj(values):
        return values.astype(np.float32).ravel()
    return np.stack([values.real, values.imag], axis=-1).astype(np.float32).ravel()


@pytest.mark.parametrize(
    ("size", "optimizers"),
    # The general path, the CPU float32 path, and each weight its own optimizer (kept as
    # each steps, `keep_part`).
    [(64, 1), (12_000, 1), (64, 2)],
)
def test_complex_weights_count_each_real_and_imaginary_part_as_a_weight(
    tmp_path: Path, size: int, optimizers: int
) -> None:
    # The float32 buffers took `copy_` of the complex weights and gradients, which keeps the
    # real parts only (torch warned): an update to imaginary parts only read as lost, and
    # gradients with zero real parts as no update intended (share 1.0 of 0 intended; this
    # failed before). Each part is a weight, as torch's optimizers take it: numpy's FP16
    # rounding of each part is the oracle.
    model = ComplexWeights(size)
    groups = [list(model.parameters())] if optimizers == 1 else [[model.weight], [model.bias]]
    steppers = [torch.optim.SGD(group, lr=1.0) for group in groups]
    generator = torch.Generator().manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Casting complex values to real discards..."
        monitor = AmpMonitor(model, steppers, None, out=tmp_path / "run.jsonl", stats_every=1)
        with monitor:
            for _ in range(3):
                # Steps from far below to far above half an FP16 ulp of the weights (about
                # 2**-6 at 30): many lost, many not. Imaginary parts only in the first half.
                sizes = torch.exp2(torch.randint(-14, 2, (size, 2), generator=generator))
                parts = sizes * torch.randn(size, 2, generator=generator)
                parts[: size // 2, 0] = 0.0
                parts[::5] = 0.0  # no update to either part
                model.weight.grad = torch.complex(parts[:, 0], parts[:, 1])
                model.bias.grad = torch.randn(8, generator=generator)
                model.bias.grad[::3] = 0.0
                old = [as_parts(p.detach().numpy().copy()) for p in model.parameters()]
                for optimizer in steppers:
                    optimizer.step()
                record = monitor.step(0.0)
                new = [as_parts(p.detach().numpy()) for p in model.parameters()]
                grads = [as_parts(p.grad.numpy()) for p in model.parameters() if p.grad is not None]
                intended = np.concatenate(grads) != 0
                shows = oracle_shows(np.concatenate(old), np.concatenate(new), fp16_weights=False)
                lost = int((intended & ~shows).sum())
                assert 0 < lost < intended.sum()
                assert record.lost_updates is not None
                assert record.lost_updates.intended == int(intended.sum())
                assert record.lost_updates.share == lost / int(intended.sum())
                assert record.lost_updates.kind == "fp16_would_lose"
                assert record.stats is not None and record.stats.grad_hist is not None
                assert record.stats.grad_hist.zero == int((~intended).sum())
