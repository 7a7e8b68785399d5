"""Tests of the vector instructions (npu_lab.lang.vector / select / reduce / sort) against
independent numpy computations.

Rules (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/..., notes in /work/notes/ascendc_api.md):

* tensor form ``Op(dst, src..., count)``: the first ``count`` elements;
* level-0 form ``Op(dst, src..., mask, repeatTime, RepeatParams)``: repeat r, lane l (of
  256 B / sizeof(T) lanes) touches element ``r*repStride*B + (l // B)*blkStride*B + l % B``, B the
  elements of one 32-B block; ``mask`` is a lane count or [lo, hi] bits; masked-off dst elements
  keep their values (SIMD计算说明/高维切分.md, 掩码.md);
* ``Compare`` writes bit i % 8 of byte i // 8 for element i; ``Select`` takes src0 on a 1 bit;
  ``GatherMask`` packs the kept elements; ``Brcb`` fills one 32-B block per source element;
* ``WholeReduceMax`` gives [value, index bits] per repeat, index within the repeat, lowest on ties;
  ``ReduceMax`` the global max and its lowest index; ``Sort32`` sorts 32 (score, index) pairs
  descending, stable; ``MrgSort`` merges 2-4 sorted lists, ties to the earlier list.

Illegal uses are in test_illegal_programs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import KernelContext, get_preset
from npu_lab.lang import (SELMODE, AscendCRuleError, BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams,
                          GatherMaskParams, MrgSort4Info, MrgSortSrcList, ReduceOrder, RoundMode, TBuf,
                          UnaryRepeatParams, reduce_max_tmp_elements)

HW = get_preset("ascend-910b2")
SETTINGS = dict(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OLD = 0x5A                                            # the bytes UB starts with in these tests


def ctx_on(**kwargs) -> KernelContext:
    return KernelContext(HW, 0, 1, **kwargs)


def scratch(ctx, dtype, count, name="t"):
    """A UB tensor of ``count`` elements, every byte OLD (recognisable when left untouched)."""
    b = TBuf()
    ctx.pipe.init_buffer(b, max(count * np.dtype(dtype).itemsize, 32), name=name)
    t = b.get(dtype)
    t.region.storage[:] = OLD
    return t


def put(ctx, values, name="src", dtype=None):
    """A UB tensor holding ``values`` (written directly: these tests are about the vector unit)."""
    values = np.asarray(values, dtype=dtype)
    t = scratch(ctx, values.dtype, values.size, name)
    t.data[:values.size] = values.ravel()
    return t


def old_values(n, dtype):
    return np.full(n * np.dtype(dtype).itemsize, OLD, np.uint8).view(dtype)


def rand(n, dtype=np.float32, seed=0, lo=-4, hi=4):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(lo, hi, n).astype(dtype)
    return rng.integers(lo * 10, hi * 10, n).astype(dtype)


def l0_offsets(lanes, itemsize, repeat, blk, rep):
    """Element offsets of a level-0 operand, by the page's rule, one lane at a time."""
    per_block = 32 // itemsize
    return np.array([r * rep * per_block + (lane // per_block) * blk * per_block + lane % per_block
                     for r in range(repeat) for lane in lanes], dtype=np.int64)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}


# ---- tensor form ------------------------------------------------------------------------------------


@settings(**SETTINGS)
@given(op=st.sampled_from(sorted(BINARY)), dtype=st.sampled_from([np.float32, np.float16, np.int32]),
       count=st.integers(1, 700))
def test_binary_tensor_form_matches_numpy(op, dtype, count):
    """Add/Sub/Mul/Div/Max/Min over the first count elements, as numpy computes them in dtype;
    the rest of dst is untouched."""
    if op == "div" and dtype == np.int32:
        return
    ctx = ctx_on()
    a_np, b_np = rand(count + 5, dtype, 1), rand(count + 5, dtype, 2)
    if op == "div":
        b_np = np.where(b_np == 0, 1, b_np).astype(dtype)
    a, b = put(ctx, a_np, "a"), put(ctx, b_np, "b")
    out = scratch(ctx, dtype, count + 5, "out")
    getattr(ctx, op)(out, a, b, count)
    expect = old_values(count + 5, dtype).copy()
    with np.errstate(all="ignore"):
        expect[:count] = BINARY[op](a_np[:count], b_np[:count]).astype(dtype)
    np.testing.assert_array_equal(out.data[:count + 5], expect)


@pytest.mark.parametrize("op, ref", [("adds", np.add), ("muls", np.multiply), ("maxs", np.maximum),
                                     ("mins", np.minimum)])
def test_scalar_tensor_forms_and_exp(op, ref):
    x = np.linspace(-3, 3, 100, dtype=np.float32)
    ctx = ctx_on()
    a = put(ctx, x)
    out = scratch(ctx, np.float32, 100, "out")
    getattr(ctx, op)(out, a, 1.5, 100)
    np.testing.assert_array_equal(out.data[:100], ref(x, np.float32(1.5)))
    ctx.exp(out, a, 100)
    np.testing.assert_array_equal(out.data[:100], np.exp(x))


