"""A user task for `fpexplorer train --task examples/user_task.py:make_task`.

The factory returns (model, batches, loss_fn). It may accept any of the keyword arguments
`seed`, `batch_size` and `device`; fpexplorer passes those it declares.

    fpexplorer train --task examples/user_task.py:make_task --precision fp16 --steps 100 \
        --out my-run.jsonl
    fpexplorer runs summarize my-run.jsonl
"""

from __future__ import annotations

import torch
from torch import nn


def make_task(seed: int = 0, batch_size: int | None = None):
    generator = torch.Generator().manual_seed(seed)
    size = batch_size or 64
    # A small autoencoder on points near a random 4-dimensional subspace of R^32.
    basis = torch.randn(4, 32, generator=generator)
    data = torch.randn(1024, 4, generator=generator) @ basis
    batches = [data[i : i + size] for i in range(0, len(data) - size + 1, size)]
    model = nn.Sequential(nn.Linear(32, 8), nn.GELU(), nn.Linear(8, 32))

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target)

    # Each batch is (inputs, target); a list is re-iterated when the job needs more steps.
    return model, [(x, x) for x in batches], loss_fn
