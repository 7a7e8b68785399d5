"""Tests of data movement (npu_lab.lang.dma) against independent numpy references.

Rules (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/):

* ``DataCopy(dst, src, count)`` (DataCopy（GM与UB连续数据搬运）.md) moves ``count`` elements,
  ``count * sizeof(T)`` a multiple of 32 B, UB address 32-B aligned;
* ``DataCopy(dst, src, DataCopyParams{blockCount, blockLen, srcStride, dstStride})``
  (DataCopy（GM与UB高维切分数据搬运）.md): blocks of ``blockLen`` 32-B units, a stride being the
  *gap* from one block's end to the next one's start, in 32-B units on both sides; one instruction;
* ``DataCopyPad`` GM->UB (DataCopyPad（GMToUB非对齐数据搬运）.md): ``blockLen`` bytes per block,
  GM gap in bytes, UB gap in 32-B blocks; each block lands at a 32-B boundary as
  [left padding][data][right padding][dummy] rounded up to 32 B: with no left/right padding the
  dummy repeats the block's first element, otherwise isPad fills with paddingValue;
* ``DataCopyPad`` UB->GM (DataCopyPad（UBToGM非对齐数据搬运）.md): UB gap in 32-B blocks, GM gap
  in bytes; exactly ``blockLen`` bytes per block reach GM, nothing else changes.

Errors for illegal copies are in test_illegal_programs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import GlobalTensor, KernelContext, get_preset
from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, TBuf
from npu_lab.sim.core import PIPE_CODE

HW = get_preset("ascend-910b2")
SETTINGS = dict(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.float32, np.float16, np.int32, np.uint8]
SENTINEL = 0x5A                                  # bytes a copy must not touch


def ctx_on(**kwargs) -> KernelContext:
    return KernelContext(HW, 0, 1, **kwargs)


def ub(ctx, dtype, count, name="ub", fill_byte=SENTINEL):
    """A UB tensor of ``count`` elements whose bytes are all ``fill_byte`` (so untouched bytes
    can be recognised)."""
    b = TBuf()
    ctx.pipe.init_buffer(b, count * np.dtype(dtype).itemsize, name=name)
    t = b.get(dtype)
    t.region.storage[:] = fill_byte
    return t


def values(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 100, n).astype(dtype)


def sentinel_array(n, dtype):
    return np.full(n * np.dtype(dtype).itemsize, SENTINEL, np.uint8).view(dtype)


def mte_events(ctx):
    return [(ev[0], ev[4]) for ev in ctx.core.events]


# ---- DataCopy, contiguous ---------------------------------------------------------------------------


@settings(**SETTINGS)
@given(dtype=st.sampled_from(DTYPES), blocks=st.integers(1, 20), gm_off=st.integers(0, 40),
       ub_blocks_off=st.integers(0, 3))
def test_data_copy_contiguous_both_ways(dtype, blocks, gm_off, ub_blocks_off):
    """GM->UB on MTE2 and UB->GM on MTE3 move exactly count elements, from any GM element offset
    to a 32-B aligned UB offset; neighbours are untouched; HBM bytes are counted."""
    per = 32 // np.dtype(dtype).itemsize
    count, ub_off = blocks * per, ub_blocks_off * per
    src_np = values(gm_off + count + 5, dtype)
    ctx = ctx_on()
    t = ub(ctx, dtype, ub_off + count + per)
    ctx.data_copy(t[ub_off], GlobalTensor.from_array(src_np)[gm_off], count)
    expect = sentinel_array(ub_off + count + per, dtype)
    expect[ub_off:ub_off + count] = src_np[gm_off:gm_off + count]
    np.testing.assert_array_equal(t.data, expect)

    ctx.set_flag("MTE2_MTE3", 0)
    ctx.wait_flag("MTE2_MTE3", 0)
    out_np = np.zeros(gm_off + count + 5, dtype)
    out = GlobalTensor.from_array(out_np.copy())
    ctx.data_copy(out[gm_off], t[ub_off], count)
    expect_out = out_np.copy()
    expect_out[gm_off:gm_off + count] = src_np[gm_off:gm_off + count]
    np.testing.assert_array_equal(out.data, expect_out)
    nbytes = count * np.dtype(dtype).itemsize
    assert (ctx.core.hbm_read_bytes, ctx.core.hbm_write_bytes) == (nbytes, nbytes)
    assert mte_events(ctx) == [(PIPE_CODE["MTE2"], nbytes), (PIPE_CODE["MTE3"], nbytes)]


def _blocks_reference(src, block_count, per_block, src_gap, dst_gap, dst_size, dst_init):
    """DataCopyParams by hand: block b reads src[b*(len+srcGap) ...] and writes
    dst[b*(len+dstGap) ...] (all in elements here)."""
    dst = dst_init.copy()
    for b in range(block_count):
        s = b * (per_block + src_gap)
        d = b * (per_block + dst_gap)
        dst[d:d + per_block] = src[s:s + per_block]
    return dst


@settings(**SETTINGS)
@given(dtype=st.sampled_from(DTYPES), block_count=st.integers(1, 6), block_len=st.integers(1, 3),
       src_stride=st.integers(0, 3), dst_stride=st.integers(0, 3), to_gm=st.booleans())
def test_data_copy_params_multi_block_with_strides(dtype, block_count, block_len, src_stride, dst_stride, to_gm):
    """One DataCopy with DataCopyParams equals the block-by-block reference in both directions
    (strides in 32-B blocks on both sides), and is one instruction moving blockCount x blockLen
    blocks."""
    per = 32 // np.dtype(dtype).itemsize
    p = DataCopyParams(block_count, block_len, src_stride, dst_stride)
    src_need = (block_count - 1) * (block_len + src_stride) * per + block_len * per
    dst_need = (block_count - 1) * (block_len + dst_stride) * per + block_len * per
    src_np = values(src_need + 3 * per, dtype, seed=block_count)
    ctx = ctx_on()
    if not to_gm:
        t = ub(ctx, dtype, dst_need + per)
        ctx.data_copy(t, GlobalTensor.from_array(src_np), p)
        got = t.data
        expect = _blocks_reference(src_np, block_count, block_len * per, src_stride * per, dst_stride * per,
                                   dst_need + per, sentinel_array(dst_need + per, dtype))
    else:
        t = ub(ctx, dtype, src_need + 3 * per)
        t.data[:] = src_np
        out = GlobalTensor.from_array(np.zeros(dst_need + per, dtype))
        ctx.data_copy(out, t, p)
        got = out.data
        expect = _blocks_reference(src_np, block_count, block_len * per, src_stride * per, dst_stride * per,
                                   dst_need + per, np.zeros(dst_need + per, dtype))
    np.testing.assert_array_equal(got, expect)
    ((pipe, nbytes),) = mte_events(ctx)
    assert pipe == PIPE_CODE["MTE3" if to_gm else "MTE2"]
    assert nbytes == block_count * block_len * 32


def test_data_copy_params_doc_example():
    """The page's example: half, blockCount=2, blockLen=3, srcStride=1, dstStride=2 → GM elements
    0..47 and 64..111 land at UB 0..47 and 80..127."""
    src = np.arange(200, dtype=np.float16)
    ctx = ctx_on()
    t = ub(ctx, np.float16, 128)
    ctx.data_copy(t, GlobalTensor.from_array(src), DataCopyParams(2, 3, 1, 2))
    np.testing.assert_array_equal(t.data[:48], src[:48])
    np.testing.assert_array_equal(t.data[80:128], src[64:112])
    assert (t.data[48:80].view(np.uint16) == 0x5A5A).all()


def test_one_multi_block_copy_is_cheaper_than_a_copy_per_block():
    """One instruction pays one latency: 16 blocks in one DataCopyParams beat 16 DataCopy calls."""
    src = GlobalTensor.from_array(np.zeros(16 * 64, np.float32))

    def cycles(one):
        ctx = ctx_on()
        t = ub(ctx, np.float32, 16 * 64)
        if one:
            ctx.data_copy(t, src, DataCopyParams(16, 8, 0, 0))
        else:
            for r in range(16):
                ctx.data_copy(t[64 * r], src[64 * r], 64)
        return ctx.core.finish().duration_cycles

    assert cycles(True) < cycles(False)


# ---- DataCopyPad GM -> UB ------------------------------------------------------------------------


def _pad_in_reference(src, dtype, p: DataCopyExtParams, pad: DataCopyPadExtParams, ub_size):
    """DataCopyPad GM->UB by hand, per the page: each block starts 32-B aligned; layout
    [left][data][right][dummy] rounded up to 32 B; returns (expected UB, mask of defined
    elements). Undefined ("随机值") elements are masked out."""
    size = np.dtype(dtype).itemsize
    n = p.block_len // size
    block = -(-(pad.left_padding * size + p.block_len + pad.right_padding * size) // 32) * 32 // size
    ub_np = sentinel_array(ub_size, dtype).copy()
    defined = np.ones(ub_size, bool)
    for b in range(p.block_count):
        g = b * (n + p.src_stride // size)
        u = b * (block + p.dst_stride * 32 // size)
        data = src[g:g + n]
        if pad.left_padding == 0 and pad.right_padding == 0:
            ub_np[u:u + block] = data[0]                      # the dummy repeats the first element
        elif pad.is_pad:
            ub_np[u:u + block] = dtype(pad.padding_value)
        else:
            defined[u:u + block] = False
        ub_np[u + pad.left_padding:u + pad.left_padding + n] = data
        defined[u + pad.left_padding:u + pad.left_padding + n] = True
    return ub_np, defined


@st.composite
def pad_in_cases(draw):
    dtype = draw(st.sampled_from([np.float32, np.float16, np.int32]))
    size = np.dtype(dtype).itemsize
    n = draw(st.integers(1, 40))
    max_pad = 32 // size
    left = draw(st.sampled_from([0, 0, draw(st.integers(0, max_pad))]))
    right = draw(st.sampled_from([0, 0, draw(st.integers(0, max_pad))]))
    p = DataCopyExtParams(draw(st.integers(1, 4)), n * size, draw(st.integers(0, 5)) * size,
                          draw(st.integers(0, 2)), 0)
    pad = DataCopyPadExtParams(draw(st.booleans()), left, right, draw(st.sampled_from([-7, 0, 3])))
    return dtype, p, pad


@settings(**SETTINGS)
@given(case=pad_in_cases())
def test_data_copy_pad_gm_to_ub_matches_the_page(case):
    """Any blockLen / GM gap / UB gap / padding: every block lands 32-B aligned with its padding
    and dummy as the page says; bytes past the last block are untouched."""
    dtype, p, pad = case
    size = np.dtype(dtype).itemsize
    n = p.block_len // size
    src = values(p.block_count * (n + p.src_stride // size) + 4, dtype, seed=n)
    block = -(-(pad.left_padding * size + p.block_len + pad.right_padding * size) // 32) * 32 // size
    ub_need = (p.block_count - 1) * (block + p.dst_stride * 32 // size) + block
    ctx = ctx_on()
    t = ub(ctx, dtype, ub_need + 32 // size)
    ctx.data_copy_pad(t, GlobalTensor.from_array(src), p, pad)
    expect, defined = _pad_in_reference(src, dtype, p, pad, t.count)
    np.testing.assert_array_equal(t.data[defined], expect[defined])
    ((pipe, nbytes),) = mte_events(ctx)
    assert (pipe, nbytes) == (PIPE_CODE["MTE2"], p.block_count * p.block_len)
    assert ctx.core.hbm_read_bytes == p.block_count * p.block_len


def test_data_copy_pad_dummy_is_the_first_element():
    """The page's scene 2: no padding, blockLen 20 B of float → 3 dummy floats per block, each a
    copy of the block's first element; dstStride=1 leaves one untouched block between."""
    src = np.arange(1, 11, dtype=np.float32)
    ctx = ctx_on()
    t = ub(ctx, np.float32, 24)
    ctx.data_copy_pad(t, GlobalTensor.from_array(src), DataCopyExtParams(2, 20, 0, 1, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    assert t.data[:8].tolist() == [1, 2, 3, 4, 5, 1, 1, 1]
    assert (t.data[8:16].view(np.uint32) == 0x5A5A5A5A).all()
    assert t.data[16:24].tolist() == [6, 7, 8, 9, 10, 6, 6, 6]


def test_data_copy_pad_pads_rows_with_a_value():
    """isPad with right padding: 5 floats per row + 3 of -inf fill 32-B rows (how the v4 kernel
    pads E to whole Sort32 groups)."""
    src = np.arange(15, dtype=np.float32)
    ctx = ctx_on()
    t = ub(ctx, np.float32, 24)
    ctx.data_copy_pad(t, GlobalTensor.from_array(src), DataCopyExtParams(3, 20, 0, 0, 0),
                      DataCopyPadExtParams(True, 0, 3, -np.inf))
    np.testing.assert_array_equal(t.data.reshape(3, 8)[:, :5], src.reshape(3, 5))
    assert np.isneginf(t.data.reshape(3, 8)[:, 5:]).all()


def test_data_copy_pad_left_padding():
    """leftPadding puts paddingValue before the data, inside the same 32-B block."""
    src = np.arange(1, 5, dtype=np.float32)
    ctx = ctx_on()
    t = ub(ctx, np.float32, 8)
    ctx.data_copy_pad(t, GlobalTensor.from_array(src), DataCopyExtParams(1, 16, 0, 0, 0),
                      DataCopyPadExtParams(True, 2, 1, 9.0))
    assert t.data.tolist() == [9, 9, 1, 2, 3, 4, 9, 9]


def test_data_copy_pad_zero_block_is_a_nop():
    """blockCount or blockLen 0: a NOP, nothing issued."""
    ctx = ctx_on()
    t = ub(ctx, np.float32, 8)
    g = GlobalTensor.from_array(np.ones(8, np.float32))
    ctx.data_copy_pad(t, g, DataCopyExtParams(0, 32, 0, 0, 0), DataCopyPadExtParams())
    ctx.data_copy_pad(t, g, DataCopyExtParams(1, 0, 0, 0, 0), DataCopyPadExtParams())
    assert ctx.core.events == [] and (t.data.view(np.uint32) == 0x5A5A5A5A).all()


# ---- DataCopyPad UB -> GM -------------------------------------------------------------------------


@settings(**SETTINGS)
@given(dtype=st.sampled_from([np.float32, np.float16, np.int32, np.uint8]), block_count=st.integers(1, 5),
       n=st.integers(1, 40), ub_gap_blocks=st.integers(0, 2), gm_gap=st.integers(0, 6))
def test_data_copy_pad_ub_to_gm_writes_exact_bytes(dtype, block_count, n, ub_gap_blocks, gm_gap):
    """Each UB block (32-B aligned, srcStride in blocks) writes exactly blockLen bytes to GM at
    dstStride-byte gaps; every other GM element keeps its value."""
    size = np.dtype(dtype).itemsize
    per = 32 // size
    ub_block = -(-n // per) * per
    ub_np = values((block_count - 1) * (ub_block + ub_gap_blocks * per) + ub_block, dtype, seed=n)
    gm_size = block_count * (n + gm_gap) + 7
    before = np.full(gm_size, 3, dtype)
    ctx = ctx_on()
    t = ub(ctx, dtype, len(ub_np))
    t.data[:] = ub_np
    out = GlobalTensor.from_array(before.copy())
    ctx.data_copy_pad(out, t, DataCopyExtParams(block_count, n * size, ub_gap_blocks, gm_gap * size, 0))
    expect = before.copy()
    for b in range(block_count):
        u = b * (ub_block + ub_gap_blocks * per)
        g = b * (n + gm_gap)
        expect[g:g + n] = ub_np[u:u + n]
    np.testing.assert_array_equal(out.data, expect)
    assert ctx.core.hbm_write_bytes == block_count * n * size


def test_data_copy_pad_to_an_odd_gm_offset_leaves_neighbours():
    """8 bytes (two floats) written at GM element 3: elements 2 and 5 keep their values (a
    DataCopy would have needed 32 bytes)."""
    ctx = ctx_on()
    t = ub(ctx, np.float32, 8)
    t.data[:] = [7, 8, 0, 0, 0, 0, 0, 0]
    out = GlobalTensor.from_array(np.zeros(8, np.float32))
    ctx.data_copy_pad(out[3], t, DataCopyExtParams(1, 8, 0, 0, 0))
    assert out.data.tolist() == [0, 0, 0, 7, 8, 0, 0, 0]


def test_dma_in_timing_only_runs_costs_the_same():
    """A timing-only run charges every copy exactly as a full run does."""
    def run(timing_only):
        ctx = ctx_on(timing_only=timing_only)
        b = TBuf()
        ctx.pipe.init_buffer(b, 4096)
        t = b.get(np.float32)
        g = GlobalTensor.empty(4096, np.float32, "g", timing_only=timing_only)
        ctx.data_copy(t, g, 256)
        ctx.data_copy(t, g, DataCopyParams(4, 2, 1, 0))
        ctx.data_copy_pad(t, g, DataCopyExtParams(3, 44, 4, 0, 0), DataCopyPadExtParams(True, 0, 1, 0))
        return ctx.core.finish()

    assert run(False).same_work_as(run(True))


@pytest.mark.parametrize("bad", [(-1, 1, 0, 0), (1, -1, 0, 0), (4096, 1, 0, 0), (1, 1, 70000, 0), (1, 1.5, 0, 0)])
def test_data_copy_params_fields_are_checked(bad):
    """DataCopyParams fields are whole numbers in their uint16 ranges (blockCount 0..4095)."""
    with pytest.raises(ValueError, match="DataCopyParams"):
        DataCopyParams(*bad)


@pytest.mark.parametrize("params", [DataCopyParams(0, 4, 0, 0), DataCopyParams(3, 0, 0, 0)])
def test_a_zero_length_data_copy_is_a_no_op_on_the_910b_and_refused_on_the_310p(params):
    """DataCopy（GM与UB高维切分数据搬运）.md: blockCount∈[0, 4095], blockLen∈[0, 65535] — an empty
    copy moves nothing on the A2; the 310P's implementation checks both >= 1."""
    from npu_lab.lang.errors import AscendCRuleError

    ctx = KernelContext(get_preset("ascend-910b2"), 0, 1)
    b = TBuf()
    ctx.pipe.init_buffer(b, 1024, name="t")
    t = b.get(np.float32)
    t.data[:] = 7.0
    g = GlobalTensor.from_array(np.arange(256, dtype=np.float32), "g")
    ctx.data_copy(t, g, params)
    assert (t.data == 7.0).all() and ctx.core.finish().duration_cycles == 0
    p310 = KernelContext(get_preset("ascend-310p3"), 0, 1)
    b = TBuf()
    p310.pipe.init_buffer(b, 1024, name="t")
    with pytest.raises(AscendCRuleError, match="blockCount and blockLen must be >= 1"):
        p310.data_copy(b.get(np.float32), g, params)