def test_count_limits_the_elements_touched_and_the_cost():
    """count=10 touches 10 elements and costs one repeat."""
    ctx = ctx_on()
    a = put(ctx, np.ones(128, np.float32))
    out = put(ctx, np.zeros(128, np.float32), "out")
    ctx.add(out, a, a, 10)
    assert out.data[:10].tolist() == [2] * 10 and out.data[10:].sum() == 0
    assert ctx.core.events[-1][1] == "Add x1"


# ---- level-0 form --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["add", "muls", "exp"])
def test_level0_with_full_mask_equals_the_tensor_form(op, dtype):
    """mask = all lanes, repeatTime = count / lanes, default strides: the same numbers and the
    same cost as the tensor form with that count."""
    lanes = 256 // np.dtype(dtype).itemsize
    count = 5 * lanes
    a_np, b_np = rand(count, dtype, 3, -2, 2), rand(count, dtype, 4, -2, 2)
    results, costs = [], []
    for level0 in (False, True):
        ctx = ctx_on()
        a, b, out = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, dtype, count, "out")
        tail = (lanes, 5, BinaryRepeatParams() if op == "add" else UnaryRepeatParams()) if level0 else (count,)
        if op == "add":
            ctx.add(out, a, b, *tail)
        elif op == "muls":
            ctx.muls(out, a, 0.75, *tail)
        else:
            ctx.exp(out, a, *tail)
        results.append(out.data.copy())
        ev = ctx.core.events[-1]
        costs.append((ev[1], ev[3] - ev[2]))
    np.testing.assert_array_equal(results[0], results[1])
    assert costs[0] == costs[1]


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16]), repeat=st.integers(1, 4), data=st.data())
def test_level0_count_mask_touches_the_first_lanes_of_each_repeat(dtype, repeat, data):
    """Count mode: the first ``mask`` lanes of every repeat are computed, the others keep their
    old values."""
    lanes = 256 // np.dtype(dtype).itemsize
    mask = data.draw(st.integers(1, lanes))
    n = repeat * lanes
    a_np, b_np = rand(n, dtype, 5), rand(n, dtype, 6)
    ctx = ctx_on()
    a, b, out = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, dtype, n, "out")
    ctx.add(out, a, b, mask, repeat, BinaryRepeatParams())
    expect = old_values(n, dtype).copy()
    for r in range(repeat):
        for lane in range(mask):
            i = r * lanes + lane
            expect[i] = a_np[i] + b_np[i]
    np.testing.assert_array_equal(out.data.view(np.uint8), expect.view(np.uint8))


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16]), lo=st.integers(0, 2**64 - 1), hi=st.integers(0, 2**64 - 1),
       repeat=st.integers(1, 3))
def test_level0_bit_mask_selects_lanes_by_bit(dtype, lo, hi, repeat):
    """Bit mode [lo, hi]: lane i is on when bit i of lo (i < 64) or bit i-64 of hi is set; hi
    must be 0 for 32-bit types (tested in the illegal catalogue)."""
    lanes = 256 // np.dtype(dtype).itemsize
    if lanes == 64:
        hi = 0
    if lo == 0 and hi == 0:
        lo = 1
    n = repeat * lanes
    a_np = rand(n, dtype, 7)
    ctx = ctx_on()
    a, out = put(ctx, a_np, "a"), scratch(ctx, dtype, n, "out")
    ctx.muls(out, a, 2.0, [lo, hi], repeat, UnaryRepeatParams())
    expect = old_values(n, dtype).copy()
    for r in range(repeat):
        for lane in range(lanes):
            on = (lo >> lane) & 1 if lane < 64 else (hi >> (lane - 64)) & 1
            if on:
                expect[r * lanes + lane] = a_np[r * lanes + lane] * dtype(2)
    np.testing.assert_array_equal(out.data.view(np.uint8), expect.view(np.uint8))


@settings(**SETTINGS)
@given(repeat=st.integers(1, 4), dst_blk=st.integers(1, 3), src0_blk=st.integers(0, 3), src1_blk=st.integers(0, 3),
       dst_rep=st.integers(0, 24), src0_rep=st.integers(0, 24), src1_rep=st.integers(0, 24),
       mask=st.integers(1, 64))
