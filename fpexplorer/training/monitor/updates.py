"""The lost-update statistic: among the weights whose gradient is not zero, those whose FP16
value did not change in the optimizer step (FP16 weights) or would not have changed (any
other weights: FP16(FP16(w_old) + (w_new - w_old)), the sum in FP32, compared with
FP16(w_old), as an FP16 weight would be updated). Needs torch.

The weights are read twice: before the optimizer step (`LostUpdateCheck.keep`: a copy of
all of them up to LOST_UPDATE_SAMPLE, of a fixed random sample of that many beyond) and
after it (`LostUpdateCheck.count`). Both work in buffers kept from step to step (a fresh
temporary the size of the model costs its page faults on every step on a CPU, often more
than the arithmetic done in it), with dtype conversions and arithmetic only: on a CPU
torch's element-wise comparisons take four to six times as long as a subtraction, and
FP16 arithmetic is slower still (measured again on torch 2.13: one `ne` of the FP16
copies of the transformer's 114528 weights takes ~170 us, the four float32 operations
below ~45 us; only below a few thousand weights is the single `ne` cheaper, by ~2 us).
Two FP16 values are compared as the float32 difference of their float32 copies, clamped
to +-65520 so that an infinity minus itself reads as equal (see `_values_differ`); a
difference converted to bool is True where the values differ (NaN included, as NaN == NaN
is False).

Complex weights are followed as their real and imaginary parts, each a weight (as torch's
optimizers update them, through `torch.view_as_real`): an update intended where that part
of the gradient is not zero, lost where that part's FP16 value would not change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

# The lost-update share of a model with more weights than this is measured on this many,
# drawn at random (with replacement, fixed for the run): the record says so and gives the
# share's bound at this confidence (Hoeffding), e.g. +-0.0019 when all 2**20 had updates.
LOST_UPDATE_SAMPLE = 1 << 20
LOST_UPDATE_CONFIDENCE = 0.999

# Float32 weights on a CPU are counted by `_count_on_cpu` from this many: below it the
# general path's few operations, the same ones each step, cost less in a training loop
# (measured on the built-in mlp's 4482 weights: ~66 us against ~87 us in its loop, though
# ~30 us both when timed alone), above it the fewer passes pay (the transformer's 114528:
# ~360 us against ~430 to 540 us).
_CPU_PATH_FROM = 1 << 14

# Beyond every finite FP16 value (65504) and below float32's infinity: clamping the float32
# copies of FP16 values to +-this maps +-inf onto values that equal only themselves.
_PAST_FP16_MAX = 65520.0


def hoeffding_bound(count: int, confidence: float = LOST_UPDATE_CONFIDENCE) -> float:
    """Half-width of the interval around a share measured on `count` independent draws that
    holds the whole population's share with probability `confidence`."""
    if count <= 0:
        return 1.0
    return math.sqrt(math.log(2 / (1 - confidence)) / (2 * count))


