"""Tests of the demo kernel z = alpha * x + y (npu_lab.kernels.scaled_add; README.md).

* numbers: equal to the numpy reference, exactly, for every size, tile, buffer count and block
  count (tail tiles and tail blocks included);
* time: double buffering is strictly faster than single buffering when a core handles several
  tiles and exactly as fast with one tile per core (the overlap *emerges* from the queue rules);
* input errors name what was wrong and what would be right;
* a golden timeline (tests/golden/scaled_add_910b2.json) guards against silent model changes.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from npu_lab.lang import CapabilityError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.scaled_add import ScaledAddTiling, scaled_add, scaled_add_reference

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOLDEN = Path(__file__).parent / "golden" / "scaled_add_910b2.json"
CHIPS = ("ascend-910b2", "ascend-310p3")


@st.composite
def problems(draw, max_n=50_000, max_tiles=1000):
    """(n, tile_len, num_buffers, block_dim or None, chip). tile_len is a multiple of 8; at most
    ``max_tiles`` tiles in all, so that a full run (every tile simulated) stays quick."""
    n = draw(st.integers(1, max_n))
    min_k = max(1, math.ceil(n / (8 * max_tiles)))
    # at most 7840 elements: three double-buffered float32 queues fill the 910B2's usable UB (192 KB - 256 B - 8 KB)
    tile_len = 8 * draw(st.integers(min_k, max(min_k, 980)))
    num_buffers = draw(st.sampled_from([1, 2]))
    block_dim = draw(st.one_of(st.none(), st.integers(1, 64)))
    chip = draw(st.sampled_from(CHIPS))
    return n, tile_len, num_buffers, block_dim, chip


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    y = (rng.standard_normal(n) * 100).astype(np.float32)
    return x, y


# ---- numbers -----------------------------------------------------------------------------------------


def test_reference_is_float32_alpha_x_plus_y():
    """The numpy reference computes alpha * x + y in float32."""
    x = np.array([1, 2, 3], np.float32)
    y = np.array([10, 20, 30], np.float32)
    out = scaled_add_reference(x, y, 0.5)
    assert out.dtype == np.float32 and out.tolist() == [10.5, 21, 31.5]


@settings(max_examples=40, **SETTINGS)
@given(problem=problems(), alpha=st.floats(-1e3, 1e3, allow_nan=False, width=32))
def test_equals_numpy_reference_exactly(problem, alpha):
    """Every element equals float32(alpha) * x + y computed by numpy, bit for bit."""
    n, tile_len, num_buffers, block_dim, chip = problem
    x, y = data(n, seed=n)
    if n % 8 and get_preset(chip).isa == "ascend310p":
        # a tail that is not whole 32-byte blocks needs DataCopyPad, which the 310P lacks
        with pytest.raises(CapabilityError, match="DataCopyPad"):
            scaled_add(x, y, alpha, hw=chip, tile_len=tile_len, num_buffers=num_buffers, block_dim=block_dim)
        return
    z, tl = scaled_add(x, y, alpha, hw=chip, tile_len=tile_len, num_buffers=num_buffers, block_dim=block_dim)
    np.testing.assert_array_equal(z, scaled_add_reference(x, y, alpha))
    assert z.dtype == np.float32
    assert tl.hbm_bytes == 12 * n  # read x and y, write z: nothing more, nothing less


@pytest.mark.parametrize("n", [1, 7, 8, 9, 2047, 2048, 2049, 48 * 2048 + 1])
def test_edge_sizes(n):
    """Sizes around tile and block boundaries (tail tiles shorter than tile_len)."""
    x, y = data(n)
    z, _ = scaled_add(x, y, -3.0, tile_len=2048)
    np.testing.assert_array_equal(z, scaled_add_reference(x, y, -3.0))


def test_inputs_are_not_modified_and_special_values_pass_through():
    """The kernel reads x and y and writes z; inf and nan propagate as in numpy."""
    x = np.array([1, np.inf, np.nan, -0.0, 3e38], np.float32)
    y = np.array([1, 1, 1, 0.0, 3e38], np.float32)
    xc, yc = x.copy(), y.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        ref = scaled_add_reference(x, y, 2.0)
    z, _ = scaled_add(x, y, 2.0, tile_len=8)
    np.testing.assert_array_equal(z, ref)
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(y, yc)


def test_timing_only_returns_no_numbers():
    """scaled_add(n, None, timing_only=True) gives (None, timeline) without any data."""
    z, tl = scaled_add(100_000, None, timing_only=True)
    assert z is None and tl.total_us > 0 and tl.hbm_bytes == 1_200_000


# ---- block and tile layout ---------------------------------------------------------------------------


def test_default_block_dim_is_cores_capped_by_tiles():
    """Default: one block per vector core, but never more blocks than tiles."""
    _, tl = scaled_add(10 * 2048, None, tile_len=2048, timing_only=True)
    assert tl.launches[0].block_dim == 10
    _, tl = scaled_add(10**6, None, tile_len=2048, timing_only=True)
    assert tl.launches[0].block_dim == 48
    _, tl = scaled_add(10**6, None, tile_len=2048, hw="310p3", timing_only=True)
    assert tl.launches[0].block_dim == 8


def test_tiling_struct_round_trips_through_bytes():
    """ScaledAddTiling packs to the 20 bytes the host would copy: 4 little-endian int32, then alpha
    as a float32 (the entry takes no scalar by value: alpha travels in the tiling)."""
    import struct
    t = ScaledAddTiling(total=1000, block_len=300, tile_len=64, num_buffers=2, alpha=1.5)
    raw = t.pack()
    assert len(raw) == 20 and raw[:4] == (1000).to_bytes(4, "little")
    assert struct.unpack("<f", raw[16:])[0] == 1.5
    assert ScaledAddTiling.unpack(raw) == t
    assert t.block_dim == 4
    assert [t.block_range(i) for i in range(4)] == [(0, 300), (300, 300), (600, 300), (900, 100)]
    with pytest.raises(ValueError, match="20 bytes"):
        ScaledAddTiling.unpack(raw[:16])


# ---- time --------------------------------------------------------------------------------------------


@settings(max_examples=40, **SETTINGS)
@given(n=st.integers(1, 50_000), tile_len=st.sampled_from([64, 256, 512, 1024, 2048]),
       block_dim=st.one_of(st.none(), st.integers(1, 48)), chip=st.sampled_from(CHIPS))
def test_double_buffering_is_faster_iff_a_core_has_several_tiles(n, tile_len, block_dim, chip):
    """With >= 2 tiles in some block, 2 buffers are strictly faster than 1 (load of tile i+1
    overlaps compute of tile i); with at most one tile per block the two are identical.
    (Sizes stay far below the HBM roofline, where both would be bandwidth-bound.)"""
    if n % 8 and get_preset(chip).isa == "ascend310p":
        return                      # a tail needs DataCopyPad there: test_equals_numpy_reference_exactly
    kw = dict(hw=chip, tile_len=tile_len, block_dim=block_dim, timing_only=True)
    _, single = scaled_add(n, None, num_buffers=1, **kw)
    _, double = scaled_add(n, None, num_buffers=2, **kw)
    block_dim_used = block_dim if block_dim is not None else min(get_preset(chip).vector_cores,
                                                                 -(-n // tile_len))
    block_len = -(-(-(-n // block_dim_used)) // 8) * 8     # the host rounds to whole 32-B blocks
    if block_len > tile_len:
        assert double.total_us < single.total_us
    else:
        assert double.total_us == single.total_us


def test_double_buffering_hides_the_compute_time():
    """48 cores x 8 tiles of 2048. Scaled add is DMA-bound (MTE2 moves 16 KB per tile, V does
    two cheap instructions), so with one buffer each tile's compute delays the next load, and
    with two buffers it is hidden: the saving is about 7 tiles' compute time per core."""
    n = 48 * 8 * 2048
    _, single = scaled_add(n, None, num_buffers=1, timing_only=True)
    _, double = scaled_add(n, None, num_buffers=2, timing_only=True)
    saving_us = single.total_us - double.total_us
    compute_per_tile_us = double.busy_us_by_pipe()["V"] / (48 * 8)
    assert saving_us > 0
    # with one buffer each tile also waits out a load's and a store's request latency (the
    # copies' data is complete dma_latency_cycles after their transfer): two buffers hide that too
    hw = double.hw
    latency_us = hw.cycles_to_us(2 * hw.dma_latency_cycles + 4 * hw.sync_flag_cycles)
    assert 0.5 * 7 * compute_per_tile_us < saving_us < 1.5 * 7 * (compute_per_tile_us + latency_us)