def test_level0_block_and_repeat_strides(repeat, dst_blk, src0_blk, src1_blk, dst_rep, src0_rep, src1_rep, mask):
    """Strides in 32-B blocks place every lane where the page's formula says (including
    src block stride 0: every block reads the first one)."""
    dtype = np.float32
    lanes = range(mask)
    size = 1000
    a_np, b_np = rand(size, dtype, 8), rand(size, dtype, 9)
    do = l0_offsets(lanes, 4, repeat, dst_blk, dst_rep)
    if len(set(do.tolist())) != len(do):     # overlapping dst lanes: the order would matter
        dst_rep = max(dst_rep, 8 * dst_blk)
        do = l0_offsets(lanes, 4, repeat, dst_blk, dst_rep)
    ctx = ctx_on()
    a, b, out = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, dtype, size, "out")
    ctx.sub(out, a, b, mask, repeat, BinaryRepeatParams(dst_blk, src0_blk, src1_blk, dst_rep, src0_rep, src1_rep))
    s0, s1 = l0_offsets(lanes, 4, repeat, src0_blk, src0_rep), l0_offsets(lanes, 4, repeat, src1_blk, src1_rep)
    expect = old_values(size, dtype).copy()
    for d, i, j in zip(do, s0, s1):
        expect[d] = a_np[i] - b_np[j]
    np.testing.assert_array_equal(out.data.view(np.uint8), expect.view(np.uint8))


def test_src_block_stride_zero_broadcasts_one_block():
    """src1 block stride 0 and repeat stride 0: one 8-float block added to every block of 4
    repeats (the hardware's broadcast of a short vector)."""
    ctx = ctx_on()
    x_np, row = rand(256, np.float32, 10), np.arange(8, dtype=np.float32)
    x, r, out = put(ctx, x_np, "x"), put(ctx, row, "row"), scratch(ctx, np.float32, 256, "out")
    ctx.add(out, x, r, 64, 4, BinaryRepeatParams(1, 1, 0, 8, 8, 0))
    np.testing.assert_array_equal(out.data, x_np + np.tile(row, 32))


def test_brcb_then_block_stride_zero_adds_a_value_per_row():
    """Brcb spreads 8 per-row values to one 32-B block each; src1 block stride 0, repeat stride 1
    then adds row r's value to all 64 elements of row r (how a per-row max is subtracted)."""
    rows = 8
    ctx = ctx_on()
    x_np = rand(rows * 64, np.float32, 11)
    per_row = np.arange(1, rows + 1, dtype=np.float32) * 10
    x, v = put(ctx, x_np, "x"), put(ctx, per_row, "v")
    blocks, out = scratch(ctx, np.float32, rows * 8, "blocks"), scratch(ctx, np.float32, rows * 64, "out")
    ctx.brcb(blocks, v, 1, BrcbRepeatParams(1, 8))
    np.testing.assert_array_equal(blocks.data, np.repeat(per_row, 8))
    ctx.sub(out, x, blocks, 64, rows, BinaryRepeatParams(1, 1, 0, 8, 8, 1))
    np.testing.assert_array_equal(out.data, (x_np.reshape(rows, 64) - per_row[:, None]).ravel())


@settings(**SETTINGS)
@given(repeat=st.integers(1, 3), blk=st.integers(1, 3), rep=st.integers(8, 30), dtype=st.sampled_from([np.float32, np.float16]))
def test_brcb_fills_one_block_per_source_element(repeat, blk, rep, dtype):
    """Brcb: block i*dstRepStride + j*dstBlkStride of dst = src[8*i + j] (the page's pseudo code)."""
    per = 32 // np.dtype(dtype).itemsize
    rep = max(rep, 7 * blk + 1)                       # no two blocks on the same place
    size = (repeat - 1) * rep * per + (7 * blk + 1) * per
    src_np = rand(8 * repeat, dtype, 12)
    ctx = ctx_on()
    src, dst = put(ctx, src_np, "src"), scratch(ctx, dtype, size, "dst")
    ctx.brcb(dst, src, repeat, BrcbRepeatParams(blk, rep))
    expect = old_values(size, dtype).copy()
    for i in range(repeat):
        for j in range(8):
            b = i * rep + j * blk
            expect[b * per:(b + 1) * per] = src_np[8 * i + j]
    np.testing.assert_array_equal(dst.data.view(np.uint8), expect.view(np.uint8))


def test_duplicate_both_forms():
    ctx = ctx_on()
    t = scratch(ctx, np.float32, 128)
    ctx.duplicate(t, 2.5, 70)
    assert (t.data[:70] == 2.5).all() and (t.data[70:].view(np.uint32) == 0x5A5A5A5A).all()
    ctx.duplicate(t, -1.0, 8, 2, 1, 8)                # the first 8 lanes of 2 repeats
    assert t.data[:8].tolist() == [-1] * 8 and t.data[64:72].tolist() == [-1] * 8
    assert (t.data[8:64] == 2.5).all()


def test_copy_level0_with_src_stride_zero_repeats_one_block():
    """Copy(dst, src, mask, repeat, CopyRepeatParams(1, 0, 8, 1)): every block of repeat r is
    src block r."""
    ctx = ctx_on()
    src_np = np.arange(32, dtype=np.float32)
    src, dst = put(ctx, src_np, "src"), scratch(ctx, np.float32, 256, "dst")
    ctx.copy(dst, src, 64, 4, CopyRepeatParams(1, 0, 8, 1))
    np.testing.assert_array_equal(dst.data, np.repeat(src_np.reshape(4, 8), 8, axis=0).ravel())


