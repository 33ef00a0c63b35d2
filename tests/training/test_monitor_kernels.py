"""The counting kernels alone, against an oracle (numpy's frexp in float64) and the exact
`code_histogram`: an activation gradient's segment by either path (table lookup for small
16-bit tensors, pattern counts per exponent field for large ones, the exponent field of
float32), turned into rows by `segment_rows` and decoded as the step record's decoder does;
parameter-gradient groups by either bin layout; the host pack reads parts back by name."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

from fpexplorer.training.monitor import kernels
from fpexplorer.training.monitor.kernels import (
    BINADE_LO,
    CODES,
    INF_CODE,
    NAN_CODE,
    NUM_BINADES,
    PATTERNS,
    ZERO_CODE,
    Scratch,
    Segment,
    _code_tables,
    _first_code,
    _map_patterns,
    code_histogram,
    group_code_counts,
    segment_of,
    segment_rows,
)
from fpexplorer.training.monitor.plan import HostPack, StatsPlan
from fpexplorer.training.records import Memory


def oracle_codes(tensor: torch.Tensor) -> np.ndarray:
    """CODES counts from numpy: floor(log2 |x|) by frexp in float64 (exact for every float32,
    hence for float16/bfloat16 values converted to float32)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs stay NaN
        values = tensor.detach().float().reshape(-1).numpy().astype(np.float64)
    counts = np.zeros(CODES, dtype=np.int64)
    finite = values[np.isfinite(values) & (values != 0)]
    _, exponent = np.frexp(np.abs(finite))
    np.add.at(counts, exponent - 1 - BINADE_LO, 1)
    counts[ZERO_CODE] = int(np.sum(values == 0))
    counts[INF_CODE] = int(np.sum(np.isinf(values)))
    counts[NAN_CODE] = int(np.sum(np.isnan(values)))
    return counts


def oracle_amax(tensor: torch.Tensor) -> float:
    values = tensor.detach().float().reshape(-1).numpy()
    if values.size == 0:
        return 0.0
    return math.nan if np.isnan(values).any() else float(np.abs(values).max())


RowsOf = Callable[[Sequence[Segment]], tuple[torch.Tensor, torch.Tensor]]