def test_more_blocks_than_cores_run_in_waves():
    """block_dim = 96 on 48 cores: two waves, slower than 48 blocks doing the same work."""
    n = 96 * 512
    _, one_wave = scaled_add(n, None, tile_len=512, block_dim=48, timing_only=True)
    _, two_waves = scaled_add(n, None, tile_len=512, block_dim=96, timing_only=True)
    rec = two_waves.launches[0]
    assert rec.block_dim == 96 and rec.block_core.max() == 47
    assert np.all(rec.block_start[48:] > rec.block_start[:48])


def test_310p3_is_slower_than_910b2_on_a_large_vector():
    """A quarter of the cores, about 1/8 of the bandwidth, a slower clock."""
    n = 4 * 10**6
    _, b2 = scaled_add(n, None, hw="910b2", timing_only=True)
    _, p3 = scaled_add(n, None, hw="310p3", timing_only=True)
    assert p3.total_us > 2 * b2.total_us


# ---- input errors ------------------------------------------------------------------------------------


X8 = np.ones(8, np.float32)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: scaled_add(np.ones(8), X8), TypeError, ["x", "float32", "float64"]),
    (lambda: scaled_add(X8, np.ones(8, np.int32)), TypeError, ["y", "float32"]),
    (lambda: scaled_add(X8, np.ones(9, np.float32)), ValueError, ["same length", "(8,)", "(9,)"]),
    (lambda: scaled_add(np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)), ValueError, ["1-D"]),
    (lambda: scaled_add(np.ones(0, np.float32), np.ones(0, np.float32)), ValueError, ["empty"]),
    (lambda: scaled_add(0, None, timing_only=True), ValueError, ["n must be >= 1"]),
    (lambda: scaled_add(X8, X8, tile_len=12), ValueError, ["tile_len", "multiple of 8"]),
    (lambda: scaled_add(X8, X8, tile_len=0), ValueError, ["tile_len"]),
    (lambda: scaled_add(X8, X8, tile_len=64.0), ValueError, ["tile_len"]),
    (lambda: scaled_add(X8, X8, num_buffers=3), ValueError, ["num_buffers", "1", "2"]),
    (lambda: scaled_add(X8, X8, tile_len=1 << 16), ValueError, ["UB", "Largest tile_len"]),
    (lambda: scaled_add(X8, X8, hw="ascend-950"), KeyError, ["ascend-950", "known presets"]),
    (lambda: scaled_add(X8, X8, block_dim=-1), ValueError, ["block_dim"]),
])
def test_bad_inputs_raise_helpful_errors(call, exc, words):
    """Each bad input raises the right exception whose message names the problem and the fix."""
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_block_dim_zero_is_a_clear_value_error():
    """block_dim=0 is refused with a ValueError that names block_dim."""
    with pytest.raises(ValueError, match="block_dim"):
        scaled_add(X8, X8, block_dim=0)


