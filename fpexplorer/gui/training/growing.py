"""Bounded buffers that start small: rows allocated as they come, doubling up to a capacity.

The run model's buffers (scalars, heatmaps, quantized-layer history) hold at most their
capacity and then decimate. Allocated whole at once, a run of 40 steps cost as much as
one of a million, about 1 MB: hundreds of small runs opened together took 560 MB.
"""

from __future__ import annotations

import numpy as np

INITIAL_ROWS = 16  # rows a bounded buffer starts with; doubled as needed up to its capacity


def grown_rows(array: np.ndarray, capacity: int, fill: float) -> np.ndarray:
    """`array` with twice the rows (at most `capacity`), the new ones `fill`."""
    rows = min(capacity, 2 * len(array))
    grown = np.full((rows, *array.shape[1:]), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown
