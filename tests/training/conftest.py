"""Training tests run torch on one thread: the machine's 2 cores are shared."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)