@pytest.fixture(params=["cpu", "accelerator", "accelerator_counts_cpu_rows"])
def rows_of(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> RowsOf:
    """The ways a step's segments become rows: on a CPU (small tensors counted together in
    numpy, rows placed in numpy), as on an accelerator (every tensor counted by torch in its
    hook, by index_add as on CUDA, rows placed by torch; run here on the CPU), and the two
    crossed."""
    if request.param == "cpu":
        return segment_rows
    monkeypatch.setattr(kernels, "_HOST_BELOW", 0)
    monkeypatch.setattr(kernels, "_BINCOUNT_DEVICES", ())  # counts by index_add, as on CUDA
    monkeypatch.setattr(kernels, "_READ_IN_HOOK_DEVICES", ())  # no host reads in hooks
    return kernels._device_rows if request.param == "accelerator" else kernels._host_rows


def decoded(segments: list[Segment], rows_of: RowsOf) -> tuple[np.ndarray, np.ndarray]:
    """([segments, CODES] histograms, max |x| per segment) as the step record's decoder reads
    them: rows from `segment_rows`, through the host pack, float32 rows that the bits cannot
    decide counted again from the values."""
    plan = StatsPlan(
        layer_names=("layer",),
        param_groups=(),
        act_segments=tuple(segments),
        param_layers=(),
        forward_layers=(),
        scale=1.0,
        memory=Memory(),
        formats=(),
        lost_update_kind=None,
        lost_update_sampled=False,
        scratch=Scratch(),
    )
    rows, amax = rows_of(segments)
    pack = HostPack(torch.device("cpu"))
    pack.add("rows", rows.reshape(-1).to(torch.float64))
    pack.add("amax", amax.to(torch.float64))
    host = pack.fetch()
    return plan._histograms(host, plan.segments).astype(np.int64), host["amax"]


def assert_segments_exact(tensors: list[torch.Tensor], rows_of: RowsOf) -> None:
    segments = [segment_of(0, tensor) for tensor in tensors]
    histograms, amax = decoded(segments, rows_of)
    for tensor, histogram, peak in zip(tensors, histograms, amax, strict=True):
        assert np.array_equal(histogram, oracle_codes(tensor))
        expected = oracle_amax(tensor)
        assert (math.isnan(peak) and math.isnan(expected)) or peak == expected


def all_patterns(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16_bit_pattern_by_every_path(dtype: torch.dtype, rows_of: RowsOf) -> None:
    patterns = all_patterns(dtype)
    # Whole (the pattern counts), and in pieces below the lookup limit; the pieces without
    # NaN or inf give max |x| as a number; one is strided.
    finite = patterns[patterns.float().isfinite()]
    pieces = [*patterns.split(2048), *finite.split(20000), finite[::3][:7000].reshape(-1, 7)]
    assert_segments_exact([patterns, *pieces, finite[:60000].reshape(2, -1).t()], rows_of)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_rows_need_no_second_look(dtype: torch.dtype, rows_of: RowsOf) -> None:
    # The 16-bit counts place every element: the row equals the oracle as it comes; only
    # the small ones waiting to be counted together keep their tensor.
    for tensor in (all_patterns(dtype), all_patterns(dtype)[::9]):
        segment = segment_of(0, tensor)
        assert segment.exact
        assert (segment.tensor is not None) == (segment.layout == "pending")
        rows, _ = rows_of([segment])
        assert np.array_equal(rows[0, :CODES].numpy(), oracle_codes(tensor))


def float32_cases() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    exponents = torch.randint(-150, 128, (50_000,), generator=generator)
    spread = torch.randn(50_000, generator=generator) * torch.pow(2.0, exponents.double())
    spread = spread.float()
    spread[::97] = 0.0
    normal = torch.randn(3000, generator=generator) * 1e-3
    nan_low = torch.tensor([0x7F800001, 0x7F80FFFF, 0xFF800123 - 2**32, 0x7FC00000],
                           dtype=torch.int32).view(torch.float32)  # fmt: skip
    deep = torch.tensor([2.0**-149, -(2.0**-149), 3 * 2.0**-149, 2.0**-134, 2.0**-133,
                         2.0**-127, 2.0**-126 * 0.75, 0.0, -0.0])  # fmt: skip
    with_inf = torch.cat([normal, torch.tensor([math.inf, -math.inf, 2.0**127])])
    with_nan = torch.cat([normal, nan_low, torch.tensor([math.inf])])
    matrix = torch.randn(64, 96, generator=generator)
    return [
        spread,  # every binade, zeros, subnormals, inf/NaN from overflow
        normal,
        normal.reshape(30, 100)[:, ::3],  # not contiguous
        matrix.t(),  # transposed
        with_inf,
        with_nan,  # NaN payloads only in the low 16 bits have an inf's top half
        deep,
        torch.zeros(5000),
        torch.relu(torch.randn(40_000, generator=generator)),  # zeros, counted in the hook
        torch.randn(40_000, generator=generator).abs() + 1e-3,  # no zeros
        -torch.zeros(7, 3),
        torch.zeros(0),
        torch.zeros(0, 4),
        torch.tensor(-2.5),  # 0-dim
        torch.randn(200, dtype=torch.float64, generator=generator) * 1e-30,  # converted
    ]


def test_float32_segments_decode_exactly(rows_of: RowsOf) -> None:
    assert_segments_exact(float32_cases(), rows_of)


def test_float32_rows_need_a_second_look_only_for_subnormals_inf_and_nan(
    rows_of: RowsOf,
) -> None:
    plain = torch.randn(4000) * 1e-3
    plain[::5] = 0.0
    subnormal = plain.clone()
    subnormal[3] = 2.0**-130
    overflow = plain.clone()
    overflow[3] = math.inf
    tensors = (plain, subnormal, overflow)
    segments = [segment_of(0, t) for t in tensors]
    rows, _ = rows_of(segments)
    for segment, row, tensor, second_look in zip(
        segments, rows, tensors, (False, True, True), strict=True
    ):
        if segment.exact:  # an accelerator's hook counts every float32 gradient exactly
            assert np.array_equal(row[:CODES].numpy(), oracle_codes(tensor))
        else:
            undecided = bool(row[CODES] > row[ZERO_CODE]) or bool(row[INF_CODE] > 0)
            assert undecided == second_look
    assert np.array_equal(rows[0, :CODES].numpy(), oracle_codes(plain))


def normal_bfloat16_patterns() -> torch.Tensor:
    """Every bfloat16 pattern with exponent field 1..254 (both signs), and +0.0 and -0.0."""
    patterns = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    field = (patterns.int() & 0x7F80) >> 7
    normal = patterns[(field > 0) & (field < 255)]
    zeros = torch.tensor([0, -(2**15)], dtype=torch.int16)
    return torch.cat([normal, zeros]).view(torch.bfloat16)


def cpu_field_cases() -> list[torch.Tensor]:
    """Gradients a CPU hook counts by their exponent fields: bfloat16, float32 (whose field
    is the same), float64 (converted); contiguous, transposed, strided."""
    generator = torch.Generator().manual_seed(7)
    bf16 = normal_bfloat16_patterns()
    wide = bf16.float()
    low_bits = torch.randint(0, 2**16, wide.shape, generator=generator, dtype=torch.int32)
    wide = torch.where(wide == 0, wide, (wide.view(torch.int32) | low_bits).view(torch.float32))
    wide[::13] = 0.0
    return [
        bf16,
        bf16.reshape(2, -1).t(),  # transposed
        bf16[::2],  # strided
        wide,
        wide.reshape(2, -1).t(),
        wide[1::3],
        (torch.randn(20_000, dtype=torch.float64, generator=generator) * 1e-3),
    ]


@pytest.mark.parametrize("zeros_first", [False, True])
def test_cpu_fields_place_every_normal_pattern_without_a_second_look(zeros_first: bool) -> None:
    # Every normal bfloat16 pattern (and the float32 values with the same exponent fields,
    # every low bit set somewhere, zeros among them) counted in the hook by the 1024 field
    # bins: exact as it comes, zeros counted there (-0.0 too; before the fields with the
    # hint `zeros_first`, after them without), max |x| exact.
    tensors = cpu_field_cases()
    segments = [segment_of(0, tensor, zeros_first=zeros_first) for tensor in tensors]
    assert [segment.layout for segment in segments] == ["exponents"] * len(tensors)
    assert all(segment.tensor is None for segment in segments)  # nothing kept
    histograms, amax = decoded(segments, segment_rows)
    for tensor, histogram, peak in zip(tensors, histograms, amax, strict=True):
        assert np.array_equal(histogram, oracle_codes(tensor))
        assert peak == oracle_amax(tensor)


@pytest.mark.parametrize(
    ("dtype", "odd"),
    [
        *((dtype, odd) for dtype in (torch.bfloat16, torch.float32)
          for odd in ("subnormal", "inf", "nan")),
        (torch.float32, "nan_low_bits"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("zeros_first", [False, True])
def test_cpu_fields_count_exactly_where_the_fields_cannot_place(
    dtype: torch.dtype, odd: str, zeros_first: bool
) -> None:
    # A subnormal (exponent field 0 holding more than the zeros), an infinity or a NaN
    # (field 255 holds both): the hook counts that gradient exactly instead.
    generator = torch.Generator().manual_seed(8)
    tensor = (torch.randn(20_000, generator=generator) * 1e-3).to(dtype)
    tensor[::7] = 0.0
    if odd == "nan_low_bits":  # a float32 NaN whose payload is only in its low 16 bits
        tensor.view(torch.int32)[5] = 0x7F800001
    else:
        tensor[5] = {"subnormal": -(2.0**-130), "inf": -math.inf, "nan": math.nan}[odd]
    segment = segment_of(0, tensor, zeros_first=zeros_first)
    assert segment.layout == "codes"
    histograms, amax = decoded([segment], segment_rows)
    assert np.array_equal(histograms[0], oracle_codes(tensor))
    expected = oracle_amax(tensor)
    assert (math.isnan(amax[0]) and math.isnan(expected)) or amax[0] == expected


def test_mixed_segments_keep_their_order(rows_of: RowsOf) -> None:
    # Layouts are stacked together: each row must still be its own segment's.
    generator = torch.Generator().manual_seed(5)
    tensors = [
        torch.randn(20_000, generator=generator).bfloat16(),
        torch.randn(300, generator=generator),
        torch.randn(500, generator=generator).half() * 1e-5,
        torch.randn(40_000, generator=generator).half(),
        torch.randn(100, generator=generator) * 1e-40,
        torch.randn(900, generator=generator).bfloat16(),
        torch.zeros(0).half(),
        torch.randn(30_000, generator=generator),
        torch.randn(9000, generator=generator).half(),
    ]
    assert_segments_exact(tensors, rows_of)


def test_many_small_tensors_counted_together(rows_of: RowsOf) -> None:
    # Small CPU tensors wait and are counted together, in one buffer and one count, however
    # many there are (float32 and bfloat16 alike): every row must still be its own tensor's.
    generator = torch.Generator().manual_seed(11)
    for count in (3, 16, 17, 40):
        tensors = [
            (torch.randn(50 + 7 * i, generator=generator) * 2.0 ** (i - 20)).to(
                torch.bfloat16 if i % 3 == 0 else torch.float32
            )
            for i in range(count)
        ]
        tensors[1][::5] = 0.0
        assert_segments_exact(tensors, rows_of)


def test_small_tensors_counted_in_several_threads_at_once_keep_their_own_counts() -> None:
    # Two monitors on two models in two threads: the buffers the small tensors are counted
    # in are reused from step to step, per layout of sizes, and must be per thread (the same
    # sizes in every thread here, each thread its own values and dtypes). A buffer shared by
    # the threads, written by one while another counts it, gave wrong rows or an error.
    import threading

    failures: list[str] = []

    def count_often(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        dtype = torch.bfloat16 if seed % 2 else torch.float32
        try:
            for _ in range(40):
                tensors = [
                    (torch.randn(size, generator=generator) * 2.0 ** (8 * seed - 12)).to(dtype)
                    for size in (3000, 5000, 7000)
                ]
                rows, _ = segment_rows([segment_of(0, tensor) for tensor in tensors])
                for tensor, row in zip(tensors, rows.numpy(), strict=True):
                    if not np.array_equal(row[:CODES], oracle_codes(tensor)):
                        failures.append(f"thread {seed}: a row not its tensor's")
                        return
        except Exception as error:  # reported below: a thread's exception is lost otherwise
            failures.append(f"thread {seed}: {error!r}")

    threads = [threading.Thread(target=count_often, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("route", ["one_copy", "chunks", "alone", "index_add"])
@pytest.mark.parametrize("keep_patterns", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_group_counts_equal_the_oracle(
    dtype: torch.dtype, keep_patterns: bool, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one_copy: all flattened at once; chunks: several buffers full, tensors split across
    # them; alone: one tensor (copied, never changed in place); index_add: counted as on
    # CUDA (whose bincount would sync).
    if route == "index_add":
        monkeypatch.setattr(kernels, "_BINCOUNT_DEVICES", ())
    if route == "chunks":
        monkeypatch.setattr(kernels, "_CHUNK", 1 << 14)
    generator = torch.Generator().manual_seed(6)
    exponents = torch.randint(-20, 10, (30_000,), generator=generator)
    base = torch.randn(30_000, generator=generator) * torch.pow(2.0, exponents.float())
    base[::11] = 0.0
    base[1] = -0.0
    members = [base[:7].to(dtype), base[7:20_007].to(dtype).reshape(100, -1).t(),
               base[20_007:].to(dtype)]  # fmt: skip
    if dtype == torch.float32:
        members.append(torch.tensor([2.0**-140, -(2.0**-128), 0.0, -0.0]))
        members.append(torch.randn(5, dtype=torch.float64))  # converted
    if route == "alone":
        members = [base.to(dtype)]
    before = [m.clone() for m in members]
    table = "float32_high" if dtype == torch.float32 else kernels.dtype_name(dtype)
    codes, patterns, nonzero = group_code_counts(members, table, Scratch(),
                                                 keep_patterns=keep_patterns)  # fmt: skip
    assert all(torch.equal(m, b) for m, b in zip(members, before, strict=True))
    expected = oracle_codes(torch.cat([m.reshape(-1).float() for m in members]))
    zeros = int(expected[ZERO_CODE])
    assert int(nonzero) == sum(m.numel() for m in members) - zeros
    got = codes.numpy().copy()
    if dtype == torch.float32:
        # Column CODES: the elements the bits leave to the values (zeros included): below
        # 2**-126 (exponent field 0) or, with the top-half patterns, below 2**-133.
        tiny = 2.0**-133 if keep_patterns else 2.0**-126
        magnitudes = np.abs(np.concatenate([m.reshape(-1).float().numpy() for m in members]))
        low = int(np.sum(magnitudes < tiny))
        assert int(got[CODES]) == low
        placed = got[:NUM_BINADES] > 0
        assert np.array_equal(got[:NUM_BINADES][placed], expected[:NUM_BINADES][placed])
        assert int(got[:NUM_BINADES].sum()) + low == int(expected.sum())
    else:
        assert np.array_equal(got[:CODES], expected)
    if keep_patterns:
        assert patterns is not None and int(patterns.sum()) == sum(m.numel() for m in members)
        assert int(patterns[0]) >= zeros
    else:
        assert patterns is None


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_code_histogram_equals_the_oracle(dtype: torch.dtype) -> None:
    # The exact fallback itself, on the float32 cases converted (NaN payloads included).
    for tensor in float32_cases():
        values = tensor.to(dtype)
        assert np.array_equal(code_histogram(values).numpy(), oracle_codes(values))


@pytest.mark.parametrize("chunk", [1 << 20, 1 << 10])
def test_group_code_histogram_equals_the_oracle(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exact fallback of a parameter group: one flattened copy, or one tensor at a time
    # beyond the chunk size; a lone tensor; float64 members converted.
    monkeypatch.setattr(kernels, "_CHUNK", chunk)
    cases = float32_cases()
    members = [cases[0][:3000], cases[5], cases[6], cases[2], cases[-1]]
    before = [m.clone() for m in members]
    expected = oracle_codes(torch.cat([m.reshape(-1).float() for m in members]))
    assert np.array_equal(kernels.group_code_histogram(members).numpy(), expected)
    assert all(
        m.numpy().tobytes() == b.numpy().tobytes() for m, b in zip(members, before, strict=True)
    )
    assert np.array_equal(kernels.group_code_histogram([cases[5]]).numpy(), oracle_codes(cases[5]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_small_cpu_group_waits_and_gives_the_same_row(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small CPU parameter group is counted with the activation gradients at the step; its
    # row (its zeros included) must be the one counting it at once gives.
    generator = torch.Generator().manual_seed(7)
    members = [torch.randn(64, 30, generator=generator).t(), torch.randn(30, generator=generator)]
    members[0][3, :5] = 0.0
    members[1][2] = -0.0
    members = [m.to(dtype) for m in members]
    if dtype == torch.float32:
        members.append(torch.tensor([2.0**-140, math.inf, -3.0], dtype=torch.float64))
    act = torch.randn(100, generator=generator).to(dtype)  # a small activation gradient too
    rows = []
    for host_below in (kernels._HOST_BELOW, 0):
        monkeypatch.setattr(kernels, "_HOST_BELOW", host_below)
        group = kernels.group_segment(members, dtype, Scratch())
        assert (group.layout == "pending") == (host_below > 0)
        found, _ = segment_rows([group, segment_of(0, act)])
        rows.append(found)
        assert np.array_equal(found[1, :CODES].numpy(), oracle_codes(act))
    assert torch.equal(rows[0], rows[1])
    expected = oracle_codes(torch.cat([m.reshape(-1).to(dtype).float() for m in members]))
    placed = rows[0][0, :CODES].numpy()
    if dtype == torch.float32:  # the subnormal and the inf are left to the exact fallback
        assert int(rows[0][0, CODES]) == int(expected[ZERO_CODE]) + 1
        assert int(rows[0][0, INF_CODE]) == 1 and int(placed[ZERO_CODE]) == int(expected[ZERO_CODE])
        assert np.array_equal(placed[:NUM_BINADES][placed[:NUM_BINADES] > 0],
                              expected[:NUM_BINADES][expected[:NUM_BINADES] > 0][1:])  # fmt: skip
    else:
        assert np.array_equal(placed, expected)