def as_real(tensors: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    """`tensors`, each complex one as its real and imaginary parts (`torch.view_as_real`, a
    view with a last dimension of 2): a float copy of a complex tensor keeps its real part
    only."""
    if not any(map(torch.is_complex, tensors)):
        return tensors
    return [torch.view_as_real(t) if t.is_complex() else t for t in tensors]


class UpdateSample:
    """The weights the lost-update check follows: all of them, or `LOST_UPDATE_SAMPLE`
    drawn at random (seed 0) from a larger model, so that the weights kept from before the
    optimizer step never take more than a few MiB."""

    def __init__(self, numels: tuple[int, ...], device: torch.device) -> None:
        self.numels = numels
        total = sum(numels)
        self.sampled = total > LOST_UPDATE_SAMPLE
        self.size = LOST_UPDATE_SAMPLE if self.sampled else total
        self._picks: list[tuple[int, torch.Tensor]] = []
        self._offsets: list[int] = []  # where each position's picks begin in a gathered row
        if self.sampled:
            generator = torch.Generator().manual_seed(0)
            index = torch.randint(total, (LOST_UPDATE_SAMPLE,), generator=generator).sort()[0]
            start = 0
            for position, numel in enumerate(numels):
                ends = torch.tensor([start, start + numel])
                low, high = torch.searchsorted(index, ends).tolist()
                if high > low:
                    self._offsets.append(sum(p.numel() for _, p in self._picks))
                    self._picks.append((position, (index[low:high] - start).to(device)))
                start += numel

    def gather(self, flat: Sequence[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        """The followed elements of the 1-D tensors `flat` (one per parameter), in order: in
        `out` when given (`self.size` elements, converted as `copy_` converts), else in a
        new tensor of the dtype `torch.cat` gives them."""
        if not self.sampled:
            if out is None:
                return torch.cat(list(flat))
            offset = 0
            for tensor in flat:
                out[offset : offset + tensor.numel()].copy_(tensor)
                offset += tensor.numel()
            return out
        if out is None:
            return torch.cat(
                [flat[position].index_select(0, picks) for position, picks in self._picks]
            )
        offset = 0
        for position, picks in self._picks:
            part = out[offset : offset + picks.numel()]
            source = flat[position]
            if source.dtype == out.dtype:
                torch.index_select(source, 0, picks, out=part)
            else:
                part.copy_(source.index_select(0, picks))
            offset += picks.numel()
        return out

    def gather_part(self, flat: Mapping[int, torch.Tensor], out: torch.Tensor) -> None:
        """`gather` into `out` of the positions in `flat` (1-D tensors by position) only: the
        other positions' elements of `out` are left as they are. Only for a sampled layout."""
        for (position, picks), offset in zip(self._picks, self._offsets, strict=True):
            source = flat.get(position)
            if source is not None:
                out[offset : offset + picks.numel()].copy_(source.index_select(0, picks))


class _Buffers:
    """The work buffers of one layout of the weights (their shapes, in order), kept from
    step to step, with views of them shaped like the weights."""

    def __init__(self, shapes: tuple[torch.Size, ...], device: torch.device) -> None:
        self.shapes = shapes
        self.device = device
        self.sample = UpdateSample(tuple(shape.numel() for shape in shapes), device)
        size = self.sample.size
        self.old = torch.empty(size, dtype=torch.float32, device=device)
        self.work = torch.empty((3, size), dtype=torch.float32, device=device)
        self.half = torch.empty(size, dtype=torch.float16, device=device)
        self.flags = torch.empty((3, size), dtype=torch.bool, device=device)
        sampled = self.sample.sampled
        self.old_views = [] if sampled else self._views(self.old)
        # The rows and views each step uses, made once (a view is a tensor object each).
        self.work_rows = self.work.unbind(0)  # (scratch, the weights after the step, scratch)
        # (update intended, update shows, the weight's FP16 value is not finite)
        self.flag_rows = self.flags.unbind(0)
        self.flag_bytes = self.flags.view(torch.uint8)
        self.new_views = [] if sampled else self._views(self.work_rows[1])
        self.changed_views = [] if sampled else self._views(self.flag_rows[0])

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        views, offset = [], 0
        for shape in self.shapes:
            views.append(flat[offset : offset + shape.numel()].view(shape))
            offset += shape.numel()
        return views

    def copy_in(
        self, out: torch.Tensor, views: list[torch.Tensor], tensors: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """The followed elements of `tensors` (shaped as the weights, in their order) in the
        1-D `out`, converted as `copy_` converts (float to bool: != 0): one multi-tensor
        copy through `views` (out's, shaped like the tensors), or a gather of the sample."""
        if self.sample.sampled:
            return self.sample.gather([t.reshape(-1) for t in tensors], out)
        torch._foreach_copy_(views, list(tensors))
        return out

    def copy_in_part(
        self, out: torch.Tensor, views: list[torch.Tensor], tensors: Mapping[int, torch.Tensor]
    ) -> None:
        """`copy_in` of the weights-shaped tensors at the positions given (a mapping from
        position to tensor); the rest of `out` is left as it is."""
        if not tensors:
            return
        if self.sample.sampled:
            self.sample.gather_part({i: t.reshape(-1) for i, t in tensors.items()}, out)
            return
        torch._foreach_copy_([views[i] for i in tensors], list(tensors.values()))


class LostUpdateCheck:
    """The weights before an optimizer step, and the count of updates lost in it.

    `keep(params)` before the step (the parameters that have gradients, in a fixed order),
    `count(params, grads)` after it with the same parameters and their gradients. Every
    tensor is copied into flat buffers kept between steps by one multi-tensor copy, or
    gathered element by element for a sampled model; then a fixed sequence of element-wise
    operations on the buffers makes the flags and one product counts them."""

    def __init__(self) -> None:
        self._buffers: _Buffers | None = None
        self._kept = False  # the buffer `old` holds this step's weights before the update
        self._kept_positions: set[int] = set()  # keep_part: the positions `old` holds
        self._intended: list[torch.Tensor] = []  # keep_part: non-zero gradients kept
        self._fp16_weights = False  # FP16 weights: the update shows or it does not
        # All weights float32, on a CPU, followed whole: `count` may take `_count_on_cpu`.
        self._cpu_float32 = False

    @property
    def sample(self) -> UpdateSample | None:
        return self._buffers.sample if self._buffers is not None else None

    @property
    def sampled(self) -> bool:
        return self._buffers is not None and self._buffers.sample.sampled

    def forget(self) -> None:
        """Drop the kept weights (the step is recorded); the buffers stay for the next."""
        self._kept = False
        self._kept_positions = set()
        self._intended = []

    def keep(self, params: Sequence[torch.Tensor]) -> None:
        """Copy the weights the check follows (in float32: exact for 16-bit weights, the
        rounding `float()` makes for wider ones), before the optimizer changes them."""
        self._kept = False
        if not params:
            return
        params = as_real(params)
        buffers = self._buffers_for(params)
        with torch.no_grad():
            buffers.copy_in(buffers.old, buffers.old_views, params)
        self._kept = True

    def _buffers_for(self, params: Sequence[torch.Tensor]) -> _Buffers:
        shapes = tuple(p.shape for p in params)
        buffers = self._buffers
        if buffers is None or buffers.shapes != shapes or buffers.device != params[0].device:
            buffers = self._buffers = None  # the old buffers go before the new are made
            buffers = self._buffers = _Buffers(shapes, params[0].device)
            self._kept_positions = set()
        self._fp16_weights = all(p.dtype == torch.float16 for p in params)
        self._cpu_float32 = (
            buffers.device.type == "cpu"
            and not buffers.sample.sampled
            and buffers.sample.size >= _CPU_PATH_FROM
            # Every weight on the CPU, not only the first (whose device the buffers take):
            # the general path copies weights of other devices in, the CPU path's in-place
            # operations on them would not.
            and all(p.dtype == torch.float32 and p.is_cpu for p in params)
        )
        return buffers

    def keep_part(
        self,
        params: Sequence[torch.Tensor],
        positions: Sequence[int],
        grads: Sequence[torch.Tensor | None],
    ) -> None:
        """`keep` of the weights at `positions` of `params` only, with the updates intended
        there: their gradients (`grads`, one per position, None for none: no update), read
        now. Several optimizers: each keeps its own parameters' as it steps (`params`, all
        of theirs, is one layout for the run; a GAN's discriminator gradients gain the
        generator loss's after its own step). `count_part` counts what was kept since
        `forget`."""
        if not params or not positions:
            return
        params = as_real(params)
        grads = [g if g is None or not g.is_complex() else torch.view_as_real(g) for g in grads]
        buffers = self._buffers_for(params)
        if not self._kept_positions:  # the first optimizer of the step
            buffers.flag_rows[0].zero_()  # no update intended where nothing is kept
            self._intended = []
        changed: dict[int, torch.Tensor] = {}
        for position, grad in zip(positions, grads, strict=True):
            if grad is not None and grad.numel() == params[position].numel():
                changed[position] = grad.reshape(params[position].shape)
        with torch.no_grad():
            buffers.copy_in_part(buffers.old, buffers.old_views, {i: params[i] for i in positions})
            buffers.copy_in_part(buffers.flag_rows[0], buffers.changed_views, changed)  # != 0
            self._intended += [torch.count_nonzero(grad) for grad in changed.values()]
        self._kept_positions.update(positions)

    @property
    def intended(self) -> torch.Tensor | None:
        """After `keep_part`: the updates intended in all the kept weights (non-zero
        gradients, NaN included), sampled or not; None when none were kept."""
        if not self._kept_positions:
            return None
        if not self._intended:
            return torch.zeros((), dtype=torch.int64)
        return torch.stack(self._intended).sum()

    def count_part(self, params: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """`count` over the weights kept by `keep_part` (the updates intended as read then);
        None when none were kept or the parameters changed since."""
        buffers = self._buffers
        if not self._kept_positions or buffers is None:
            return None
        params = as_real(params)
        if tuple(p.shape for p in params) != buffers.shapes:
            return None
        kept = sorted(self._kept_positions)
        with torch.no_grad():
            (scratch, new, _), (_, shows, nonfinite) = buffers.work_rows, buffers.flag_rows
            buffers.copy_in_part(new, buffers.new_views, {i: params[i] for i in kept})
            # Where nothing was kept `old` and `new` hold what earlier steps left: their flags
            # are multiplied by the zeros of `changed` there.
            update_shows(buffers.old, new, fp16_weights=self._fp16_weights, out=shows,
                         work=scratch, half=buffers.half, nonfinite=nonfinite)  # fmt: skip
            ones = buffers.work.copy_(buffers.flag_bytes)  # [changed, shows, nonfinite]: 0/1
            return torch.mv(ones, scratch)

    def count(
        self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]
    ) -> torch.Tensor | None:
        """[updates intended, updates intended and applied, updates intended to weights
        whose FP16 value is not finite] in the followed weights (exact counts in float32, on
        the device; the first two's difference is the updates lost; the third says where
        that means nothing: a weight beyond FP16's range reads inf before and after, not an
        update lost to rounding), or None when no weights were kept before the step (the
        optimizer was not called: a skipped step) or the parameters changed since."""
        buffers = self._buffers
        if not self._kept or buffers is None:
            return None
        params, grads = as_real(params), as_real(grads)
        shapes = buffers.shapes
        if tuple(p.shape for p in params) != shapes:
            return None
        if tuple(g.shape for g in grads) != shapes:  # e.g. a gradient of another shape
            if tuple(g.numel() for g in grads) != buffers.sample.numels:
                return None
            grads = [g.reshape(shape) for g, shape in zip(grads, shapes, strict=True)]
        with torch.no_grad():
            if self._cpu_float32:
                counts = _count_on_cpu(buffers, params, grads)
                if counts is not None:
                    return counts
            (scratch, new, _), (changed, shows, nonfinite) = buffers.work_rows, buffers.flag_rows
            buffers.copy_in(new, buffers.new_views, params)
            update_shows(buffers.old, new, fp16_weights=self._fp16_weights, out=shows,
                         work=scratch, half=buffers.half, nonfinite=nonfinite)  # fmt: skip
            buffers.copy_in(changed, buffers.changed_views, grads)  # as bool: != 0, NaN too
            # The three counts in one product of rows of 0/1 (the work rows are free again):
            # sums of integers below 2**24, exact in float32.
            ones = buffers.work.copy_(buffers.flag_bytes)  # [changed, shows, nonfinite]: 0/1
            return torch.mv(ones, scratch)


def _count_on_cpu(
    buffers: _Buffers, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]
) -> torch.Tensor | None:
    """`LostUpdateCheck.count` of float32 weights followed whole on a CPU, where reading a
    value back costs nothing: when every FP16(w_old) is finite (their float32 sum is: each
    is at most 65504, and there are at most 2**20 of them), FP16(w_old) cannot be inf, so
    no clamp is needed to read inf == inf as equal, and no weight is one FP16 cannot hold
    (the third count is 0); w_new is subtracted from the parameters themselves (one
    multi-tensor operation, no copy of them first). The same float32 arithmetic as
    `update_shows`, in fewer passes over the weights, counted by numpy. None (nothing
    changed) when some FP16(w_old) is inf or NaN: the general path counts those."""
    (fp16_old, new, _), shows = buffers.work_rows, buffers.flag_rows[1]
    old, half = buffers.old, buffers.half
    half.copy_(old)  # FP16(w_old)
    fp16_old.copy_(half)
    if not math.isfinite(float(fp16_old.sum())):
        return None
    torch._foreach_sub_(buffers.old_views, list(params))  # w_old - w_new, as `update_shows`
    torch.sub(fp16_old, old, out=new)  # FP16(w_old) + (w_new - w_old)
    half.copy_(new)  # ... rounded to FP16
    new.copy_(half)
    # x - y == 0 exactly when x == y for finite x, y (zeros of either sign equal); with
    # FP16(w_old) finite, a rounded sum of inf gives inf and one of NaN NaN: both differ.
    torch.sub(new, fp16_old, out=old)
    shows.copy_(old)  # bool: != 0, NaN too
    torch._foreach_copy_(buffers.changed_views, list(grads))  # as bool: != 0, NaN too
    # Counted by numpy on the flags' bytes: several times faster than torch's count_nonzero
    # (or a conversion to float and a product) on a CPU.
    flags = buffers.flag_bytes.numpy()
    intended = np.count_nonzero(flags[0])
    applied = np.count_nonzero(np.bitwise_and(flags[0], flags[1], out=flags[2]))
    # No weight FP16 cannot hold. Counts below 2**24: exact in float32.
    return torch.tensor([intended, applied, 0], dtype=torch.float32)


def update_shows(
    old: torch.Tensor,
    new: torch.Tensor,
    *,
    fp16_weights: bool,
    out: torch.Tensor | None = None,
    work: torch.Tensor | None = None,
    half: torch.Tensor | None = None,
    nonfinite: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per weight, whether its update shows in FP16, from 1-D float32 tensors of the weights
    before (`old`) and after (`new`) the step: for FP16 weights, new != old; for others,
    FP16(FP16(old) + (new - old)) != FP16(old), in float32 arithmetic, as an FP16 weight
    would be updated. `old` and `new` are overwritten. `out` (bool), `work` (float32) and
    `half` (float16), of the same size, are the buffers used (made when not given).
    `nonfinite` (bool, optional) receives, per weight, whether FP16(old) is inf or NaN
    (|old| beyond FP16's largest finite value, 65504, rounds to inf): there inf == inf reads
    as an update lost, NaN != NaN as one applied, and neither is true."""
    out = torch.empty_like(old, dtype=torch.bool) if out is None else out
    fp16_old = torch.empty_like(old) if work is None else work
    if fp16_weights:
        if nonfinite is not None:
            torch.sub(old, old, out=fp16_old)  # 0 where finite, NaN at inf/NaN
            nonfinite.copy_(fp16_old)  # bool: != 0, NaN too
        _values_differ(old, new, fp16_old, out)
        return out
    half = torch.empty_like(old, dtype=torch.float16) if half is None else half
    half.copy_(old)  # FP16(w_old)
    fp16_old.copy_(half)
    old.sub_(new)  # w_old - w_new: exactly -(w_new - w_old) in float32
    torch.sub(fp16_old, old, out=new)  # FP16(w_old) + (w_new - w_old)
    half.copy_(new)  # ... rounded to FP16
    if nonfinite is not None:  # `new` is free until it takes the rounded sum back
        torch.sub(fp16_old, fp16_old, out=new)  # 0 where FP16(w_old) is finite, else NaN
        nonfinite.copy_(new)
    new.copy_(half)
    _values_differ(fp16_old, new, old, out)
    return out


def _values_differ(
    first: torch.Tensor, second: torch.Tensor, work: torch.Tensor, out: torch.Tensor
) -> None:
    """out = (first != second) for float32 tensors holding FP16 values (finite, +-inf or
    NaN), without a comparison kernel; `first` and `second` are clamped in place.

    For finite x and y, x - y == 0 exactly when x == y (gradual underflow; FP16 values are
    far from float32's limits); +-inf are clamped to +-65520, which no other value takes, so
    that inf == inf reads as equal; NaN stays NaN (clamp keeps it), a difference that is
    True as a bool, as NaN == NaN is False. Zeros of either sign are equal."""
    first.clamp_(-_PAST_FP16_MAX, _PAST_FP16_MAX)
    second.clamp_(-_PAST_FP16_MAX, _PAST_FP16_MAX)
    torch.sub(first, second, out=work)
    out.copy_(work)  # bool: x != 0