def test_numpy_integer_tile_len_is_accepted():
    """tile_len / num_buffers given as numpy integers work like Python ints."""
    z, _ = scaled_add(X8, X8, tile_len=np.int64(64), num_buffers=np.int64(2))
    np.testing.assert_array_equal(z, scaled_add_reference(X8, X8, 2.0))


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("num_buffers", [1, 2])
def test_ub_overflow_suggests_a_tile_that_fits(chip, num_buffers):
    """The UB error names the largest tile_len that fits; that one runs, 8 more does not."""
    hw = get_preset(chip)
    largest = (hw.ub_usable_bytes // (3 * num_buffers * 4)) // 8 * 8
    with pytest.raises(ValueError, match=f"Largest tile_len: {largest}"):
        scaled_add(1000, None, hw=hw, tile_len=largest + 8, num_buffers=num_buffers, timing_only=True)
    _, tl = scaled_add(largest * 2, None, hw=hw, tile_len=largest, num_buffers=num_buffers, timing_only=True)
    assert tl.total_us > 0


# ---- golden timeline ---------------------------------------------------------------------------------

GOLDEN_EVENT_FIELDS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements"]


def golden_run():
    """The fixed run the golden file records: 20 000 elements, 4 blocks of 5 tiles of 1024,
    double-buffered, on the 910B2 preset."""
    x, y = data(20_000, seed=42)
    z, tl = scaled_add(x, y, 2.0, hw="ascend-910b2", tile_len=1024, num_buffers=2, block_dim=4)
    np.testing.assert_array_equal(z, scaled_add_reference(x, y, 2.0))
    events = tl.events().head(20)[GOLDEN_EVENT_FIELDS]
    return {
        "run": "scaled_add(x, y, 2.0, hw='ascend-910b2', tile_len=1024, num_buffers=2, block_dim=4), n=20000",
        "total_us": tl.total_us,
        "busy_us_by_pipe": {p: b for p, b in tl.busy_us_by_pipe().items() if b > 0},
        "hbm_bytes": tl.hbm_bytes,
        "first_events": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                         for row in events.to_dict(orient="records")],
    }


