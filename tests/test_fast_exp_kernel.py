"""The vector fast_exp, run as a kernel on the simulator, against fast_exp_numpy and np.exp.

Inside v3_fast_exp the softmax normalisation cancels any constant factor, so an exponent bias of
126 instead of 127 (every value halved) passed every other test (issue 11). Here the kernel's
own output is compared, value by value."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, launch, npu_kernel
from npu_lab.lang import TBuf, TPosition, TQue
from npu_lab.kernels.moe_gating.vectorized import fast_exp, fast_exp_numpy


@npu_kernel
def fast_exp_only(ctx, x_gm, y_gm, n):
    """y = fast_exp(x) on n floats (a multiple of 8), one block: copy in, the vector fast exp,
    copy out."""
    q_in, q_out, work_buf = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(q_in, 1, n * 4, name="x")
    ctx.pipe.init_buffer(q_out, 1, n * 4, name="y")
    ctx.pipe.init_buffer(work_buf, 3 * n * 4, name="work")
    x = q_in.alloc_tensor(np.float32)
    ctx.data_copy(x, x_gm, n)
    q_in.enque(x)
    x, y = q_in.deque(np.float32), q_out.alloc_tensor(np.float32)
    fast_exp(ctx, y, x, work_buf.get(np.float32), n)
    q_out.enque(y)
    q_in.free_tensor(x)
    y = q_out.deque(np.float32)
    ctx.data_copy(y_gm, y, n)
    q_out.free_tensor(y)


def _kernel_exp(x: np.ndarray) -> np.ndarray:
    x_gm = GlobalTensor.from_array(x.astype(np.float32), "x")
    y_gm = GlobalTensor.empty(x.size, np.float32, "y")
    launch(fast_exp_only, 1, x_gm, y_gm, x.size, hw="ascend-910b2")
    return y_gm.data.copy()


@pytest.mark.parametrize("lo, hi", [(-80.0, 0.0), (-10.0, 10.0), (-120.0, -80.0)])
def test_vector_fast_exp_is_exactly_fast_exp_numpy(lo, hi):
    x = np.linspace(lo, hi, 2048, dtype=np.float32)
    np.testing.assert_array_equal(_kernel_exp(x), fast_exp_numpy(x))


def test_vector_fast_exp_is_close_to_exp():
    x = np.linspace(-80.0, 10.0, 4096, dtype=np.float32)
    exact = np.exp(x.astype(np.float64))
    rel = np.abs(_kernel_exp(x) - exact) / exact
    assert rel.max() < 1e-3, rel.max()


def test_vector_fast_exp_of_known_values():
    x = np.array([0.0, 1.0, -1.0, np.log(2.0), -87.0, -100.0, 0.5, 2.0], np.float32)
    got = _kernel_exp(x)
    np.testing.assert_allclose(got[:4], [1.0, np.e, 1 / np.e, 2.0], rtol=1e-3)
    assert got[5] == got[4] > 0          # the clamp at -87: no garbage below it


# ---- issue 22 items 1-2 --------------------------------------------------------------------
def test_fast_exp_is_exact_at_zero_and_never_rises_as_x_falls():
    """p(0) = 1 and p(1) = 2 make 2**n·p(f) continuous where n steps: exp(0) is exactly 1 and
    consecutive float32 inputs never give a larger exp for the smaller input (the free fit broke
    both: the top expert could get the smaller weight)."""
    from npu_lab.kernels.moe_gating.vectorized import FAST_EXP_COEFFS

    assert FAST_EXP_COEFFS[-1] == 1.0 and abs(FAST_EXP_COEFFS.sum() - 2.0) < 1e-12
    assert fast_exp_numpy(np.zeros(1, np.float32))[0] == 1.0
    for start in (-1e-7, -0.6931, -1.0, -20.0, -60.1):      # consecutive floats, falling
        xs = (np.float32(start).view(np.int32) + np.arange(200_000, dtype=np.int32)).view(np.float32)
        assert (np.diff(fast_exp_numpy(xs)) <= 0).all(), start
    n = np.arange(-125, 1)                                   # around every step of n
    xs = np.sort(((n / np.log2(np.e)).astype(np.float32)[:, None]
                  + np.arange(-64, 64, dtype=np.float32) * 1e-6).ravel())[::-1]
    xs = xs[(xs <= 0) & (xs >= -87)]
    assert (np.diff(fast_exp_numpy(xs)) <= 0).all()


def test_v3_fast_exp_weights_stay_non_increasing():
    from npu_lab.kernels.moe_gating import moe_gating_topk

    res = moe_gating_topk(np.array([[0.0, -1e-7]], np.float32), 2, version="v3_fast_exp")
    assert res.indices.tolist() == [[0, 1]]
    assert res.weights[0, 0] >= res.weights[0, 1]
    rng = np.random.default_rng(22)
    x = (rng.standard_normal((64, 64)) * 1e-6).astype(np.float32)    # near-ties everywhere
    w = moe_gating_topk(x, 8, version="v3_fast_exp").weights
    assert (np.diff(w, axis=1) <= 0).all()


@pytest.mark.parametrize("version", ["v3", "v3_fast_exp"])
@pytest.mark.parametrize("E", [1985, 2048, 2100])
def test_v3_runs_past_e_1984(version, E):
    """E > 1984: 8 rows' argmax blocks lie more than 255 blocks apart (the uint8 srcRepeatSize
    of CopyRepeatParams): the index column is copied per 8 rows instead of raising."""
    from npu_lab.kernels.moe_gating import moe_gating_topk
    from npu_lab.kernels.moe_gating.reference import softmax_topk_renormalise_reference

    assert moe_gating_topk(np.zeros((1, E), np.float32), 1, version=version).indices.tolist() == [[0]]
    x = np.random.default_rng(E).standard_normal((1, 9, E)).astype(np.float32)
    res = moe_gating_topk(x, 4, version=version)
    ref_i, ref_w = softmax_topk_renormalise_reference(x, 4)
    np.testing.assert_array_equal(res.indices, ref_i)
    np.testing.assert_allclose(res.weights, ref_w, rtol=1e-3 if version == "v3_fast_exp" else 1e-6, atol=1e-6)
