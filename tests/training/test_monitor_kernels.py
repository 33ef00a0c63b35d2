"""The counting kernels alone: a segment's code counts by either path (table lookup for small
tensors, pattern bins for large ones) equal the exact histogram; the host pack reads parts
back by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fpexplorer.training.monitor.kernels import (
    BINADE_LO,
    CODES,
    PATTERNS,
    ZERO_CODE,
    Scratch,
    _code_tables,
    _first_code,
    _map_patterns,
    code_histogram,
    count_deferred_zeros,
    segment_of,
    segment_rows,
)
from fpexplorer.training.monitor.plan import HostPack


def spread(numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    exponents = torch.randint(-150, 120, (numel,), generator=generator)
    values = torch.randn(numel, generator=generator) * torch.pow(2.0, exponents.double()).float()
    values[::97] = 0.0
    values[5] = math.inf
    values[6] = math.nan
    return values.to(dtype)


@pytest.mark.parametrize("numel", [1000, 50_000])  # below and above the lookup limit
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_segment_code_counts_equal_the_exact_histogram(numel: int, dtype: torch.dtype) -> None:
    tensor = spread(numel, dtype, seed=numel)
    segments = count_deferred_zeros([segment_of(0, tensor.reshape(10, -1), Scratch())])
    rows, amax = segment_rows(segments)
    exact = code_histogram(tensor)
    row = rows[0]
    if dtype == torch.float32:
        # Pattern 0 holds zero and |x| < 2**-133, binades -149..-134: the decoder places
        # those exactly; the row keeps them in its last column, zeros included.
        deep = -134 - BINADE_LO + 1
        assert int(row[CODES]) == int(exact[:deep].sum()) + int(exact[ZERO_CODE])
        assert int(row[:deep].sum()) == 0
        assert torch.equal(row[deep:CODES], exact[deep:])
    else:
        assert torch.equal(row[:CODES], exact)
    assert int(exact.sum()) == numel
    assert math.isnan(float(amax[0]))  # a NaN makes max |x| NaN: the layer is non-finite


def test_the_host_pack_reads_parts_back_by_name() -> None:
    pack = HostPack(torch.device("cpu"))
    pack.add("loss", torch.tensor(0.5))
    pack.add("norms", torch.tensor([1.0, 2.0, 3.0]))
    pack.add("scale", 65536.0)
    host = pack.fetch()
    assert host.scalar("loss") == 0.5 and host.scalar("scale") == 65536.0
    assert np.array_equal(host["norms"], [1.0, 2.0, 3.0])
    assert "norms" in host and "rows" not in host
    with pytest.raises(ValueError):
        pack.add("loss", 1.0)


@pytest.mark.parametrize("table_name", ["float16", "bfloat16", "float32_high"])
def test_block_mapping_of_pattern_counts_equals_the_table(table_name: str) -> None:
    # Normal rows summed in place must give what the pattern-by-pattern table gives.
    tables = _code_tables(torch.device("cpu"))
    generator = torch.Generator().manual_seed(2)
    counts = torch.randint(0, 1000, (PATTERNS,), generator=generator)
    table = tables[table_name]
    assert _first_code(table_name, table) is not None  # the block path is taken
    assert torch.equal(_map_patterns(counts, table, table_name), _map_patterns(counts, table))