def test_index_generators():
    ctx = ctx_on()
    t = scratch(ctx, np.int32, 64)
    ctx.create_vec_index(t, 5, 40)
    assert t.data[:40].tolist() == list(range(5, 45))
    f = scratch(ctx, np.float32, 16, "f")
    ctx.arith_progression(f, 1.0, 0.5, 10)
    np.testing.assert_array_equal(f.data[:10], 1.0 + 0.5 * np.arange(10, dtype=np.float32))


@pytest.mark.parametrize("mode, ref", [(RoundMode.CAST_RINT, [2, -2, 2, 4, -3]), (RoundMode.CAST_FLOOR, [2, -3, 2, 3, -3]),
                                       (RoundMode.CAST_CEIL, [3, -2, 3, 4, -2]), (RoundMode.CAST_ROUND, [3, -3, 2, 4, -3]),
                                       (RoundMode.CAST_TRUNC, [2, -2, 2, 3, -2])])
def test_cast_float_to_int_rounds_as_asked(mode, ref):
    """CAST_RINT ties to even, CAST_ROUND away from zero, FLOOR/CEIL/TRUNC as named (Cast.md)."""
    ctx = ctx_on()
    x = put(ctx, np.array([2.5, -2.5, 2.4999, 3.5, -2.7], np.float32))
    y = scratch(ctx, np.int32, 8, "y")
    ctx.cast(y, x, mode, 5)
    assert y.data[:5].tolist() == ref


def test_cast_widening_takes_cast_none():
    ctx = ctx_on()
    x = put(ctx, np.array([1.5, -2.25], np.float16))
    y = scratch(ctx, np.float32, 8, "y")
    ctx.cast(y, x, RoundMode.CAST_NONE, 2)
    assert y.data[:2].tolist() == [1.5, -2.25]


def test_shift_left_on_integers():
    ctx = ctx_on()
    x = put(ctx, np.arange(8, dtype=np.int32))
    y = scratch(ctx, np.int32, 8, "y")
    ctx.shift_left(y, x, 3, 8)
    assert y.data.tolist() == [i << 3 for i in range(8)]


# ---- compare / select ---------------------------------------------------------------------------


