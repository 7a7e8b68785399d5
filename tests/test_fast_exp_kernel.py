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
