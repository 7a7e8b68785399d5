"""Matmul + LeakyRelu, one mixed kernel against cube-then-vector (issue 17 §2; npu_lab.kernels.gemm.epilogue)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.gemm.epilogue import matmul_leakyrelu, matmul_leakyrelu_reference
from npu_lab.sim.mixed import MixedLaunchRecord


def _inputs(M, K, N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((K, N)).astype(np.float16)


def _close(got, want, A, B):
    """Both fp16: one unit in the last place of the result, plus what fp32 sums taken in another
    order may differ by (K x eps32 x sum |a||b|: cancellation makes a small result's error large)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    fp32 = A.shape[1] * np.finfo(np.float32).eps * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))
    return np.abs(g - w) <= 1.01 * ulp + 2 * fp32


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 130), K=st.integers(1, 150), N=st.integers(1, 100), alpha=st.sampled_from([0.0, 0.01, 0.2, 1.0]),
       way=st.sampled_from(["mixed", "separate"]), seed=st.integers(0, 3))
def test_matches_numpy(M, K, N, alpha, way, seed):
    A, B = _inputs(M, K, N, seed)
    C, _ = matmul_leakyrelu(A, B, alpha, way=way, base=(32, 32, 32))
    want = matmul_leakyrelu_reference(A, B, alpha)
    assert C.shape == (M, N) and C.dtype == np.float16
    assert _close(C, want, A, B).all()
    exact = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(C.astype(np.float64), np.maximum(exact, alpha * exact), rtol=5e-3, atol=5e-2)


@pytest.mark.parametrize("shape", [(64, 32, 48), (100, 40, 70), (512, 128, 128)])
@pytest.mark.parametrize("way", ["mixed", "separate"])
def test_timing_only_equals_full_run(shape, way):
    M, K, N = shape
    A, B = _inputs(M, K, N)
    _, full = matmul_leakyrelu(A, B, 0.1, way=way)
    none, fast = matmul_leakyrelu((M, K), (K, N), 0.1, way=way, timing_only=True)
    assert none is None
    assert full.total_cycles == fast.total_cycles and full.hbm_bytes == fast.hbm_bytes
    cols = ["core", "pipe", "name", "start_us", "end_us", "bytes"]
    pd.testing.assert_frame_equal(full.events()[cols], fast.events()[cols])


def test_mixed_is_one_launch_with_aic_and_aiv_lanes():
    M, K, N = 512, 128, 128
    _, tl = matmul_leakyrelu((M, K), (K, N), 0.1, way="mixed", timing_only=True)
    assert len(tl.launches) == 1
    rec = tl.launches[0]
    assert isinstance(rec, MixedLaunchRecord) and rec.kernel_type == "mix_aic_1_2"
    ev = tl.events()
    cubes = rec.hw.cube_cores
    aic, aiv = ev[(ev.core >= 0) & (ev.core < cubes)], ev[ev.core >= cubes]
    assert set(aic["pipe"]) <= {"S", "MTE2", "MTE1", "M", "FIX"} and {"M", "FIX"} <= set(aic["pipe"])
    assert set(aiv["pipe"]) <= {"S", "MTE2", "V", "MTE3"} and {"V", "MTE3"} <= set(aiv["pipe"])
    # every AIV of group g runs on core cubes + 2 * (AIC core) + sub
    assert set(aiv.core) <= {cubes + 2 * c + s for c in set(aic.core) for s in (0, 1)}
    # cross-core order: an AIV's first read starts after its AIC's first Fixpipe completed
    first_fix = aic[aic["pipe"] == "FIX"].groupby("core").ready_us.min()
    first_read = aiv[aiv["pipe"] == "MTE2"].groupby("core").start_us.min()
    for core, t in first_read.items():
        assert t > first_fix[(core - cubes) // 2]
    trace = tl.to_chrome_trace()
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert any(n.startswith("AIC ") for n in names) and any(n.startswith("AIV ") for n in names)


@pytest.mark.parametrize("shape", [(64, 32, 48), (256, 64, 256), (512, 128, 128), (1024, 1024, 1024)])
def test_mixed_beats_two_launches_here(shape):
    """One launch overhead instead of two, and the epilogue of tile i overlaps the matmul of tile i+1:
    on these shapes the mixed kernel is faster (launch overhead dominates them)."""
    M, K, N = shape
    _, mixed = matmul_leakyrelu((M, K), (K, N), 0.1, way="mixed", timing_only=True)
    _, sep = matmul_leakyrelu((M, K), (K, N), 0.1, way="separate", timing_only=True)
    assert len(sep.launches) == 2
    assert mixed.total_us < sep.total_us
    assert mixed.launch_overhead_us < sep.launch_overhead_us


def test_the_aic_runs_ahead_by_at_most_two_tiles():
    """Back-pressure (flag 1): with 8 tasks on one AI core group, the AIC's first load of task i + 2
    starts only after both AIVs wrote task i out (its CrossCoreWaitFlag(1))."""
    M, K, N = 256, 32, 64          # tiling: singleCoreM 32 x singleCoreN 64, two 32x32 base tiles per task
    from npu_lab.presets import get_preset
    hw = get_preset("ascend-910b2").replace(cube_cores=1, vector_cores=2, provenance_note="one AI core group")
    _, tl = matmul_leakyrelu((M, K), (K, N), 0.1, way="mixed", timing_only=True, hw=hw, base=(32, 32, 32))
    ev = tl.events()
    loads = ev[(ev.core == 0) & (ev["pipe"] == "MTE2")].sort_values("start_us").start_us.values.reshape(8, 4)
    outs = [ev[(ev.core == c) & (ev["pipe"] == "MTE3")].sort_values("start_us").ready_us.values for c in (1, 2)]
    assert all(len(o) == 8 for o in outs)
    done = np.maximum(outs[0], outs[1])
    assert (loads[2:, 0] > done[:-2]).all()
    assert (loads[1:, 0] < done[:-1]).any()    # ...but it does run ahead: tile i + 1 overlaps tile i's epilogue


def test_bad_input():
    A, B = _inputs(16, 16, 16)
    with pytest.raises(ValueError, match="way must be"):
        matmul_leakyrelu(A, B, way="fused")
    with pytest.raises(ValueError, match="alpha must be a number in"):
        matmul_leakyrelu(A, B, alpha=2.0)
    with pytest.raises(TypeError, match="float16"):
        matmul_leakyrelu(A.astype(np.float32), B.astype(np.float32))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_leakyrelu((16, 8), (9, 16), timing_only=True)
