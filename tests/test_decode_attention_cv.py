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
    # the AIC's last Fixpipe (O of the last chunk) starts after the AIVs wrote the last P (DataCopyPad out),
    # and the AIVs' output copies (DataCopy out, after the division) start after it
    aiv_out = ev[(ev.core >= cubes) & (ev["pipe"] == "MTE3")]
    p_out = aiv_out[aiv_out.name.str.startswith("DataCopyPad")].ready_us.max()
    o_out = aiv_out[~aiv_out.name.str.startswith("DataCopyPad")].start_us.max()
    last_fix = ev[ev["pipe"] == "FIX"]
    assert p_out < last_fix.start_us.max() < last_fix.ready_us.max() < o_out


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


# ---- v3 as a version of decode_attention (the ladder's cube + vector rung)

def test_v3_is_a_decode_attention_version_equal_to_the_reference():
    from npu_lab.kernels.decode import VERSIONS, decode_attention
    from npu_lab.kernels.decode.reference import decode_attention_reference
    assert VERSIONS.index("v2") < VERSIONS.index("v3") < VERSIONS.index("v4")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 8, 64)).astype(np.float16)
    k = rng.standard_normal((2, 150, 2, 64)).astype(np.float16)
    v = rng.standard_normal((2, 150, 2, 64)).astype(np.float16)
    lens = [150, 33]
    r = decode_attention(q, k, v, lens, version="v3")
    np.testing.assert_allclose(r.out, decode_attention_reference(q, k, v, lens), rtol=2e-3, atol=2e-3)
    t = decode_attention((2, 8, 64), ((2, 150, 2, 64), np.float16), None, lens, version="v3", timing_only=True)
    assert t.timeline.total_us == r.timeline.total_us and 0 < t.achieved < 1


@pytest.mark.parametrize("kw", [dict(chunk=64), dict(splits=2), dict(block_dim=4)])
def test_v3_refuses_the_vector_versions_tiling_options_by_name(kw):
    from npu_lab.kernels.decode import decode_attention
    q = np.zeros((1, 2, 64), np.float16)
    k = np.zeros((1, 16, 1, 64), np.float16)
    with pytest.raises(ValueError, match=next(iter(kw))):
        decode_attention(q, k, k, [16], version="v3", **kw)


def test_v3_refuses_float32_kv():
    from npu_lab.kernels.decode import decode_attention
    k = np.zeros((1, 16, 1, 64), np.float32)
    with pytest.raises(ValueError, match="fp16"):
        decode_attention(np.zeros((1, 2, 64), np.float32), k, k, [16], version="v3")


def test_ladder_runs_v3_at_the_notebook_shape_and_at_the_bench_shape():
    from npu_lab.kernels.decode import decode_ladder
    df = decode_ladder(batch=2, context_len=256, q_heads=8, kv_heads=2, head_dim=64, versions=("v2", "v3"))
    v2, v3 = df.set_index("version").loc["v2"], df.set_index("version").loc["v3"]
    assert v3.time_us > 0 and v3.note == "" and v3.time_us < v2.time_us     # the cube does Q·Kᵀ and P·V
    # no cap: the mixed launch's fast path (block classes + tile_loop fast-forward) runs it at any shape
    big = decode_ladder(batch=64, context_len=8192, q_heads=64, kv_heads=8, head_dim=128, versions=("v3",))
    assert big.time_us[0] > 0 and big.note[0] == ""
    assert big.time_us[0] >= big.roofline_us[0]              # never faster than HBM


@pytest.mark.parametrize("B, Hq, Hkv, D, Lmax, lens, ramp", [
    (2, 8, 2, 128, 2000, (2000, 1300), 4.0),      # 16 chunks: the running max rises chunk after chunk
    (3, 4, 1, 64, 1500, (1, 129, 1500), -4.0),    # falling scores: the first chunk holds the max
    (1, 16, 1, 64, 1024, (1024,), 0.0),           # G = 16: one full fractal of A, eight rows per AIV
])
def test_online_softmax_over_many_chunks_matches_the_reference(B, Hq, Hkv, D, Lmax, lens, ramp):
    from npu_lab.kernels.decode.run import TOLERANCE
    rng = np.random.default_rng(3)
    q = rng.standard_normal((B, Hq, D)).astype(np.float16)
    k = rng.standard_normal((B, Lmax, Hkv, D))
    # a ramp along the positions moves each row's maximum from chunk to chunk (the correction factor's work)
    k += ramp * np.linspace(0, 1, Lmax)[None, :, None, None] * np.sign(q.astype(np.float64).mean(1))[:, None, None, :]
    k = k.astype(np.float16)
    v = rng.standard_normal((B, Lmax, Hkv, D)).astype(np.float16)
    out, _ = decode_attention_cv(q, k, v, lens)
    rtol, atol = TOLERANCE[np.dtype(np.float16)]
    np.testing.assert_allclose(out, decode_attention_reference(q, k, v, np.array(lens)), rtol=rtol, atol=atol)


def test_the_workspace_does_not_grow_with_the_context(monkeypatch):
    from npu_lab.lang import GlobalTensor
    made = {}
    original = GlobalTensor.empty

    def record(n, dtype, name, **kw):
        made.setdefault(name, []).append(n)
        return original(n, dtype, name, **kw)

    monkeypatch.setattr(GlobalTensor, "empty", staticmethod(record))
    for L in (256, 65536):      # 64K positions: the old whole-S workspace would be G x 64K floats per task
        decode_attention_cv((2, 8, 128), (2, L, 2, 128), (2, L, 2, 128), (L, L), timing_only=True)
    for name in ("s_workspace", "p_workspace", "o_workspace"):
        assert made[name][0] == made[name][1] and made[name][0] <= 4 * 2 * 4 * 128   # 2 slots x G x CHUNK|D per group