def bits_reference(flags) -> np.ndarray:
    """Booleans → bytes, element i = bit i % 8 of byte i // 8, one element at a time."""
    out = np.zeros((len(flags) + 7) // 8, np.uint8)
    for i, f in enumerate(flags):
        if f:
            out[i // 8] |= 1 << (i % 8)
    return out


CMP = {"LT": np.less, "GT": np.greater, "EQ": np.equal, "LE": np.less_equal, "GE": np.greater_equal,
       "NE": np.not_equal}


@settings(**SETTINGS)
@given(mode=st.sampled_from(sorted(CMP)), dtype=st.sampled_from([np.float32, np.float16]), repeats=st.integers(1, 4))
def test_compare_writes_a_little_endian_bit_mask(mode, dtype, repeats):
    """Compare over whole repeats: bit i % 8 of byte i // 8 is (src0[i] mode src1[i]); bytes
    after the mask are untouched."""
    n = repeats * 256 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(repeats)
    a_np = rng.integers(-3, 3, n).astype(dtype)
    b_np = rng.integers(-3, 3, n).astype(dtype)
    ctx = ctx_on()
    a, b, m = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, np.uint8, n // 8 + 32, "mask")
    ctx.compare(m, a, b, mode, n)
    np.testing.assert_array_equal(m.data[:n // 8], bits_reference(CMP[mode](a_np, b_np)))
    assert (m.data[n // 8:] == OLD).all()


def test_compare_doc_example_gt_gives_240():
    """The page's GT example: [2,3,5,7,11,13,17,19] > [2,4,6,8,10,12,14,16] → byte 240."""
    ctx = ctx_on()
    a = np.zeros(64, np.float32)
    b = np.zeros(64, np.float32)
    a[:8], b[:8] = [2, 3, 5, 7, 11, 13, 17, 19], [2, 4, 6, 8, 10, 12, 14, 16]
    m = scratch(ctx, np.uint8, 32, "mask")
    ctx.compare(m, put(ctx, a, "a"), put(ctx, b, "b"), "GT", 64)
    assert m.data[0] == 240 and (m.data[1:8] == 0).all()


def test_compare_level0_and_compares_and_int32_eq():
    """Level-0 Compare (full mask) with strides, Compares against a scalar, and int32 EQ (the one
    int32 mode the 910B has)."""
    ctx = ctx_on()
    a_np = np.arange(256, dtype=np.float32) % 7
    a, b = put(ctx, a_np, "a"), put(ctx, np.full(64, 3, np.float32), "b")
    m = scratch(ctx, np.uint8, 64, "m")
    ctx.compare(m, a, b, "LE", 64, 4, BinaryRepeatParams(1, 1, 1, 8, 8, 0))
    np.testing.assert_array_equal(m.data[:32], bits_reference(a_np <= 3))
    ctx.compares(m, a, 3.0, "GT", 256)
    np.testing.assert_array_equal(m.data[:32], bits_reference(a_np > 3))
    i = put(ctx, np.arange(64, dtype=np.int32) % 5, "i")
    j = put(ctx, np.full(64, 2, np.int32), "j")
    ctx.compare(m, i, j, "EQ", 64)
    np.testing.assert_array_equal(m.data[:8], bits_reference(np.arange(64) % 5 == 2))


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16]), n=st.integers(1, 300), seed=st.integers(0, 99))
def test_select_tensor_and_scalar_modes(dtype, n, seed):
    """VSEL_TENSOR_TENSOR_MODE: bit 1 → src0, bit 0 → src1; VSEL_TENSOR_SCALAR_MODE: bit 0 → the
    scalar; the mask is consumed continuously."""
    rng = np.random.default_rng(seed)
    bits = rng.random(n) < 0.5
    a_np, b_np = rand(n, dtype, seed), rand(n, dtype, seed + 1)
    ctx = ctx_on()
    m = put(ctx, bits_reference(bits), "m")
    a, b, out = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, dtype, n, "out")
    ctx.select(out, m, a, b, SELMODE.VSEL_TENSOR_TENSOR_MODE, n)
    np.testing.assert_array_equal(out.data[:n], [a_np[i] if bits[i] else b_np[i] for i in range(n)])
    ctx.select(out, m, a, -9.0, SELMODE.VSEL_TENSOR_SCALAR_MODE, n)
    np.testing.assert_array_equal(out.data[:n], np.array([a_np[i] if bits[i] else -9 for i in range(n)], dtype))


def test_select_cmpmask_spr_reuses_the_first_repeat_of_bits():
    """VSEL_CMPMASK_SPR: every repeat uses the same first 256/sizeof(T) mask bits."""
    ctx = ctx_on()
    bits = np.zeros(256, bool)
    bits[:64] = np.arange(64) % 3 == 0               # only the first repeat's bits count
    bits[64:] = True
    m = put(ctx, bits_reference(bits), "m")
    a_np, b_np = rand(256, np.float32, 1), rand(256, np.float32, 2)
    a, b, out = put(ctx, a_np, "a"), put(ctx, b_np, "b"), scratch(ctx, np.float32, 256, "out")
    ctx.select(out, m, a, b, SELMODE.VSEL_CMPMASK_SPR, 256)
    keep = np.tile(np.arange(64) % 3 == 0, 4)
    np.testing.assert_array_equal(out.data, np.where(keep, a_np, b_np))


def test_compare_then_select_masks_like_numpy_where():
    """The usual pair: Compare to a bit mask, then Select — np.where(x > y, x, 0)."""
    ctx = ctx_on()
    x_np, y_np = rand(128, np.float32, 3), rand(128, np.float32, 4)
    x, y = put(ctx, x_np, "x"), put(ctx, y_np, "y")
    m, out = scratch(ctx, np.uint8, 32, "m"), scratch(ctx, np.float32, 128, "out")
    ctx.compare(m, x, y, "GT", 128)
    ctx.select(out, m, x, 0.0, SELMODE.VSEL_TENSOR_SCALAR_MODE, 128)
    np.testing.assert_array_equal(out.data, np.where(x_np > y_np, x_np, 0))


# ---- gather_mask -----------------------------------------------------------------------------------


PATTERN_KEEP = {1: lambda i: i % 2 == 0, 2: lambda i: i % 2 == 1, 3: lambda i: i % 4 == 0,
                4: lambda i: i % 4 == 1, 5: lambda i: i % 4 == 2, 6: lambda i: i % 4 == 3, 7: lambda i: True}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint32])
@pytest.mark.parametrize("pattern", sorted(PATTERN_KEEP))
def test_gather_mask_builtin_patterns(pattern, dtype):
    """Patterns 1-7 (even, odd, 1st..4th of every 4, all) over 2 repeats, kept elements packed to
    the front, the count returned (rsvdCnt)."""
    per = 256 // np.dtype(dtype).itemsize
    src_np = np.arange(2 * per).astype(dtype)
    ctx = ctx_on()
    src, dst = put(ctx, src_np, "src"), scratch(ctx, dtype, 2 * per, "dst")
    kept = ctx.gather_mask(dst, src, pattern, False, 0, GatherMaskParams(1, 2, 8, 0))
    expect = [src_np[i] for i in range(2 * per) if PATTERN_KEEP[pattern](i)]
    assert kept == len(expect)
    np.testing.assert_array_equal(dst.data[:kept], expect)
    assert (dst.data.view(np.uint8)[kept * np.dtype(dtype).itemsize:] == OLD).all()


