"""Issue 15 §4 and §6: the semantics the audit found wrong (Cast rounding and tables, reserved UB,
dtype lists, loosened limits) and the calls a first real kernel needs (SetGlobalBuffer, TPipe
lifecycle, atomic add, debugging, counter mode, Relu/Abs/Sqrt/Ln/Reciprocal, Gather, Transpose,
bfloat16). Numerics against numpy; every rule's error is matched on its words."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import GlobalTensor, KernelContext, get_preset, launch
from npu_lab.lang import (MASK_PLACEHOLDER, AscendCRuleError, BinaryRepeatParams, BrcbRepeatParams,
                          KernelAssertionError, QueueError, RoundMode, TBuf, TPosition, TQue, UnaryRepeatParams,
                          bfloat16_to_float, float_to_bfloat16, get_user_workspace)
from npu_lab.lang.vector import round_float

B910, P310 = get_preset("ascend-910b2"), get_preset("ascend-310p3")
SETTINGS = dict(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ctx_on(hw=B910, **kw) -> KernelContext:
    return KernelContext(hw, 0, 1, **kw)


def put(ctx, values, name="t", dtype=None, room=None):
    values = np.asarray(values, dtype=dtype)
    b = TBuf()
    ctx.pipe.init_buffer(b, max((room or values.size) * values.dtype.itemsize, 32), name=name)
    t = b.get(values.dtype)
    t.data[:values.size] = values.ravel()
    return t


# ---- Cast: every RoundMode exact for a float result ----------------------------------------------
def _reference_round(v: float, mode: str) -> np.float16:
    """The float16 neighbour of v (a float64) chosen by mode, by brute force over the two neighbours."""
    with np.errstate(over="ignore"):
        near = np.float16(v)                               # nearest even
    if float(near) == v or np.isnan(v):
        return near
    with np.errstate(over="ignore"):
        lo = near if float(near) < v else np.nextafter(near, np.float16(-np.inf))
        hi = near if float(near) > v else np.nextafter(near, np.float16(np.inf))
    # IEEE: past the largest finite half the "next" value is 65536 (that overflows to inf)
    f = lambda h: float(np.copysign(65536.0, float(h))) if np.isinf(h) else float(h)
    if mode == "CAST_FLOOR":
        return lo
    if mode == "CAST_CEIL":
        return hi
    if mode == "CAST_TRUNC":
        return lo if v > 0 else hi
    if mode == "CAST_ROUND":
        dlo, dhi = v - f(lo), f(hi) - v
        return (lo if dlo < dhi else hi) if dlo != dhi else (hi if v > 0 else lo)
    if mode == "CAST_ODD":
        return lo if int(np.array(lo).view(np.uint16)) & 1 else hi
    return near


@settings(**SETTINGS)
@given(x=st.lists(st.floats(-7e4, 7e4, width=32, allow_nan=False), min_size=1, max_size=16),
       mode=st.sampled_from(["CAST_FLOOR", "CAST_CEIL", "CAST_TRUNC", "CAST_ROUND", "CAST_ODD", "CAST_RINT"]))
def test_round_float_picks_the_right_float16_neighbour(x, mode):
    v = np.array(x, np.float32)
    got = round_float(v, np.dtype(np.float16), mode)
    want = np.array([_reference_round(float(a), mode) for a in v], np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_cast_f32_to_f16_honours_the_mode_in_a_kernel():
    ctx = ctx_on()
    x = np.array([1 + 2**-11, -(1 + 2**-11), 2049.0, 2051.0] * 2, np.float32)     # halfway cases
    src = put(ctx, x, "src")
    dst = put(ctx, np.zeros(16, np.float16), "dst")
    expect = {"CAST_FLOOR": [1, -1.0009765625, 2048, 2050], "CAST_CEIL": [1.0009765625, -1, 2050, 2052],
              "CAST_TRUNC": [1, -1, 2048, 2050], "CAST_ROUND": [1.0009765625, -1.0009765625, 2050, 2052],
              "CAST_RINT": [1, -1, 2048, 2052], "CAST_ODD": [1.0009765625, -1.0009765625, 2050, 2050]}
    for mode, want in expect.items():
        ctx.cast(dst, src, mode, 8)
        np.testing.assert_array_equal(dst.data[:4], np.array(want, np.float16), err_msg=mode)


def test_cast_int32_to_float32_rounds_large_values_by_mode():
    ctx = ctx_on()
    src = put(ctx, np.array([2**24 + 1, -(2**24 + 1), 2**24 + 3, 7] * 2, np.int32), "src")
    dst = put(ctx, np.zeros(8, np.float32), "dst")
    ctx.cast(dst, src, RoundMode.CAST_FLOOR, 8)
    assert dst.data[:4].tolist() == [2**24, -(2**24 + 2), 2**24 + 2, 7]
    ctx.cast(dst, src, RoundMode.CAST_CEIL, 8)
    assert dst.data[:4].tolist() == [2**24 + 2, -(2**24), 2**24 + 4, 7]


def test_cast_float32_to_float32_rounds_to_an_integral_value():
    ctx = ctx_on()
    src = put(ctx, np.array([1.5, 2.5, -1.5, 0.4] * 2, np.float32), "src")
    dst = put(ctx, np.zeros(8, np.float32), "dst")
    ctx.cast(dst, src, RoundMode.CAST_ROUND, 8)
    assert dst.data[:4].tolist() == [2.0, 3.0, -2.0, 0.0]
    ctx.cast(dst, src, RoundMode.CAST_RINT, 8)
    assert dst.data[:4].tolist() == [2.0, 2.0, -2.0, 0.0]


def test_cast_tables_differ_by_chip():
    """310P: float -> half only CAST_ODD / CAST_NONE; no int32 -> float32 rounding modes."""
    ctx = ctx_on(P310)
    src = put(ctx, np.ones(16, np.float32), "src")
    dst = put(ctx, np.zeros(16, np.float16), "dst")
    ctx.cast(dst, src, RoundMode.CAST_ODD, 16)
    with pytest.raises(AscendCRuleError, match=r"float32 -> float16 on ascend-310p3 allows CAST_ODD, CAST_NONE.*Cast\.md"):
        ctx.cast(dst, src, RoundMode.CAST_FLOOR, 16)
    ctx_on().cast(put(ctx_on(), np.zeros(16, np.float16)), put(ctx_on(), np.ones(16, np.float32)),
                  RoundMode.CAST_FLOOR, 16)                     # the 910B allows it
    with pytest.raises(AscendCRuleError, match=r"uint8 -> int32 is not in ascend-910b2's table"):
        c = ctx_on()
        c.cast(put(c, np.zeros(8, np.int32)), put(c, np.zeros(32, np.uint8)), RoundMode.CAST_NONE, 8)


def test_int32_to_half_needs_set_deq_scale_and_uses_it():
    ctx = ctx_on()
    src = put(ctx, np.arange(16, dtype=np.int32) * 100, "src")
    dst = put(ctx, np.zeros(16, np.float16), "dst")
    with pytest.raises(AscendCRuleError, match=r"scales by the DEQSCALE register: call set_deq_scale"):
        ctx.cast(dst, src, RoundMode.CAST_NONE, 16)
    ctx.set_deq_scale(0.5)
    ctx.cast(dst, src, RoundMode.CAST_NONE, 16)
    np.testing.assert_array_equal(dst.data, (np.arange(16) * 50).astype(np.float16))
    with pytest.raises(AscendCRuleError, match="not a finite half"):
        ctx.set_deq_scale(1e6)


# ---- dtype lists, loosened limits -------------------------------------------------------------
@pytest.mark.parametrize("call, dtype, match", [
    (lambda c, t: c.duplicate(t, 1, 32), np.uint8, r"Duplicate takes int16, uint16, float16, int32, uint32, float32"),
    (lambda c, t: c.create_vec_index(t, 0, 8), np.uint32, r"CreateVecIndex takes int16, float16, int32, float32"),
    (lambda c, t: c.adds(t, t, 1, 8), np.uint32, r"Adds takes int16, float16, int32, float32"),
    (lambda c, t: c.relu(t, t, 16), np.int16, r"Relu takes float16, int32, float32"),
    (lambda c, t: c.sqrt(t, t, 8), np.int32, r"Sqrt takes float16, float32"),
])
def test_instructions_refuse_dtypes_their_page_does_not_list(call, dtype, match):
    ctx = ctx_on()
    with pytest.raises(AscendCRuleError, match=match + r".*数据类型"):
        call(ctx, put(ctx, np.zeros(64, dtype)))


def test_unary_block_strides_are_uint16():
    ctx = ctx_on()
    src = put(ctx, np.arange(300 * 8, dtype=np.float32), "src")
    dst = put(ctx, np.zeros(64, np.float32), "dst")
    ctx.adds(dst, src, 1.0, 16, 1, UnaryRepeatParams(1, 256, 8, 8))        # block stride 256 > 255
    np.testing.assert_array_equal(dst.data[:16], np.r_[np.arange(8), np.arange(2048, 2056)] + 1.0)
    with pytest.raises(AscendCRuleError, match=r"block stride must be a whole number 0\.\.255"):
        ctx.add(dst, src, src, 16, 1, BinaryRepeatParams(1, 256, 1, 8, 8, 8))


def test_shift_left_by_the_full_width_is_allowed_and_clears():
    ctx = ctx_on()
    t = put(ctx, np.array([1, 3, -1, 7] * 2, np.int32))
    out = put(ctx, np.zeros(8, np.int32), "out")
    ctx.shift_left(out, t, 32, 8)
    assert (out.data == 0).all()
    ctx.shift_left(out, t, 31, 8)
    assert out.data[0] == np.int32(-2**31)
    with pytest.raises(AscendCRuleError, match=r"ShiftLeft scalarValue \(0\.\.32"):
        ctx.shift_left(out, t, 33, 8)


def test_brcb_may_share_a_buffer_when_bytes_do_not_overlap():
    ctx = ctx_on()
    b = TBuf()
    ctx.pipe.init_buffer(b, 128 * 4, name="both")
    whole = b.get(np.float32)
    whole.data[:8] = np.arange(8)
    ctx.brcb(whole[64], whole, 1, BrcbRepeatParams(1, 8))
    np.testing.assert_array_equal(whole.data[64:128], np.repeat(np.arange(8.0), 8))
    with pytest.raises(AscendCRuleError, match="overlaps what it writes"):
        ctx.brcb(whole, whole[8], 1, BrcbRepeatParams(1, 8))


def test_reduce_max_half_with_index_takes_at_most_65536_elements():
    ctx = ctx_on()
    src = put(ctx, np.zeros(65600, np.float16), "src")
    tmp = put(ctx, np.zeros(2048, np.float16), "tmp")
    dst = put(ctx, np.zeros(16, np.float16), "dst")
    with pytest.raises(AscendCRuleError, match=r"index as a uint16, so it takes at most 65536 elements.*65535"):
        ctx.reduce_max(dst, src, tmp, 65600, True)
    with pytest.raises(AscendCRuleError, match="65536 elements"):        # the same in a timing-only run
        t = ctx_on(timing_only=True)
        bufs = []
        for n in (16, 65600, 2048):
            b = TBuf()
            t.pipe.init_buffer(b, 2 * n)
            bufs.append(b.get(np.float16))
        t.reduce_max(bufs[0], bufs[1], bufs[2], 65600, True)


def test_the_reserve_is_outside_the_allocator_and_select_fails_without_it():
    from npu_lab.lang import SELMODE

    ctx = ctx_on()
    assert ctx.ub.capacity_bytes == 192 * 1024 - 256 - 8 * 1024
    a = put(ctx, np.zeros(64, np.float32), "a", room=ctx.ub.free_bytes // 4 - 64)   # fill the usable UB
    m = put(ctx, np.zeros(32, np.uint8), "m")
    ctx.select(a, m, a, a, SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)     # its scratch is the reserve
    off = ctx_on(B910.replace(disable_asc_reserved_ubuf=True))
    assert off.ub.capacity_bytes == 192 * 1024 - 256
    a = put(off, np.zeros(64, np.float32), "a")
    m = put(off, np.zeros(32, np.uint8), "m")
    with pytest.raises(AscendCRuleError, match="--cce-disable-asc-reserved-ubuf.*compile error"):
        off.select(a, m, a, a, SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)


# ---- new calls ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, fn, dtype", [
    ("relu", lambda x: np.maximum(x, 0), np.float32), ("relu", lambda x: np.maximum(x, 0), np.int32),
    ("abs", np.abs, np.float16), ("sqrt", np.sqrt, np.float32), ("ln", np.log, np.float32),
    ("reciprocal", np.reciprocal, np.float16)])
def test_new_unary_instructions_match_numpy_in_both_forms(name, fn, dtype):
    ctx = ctx_on()
    x = (np.random.default_rng(3).random(256) * 10 - (0 if name in ("sqrt", "ln") else 5) + 0.1).astype(dtype)
    src, dst = put(ctx, x, "src"), put(ctx, np.zeros(256, dtype), "dst")
    getattr(ctx, name)(dst, src, 200)
    np.testing.assert_array_equal(dst.data[:200], fn(x[:200]).astype(dtype))
    per = 256 // np.dtype(dtype).itemsize
    getattr(ctx, name)(dst, src, per, 1, UnaryRepeatParams(1, 1, 8, 8))          # level-0, one repeat
    np.testing.assert_array_equal(dst.data[:per], fn(x[:per]).astype(dtype))


def test_gather_by_byte_offsets():
    ctx = ctx_on()
    src = put(ctx, np.arange(64, dtype=np.float32) * 2, "src")
    idx = np.array([5, 0, 62, 7] * 4, np.uint32)
    off = put(ctx, idx * 4, "off")
    dst = put(ctx, np.zeros(16, np.float32), "dst")
    ctx.gather(dst, src, off, 0, 16)
    np.testing.assert_array_equal(dst.data, idx * 2.0)
    ctx.gather(dst, src, off, 4, 8)                               # a base address one element on
    np.testing.assert_array_equal(dst.data[:8], (idx[:8] + 1) * 2.0)
    with pytest.raises(AscendCRuleError, match="not a whole float32 inside"):
        ctx.gather(dst, src, off, 8, 16)                          # 62 + 2 is past src
    with pytest.raises(AscendCRuleError, match="srcBaseAddr=2 B is not a multiple"):
        ctx.gather(dst, src, off, 2, 16)
    with pytest.raises(AscendCRuleError, match="uint32 tensor of byte offsets"):
        ctx.gather(dst, src, put(ctx, np.zeros(16, np.int32)), 0, 16)


def test_transpose_16x16_two_byte():
    ctx = ctx_on()
    x = np.arange(256, dtype=np.float16)
    src, dst = put(ctx, x, "src"), put(ctx, np.zeros(256, np.float16), "dst")
    ctx.transpose(dst, src)
    np.testing.assert_array_equal(dst.data.reshape(16, 16), x.reshape(16, 16).T)
    with pytest.raises(AscendCRuleError, match="Transpose takes uint16, int16, float16"):
        ctx.transpose(put(ctx, np.zeros(256, np.float32)), put(ctx, np.zeros(256, np.float32)))
    with pytest.raises(AscendCRuleError, match="overlap"):
        ctx.transpose(src, src)


def test_counter_mode_runs_the_count_and_normal_mode_the_register_mask():
    ctx = ctx_on()
    a = put(ctx, np.arange(256, dtype=np.float32), "a")
    out = put(ctx, np.zeros(256, np.float32), "out")
    with pytest.raises(AscendCRuleError, match="set_vector_mask was never called"):
        ctx.adds(out, a, 1.0, MASK_PLACEHOLDER, 1, UnaryRepeatParams())
    ctx.set_mask_count()
    ctx.set_vector_mask(100)                              # 100 elements: one full repeat and 36
    ctx.adds(out, a, 1.0, MASK_PLACEHOLDER, 1, UnaryRepeatParams())
    np.testing.assert_array_equal(out.data[:100], np.arange(100) + 1.0)
    assert (out.data[100:] == 0).all()
    with pytest.raises(AscendCRuleError, match="while the mask mode is Counter"):
        ctx.adds(out, a, 1.0, 64, 1, UnaryRepeatParams())
    ctx.set_mask_norm()
    ctx.set_vector_mask(0, 0b1011)                        # bit mode: lanes 0, 1, 3 of each repeat
    ctx.muls(out, a, 0.0, MASK_PLACEHOLDER, 2, UnaryRepeatParams())
    assert out.data[[0, 1, 3, 64, 65, 67]].tolist() == [0.0] * 6 and out.data[2] == 3.0


def test_set_global_buffer_binds_a_view_with_its_length():
    x = GlobalTensor.from_array(np.arange(100, dtype=np.float32), "x")
    g = GlobalTensor.of(np.float32).set_global_buffer(x[40], 16)
    assert g.get_size() == 16 and g.data.tolist() == list(range(40, 56)) and g.name == "x"
    assert GlobalTensor.of(np.float32).set_global_buffer(x).get_size() == 0       # no length: GetSize() 0
    with pytest.raises(ValueError, match="only 60 elements.*Pass at most 60"):
        GlobalTensor.of(np.float32).set_global_buffer(x[40], 61)
    with pytest.raises(TypeError, match="GlobalTensor<int32>"):
        GlobalTensor.of(np.int32).set_global_buffer(x, 4)
    assert get_user_workspace(x).data.tolist() == x.data.tolist()


def test_tpipe_destroy_init_reset():
    ctx = ctx_on()
    b = TBuf()
    ctx.pipe.init_buffer(b, 1024, name="b")
    t = b.get(np.float32)
    with pytest.raises(QueueError, match="already initialised"):
        ctx.pipe.init()
    ctx.pipe.destroy()
    assert ctx.ub.used_bytes == 0
    with pytest.raises(Exception, match="free"):
        ctx.duplicate(t, 1.0, 8)                                   # its buffer went with the pipe
    with pytest.raises(QueueError, match="destroyed TPipe"):
        ctx.pipe.init_buffer(TBuf(), 64)
    ctx.pipe.init()
    c = TBuf()
    ctx.pipe.init_buffer(c, 2048, name="c")
    ctx.pipe.reset()
    assert ctx.ub.used_bytes == 0
    ctx.pipe.init_buffer(TBuf(), 64)


def _atomic_kernel(ctx, out_gm):
    q = TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(q, 1, 64 * 4)
    t = q.alloc_tensor(np.float32)
    ctx.duplicate(t, float(ctx.get_block_idx() + 1), 64)
    q.enque(t)
    t = q.deque(np.float32)
    ctx.set_atomic_add(np.float32)
    ctx.data_copy(out_gm, t, 64)
    ctx.set_atomic_none()
    q.free_tensor(t)


def test_set_atomic_add_accumulates_every_block_into_gm():
    out = GlobalTensor.from_array(np.full(64, 10.0, np.float32), "out")
    launch(_atomic_kernel, 4, out)
    assert (out.data == 10.0 + 1 + 2 + 3 + 4).all()
    t_full = launch(_atomic_kernel, 4, GlobalTensor.from_array(np.zeros(64, np.float32), "o"))
    t_fast = launch(_atomic_kernel, 4, GlobalTensor.empty(64, np.float32, "o", timing_only=True), timing_only=True)
    assert t_full.total_us == t_fast.total_us


def test_set_atomic_add_checks_the_type_against_the_chip_and_the_data():
    ctx = ctx_on(P310)
    with pytest.raises(AscendCRuleError, match=r"SetAtomicAdd<int32> is not available on ascend-310p3"):
        ctx.set_atomic_add(np.int32)
    ctx = ctx_on()
    ctx.set_atomic_add(np.float16)
    t = put(ctx, np.zeros(8, np.float32))
    with pytest.raises(AscendCRuleError, match="accumulation type must match"):
        ctx.data_copy(GlobalTensor.from_array(np.zeros(8, np.float32)), t, 8)


def _debug_kernel(ctx, x_gm):
    q = TQue(TPosition.VECIN, 1)
    ctx.pipe.init_buffer(q, 1, 32 * 4)
    t = q.alloc_tensor(np.float32)
    ctx.data_copy(t, x_gm, 32)
    q.enque(t)
    t = q.deque(np.float32)
    ctx.printf("block %d of %d, first %f", ctx.get_block_idx(), ctx.get_block_num(), 1.5)
    ctx.dump_tensor(t, 7, 4)
    ctx.ascendc_assert(ctx.get_block_idx() < 2, "block %d is past the end", ctx.get_block_idx())
    q.free_tensor(t)


def test_printf_and_dump_tensor_print_with_the_block_index_in_full_runs_only(capsys):
    x = GlobalTensor.from_array(np.arange(32, dtype=np.float32), "x")
    full = launch(_debug_kernel, 2, x)
    out = capsys.readouterr().out
    assert "[Block 0] block 0 of 2, first 1.500000" in out and "[Block 1] block 1 of 2" in out
    assert "DumpTensor: desc=7, addr=0x0, data_type=float32, position=UB, dump_size=4" in out
    assert "[0. 1. 2. 3.]" in out
    fast = launch(_debug_kernel, 2, GlobalTensor.empty(32, np.float32, "x", timing_only=True), timing_only=True)
    assert capsys.readouterr().out == "" and fast.total_us == full.total_us


def test_assert_stops_the_kernel_with_its_message():
    x = GlobalTensor.from_array(np.arange(32, dtype=np.float32), "x")
    with pytest.raises(KernelAssertionError, match="block 2: assert failed in the kernel: block 2 is past the end"):
        launch(_debug_kernel, 3, x)


def test_printf_checks_its_format():
    ctx = ctx_on()
    with pytest.raises(TypeError, match="more conversions than arguments"):
        ctx.printf("%d %d", 1)
    with pytest.raises(TypeError, match="%d takes an integer"):
        ctx.printf("%d", 1.5)


def test_bfloat16_round_trip_is_round_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, 3.0e38], np.float32)
    bits = float_to_bfloat16(x)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bfloat16_to_float(bits), np.array([1.0, 1.0, 1 + 2**-6, -2.5, np.inf, 3.0040553e38],
                                                                     np.float32))
    assert np.isnan(bfloat16_to_float(float_to_bfloat16(np.array([np.nan], np.float32))))[0]
    # every bfloat16 converts to float32 and back unchanged
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    f = bfloat16_to_float(every)
    ok = ~np.isnan(f)
    np.testing.assert_array_equal(float_to_bfloat16(f)[ok], every[ok])
