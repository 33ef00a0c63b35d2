"""Per-tensor scaled casts (FP8 current or delayed scaling), emulated on any device; also
one scale per row, as torchao's rowwise recipe casts.

`quantize_tensorwise(x, element, scale)` does what torchao's float8 training does to a
tensor, in the same arithmetic: ``x * scale`` in float32 (one rounding), a saturating
cast into the element format (round to nearest-even, clamped to ±max), and back, divided
by the scale. For E4M3/E5M2 it equals torch's own cast,
``(x * scale).clamp(-max, max).to(torch.float8_e4m3fn)``, bit for bit (the tests hold
that); unlike it, it works for any element format of the engine (FP6, FP4, custom eXmY),
which is what lets the delayed-scaling recipe and its statistics share one path.

Cost: about ten elementwise float32 passes; no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fpexplorer.formats.format import FloatFormat
from fpexplorer.formats.registry import get_format

from .block_torch import INPUT_DTYPES, ElementGrid, round_to_grid


@dataclass(frozen=True, slots=True, eq=False)
class TensorwiseQuantized:
    """A tensor cast with one per-tensor scale (or one per row) and dequantized again.

    `scale` follows torchao's convention: the factor x is multiplied by before the cast
    (E4M3's 448 / amax for current scaling), a float32 tensor on x's device: 0-dim for a
    per-tensor cast, else one scale per row (or column), shaped to broadcast against x.
    `values` = cast(x · scale) / scale, x's shape and dtype.
    """

    element: FloatFormat
    input: torch.Tensor
    scale: torch.Tensor
    values: torch.Tensor

    def scaled_input(self) -> torch.Tensor:
        """x · scale in float32, as it was cast (the saturation test compares this)."""
        return self.input.float() * self.scale

    @property
    def per_tensor(self) -> bool:
        """One scale for the whole tensor (else one per row or column)."""
        return self.scale.dim() == 0


def quantize_tensorwise(
    x: torch.Tensor, element: FloatFormat | str, scale: float | torch.Tensor
) -> TensorwiseQuantized:
    """Cast ``x * scale`` into `element` (saturating, nearest-even) and divide it back.

    `scale`: a float or a 0-dim tensor (rounded to float32, as torchao keeps its scales),
    or a tensor of scales (one dimension or more) that broadcasts against x without
    changing its shape: one per row, shape (rows, 1). A tensor is not checked for being
    positive, so as not to synchronise with the device.
    """
    fmt = get_format(element)
    if not isinstance(x, torch.Tensor) or x.dtype not in INPUT_DTYPES:
        kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"quantize_tensorwise takes a float32/bfloat16/float16 tensor, not {kind}")
    grid = ElementGrid.of(fmt)
    scale_tensor = _scale_tensor(scale, x)
    cast = round_to_grid(x.float() * scale_tensor, grid, None)
    return TensorwiseQuantized(fmt, x, scale_tensor, (cast / scale_tensor).to(x.dtype))


def _scale_tensor(scale: float | torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    device = x.device
    if isinstance(scale, torch.Tensor):
        if scale.dim() == 0:
            return scale.to(device=device, dtype=torch.float32)
        pairs = zip(reversed(scale.shape), reversed(x.shape), strict=False)
        if scale.dim() > x.dim() or any(size not in (1, own) for size, own in pairs):
            raise ValueError(
                f"scales of shape {tuple(scale.shape)} do not broadcast against a tensor "
                f"of shape {tuple(x.shape)}: one number, or one per row such as (rows, 1)"
            )
        return scale.to(device=device, dtype=torch.float32)
    number = float(scale)
    rounded = torch.tensor(number, dtype=torch.float32)
    if not (number > 0 and float(rounded) > 0 and torch.isfinite(rounded)):
        raise ValueError(f"a per-tensor scale must be a positive float32 number, not {scale!r}")
    return rounded.to(device)