def test_gather_mask_splits_sort32_pairs():
    """Patterns 1 and 2 on a pair tensor viewed as float32 / uint32: scores and indices."""
    ctx = ctx_on()
    scores = np.arange(32, dtype=np.float32) * 0.5
    idx = np.arange(100, 132, dtype=np.uint32)
    pairs = np.empty(64, np.float32)
    pairs[0::2], pairs.view(np.uint32)[1::2] = scores, idx
    p = put(ctx, pairs, "pairs")
    s_out, i_out = scratch(ctx, np.float32, 64, "s"), scratch(ctx, np.uint32, 64, "i")
    assert ctx.gather_mask(s_out, p, 1, False, 0, GatherMaskParams(1, 1, 8, 0)) == 32
    assert ctx.gather_mask(i_out, p.reinterpret_cast(np.uint32), 2, False, 0, GatherMaskParams(1, 1, 8, 0)) == 32
    np.testing.assert_array_equal(s_out.data[:32], scores)
    np.testing.assert_array_equal(i_out.data[:32], idx)


@settings(**SETTINGS)
@given(words=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2))
def test_gather_mask_user_pattern(words):
    """A uint32 pattern tensor: element i kept when bit i % 32 of word i // 32 is set."""
    ctx = ctx_on()
    src_np = np.arange(64, dtype=np.float32)
    src, dst = put(ctx, src_np, "src"), scratch(ctx, np.float32, 64, "dst")
    pat = put(ctx, np.array(words + [0] * 6, np.uint32), "pattern")
    kept = ctx.gather_mask(dst, src, pat, False, 0, GatherMaskParams(1, 1, 8, 0))
    expect = [src_np[i] for i in range(64) if (words[i // 32] >> (i % 32)) & 1]
    assert kept == len(expect)
    np.testing.assert_array_equal(dst.data[:kept], expect)


def test_gather_mask_counter_mode_takes_mask_elements_per_repeat():
    """reduceMode=true on the 910B (配置方式一): mask elements per repeat, repeatTimes repeats."""
    ctx = ctx_on()
    src_np = np.arange(64, dtype=np.float32)
    src, dst = put(ctx, src_np, "src"), scratch(ctx, np.float32, 64, "dst")
    kept = ctx.gather_mask(dst, src, 1, True, 16, GatherMaskParams(1, 2, 2, 0))   # 16 floats = 2 blocks
    assert kept == 16
    np.testing.assert_array_equal(dst.data[:16], np.arange(0, 32, 2))


def test_gather_mask_counter_mode_honours_the_source_strides_on_the_910b():
    """配置方式一 reads each repeat's mask elements at src0RepeatStride blocks apart (and
    src0BlockStride within): repeat 1 starts 4 blocks (32 floats) in, not right after repeat 0."""
    ctx = ctx_on()
    src_np = np.arange(128, dtype=np.float32)
    src, dst = put(ctx, src_np, "src"), scratch(ctx, np.float32, 64, "dst")
    kept = ctx.gather_mask(dst, src, 1, True, 16, GatherMaskParams(1, 2, 4, 0))
    np.testing.assert_array_equal(dst.data[:kept], np.r_[np.arange(0, 16, 2), np.arange(32, 48, 2)])
    kept = ctx.gather_mask(dst, src, 1, True, 16, GatherMaskParams(2, 1, 8, 0))   # blocks 0 and 2
    np.testing.assert_array_equal(dst.data[:kept], np.r_[np.arange(0, 8, 2), np.arange(16, 24, 2)])
    p310 = KernelContext(get_preset("ascend-310p3"), 0, 1)      # 配置方式二: mask elements in all
    src, dst = put(p310, src_np, "src"), scratch(p310, np.float32, 64, "dst")
    kept = p310.gather_mask(dst, src, 1, True, 32, GatherMaskParams(1, 2, 4, 0))
    np.testing.assert_array_equal(dst.data[:kept], np.arange(0, 32, 2))


# ---- reductions ------------------------------------------------------------------------------------


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16]), repeat=st.integers(1, 5), seed=st.integers(0, 999), data=st.data())
def test_whole_reduce_max_and_min_give_value_index_pairs(dtype, repeat, seed, data):
    """Per repeat: [value, index bits], the index the lane inside the repeat, lowest on ties
    (values drawn from a few levels, so ties are common)."""
    lanes = 256 // np.dtype(dtype).itemsize
    mask = data.draw(st.integers(1, lanes))
    rng = np.random.default_rng(seed)
    src_np = rng.integers(0, 4, repeat * lanes).astype(dtype)
    idx_t = np.uint32 if dtype == np.float32 else np.uint16
    for name, pick in (("whole_reduce_max", max), ("whole_reduce_min", min)):
        ctx = ctx_on()
        src, dst = put(ctx, src_np, "src"), scratch(ctx, dtype, 2 * repeat, "dst")
        getattr(ctx, name)(dst, src, mask, repeat, 1, 1, 8, ReduceOrder.ORDER_VALUE_INDEX)
        for r in range(repeat):
            row = [src_np[r * lanes + lane] for lane in range(mask)]
            best = pick(row)
            assert dst.data[2 * r] == best
            assert dst.data.view(idx_t)[2 * r + 1] == row.index(best)    # first occurrence


