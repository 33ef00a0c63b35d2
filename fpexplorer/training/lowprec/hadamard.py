"""The random Hadamard transform (RHT) of NVIDIA's NVFP4 training recipe, in torch.

Before the weight-gradient matmul grad_W = gᵀ·x is quantized, both operands are rotated
along its reduction dimension M (the batch rows) in tiles of 16 rows: each tile t becomes
Hᵀ·t with H = S·H₁₆/4, H₁₆ the 16×16 Sylvester Hadamard matrix (entries ±1) and S the
diagonal matrix of a fixed sign vector. H is orthogonal (H·Hᵀ = I), so gᵀ·x is unchanged
before rounding: (Hᵀg)ᵀ(Hᵀx) = gᵀ·H·Hᵀ·x. Rotating spreads a block's outlier over the 16
rows of its tile, which block scaling then resolves better (NVIDIA applies it to the
Wgrad operands only: a 16-point mix is cheap there and the forward and data-gradient
matmuls gain little). Rows are zero-padded to a multiple of 16 first: the padding rotates
into non-zero values, but in both operands alike, and the product over the padded rows is
still gᵀ·x.

Cost: one batched 16×16 matmul per tile (32 flops per element) in float32; no host
synchronisation.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

HADAMARD_SIZE = 16
# The sign vector Transformer Engine fixes for its NVFP4 recipe (one vector shared by every
# layer and step, as the NVFP4 pretraining paper describes): random once, then constant.
SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def rht_matrix(device: torch.device | str = "cpu") -> torch.Tensor:
    """H = S·H₁₆/4 (16×16 float32 on `device`): orthogonal, entries exactly ±1/4. Made
    once per device (a host-to-device copy on an accelerator), then reused."""
    return _rht_matrix(torch.device(device))


@functools.cache
def _rht_matrix(device: torch.device) -> torch.Tensor:
    hadamard = torch.ones(1, 1)
    while hadamard.shape[0] < HADAMARD_SIZE:  # Sylvester: [[H, H], [H, -H]]
        hadamard = torch.cat(
            [torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0
        )
    signs = torch.tensor(SIGNS, dtype=torch.float32)
    return (signs[:, None] * hadamard / 4.0).to(device)  # S·H₁₆/√16


def hadamard_rows(x: torch.Tensor) -> torch.Tensor:
    """`x` (rows × columns, float32) rotated along its rows in tiles of 16: each tile t
    becomes Hᵀ·t. Rows are zero-padded to a multiple of 16 first, so the result has
    ceil(rows / 16)·16 rows."""
    rows, cols = x.shape
    padded = F.pad(x, (0, 0, 0, -rows % HADAMARD_SIZE))
    tiles = padded.reshape(-1, HADAMARD_SIZE, cols)
    rotated = torch.matmul(rht_matrix(x.device).t(), tiles)
    return rotated.reshape(-1, cols)


def inverse_hadamard_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Undo `hadamard_rows`: each tile t becomes H·t, and the first `rows` rows are kept."""
    tiles = x.reshape(-1, HADAMARD_SIZE, x.shape[1])
    restored = torch.matmul(rht_matrix(x.device), tiles)
    return restored.reshape(-1, x.shape[1])[:rows]
