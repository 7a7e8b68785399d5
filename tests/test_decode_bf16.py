"""bfloat16 K/V (stored as uint16 bits, npu_lab.lang.float_to_bfloat16): the append kernels copy
them bit-exactly; decode attention widens them to float32 by their bits in the kernel (ShiftLeft,
a masked Duplicate, Copy, and a Gather of q / the output) and matches the float64 reference of
the exact bfloat16 values within TOLERANCE[uint16], over hypothesis shapes, contiguous and paged;
timing-only = full; a bf16 / float16 mix refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.decode import (TOLERANCE, decode_attention, decode_attention_reference, kv_cache_append,
                                    kv_cache_append_reference, paged_kv_cache_append,
                                    paged_kv_cache_append_reference)
from npu_lab.lang import bfloat16_to_float, float_to_bfloat16
from npu_lab.lang.launch import full_timing_every_block

HYP = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BF16 = np.dtype(np.uint16)


def _bf(rng, shape, scale=1.0):
    return float_to_bfloat16((rng.standard_normal(shape) * scale).astype(np.float32))


@HYP
@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), max_len=st.integers(1, 70), n2=st.integers(1, 3),
       g=st.sampled_from([1, 2, 8]), d=st.sampled_from([64, 128]), version=st.sampled_from(["v1", "v2", "v4"]),
       chunk=st.sampled_from([8, 16, 40]), scale=st.sampled_from([0.1, 1.0, 8.0]))
def test_bf16_matches_reference(seed, B, max_len, n2, g, d, version, chunk, scale):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, n2 * g, d)).astype(np.float32)
    k, v = _bf(rng, (B, max_len, n2, d), scale), _bf(rng, (B, max_len, n2, d))
    lens = rng.integers(1, max_len + 1, B)
    got = decode_attention(q, k, v, lens, version=version, chunk=None if version == "v1" else chunk)
    np.testing.assert_allclose(got.out, decode_attention_reference(q, k, v, lens), *TOLERANCE[BF16])


def test_bf16_equals_float32_run_of_the_same_values():
    """Widening by bits is exact: the bf16 run computes what a float32 run on the same values does
    (the rows come in another dim order, so sums may round differently: close, not identical)."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    k, v = _bf(rng, (2, 48, 2, 128)), _bf(rng, (2, 48, 2, 128))
    lens = [48, 17]
    a = decode_attention(q, k, v, lens, chunk=16).out
    b = decode_attention(q, bfloat16_to_float(k), bfloat16_to_float(v), lens, chunk=16).out
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bf16_paged_matches_reference():
    rng = np.random.default_rng(2)
    k, v = _bf(rng, (9, 16, 2, 128)), _bf(rng, (9, 16, 2, 128))
    table = np.array([[3, 0, 7, -1], [5, 1, -1, -1]])
    lens = [40, 17]
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    for version in ("v2", "v4"):
        got = decode_attention(q, k, v, lens, version=version, block_table=table)
        ref = decode_attention_reference(q, k, v, lens, block_table=table)
        np.testing.assert_allclose(got.out, ref, *TOLERANCE[BF16])


@pytest.mark.parametrize("version", ["v2", "v4"])
def test_bf16_timing_only_and_fast_path_equal_full(version):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((4, 4, 64)).astype(np.float32)
    k, v = _bf(rng, (4, 40, 2, 64)), _bf(rng, (4, 40, 2, 64))
    lens = [40, 40, 40, 17]
    fast = decode_attention(q, k, v, lens, version=version, chunk=16)
    timing = decode_attention(q.shape, (k.shape, k.dtype), None, lens, version=version, chunk=16, timing_only=True)
    with full_timing_every_block():
        full = decode_attention(q, k, v, lens, version=version, chunk=16)
    cols = ["launch", "pipe", "name", "start_us", "end_us", "bytes"]
    for other in (timing, full):
        assert other.timeline.events()[cols].equals(fast.timeline.events()[cols])
    np.testing.assert_array_equal(full.out, fast.out)


def test_bf16_mixed_with_float16_refused():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    k = _bf(rng, (1, 8, 1, 64))
    with pytest.raises(TypeError, match="one dtype"):
        decode_attention(q, k, k.view(np.float16), [8])
    with pytest.raises(TypeError, match="q is uint16"):
        decode_attention(k[:, 0], k, k, [8])


@pytest.mark.parametrize("paged", [False, True])
def test_bf16_append_copies_bits(paged):
    rng = np.random.default_rng(5)
    new_k, new_v = _bf(rng, (3, 2, 64)), _bf(rng, (3, 2, 64))
    ids, lens = np.array([2, 0, 1]), np.array([15, 16, 0])
    if paged:
        pages = np.zeros((6, 16, 2, 64), np.uint16)
        table = np.array([[0, 3], [1, 4], [2, -1]])
        got = paged_kv_cache_append(new_k, new_v, pages, pages, ids, lens, table)
        ref = paged_kv_cache_append_reference(new_k, new_v, pages, pages, ids, lens, table)
    else:
        cache = np.zeros((3, 20, 2, 64), np.uint16)
        got = kv_cache_append(new_k, new_v, cache, cache, ids, lens)
        ref = kv_cache_append_reference(new_k, new_v, cache, cache, ids, lens)
    np.testing.assert_array_equal(got.k_cache, ref[0])
    np.testing.assert_array_equal(got.v_cache, ref[1])
    np.testing.assert_array_equal(got.seq_lens, ref[2])