def test_whole_reduce_max_orders_and_dst_stride():
    """ORDER_INDEX_VALUE swaps the pair; ORDER_ONLY_VALUE writes values only; dstRepStride counts
    results; src block stride 2 reads every other block."""
    ctx = ctx_on()
    src_np = rand(256, np.float32, 5)
    src = put(ctx, src_np, "src")
    dst = scratch(ctx, np.float32, 16, "dst")
    ctx.whole_reduce_max(dst, src, 64, 2, 2, 1, 8, ReduceOrder.ORDER_INDEX_VALUE)
    rows = src_np[:128].reshape(2, 64)
    for r in range(2):
        assert dst.data.view(np.uint32)[4 * r] == rows[r].argmax() and dst.data[4 * r + 1] == rows[r].max()
    ctx.whole_reduce_max(dst, src, 32, 3, 1, 2, 8, ReduceOrder.ORDER_ONLY_VALUE)
    for r in range(3):
        lanes = [r * 64 + (lane // 8) * 16 + lane % 8 for lane in range(32)]
        assert dst.data[r] == src_np[lanes].max()


def test_whole_reduce_sum_per_repeat():
    ctx = ctx_on()
    src_np = np.arange(192, dtype=np.float32)
    src, dst = put(ctx, src_np, "src"), scratch(ctx, np.float32, 8, "dst")
    ctx.whole_reduce_sum(dst, src, 64, 3, 1, 1, 8)
    np.testing.assert_array_equal(dst.data[:3], src_np.reshape(3, 64).sum(axis=1))


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16]), count=st.integers(1, 3000), seed=st.integers(0, 99))
def test_reduce_max_with_index_over_the_whole_count(dtype, count, seed):
    """ReduceMax(dst, src, tmp, count, calIndex): dst[0] the max, dst[1] the bits of its lowest
    global index; the tmp buffer of the page's size is enough."""
    rng = np.random.default_rng(seed)
    src_np = rng.integers(-50, 50, count).astype(dtype)
    size = np.dtype(dtype).itemsize
    need = reduce_max_tmp_elements(count, size, True)
    ctx = ctx_on()
    src, dst, tmp = put(ctx, src_np, "src"), scratch(ctx, dtype, 16, "dst"), scratch(ctx, dtype, need, "tmp")
    ctx.reduce_max(dst, src, tmp[0] if need == tmp.count else tmp, count, True)
    assert dst.data[0] == src_np.max()
    idx_t = np.uint32 if size == 4 else np.uint16
    assert dst.data.view(idx_t)[1] == int(np.flatnonzero(src_np == src_np.max())[0])


def test_reduce_max_tmp_size_follows_the_page():
    """The page's worked example (half, 65 repeats): 144 elements without index, 176 with;
    one element fewer raises."""
    assert reduce_max_tmp_elements(65 * 128, 2, False) == 144
    assert reduce_max_tmp_elements(65 * 128, 2, True) == 176
    assert reduce_max_tmp_elements(64, 4, False) == 8
    ctx = ctx_on()
    src = put(ctx, np.zeros(65 * 128, np.float16), "src")
    dst = scratch(ctx, np.float16, 16, "dst")
    ctx.reduce_max(dst, src, scratch(ctx, np.float16, 176, "ok"), 65 * 128, True)
    b = TBuf()
    ctx.pipe.init_buffer(b, 352, name="small")
    with pytest.raises(AscendCRuleError, match="at least 176"):
        ctx.reduce_max(dst, src, b.get(np.float16, 175), 65 * 128, True)


def test_reduce_sum_over_the_count():
    ctx = ctx_on()
    src_np = np.arange(100, dtype=np.float32)
    src, dst, tmp = put(ctx, src_np, "src"), scratch(ctx, np.float32, 8, "dst"), scratch(ctx, np.float32, 64, "tmp")
    ctx.reduce_sum(dst, src, tmp, 100)
    assert dst.data[0] == src_np.sum()


# ---- sort ------------------------------------------------------------------------------------------


def pairs_of(t, n):
    flat = t.data[:2 * n]
    return flat[0::2].copy(), flat.view(np.uint32)[1::2].copy()