def _compare(expected, actual, path="golden"):
    """Recursive comparison: numbers to rel 1e-9, everything else exactly."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(expected) == set(actual), f"{path}: keys differ"
        for key in expected:
            _compare(expected[key], actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(expected) == len(actual), f"{path}: lengths differ"
        for i, (e, a) in enumerate(zip(expected, actual)):
            _compare(e, a, f"{path}[{i}]")
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), f"{path}: {actual} != {expected}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def test_golden_timeline():
    """The fixed run's latency, per-pipe busy time, HBM bytes and first 20 events match the
    recorded golden file. If the model changed on purpose, regenerate it with
    NPU_LAB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_scaled_add.py -k golden
    and review the diff of tests/golden/ before committing."""
    actual = json.loads(json.dumps(golden_run()))
    if os.environ.get("NPU_LAB_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(actual, indent=1) + "\n")
    assert GOLDEN.exists(), ("golden file missing; create it with NPU_LAB_UPDATE_GOLDEN=1 "
                             ".venv/bin/python -m pytest tests/test_scaled_add.py -k golden")
    expected = json.loads(GOLDEN.read_text())
    try:
        _compare(expected, actual)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nThe scaled-add timeline differs from {GOLDEN}. If you changed the hardware "
            "model, a preset or the kernel ON PURPOSE, regenerate the golden file with\n"
            "    NPU_LAB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_scaled_add.py -k golden\n"
            "and review `git diff tests/golden/`; otherwise this is a silent model change: find it."
        ) from None


@pytest.mark.parametrize("alpha", [1e39, float("inf"), float("nan"), "2", None, True])
def test_alpha_must_fit_the_tiling_structs_float(alpha):
    """alpha travels in ScaledAddTiling as a C float: what a float32 cannot hold is refused up front."""
    x = np.ones(16, np.float32)
    with pytest.raises(ValueError, match="alpha must be a finite number a float32 holds"):
        scaled_add(x, x, alpha)
