"""Paged decode attention (block tables, as vLLM and IFA's PageAttention): v2 / v4 / v5 over a
paged cache against the float64 reference over hypothesis shapes (page boundaries: lengths at,
one past and one short of a page), equal to the contiguous run on the same data, a page table
pointing past the cache (or at no page) refused before the launch, the race detector on the table
row's flags, and timing-only = full."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.decode import (TOLERANCE, decode_attention, decode_attention_reference, quantize_kv_int8)
from npu_lab.kernels.decode.reference import paged_to_contiguous
from npu_lab.lang import RaceError
from npu_lab.lang.launch import full_timing_every_block

HYP = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _paged(seed, lens, n2, g, d, page_size, dtype, spare_pages=3):
    """Random pages, each sequence's pages drawn without replacement (shuffled: not in order)."""
    rng = np.random.default_rng(seed)
    lens = np.asarray(lens)
    need = [-(-int(n) // page_size) for n in lens]
    max_pages = max(need) + 1
    num_pages = sum(need) + spare_pages
    perm = rng.permutation(num_pages)
    table = np.full((len(lens), max_pages), -1)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[at:at + n]
        at += n
    q = rng.standard_normal((len(lens), n2 * g, d)).astype(np.float32)
    k = rng.standard_normal((num_pages, page_size, n2, d)).astype(dtype)
    v = rng.standard_normal((num_pages, page_size, n2, d)).astype(dtype)
    return q, k, v, lens, table


def _near_pages(page_size):
    return st.sampled_from([1, page_size - 1, page_size, page_size + 1, 2 * page_size, 3 * page_size - 1])


@HYP
@given(seed=st.integers(0, 2**16), page_size=st.sampled_from([8, 16, 32]), data=st.data(),
       n2=st.integers(1, 3), g=st.sampled_from([1, 2, 8]), d=st.sampled_from([64, 128]),
       dtype=st.sampled_from([np.float16, np.float32]), version=st.sampled_from(["v2", "v4"]))
def test_paged_matches_reference(seed, page_size, data, n2, g, d, dtype, version):
    B = data.draw(st.integers(1, 4))
    lens = [max(1, x) for x in data.draw(st.lists(_near_pages(page_size), min_size=B, max_size=B))]
    q, k, v, lens, table = _paged(seed, lens, n2, g, d, page_size, dtype)
    chunk = data.draw(st.sampled_from([c for c in (8, 16, 32) if page_size % c == 0]))   # < page: p0 % page
    got = decode_attention(q, k, v, lens, version=version, block_table=table, chunk=chunk)
    ref = decode_attention_reference(q, k, v, lens, block_table=table)
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(got.out, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("version", ["v2", "v4"])
def test_paged_equals_contiguous_on_the_same_data(version):
    q, k, v, lens, table = _paged(5, [16, 17, 31, 48], 2, 4, 64, 16, np.float16)
    kc, vc = paged_to_contiguous(k, table, lens), paged_to_contiguous(v, table, lens)
    paged = decode_attention(q, k, v, lens, version=version, block_table=table, chunk=8)   # two chunks a page
    flat = decode_attention(q, kc, vc, lens, version=version, chunk=8)
    np.testing.assert_array_equal(paged.out, flat.out)          # same arithmetic, other addresses
    assert paged.kv_bytes == flat.kv_bytes


def test_paged_int8_matches_dequantised_reference():
    q, k, v, lens, table = _paged(9, [15, 16, 40], 2, 8, 128, 16, np.float32)
    kq, ks, ko = quantize_kv_int8(k)
    vq, vs, vo = quantize_kv_int8(v)
    anti = (ks, ko, vs, vo)
    got = decode_attention(q, kq, vq, lens, version="v5", antiquant=anti, block_table=table)
    ref = decode_attention_reference(q, kq, vq, lens, antiquant=anti, block_table=table)
    np.testing.assert_allclose(got.out, ref, *TOLERANCE[np.dtype(np.int8)])


def test_chunk_stays_inside_a_page():
    q, k, v, lens, table = _paged(1, [40, 24], 1, 2, 64, 16, np.float16)
    assert decode_attention(q, k, v, lens, block_table=table).tiling.chunk == 16      # divides the page
    with pytest.raises(ValueError, match="must divide page_size"):
        decode_attention(q, k, v, lens, block_table=table, chunk=24)
    with pytest.raises(ValueError, match="v1 reads the whole S2"):
        decode_attention(q, k, v, lens, version="v1", block_table=table)
    r4 = decode_attention(q, k, v, lens, version="v4", block_table=table, splits=3)
    assert r4.tiling.split_len % r4.tiling.chunk == 0                                  # pieces start on a chunk


@pytest.mark.parametrize("bad, error, match", [
    (lambda t: t.__setitem__((1, 0), 99), IndexError, r"page 99 is past the cache's"),
    (lambda t: t.__setitem__((0, 2), -1), IndexError, r"no page allocated"),
    (lambda t: t.__setitem__((0, 0), -5), IndexError, r"no page allocated"),
])
def test_bad_block_table_refused_before_launch(bad, error, match):
    q, k, v, lens, table = _paged(2, [40, 9], 2, 2, 64, 16, np.float16)
    bad(table)
    for fn in (decode_attention, decode_attention_reference):
        with pytest.raises(error, match=match):
            fn(q, k, v, lens, block_table=table)


def test_bad_paged_shapes_refused():
    q, k, v, lens, table = _paged(2, [40, 9], 2, 2, 64, 16, np.float16)
    with pytest.raises(ValueError, match="past the block table"):
        decode_attention(q, k, v, [table.shape[1] * 16 + 1, 9], block_table=table)
    with pytest.raises(ValueError, match=r"block_table must be \[num_seqs=2"):
        decode_attention(q, k, v, lens, block_table=table[:1])
    with pytest.raises(TypeError, match="block_table must be a 2-D integer"):
        decode_attention(q, k, v, lens, block_table=table.astype(np.float32))
    with pytest.raises(ValueError, match="page_size=12"):
        decode_attention(q, k[:, :12], v[:, :12], [10, 9], block_table=table)
    with pytest.raises(ValueError, match="GQA"):
        decode_attention(q[:, :3], k, v, lens, block_table=table)


@pytest.mark.parametrize("drop", ["MTE2_S", "S_MTE2"])
def test_dropping_a_table_flag_is_a_race(drop):
    from npu_lab.kernels.decode.attention import ALL_FLAGS, PAGED_FLAGS
    q, k, v, lens, table = _paged(3, [32, 32, 32], 1, 1, 64, 16, np.float16)
    with pytest.raises(RaceError):
        decode_attention(q, k, v, lens, block_table=table, block_dim=1, _sync=(ALL_FLAGS | PAGED_FLAGS) - {drop})


@pytest.mark.parametrize("version", ["v2", "v4"])
def test_paged_timing_only_and_fast_path_equal_full(version):
    q, k, v, lens, table = _paged(4, [40, 40, 40, 17], 2, 2, 64, 8, np.float16)
    fast = decode_attention(q, k, v, lens, version=version, block_table=table)
    timing = decode_attention(q.shape, (k.shape, k.dtype), None, lens, version=version, block_table=table,
                              timing_only=True)
    with full_timing_every_block():
        full = decode_attention(q, k, v, lens, version=version, block_table=table)
    cols = ["launch", "pipe", "name", "start_us", "end_us", "bytes"]
    for other in (timing, full):
        assert other.timeline.total_us == fast.timeline.total_us
        assert other.timeline.events()[cols].equals(fast.timeline.events()[cols])
    np.testing.assert_array_equal(full.out, fast.out)


@pytest.mark.parametrize("kw", [dict(chunk=8.5), dict(splits="2"), dict(block_dim=0), dict(chunk=True)])
def test_tiling_knobs_must_be_whole_numbers(kw):
    q, k, v, lens, table = _paged(2, [40, 9], 2, 2, 64, 16, np.float16)
    with pytest.raises(ValueError, match="whole number"):
        decode_attention(q, k, v, lens, version="v4", **kw)
