"""The lang layer caches what it checked for a call shape (level-0 plans, Compare / WholeReduce
plans, Brcb footprints, 0-d scalars: npu_lab/lang/vector.py, select.py, reduce.py). These tests
make sure a cached shape never lets a bad call through and never changes a result."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import KernelContext, get_preset
from npu_lab.lang import SELMODE, AscendCRuleError, BinaryRepeatParams, TBuf

HW = get_preset("ascend-910b2")


def _tensor(ctx, dtype, count, values=None):
    b = TBuf()
    ctx.pipe.init_buffer(b, count * np.dtype(dtype).itemsize)
    t = b.get(dtype)
    if values is not None:
        t.data[:] = values
    return t


def test_a_cached_level0_shape_still_rejects_a_bool_or_too_long_call():
    ctx = KernelContext(HW, 0, 1)
    a, b, d = (_tensor(ctx, np.float32, 128, np.arange(128)) for _ in range(3))
    params = BinaryRepeatParams(1, 1, 1, 8, 8, 8)
    ctx.add(d, a, b, 64, 2, params)                  # checked, then cached
    ctx.add(d, a, b, 64, 2, params)                  # served from the cache
    assert np.array_equal(d.data, 2 * np.arange(128, dtype=np.float32))
    with pytest.raises(AscendCRuleError, match="repeat_time"):
        ctx.add(d, a, b, 64, True, params)           # True == 1, but a bool is not a repeat count
    with pytest.raises(AscendCRuleError, match="past the tensor"):
        ctx.add(d, a, b, 64, 3, params)              # a new shape: checked again
    with pytest.raises(AscendCRuleError, match="past the tensor"):
        ctx.add(d[64], a, b, 64, 2, params)          # same arguments, another dst place


def test_a_cached_compare_gives_the_bits_of_each_calls_data():
    ctx = KernelContext(HW, 0, 1)
    mask = _tensor(ctx, np.uint8, 32)
    a = _tensor(ctx, np.float32, 128)
    b = _tensor(ctx, np.float32, 128)
    params = BinaryRepeatParams(1, 1, 1, 8, 8, 8)
    rng = np.random.default_rng(0)
    for _ in range(3):                               # the first call checks, the others reuse
        a.data[:] = rng.standard_normal(128)
        b.data[:] = rng.standard_normal(128)
        ctx.compare(mask, a, b, "LT", 64, 2, params)
        want = np.packbits(a.data < b.data, bitorder="little")
        assert np.array_equal(mask.data[:16], want)
    with pytest.raises(AscendCRuleError, match="CMPMODE"):
        ctx.compare(mask, a, b, "lt", 64, 2, params)


def test_select_scalar_keeps_the_sign_of_zero_and_nan():
    ctx = KernelContext(HW, 0, 1)
    mask = _tensor(ctx, np.uint8, 32, 0)             # every bit 0: dst takes the scalar everywhere
    src = _tensor(ctx, np.float32, 64, 1.0)
    dst = _tensor(ctx, np.float32, 64)
    for value in (0.0, -0.0, float("nan"), 3.0, -0.0):
        ctx.select(dst, mask, src, value, SELMODE.VSEL_TENSOR_SCALAR_MODE, 64)
        assert dst.data.tobytes() == np.full(64, value, np.float32).tobytes()
