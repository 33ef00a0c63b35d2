"""The header names the device a run used: the CUDA device's name, or the CPU's model."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from fpexplorer.training.monitor import cpu_name, device_description


def test_cpu_is_named_by_its_model_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example  CPU 9000\n")
    assert cpu_name(str(cpuinfo)) == "Example CPU 9000"


def test_cpu_name_falls_back_to_the_architecture(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cpuinfo"
    name = cpu_name(str(missing))
    assert name and (name == platform.machine() or name == platform.processor())


def test_cpu_device_description_uses_the_model_name() -> None:
    described = device_description(torch.device("cpu"))
    assert described == {"type": "cpu", "name": cpu_name()}
