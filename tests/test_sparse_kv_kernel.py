"""The sparse-KV kernel (npu_lab/kernels/sparse_kv/kernel.py) against the reference over many
shapes: the kept positions (sinks, then descending score, ties to the lower position) and the
gathered rows exactly; edge cases; timing-only = full; the host's refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.sparse_kv import (compress_kv, compress_kv_npu, importance, n_keep_of, select_tokens,
                                       sparse_kv_tiling, synthetic_kv)
from npu_lab.lang.launch import full_timing_every_block

HW = get_preset("ascend-910b2")
HYP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _kv(seed, H, S, D, dtype, ties):
    rng = np.random.default_rng(seed)
    if ties:                                   # few distinct values: many equal key norms
        k = rng.integers(-1, 2, (H, S, D)).astype(dtype)
    else:
        k = rng.standard_normal((H, S, D)).astype(dtype)
    return k, rng.standard_normal((H, S, D)).astype(dtype)


def _check(k, v, ratio, sinks, score="key_norm", queries=None, **kw):
    run = compress_kv_npu(k, v, ratio, sinks, score, queries=queries, **kw)
    want = select_tokens(importance(k, score, queries), run.n_keep, sinks)
    np.testing.assert_array_equal(run.indices, want)
    g = want[:, :, None].astype(np.int64)
    np.testing.assert_array_equal(run.k, np.take_along_axis(k, g, axis=1))
    np.testing.assert_array_equal(run.v, np.take_along_axis(v, g, axis=1))
    ref = compress_kv(k, v, ratio, sinks, score, queries=queries)
    np.testing.assert_array_equal(run.mask, ref.mask)
    assert (run.bytes_full, run.bytes_kept) == (ref.bytes_full, ref.bytes_kept)
    return run


@HYP
@given(seed=st.integers(0, 2**16), H=st.integers(1, 4), S=st.integers(1, 700),
       D=st.sampled_from([16, 32, 64, 128]), dtype=st.sampled_from([np.float16, np.float32]),
       ratio=st.floats(0.01, 1.0), sinks=st.integers(0, 8), ties=st.booleans(), rpt=st.none() | st.integers(1, 9))
def test_kernel_matches_reference(seed, H, S, D, dtype, ratio, sinks, ties, rpt):
    if D * np.dtype(dtype).itemsize % 32:
        D *= 2
    sinks = min(sinks, S)
    k, v = _kv(seed, H, S, D, dtype, ties)
    n = n_keep_of(S, ratio, sinks)
    _check(k, v, ratio, sinks, rows_per_tile=None if rpt is None else min(rpt, n))


@pytest.mark.parametrize("S", [1, 31, 32, 33, 100, 128, 160, 200, 513, 1000, 4096])
def test_every_merge_shape(S):
    """1 list (no merge); 2 (one 2-way MrgSort); 4 (one repeat); 5 (a group + a lone list Copy);
    7 (a group + a 3-way); 17, 32, 128 lists (several rounds, shorter last lists)."""
    k, v = _kv(S, 2, S, 16, np.float16, False)
    _check(k, v, 0.3, min(4, S))


def test_keep_all_and_only_sinks_and_ties():
    k, v = _kv(7, 3, 90, 32, np.float32, True)
    run = _check(k, v, 1.0, 4)                              # keep all: every position, sinks first
    assert sorted(run.indices[0].tolist()) == list(range(90))
    run = _check(k, v, 0.01, 6)                             # only the sinks
    np.testing.assert_array_equal(run.indices, np.tile(np.arange(6), (3, 1)))
    z = np.zeros((2, 64, 16), np.float32)                   # all scores equal: the first positions
    run = _check(z, z + 1, 0.25, 0)
    np.testing.assert_array_equal(run.indices, np.tile(np.arange(16), (2, 1)))


def test_window_score_on_synthetic_data():
    d = synthetic_kv(heads=2, tokens=300, head_dim=64, seed=2)
    _check(d.k, d.v, 0.3, 4, "window", d.queries)


def test_gather_is_whole_row_datacopy_and_the_sort_is_sort32():
    d = synthetic_kv(heads=1, tokens=256, head_dim=64, seed=0)
    run = compress_kv_npu(d.k, d.v, 0.25, 4, rows_per_tile=16)
    ev = run.timeline.events()
    names = ev.name.tolist()
    n = run.n_keep
    row = f"DataCopy GM->UB {64 * 4} B"
    assert sum(x == row for x in names) == 2 * n                   # one copy per kept K row and V row
    assert sum(x == f"DataCopy UB->GM {16 * 64 * 4} B" for x in names) == 2 * n // 16
    assert any(x.startswith("Sort32") for x in names) and any(x.startswith("MrgSort") for x in names)
    assert (ev["pipe"] == "MTE2").sum() == 2 * n + 1                   # + the scores: no element-wise copies
    assert (ev["pipe"] == "MTE3").sum() == 2 * n // 16 + 1              # + the indices


def test_double_buffered_gather_overlaps():
    d = synthetic_kv(heads=1, tokens=512, head_dim=128, seed=0)
    ev = compress_kv_npu(d.k, d.v, 0.5, 4, rows_per_tile=8).timeline.events()
    loads = ev[ev.name == "DataCopy GM->UB 512 B"].start_us.to_numpy()
    stores = ev[(ev["pipe"] == "MTE3") & ev.name.str.contains("4096 B")].end_us.to_numpy()
    assert loads[8] < stores[0]                # tile 1 loads before tile 0's store is done
    assert loads[16] >= stores[0]              # tile 2 waits for tile 0's slot


@pytest.mark.parametrize("H, S", [(3, 200), (60, 64)])
def test_timing_only_equals_full(H, S):
    k, v = _kv(1, H, S, 32, np.float16, False)
    fast = compress_kv_npu(k, v, 0.3, 4)
    timing = compress_kv_npu(k, v, 0.3, 4, timing_only=True)
    with full_timing_every_block():
        full = compress_kv_npu(k, v, 0.3, 4)
    cols = ["pipe", "name", "start_us", "end_us"]
    for other in (timing, full):
        assert other.timeline.total_us == fast.timeline.total_us
        assert other.timeline.events()[cols].equals(fast.timeline.events()[cols])
    np.testing.assert_array_equal(full.k, fast.k)
    assert timing.k is None and timing.mask is None


def test_host_refusals():
    k, v = _kv(0, 1, 64, 16, np.float32, False)          # 16 float32 = 64 B rows: fine
    with pytest.raises(ValueError, match="multiple of 8"):
        compress_kv_npu(k[:, :, :12], v[:, :, :12], 0.5)
    big = np.zeros((1, 4097, 16), np.float16)
    with pytest.raises(ValueError, match="at most 4096 tokens"):
        compress_kv_npu(big, big, 0.5)
    with pytest.raises(ValueError, match="keep_ratio"):
        compress_kv_npu(k, v, 0)
    with pytest.raises(ValueError, match="more sinks than tokens"):
        compress_kv_npu(k, v, 0.5, sinks=65)
    with pytest.raises(ValueError, match="rows_per_tile"):
        compress_kv_npu(k, v, 0.5, rows_per_tile=33)
    with pytest.raises(TypeError, match="hw must be"):
        compress_kv_npu(k, v, 0.5, hw=3)
    t = sparse_kv_tiling(1, 4096, 128, 4096, 4, 4, HW)
    assert 1 <= t.rowsPerTile < 4096                       # the sort buffers leave room for some rows
