"""KV-cache append (npu_lab/kernels/decode/append.py): the kernel against the numpy reference,
contiguous and paged, the host-side refusals (nothing written), the race detector on a copy of
the kernel without its flags, and timing-only = full."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.decode import (KvCacheFullError, kv_append_tiling, kv_cache_append, kv_cache_append_reference,
                                    paged_kv_cache_append, paged_kv_cache_append_reference)
from npu_lab.lang import RaceError
from npu_lab.lang.launch import full_timing_every_block

HW = get_preset("ascend-910b2")
HYP = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _case(seed, num_seqs, max_len, heads, dim, dtype, rows):
    rng = np.random.default_rng(seed)
    kc = rng.standard_normal((num_seqs, max_len, heads, dim)).astype(dtype)
    vc = rng.standard_normal((num_seqs, max_len, heads, dim)).astype(dtype)
    ids = rng.permutation(num_seqs)[:rows]
    lens = rng.integers(0, max_len, num_seqs)          # every sequence has room
    kn = rng.standard_normal((rows, heads, dim)).astype(dtype)
    vn = rng.standard_normal((rows, heads, dim)).astype(dtype)
    return kn, vn, kc, vc, ids, lens


@HYP
@given(seed=st.integers(0, 2**16), num_seqs=st.integers(1, 70), max_len=st.integers(1, 9),
       heads=st.integers(1, 8), dim=st.sampled_from([64, 128]), dtype=st.sampled_from([np.float16, np.float32]),
       frac=st.floats(0.1, 1.0), hpt=st.none() | st.integers(1, 8))
def test_append_matches_reference(seed, num_seqs, max_len, heads, dim, dtype, frac, hpt):
    rows = max(1, int(num_seqs * frac))                # num_seqs not a multiple of the cores too
    kn, vn, kc, vc, ids, lens = _case(seed, num_seqs, max_len, heads, dim, dtype, rows)
    hpt = None if hpt is None else min(hpt, heads)
    got = kv_cache_append(kn, vn, kc, vc, ids, lens, heads_per_tile=hpt)
    ref = kv_cache_append_reference(kn, vn, kc, vc, ids, lens)
    np.testing.assert_array_equal(got.k_cache, ref[0])
    np.testing.assert_array_equal(got.v_cache, ref[1])
    np.testing.assert_array_equal(got.seq_lens, ref[2])
    assert got.full == []


def _paged_case(seed, num_seqs, page_size, max_pages, heads, dim, dtype):
    rng = np.random.default_rng(seed)
    num_pages = num_seqs * max_pages + 2
    kp = rng.standard_normal((num_pages, page_size, heads, dim)).astype(dtype)
    vp = rng.standard_normal((num_pages, page_size, heads, dim)).astype(dtype)
    table = rng.permutation(num_pages)[:num_seqs * max_pages].reshape(num_seqs, max_pages)
    lens = rng.integers(0, page_size * max_pages, num_seqs)
    lens[0] = page_size if max_pages > 1 else 0        # the page-boundary case: first row of a page
    kn = rng.standard_normal((num_seqs, heads, dim)).astype(dtype)
    vn = rng.standard_normal((num_seqs, heads, dim)).astype(dtype)
    return kn, vn, kp, vp, np.arange(num_seqs)[::-1].copy(), lens, table


@HYP
@given(seed=st.integers(0, 2**16), num_seqs=st.integers(1, 53), page_size=st.sampled_from([1, 4, 16]),
       max_pages=st.integers(1, 3), heads=st.integers(1, 4), dim=st.sampled_from([64, 128]),
       dtype=st.sampled_from([np.float16, np.float32]))
def test_paged_append_matches_reference(seed, num_seqs, page_size, max_pages, heads, dim, dtype):
    case = _paged_case(seed, num_seqs, page_size, max_pages, heads, dim, dtype)
    got = paged_kv_cache_append(*case)
    ref = paged_kv_cache_append_reference(*case)
    np.testing.assert_array_equal(got.k_cache, ref[0])
    np.testing.assert_array_equal(got.v_cache, ref[1])
    np.testing.assert_array_equal(got.seq_lens, ref[2])


def test_page_boundary_writes_the_new_page_row_0():
    kn, vn, kp, vp, _, _, table = _paged_case(1, 2, 4, 2, 2, 64, np.float32)
    got = paged_kv_cache_append(kn, vn, kp, vp, [0, 1], [4, 3], table)
    np.testing.assert_array_equal(got.k_cache[table[0, 1], 0], kn[0])      # position 4 = page 1, row 0
    np.testing.assert_array_equal(got.k_cache[table[1, 0], 3], kn[1])      # position 3 = page 0, row 3
    np.testing.assert_array_equal(got.seq_lens, [5, 4])


def test_full_sequences_raise_naming_them_or_are_reported():
    kn, vn, kc, vc, ids, lens = _case(0, 4, 3, 2, 64, np.float32, 4)
    lens = np.array([3, 1, 3, 0])
    with pytest.raises(KvCacheFullError, match=r"\[0, 2\]|\[2, 0\]") as e:
        kv_cache_append(kn, vn, kc, vc, [0, 1, 2, 3], lens)
    assert sorted(e.value.full) == [0, 2]
    got = kv_cache_append(kn, vn, kc, vc, [0, 1, 2, 3], lens, on_full="report")
    assert sorted(got.full) == [0, 2]
    np.testing.assert_array_equal(got.seq_lens, [3, 2, 3, 1])
    np.testing.assert_array_equal(got.k_cache[0], kc[0])                 # the full ones untouched
    np.testing.assert_array_equal(got.k_cache[1, 1], kn[1])


@pytest.mark.parametrize("change, error, match", [
    (dict(ids=[0, 9]), IndexError, "out of range"),
    (dict(lens=[0, 5, 0, 0]), ValueError, "past max_len"),
    (dict(ids=[1, 1]), ValueError, "distinct"),
    (dict(dtype=True), TypeError, "dtype mismatch"),
])
def test_illegal_append_refused_before_launch(change, error, match):
    kn, vn, kc, vc, _, _ = _case(0, 4, 3, 2, 64, np.float32, 2)
    ids, lens = change.get("ids", [0, 1]), change.get("lens", [0, 1, 2, 0])
    if change.get("dtype"):
        vn = vn.astype(np.float16)
    before = kc.copy()
    with pytest.raises(error, match=match):
        kv_cache_append(kn, vn, kc, vc, ids, lens)
    np.testing.assert_array_equal(kc, before)


@pytest.mark.parametrize("bad, match", [(-1, "no page allocated"), (999, "past the cache")])
def test_page_table_past_the_cache_refused(bad, match):
    kn, vn, kp, vp, ids, lens, table = _paged_case(2, 3, 4, 2, 2, 64, np.float32)
    lens[:] = [4, 1, 2]
    table[0, 1] = bad
    with pytest.raises(IndexError, match=match):
        paged_kv_cache_append(kn, vn, kp, vp, [0, 1, 2], lens, table)


def test_heads_per_tile_from_usable_ub():
    t = kv_append_tiling(10, 512, 128, 4, HW)
    assert 2 * t.heads_per_tile * 128 * 4 + t.slot_ids_len * 4 <= HW.ub_usable_bytes
    assert 2 * (t.heads_per_tile + 1) * 128 * 4 + t.slot_ids_len * 4 > HW.ub_usable_bytes
    with pytest.raises(ValueError, match="heads_per_tile"):
        kv_append_tiling(10, 8, 128, 4, HW, heads_per_tile=9)


@pytest.mark.parametrize("drop", ["MTE2_S", "MTE2_MTE3", "MTE3_MTE2"])
def test_dropping_a_flag_is_a_race(drop):
    kn, vn, kc, vc, ids, lens = _case(3, 6, 4, 4, 64, np.float16, 6)
    sync = {"MTE2_S", "MTE2_MTE3", "MTE3_MTE2"} - {drop}
    with pytest.raises(RaceError):
        kv_cache_append(kn, vn, kc, vc, ids, lens, heads_per_tile=1, _sync=sync)


def test_double_buffering_overlaps_load_and_store():
    kn, vn, kc, vc, ids, lens = _case(4, 2, 4, 8, 128, np.float32, 2)
    tl = kv_cache_append(kn, vn, kc, vc, ids, lens, heads_per_tile=1, block_dim=1).timeline
    ev = tl.events()
    mte2, mte3 = ev[ev["pipe"] == "MTE2"], ev[ev["pipe"] == "MTE3"]
    loads = mte2[mte2["name"].str.contains("512 B")].start_us.to_numpy()   # the K/V tiles, not the slot ids
    stores = mte3.end_us.to_numpy()
    # the second slot: tile j+1 is loaded before tile j's store is done (one slot would wait)
    assert loads[1] < stores[0]
    assert loads[2] >= stores[0]            # and tile j+2 waits for tile j's store (MTE3_MTE2)


@pytest.mark.parametrize("num_seqs, block_dim", [(50, None), (7, 3)])
def test_timing_only_and_fast_path_equal_full(num_seqs, block_dim):
    kn, vn, kc, vc, ids, lens = _case(5, num_seqs, 4, 2, 64, np.float16, num_seqs)
    fast = kv_cache_append(kn, vn, kc, vc, ids, lens, block_dim=block_dim)
    timing = kv_cache_append(kn, vn, kc, vc, ids, lens, block_dim=block_dim, timing_only=True)
    with full_timing_every_block():
        full = kv_cache_append(kn, vn, kc, vc, ids, lens, block_dim=block_dim)
    for other in (timing, full):
        assert other.timeline.total_us == fast.timeline.total_us
        assert other.timeline.events()[["pipe", "name", "start_us", "end_us"]].equals(
            fast.timeline.events()[["pipe", "name", "start_us", "end_us"]])
    np.testing.assert_array_equal(full.k_cache, fast.k_cache)
