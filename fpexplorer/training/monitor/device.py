"""What the run ran on and how much memory its tensors take, for the run-log header and
the statistics steps. Needs torch."""

from __future__ import annotations

import functools
import platform
import sys
from collections.abc import Iterable

import torch

from fpexplorer.training.monitor.kernels import dtype_name


def bytes_by_dtype(tensors: Iterable[torch.Tensor]) -> dict[str, int]:
    totals: dict[torch.dtype, int] = {}
    for tensor in tensors:
        # numel * element_size: nbytes is not defined for sparse tensors.
        size = tensor.numel() * tensor.element_size()
        totals[tensor.dtype] = totals.get(tensor.dtype, 0) + size
    return {dtype_name(dtype): size for dtype, size in totals.items()}


@functools.cache
def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's model name ("AMD EPYC 7B13"), else its architecture ("x86_64")."""
    try:
        # Linux says it in /proc/cpuinfo; platform.processor() would fork `uname -p` there
        # and usually answers only the architecture anyway.
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    if sys.platform != "linux" and platform.processor():
        return platform.processor()
    return platform.machine() or "cpu"


def device_description(device: torch.device) -> dict[str, str]:
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device)}
    return {"type": device.type, "name": cpu_name()}
