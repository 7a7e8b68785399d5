"""Decode attention v3, cube + vector in one mixed kernel (npu_lab.kernels.decode.attention_cv)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.decode.attention_cv import decode_attention_cv
from npu_lab.kernels.decode.reference import decode_attention_reference


@st.composite
def cases(draw):
    B = draw(st.integers(1, 3))
    Hkv = draw(st.integers(1, 2))
    G = draw(st.sampled_from([1, 2, 3, 8]))
    D = draw(st.sampled_from([16, 64, 128]))
    Lmax = draw(st.integers(1, 300))
    lens = tuple(draw(st.integers(1, Lmax)) for _ in range(B))
    return B, Hkv * G, Hkv, D, Lmax, lens, draw(st.integers(0, 3))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_matches_the_reference(case):
    B, Hq, Hkv, D, Lmax, lens, seed = case
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Hq, D)).astype(np.float16)
    k = rng.standard_normal((B, Lmax, Hkv, D)).astype(np.float16)
    v = rng.standard_normal((B, Lmax, Hkv, D)).astype(np.float16)
    out, _ = decode_attention_cv(q, k, v, lens)
    ref = decode_attention_reference(q, k, v, np.array(lens))
    assert out.dtype == np.float32 and out.shape == (B, Hq, D)
    np.testing.assert_allclose(out, ref, atol=3e-3, rtol=3e-3)    # P is rounded to fp16 for the cube


def test_timing_only_equals_full_run_and_lanes():
    rng = np.random.default_rng(1)
    B, Hq, Hkv, D, Lmax, lens = 2, 4, 2, 64, 200, (200, 77)
    q = rng.standard_normal((B, Hq, D)).astype(np.float16)
    k = rng.standard_normal((B, Lmax, Hkv, D)).astype(np.float16)
    v = rng.standard_normal((B, Lmax, Hkv, D)).astype(np.float16)
    _, full = decode_attention_cv(q, k, v, lens)
    _, fast = decode_attention_cv(q.shape, k.shape, v.shape, lens, timing_only=True)
    cols = ["core", "pipe", "name", "start_us", "end_us", "bytes"]
    pd.testing.assert_frame_equal(full.events()[cols], fast.events()[cols])
    ev = full.events()
    cubes = full.hw.cube_cores
    assert {"M", "FIX"} <= set(ev[(ev.core >= 0) & (ev.core < cubes)]["pipe"])
    assert {"V", "MTE3"} <= set(ev[ev.core >= cubes]["pipe"])
    # the AIC's P·V loads of a task start after the AIVs' softmax of it wrote P
    p_out = ev[(ev.core >= cubes) & (ev["pipe"] == "MTE3")].ready_us.max()
    last_fix = ev[ev["pipe"] == "FIX"].start_us.max()
    assert last_fix > p_out


def test_bad_input():
    with pytest.raises(ValueError, match="1..16 times Hkv"):
        decode_attention_cv((1, 34, 16), (1, 8, 2, 16), (1, 8, 2, 16), (8,), timing_only=True)
    with pytest.raises(ValueError, match="multiple of 16"):
        decode_attention_cv((1, 2, 24), (1, 8, 2, 24), (1, 8, 2, 24), (8,), timing_only=True)
    with pytest.raises(ValueError, match="seq_lens must be"):
        decode_attention_cv((1, 2, 16), (1, 8, 2, 16), (1, 8, 2, 16), (9,), timing_only=True)
    with pytest.raises(TypeError, match="float16"):
        z = np.zeros((1, 8, 2, 16), np.float32)
        decode_attention_cv(np.zeros((1, 2, 16), np.float32), z, z, (8,))
