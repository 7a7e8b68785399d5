"""bfloat16 on the cube (issue 17 §1): bfloat16 tensors are uint16 bits; Nd2Nz / LoadData move the
bits, Mmad widens them exactly and accumulates in float32 in L0C (Mmad.md 表7), Fixpipe F322BF16
rounds float -> bfloat16 to nearest even. gemm(A, B, dtype="bfloat16") against a float64 reference
of the bfloat16-rounded inputs over hypothesis shapes (M, N, K not multiples of 16 included); the
rate is half's (Cube指令理论性能汇总.md 表1); the 310P refuses (Mmad.md 表9)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.gemm import GEMM_VERSIONS, gemm, gemm_reference, gemm_roofline, gemm_tiling
from npu_lab.lang import CapabilityError, bfloat16_to_float, float_to_bfloat16
from npu_lab.sim.cube_costs import cube_peak_tflops, k0_of, mmad_cycles

HW = get_preset("ascend-910b2")
COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements", "source"]


def _bits(M, K, N, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((M, K)) * scale).astype(np.float32)
    B = (rng.standard_normal((K, N)) * scale).astype(np.float32)
    return float_to_bfloat16(A), float_to_bfloat16(B)


def _assert_bf16_close(C, Ab, Bb, out_float: bool):
    """Reference: the bfloat16 inputs' exact values multiplied in float64 (R). The cube sums exact
    products in float32: |e| <= K * 2**-23 * (|A| |B|). Then bfloat16 out: one rounding to nearest,
    at most half an ulp = 2**-8 of the value; float out: 2**-24."""
    a, b = bfloat16_to_float(Ab).astype(np.float64), bfloat16_to_float(Bb).astype(np.float64)
    R = a @ b
    acc = Ab.shape[1] * 2.0 ** -23 * (np.abs(a) @ np.abs(b))
    got = (C if out_float else bfloat16_to_float(C)).astype(np.float64)
    half_ulp = 2.0 ** -24 if out_float else 2.0 ** -8
    bound = acc + half_ulp * (np.abs(R) + acc) + 1e-38
    err = np.abs(got - R)
    assert np.all(err <= bound), f"max error {err.max():.3g}, bound there {bound.flat[np.argmax(err - bound)]:.3g}"
    return float(np.abs(got - R).max() / max(np.abs(R).max(), 1e-30))


@pytest.mark.parametrize("version", list(GEMM_VERSIONS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 150), K=st.integers(1, 300), N=st.integers(1, 150), seed=st.integers(0, 2**16),
       out_float=st.booleans())
def test_bf16_gemm_equals_the_float64_reference_of_the_rounded_inputs(version, M, K, N, seed, out_float):
    Ab, Bb = _bits(M, K, N, seed)
    if version == "v4":
        out_float = True                 # the K-split's atomic add takes float partial sums
    C, tl = gemm(Ab, Bb, version=version, out_dtype=np.float32 if out_float else None)
    assert C.dtype == (np.float32 if out_float else np.uint16) and C.shape == (M, N)
    _assert_bf16_close(C, Ab, Bb, out_float)
    ref = gemm_reference(Ab, Bb, out_dtype=np.float32 if out_float else None)
    assert ref.dtype == C.dtype
    assert tl.total_us > 0


def test_float_inputs_with_dtype_bfloat16_are_rounded_to_nearest_even_first():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((40, 70)).astype(np.float32), rng.standard_normal((70, 33)).astype(np.float32)
    C1, _ = gemm(A, B, dtype="bfloat16")
    C2, _ = gemm(float_to_bfloat16(A), float_to_bfloat16(B))
    np.testing.assert_array_equal(C1, C2)
    # the bfloat16 result is the float32 one rounded to nearest even (one F322BF16 rounding)
    C32, _ = gemm(A, B, dtype="bfloat16", out_dtype=np.float32)
    np.testing.assert_array_equal(C1, float_to_bfloat16(C32))
    # and it is not the float16 GEMM's answer: bfloat16 keeps 8 significant bits, half 11
    C16, _ = gemm(A.astype(np.float16), B.astype(np.float16))
    ref = A.astype(np.float64) @ B.astype(np.float64)
    e_bf = np.abs(bfloat16_to_float(C1) - ref).max() / np.abs(ref).max()
    e_h = np.abs(C16.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert e_bf > 2 * e_h


def test_bf16_keeps_the_range_half_loses():
    """Values past half's 65504 overflow a float16 GEMM; bfloat16 has float32's exponent."""
    Ab, Bb = _bits(16, 64, 16, 5, scale=300.0)
    C, _ = gemm(Ab, Bb)
    assert np.all(np.isfinite(bfloat16_to_float(C)))
    _assert_bf16_close(C, Ab, Bb, out_float=False)
    C16, _ = gemm(bfloat16_to_float(Ab).astype(np.float16), bfloat16_to_float(Bb).astype(np.float16))
    assert not np.all(np.isfinite(C16))


@pytest.mark.parametrize("version", ["v1", "v3"])
@pytest.mark.parametrize("shape", [(300, 200, 700), (1, 2048, 1000)])
def test_bf16_timing_only_equals_full(version, shape):
    M, K, N = shape
    Ab, Bb = _bits(M, K, N, 2)
    _, full = gemm(Ab, Bb, version=version)
    _, fast = gemm((M, K), (K, N), version=version, timing_only=True, dtype="bfloat16")
    assert fast.total_us == full.total_us and fast.hbm_bytes == full.hbm_bytes
    a, b = full.events()[COLUMNS], fast.events()[COLUMNS]
    assert len(a) == len(b) and a.equals(b)


def test_bf16_runs_at_halfs_published_rate():
    """Cube指令理论性能汇总.md 表1: bfloat16_t x bfloat16_t is 16 x 16 x 16 per cycle, k0 = 16 — the
    same row as half. So a bfloat16 GEMM's timeline equals the half GEMM's at any shape."""
    assert k0_of(np.uint16) == k0_of("bfloat16") == 16
    assert mmad_cycles(HW, 128, 128, 64, np.uint16) == mmad_cycles(HW, 128, 128, 64, np.float16)
    assert cube_peak_tflops(HW, "bfloat16") == cube_peak_tflops(HW, np.float16)
    assert gemm_roofline(512, 512, 512, "bfloat16") == gemm_roofline(512, 512, 512, np.float16)
    for shape in ((512, 512, 512), (40, 300, 70)):
        M, K, N = shape
        t_bf = gemm((M, K), (K, N), timing_only=True, dtype="bfloat16")[1]
        t_h = gemm((M, K), (K, N), timing_only=True, dtype=np.float16)[1]
        assert t_bf.total_us == t_h.total_us
    assert gemm_tiling(100, 100, 100, np.uint16) == gemm_tiling(100, 100, 100, np.float16)


def test_the_310p_has_no_bf16_mmad():
    Ab, Bb = _bits(32, 32, 32, 0)
    with pytest.raises(CapabilityError, match=r"no bfloat16 Mmad \(Mmad.md 表9"):
        gemm(Ab, Bb, hw="ascend-310p3")


def test_bad_bf16_input_is_refused_with_the_fix():
    Ab, Bb = _bits(32, 48, 16, 0)
    with pytest.raises(TypeError, match="A and B must have the same dtype"):
        gemm(Ab, bfloat16_to_float(Bb).astype(np.float16))
    with pytest.raises(TypeError, match="must be float .* or uint16 bfloat16 bits"):
        gemm(np.ones((4, 4), np.int32), np.ones((4, 4), np.int32), dtype="bfloat16")
    with pytest.raises(TypeError, match="dtype=.*but A is float32"):
        gemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), dtype=np.float16)
    with pytest.raises(TypeError, match="out_dtype=np.float32"):
        gemm(*_bits(32, 480, 16, 0), version="v4", k_split=3)
    with pytest.raises(TypeError, match="Fixpipe writes it as bfloat16 .* or float32, not float16"):
        gemm(Ab, Bb, out_dtype=np.float16)
    with pytest.raises(TypeError, match="dtype must be float16, float32, int8 or 'bfloat16'"):
        gemm((4, 4), (4, 4), timing_only=True, dtype="bfloat17")


def test_host_bf16_helpers_refuse_what_is_not_a_value():
    with pytest.raises(TypeError, match="look like bits already"):
        float_to_bfloat16(np.zeros(3, np.uint16))
    with pytest.raises(TypeError, match="real numbers"):
        float_to_bfloat16(np.array(["1.0"]))
    with pytest.raises(TypeError, match="stored as uint16 bits"):
        bfloat16_to_float(np.zeros(3, np.float32))
    # integers are values: 3 -> 3.0 exactly
    assert bfloat16_to_float(float_to_bfloat16(np.array([3, -7], np.int32))).tolist() == [3.0, -7.0]