@settings(**SETTINGS)
@given(repeat=st.integers(1, 4), seed=st.integers(0, 999))
def test_sort32_sorts_each_32_descending_and_stable(repeat, seed):
    """Each repeat sorts its 32 scores descending, carrying the indices; equal scores keep their
    order (the lower position first)."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, 32 * repeat).astype(np.float32)
    idx = np.arange(32 * repeat, dtype=np.uint32) + 1000
    ctx = ctx_on()
    s, i = put(ctx, scores, "scores"), put(ctx, idx, "idx")
    dst = scratch(ctx, np.float32, 64 * repeat, "pairs")
    ctx.sort32(dst, s, i, repeat)
    got_s, got_i = pairs_of(dst, 32 * repeat)
    for r in range(repeat):
        group = sorted(range(32), key=lambda k: (-scores[32 * r + k], k))
        np.testing.assert_array_equal(got_s[32 * r:32 * r + 32], scores[32 * r + np.array(group)])
        np.testing.assert_array_equal(got_i[32 * r:32 * r + 32], idx[32 * r + np.array(group)])


@pytest.mark.parametrize("lists, valid_bit", [(2, 3), (3, 7), (4, 15)])
def test_mrg_sort_merges_sorted_lists(lists, valid_bit):
    """MrgSort of 2, 3 or 4 descending pair lists of different lengths: one descending list,
    ties taken from the earlier list first."""
    rng = np.random.default_rng(lists)
    lengths = [5, 8, 3, 6][:lists]
    ctx = ctx_on()
    srcs, all_pairs = [], []
    for k, n in enumerate(lengths):
        sc = np.sort(rng.integers(0, 5, n).astype(np.float32))[::-1]
        ix = np.arange(n, dtype=np.uint32) + 100 * k
        flat = np.empty(2 * n, np.float32)
        flat[0::2], flat.view(np.uint32)[1::2] = sc, ix
        srcs.append(put(ctx, flat, f"l{k}"))
        all_pairs += [(float(a), int(b), k, j) for j, (a, b) in enumerate(zip(sc, ix))]
    total = sum(lengths)
    dst = scratch(ctx, np.float32, 2 * total, "dst")
    ctx.mrg_sort(dst, MrgSortSrcList(*srcs, *([None] * (4 - lists))),
                 MrgSort4Info(tuple(lengths + [0] * (4 - lists)), False, valid_bit, 1))
    expect = sorted(all_pairs, key=lambda p: (-p[0], p[2], p[3]))
    got_s, got_i = pairs_of(dst, total)
    assert got_s.tolist() == [p[0] for p in expect]
    assert got_i.tolist() == [p[1] for p in expect]


def test_sort32_then_mrg_sort_sorts_128_scores():
    """Sort32 on 4 groups, then MrgSort of the 4 sorted groups = a full descending argsort
    (stable on ties)."""
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 20, 128).astype(np.float32)
    ctx = ctx_on()
    s, i = put(ctx, scores, "scores"), put(ctx, np.arange(128, dtype=np.uint32), "idx")
    sorted32, out = scratch(ctx, np.float32, 256, "s32"), scratch(ctx, np.float32, 256, "out")
    ctx.sort32(sorted32, s, i, 4)
    ctx.mrg_sort(out, MrgSortSrcList(sorted32, sorted32[64], sorted32[128], sorted32[192]),
                 MrgSort4Info((32, 32, 32, 32), False, 15, 1))
    got_s, got_i = pairs_of(out, 128)
    order = np.argsort(-scores, kind="stable")
    np.testing.assert_array_equal(got_i, order)
    np.testing.assert_array_equal(got_s, scores[order])


# ---- timing-only ----------------------------------------------------------------------------------


def test_vector_ops_in_timing_only_runs_cost_the_same_and_compute_nothing():
    def run(timing_only):
        ctx = ctx_on(timing_only=timing_only)
        b = TBuf()
        ctx.pipe.init_buffer(b, 8192)
        a = b.get(np.float32)
        m = b.get(np.uint8)
        ctx.duplicate(a, 1.0, 1000)
        ctx.exp(a, a, 64, 4, UnaryRepeatParams())
        ctx.compare(m[4096], a, a[256], "GT", 128)
        ctx.gather_mask(a[1024], a, 1, False, 0, GatherMaskParams(1, 2, 8, 0))
        ctx.whole_reduce_max(a[1536], a, 64, 2, 1, 1, 8)
        ctx.sort32(a[1024], a, a[512].reinterpret_cast(np.uint32), 2)
        return ctx

    full, fast = run(False), run(True)
    assert full.core.finish().same_work_as(fast.core.finish())
    assert fast.ub.held[0].storage is None


def test_vector_operand_errors_say_what_would_be_right():
    """Vector ops take UB tensors only, counts within every operand, count >= 1, one dtype."""
    from npu_lab import GlobalTensor

    ctx = ctx_on()
    a, small = scratch(ctx, np.float32, 16, "a"), scratch(ctx, np.float32, 8, "small")
    with pytest.raises(TypeError, match="data_copy"):
        ctx.add(a, GlobalTensor.from_array(np.zeros(8, np.float32)), a, 8)
    with pytest.raises(AscendCRuleError, match="count=16 exceeds UB tensor 'small'"):
        ctx.add(a, a, small, 16)
    with pytest.raises(AscendCRuleError, match=">= 1"):
        ctx.add(a, a, a, 0)
    with pytest.raises(AscendCRuleError, match="share one dtype"):
        ctx.add(a, a, scratch(ctx, np.float16, 16, "h"), 8)
    with pytest.raises(TypeError, match="BinaryRepeatParams"):
        ctx.add(a, a, a, 64, 1, UnaryRepeatParams())
