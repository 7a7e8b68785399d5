"""int8 GEMM dequantised in Fixpipe (issue 17 §4): ``gemm(A8, B8, deq_scale=...)`` — a float is one
scale (quantPre DEQF16), N floats one per column (VDEQF16 with the cbufWorkspace overload). The
int32 accumulation is exact; the output is half(float32(C_int32) * M1[n]) with M1 the scale cut to
(1, 8, 10) (随路量化.md 表1), over hypothesis shapes; timing-only equals full; the quant words'
L1 -> Fixpipe-buffer copies cost time on FIX; bad scales are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.gemm import gemm, gemm_reference, gemm_tiling
from npu_lab.lang import deq_scale_float, deq_scale_uint64
from npu_lab.sim.cube_costs import fixpipe_fb_copy_cycles

COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements", "source"]


def _int8(M, K, N, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(-127, 128, (M, K)).astype(np.int8), rng.integers(-127, 128, (K, N)).astype(np.int8),
            rng.uniform(1e-4, 1e-2, N))


def _expected(A, B, scales):
    acc = gemm_reference(A, B).astype(np.float32)            # int32, exact
    return np.clip(acc * deq_scale_float(deq_scale_uint64(np.atleast_1d(scales))), -65504, 65504).astype(np.float16)


@pytest.mark.parametrize("version", ["v2", "v3", "v4"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 130), K=st.integers(1, 300), N=st.integers(1, 300), seed=st.integers(0, 2**16),
       per_channel=st.booleans())
def test_dequant_in_fixpipe_is_the_hardwares_arithmetic(version, M, K, N, seed, per_channel):
    A, B, s = _int8(M, K, N, seed)
    scale = s if per_channel else float(s[0])
    kw = {"k_split": 2} if version == "v4" and K >= 64 else {}
    C, tl = gemm(A, B, version=version, deq_scale=scale, **kw)
    assert C.dtype == np.float16 and C.shape == (M, N)
    want = _expected(A, B, scale)
    if gemm_tiling(M, N, K, np.int8, version=version, **kw).kSplit == 1:
        np.testing.assert_array_equal(C, want)
    else:       # each K-split partial is dequantised and rounded to half, then added in half (SetAtomicAdd<half>)
        k_split = gemm_tiling(M, N, K, np.int8, version=version, **kw).kSplit
        tol = (k_split + 1) * 2.0 ** -11 * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))) * np.max(s)
        assert np.all(np.abs(C.astype(np.float64) - want) <= tol + 1e-6)
    assert tl.total_us > 0


@pytest.mark.parametrize("shape", [(64, 512, 600), (1, 2048, 256)])
def test_dequant_timing_only_equals_full(shape):
    M, K, N = shape
    A, B, s = _int8(M, K, N, 1)
    _, full = gemm(A, B, deq_scale=s)
    _, fast = gemm((M, K), (K, N), timing_only=True, dtype=np.int8, deq_scale=s)
    assert fast.total_us == full.total_us
    a, b = full.events()[COLUMNS], fast.events()[COLUMNS]
    assert len(a) == len(b) and a.equals(b)


def test_per_channel_costs_its_quant_word_copies_on_fix():
    """VDEQF16 adds, per Fixpipe, an L1 -> FB copy of its words (and per task a GM -> L1 copy of
    them): with the same tiling the per-channel run takes at least as long as the per-tensor one, and
    its FIX pipe is busier; the int32 product is the same, so M is equally busy. The reserve of L1
    for the words may shorten the panel, never below a whole 256-B row (Nd2Nz's efficient size)."""
    M, K, N = 256, 1024, 1024
    A, B, s = _int8(M, K, N, 2)
    t = gemm_tiling(M, N, K, np.int8, per_channel_dequant=True)      # the same tiling for both
    _, per_tensor = gemm((M, K), (K, N), timing_only=True, dtype=np.int8, deq_scale=float(s[0]), tiling=t)
    _, per_channel = gemm((M, K), (K, N), timing_only=True, dtype=np.int8, deq_scale=s, tiling=t)
    bt, bc = per_tensor.busy_us_by_pipe(), per_channel.busy_us_by_pipe()
    assert bc["FIX"] > bt["FIX"] and bc["M"] == bt["M"]
    assert per_channel.total_us >= per_tensor.total_us
    assert gemm_tiling(4096, 4096, 4096, np.int8).stepKa == 8
    assert gemm_tiling(4096, 4096, 4096, np.int8, per_channel_dequant=True).stepKa == 6     # 768 B rows, not 896
    names = set(per_channel.events()["name"])
    assert any("quant words L1->FB" in n for n in names)
    assert not any("quant words" in n for n in set(per_tensor.events()["name"]))


def test_more_than_256_columns_go_through_the_fixpipe_buffer_in_chunks_of_128():
    """GenFixpipeTilingV220: nSize <= 256 in one go, else chunks of 128 and a tail."""
    A, B, s = _int8(16, 64, 300, 3)
    one_core = get_preset("ascend-910b2").replace(cube_cores=1, provenance_note="one cube core")
    _, tl = gemm(A, B, deq_scale=s, base=(16, 288, 64), hw=one_core)    # an N tile of 288 columns
    ev = tl.events()
    fix = ev[ev["name"].str.contains("VDEQF16")]
    assert set(fix["name"]) == {"Fixpipe L0C->GM 16x288 VDEQF16 (quant words L1->FB: 1024 + 1024 + 256 B)",
                                "Fixpipe L0C->GM 16x12 VDEQF16 (quant words L1->FB: 128 B)"}
    # each chunk pays its copy (a Fixpipe head + the bytes at 128 B/cycle, assumed) and its own move
    hw = one_core
    big = fix[fix["name"].str.contains("16x288")].iloc[0]
    small = fix[fix["name"].str.contains("16x12 ")].iloc[0]
    copies = sum(fixpipe_fb_copy_cycles(hw, b) for b in (1024, 1024, 256))
    assert (big.end_us - big.start_us) * hw.clock_ghz * 1e3 >= copies + 3 * hw.fixpipe_head_cycles - 1
    assert big.end_us - big.start_us > (small.end_us - small.start_us) * 3


def test_the_scale_is_cut_to_ten_mantissa_bits():
    s = np.array([1.0, 0.1, 1 / 3, -2.5e-3, 7.0])
    m1 = deq_scale_float(deq_scale_uint64(s))
    assert m1.dtype == np.float32
    assert m1[0] == 1.0 and m1[4] == 7.0                            # exact in 10 bits
    assert np.all(np.abs(m1 - s) <= np.abs(s) * 2.0 ** -10)
    assert np.all(np.abs(m1) <= np.abs(s.astype(np.float32)))          # cut (towards zero), not rounded
    assert (deq_scale_uint64(s) >> np.uint64(32)).max() == 0         # MCB, N, offset bits all 0


def test_bad_scales_are_refused():
    A, B, s = _int8(16, 32, 16, 0)
    with pytest.raises(ValueError, match=r"one scale per column of C: shape \(16,\)"):
        gemm(A, B, deq_scale=s[:8])
    with pytest.raises(ValueError, match="inf, NaN or not a normal float32"):
        gemm(A, B, deq_scale=np.where(np.arange(16) == 3, np.nan, s))
    with pytest.raises(ValueError, match="not a normal float32"):
        gemm(A, B, deq_scale=1e-40)
    with pytest.raises(TypeError, match="dequantises an int8 GEMM"):
        gemm(A.astype(np.float16), B.astype(np.float16), deq_scale=s)
    with pytest.raises(ValueError, match="needs a tiled version"):
        gemm(A, B, version="v1", deq_scale=s)
    with pytest.raises(TypeError, match="out_dtype must be float16"):
        gemm(A, B, deq_scale=s, out_dtype=np.int32)
    with pytest.raises(TypeError, match="a float .per tensor. or N floats"):
        gemm(A, B, deq_scale="0.1")
    with pytest.raises(TypeError, match="real numbers"):
        deq_scale_uint64(np.array([True, False]))
    with pytest.raises(ValueError, match="1-D array"):
        deq_scale_uint64(np.ones((2, 2)))
    with pytest.raises(TypeError, match="uint64"):
        deq_scale_float(np.ones(3, np.float32))
