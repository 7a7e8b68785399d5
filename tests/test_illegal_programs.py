"""A catalogue of illegal kernels (docs/api_cheatsheet.md; issue 8 §2): each breaks one rule of Ascend C or
of the device, cites the page the rule comes from, and must stop the launch with an error that
names the rule and the fix. Where real hardware would be *silently* wrong (a count rounded down,
an int32 NE compared as EQ), the message also says what the hardware would have done.

Each entry: (id, rule and its asc-devkit page, kernel, chip, expected exception, regex the message
must match). Pages are under ``docs/zh/api/SIMD-API/基础API/`` (``M/`` = ``Memory矢量计算/``) unless
they say otherwise; the test checks each exists in the asc-devkit mirror when it is present.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest

from npu_lab import GlobalTensor, SimulationError, UbOverflowError, get_preset, launch
from npu_lab.lang import (MASK_PLACEHOLDER, SELMODE, AscendCRuleError, BinaryRepeatParams, BrcbRepeatParams,
                          CapabilityError, CopyRepeatParams,
                          DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, GatherMaskParams, MrgSort4Info,
                          MrgSortSrcList, QueueError, RaceError, RoundMode, TBuf, TPosition, TQue, UnaryRepeatParams)
from npu_lab.lang import EventIdError, UnmatchedFlagError

B910, P310 = "ascend-910b2", "ascend-310p3"
#: the 910B2 compiled with --cce-disable-asc-reserved-ubuf (the 8 KB reserve is ordinary UB)
B910_NO_RESERVE = get_preset(B910).replace(disable_asc_reserved_ubuf=True, provenance_note="compile option")
BASE = "docs/zh/api/SIMD-API/基础API/"
MIRROR = Path("/work/.mirror/mirror-cann+asc-devkit/repo")


class Illegal(NamedTuple):
    id: str
    rule: str            # the rule, then the page (relative to BASE; "M/" = Memory矢量计算/)
    page: str
    kernel: Callable
    hw: str
    error: type
    match: str


def ub(ctx, dtype=np.float32, count=64, name="buf"):
    b = TBuf()
    ctx.pipe.init_buffer(b, count * np.dtype(dtype).itemsize, name=name)
    return b.get(dtype)


def gm(count=256, dtype=np.float32):
    return GlobalTensor.from_array(np.arange(count).astype(dtype), "x_gm")


def vecin(ctx, num=1, depth=1, nbytes=256, name="x_in"):
    q = TQue(TPosition.VECIN, depth)
    ctx.pipe.init_buffer(q, num, nbytes, name=name)
    return q


# ---- the kernels (each a few lines, the illegal line last) ------------------------------------------


def k_unaligned_count(ctx):
    ctx.data_copy(ub(ctx), gm(), 10)                       # 40 B: not whole 32-B blocks


def k_unaligned_ub_address(ctx):
    ctx.data_copy(ub(ctx)[3], gm(), 8)                     # UB address 12 B


def k_params_past_tensor(ctx):
    ctx.data_copy(ub(ctx, count=32), gm(), DataCopyParams(4, 2, 0, 1))   # needs 8+8+... > 32


def k_pad_block_len_bytes(ctx):
    ctx.data_copy_pad(ub(ctx), gm(), DataCopyExtParams(1, 10, 0, 0, 0), DataCopyPadExtParams())


def k_pad_over_32_bytes(ctx):
    ctx.data_copy_pad(ub(ctx), gm(), DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams(True, 0, 9, 0.0))


def k_pad_on_310p(ctx):
    ctx.data_copy_pad(ub(ctx), gm(), DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams())


def k_compare_partial_repeat(ctx):
    a = ub(ctx, count=128)
    ctx.compare(ub(ctx, np.uint8, 32, "mask"), a, a[0], "GT", 100)


def k_compare_int32_ne(ctx):
    a = ub(ctx, np.int32, 64)
    ctx.compare(ub(ctx, np.uint8, 32, "mask"), a, a, "NE", 64)


def k_compare_int32_310p(ctx):
    a = ub(ctx, np.int32, 64)
    ctx.compare(ub(ctx, np.uint8, 32, "mask"), a, a, "EQ", 64)


def k_compare_level0_mask(ctx):
    a = ub(ctx, count=64)
    ctx.compare(ub(ctx, np.uint8, 32, "mask"), a, a, "LT", 32, 1, BinaryRepeatParams())


def k_sort32_310p(ctx):
    pairs = ub(ctx, count=64, name="pairs")               # first: Sort32's dst is 256-B aligned
    ctx.sort32(pairs, ub(ctx, count=32), ub(ctx, np.uint32, 32, "idx"), 1)


def k_mrg_sort_310p(ctx):
    a = ub(ctx, count=64)
    ctx.mrg_sort(ub(ctx, count=128, name="dst"), MrgSortSrcList(a, a[32]), MrgSort4Info((16, 16, 0, 0), False, 3, 1))


def k_gather_pattern_8(ctx):
    ctx.gather_mask(ub(ctx, name="dst"), ub(ctx), 8, False, 0, GatherMaskParams(1, 1, 8, 0))


def k_gather_pattern_7_310p(ctx):
    ctx.gather_mask(ub(ctx, name="dst"), ub(ctx), 7, False, 0, GatherMaskParams(1, 1, 8, 0))


def k_enque_past_depth(ctx):
    q = vecin(ctx, num=2, depth=1)
    a, b = q.alloc_tensor(np.float32), q.alloc_tensor(np.float32)
    q.enque(a)
    q.enque(b)                                             # prefetch needs TQue<VECIN, 2>


def k_deque_empty(ctx):
    vecin(ctx).deque(np.float32)


def k_alloc_all_in_use(ctx):
    q = vecin(ctx, num=1)
    q.alloc_tensor(np.float32)
    q.alloc_tensor(np.float32)


def k_use_after_free(ctx):
    q = vecin(ctx)
    x = q.alloc_tensor(np.float32)
    ctx.data_copy(x, gm(), 64)
    q.enque(x)
    x = q.deque(np.float32)
    q.free_tensor(x)
    ctx.exp(ub(ctx, name="y"), x, 64)


def k_free_enqueued(ctx):
    q = vecin(ctx)
    x = q.alloc_tensor(np.float32)
    q.enque(x)
    q.free_tensor(x)


def k_repeat_stride_past_tensor(ctx):
    a = ub(ctx, count=128)
    ctx.add(ub(ctx, count=512, name="dst"), a, a, 64, 4, BinaryRepeatParams(1, 1, 1, 8, 8, 8))


def k_vector_operand_unaligned(ctx):
    a = ub(ctx, count=128)
    ctx.add(a[3], a[16], a[32], 8)          # a[3] starts 12 bytes into the buffer


def k_select_without_scratch(ctx):
    a = ub(ctx, count=64)
    mask = ub(ctx, count=8, name="mask", dtype=np.uint8)
    ctx.select(a, mask, a, a, SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)    # on a chip compiled without the reserve


def k_repeat_stride_over_uint8(ctx):
    a = ub(ctx, count=64 * 300)
    ctx.add(a, a, a, 64, 2, BinaryRepeatParams(1, 1, 1, 256, 256, 256))


def k_mask_wider_than_repeat(ctx):
    a = ub(ctx, count=128)
    ctx.muls(a, a, 2.0, 65, 1, UnaryRepeatParams())


def k_mask_hi_32bit(ctx):
    a = ub(ctx, count=64)
    ctx.muls(a, a, 2.0, [2**64 - 1, 1], 1, UnaryRepeatParams())


def k_repeat_256(ctx):
    a = ub(ctx, count=64)
    ctx.exp(a, a, 64, 256, UnaryRepeatParams(1, 1, 0, 0))


def k_ub_overflow(ctx):
    q = TQue(TPosition.VECIN, 1)
    ctx.pipe.init_buffer(q, 2, 128 * 1024, name="x_in")     # 256 KB: fits a 310P, not a 910B


def k_wait_without_set(ctx):
    ctx.wait_flag("MTE2_V", 0)


def k_unknown_event(ctx):
    ctx.set_flag("MTE2_UB", 0)                             # a buffer, not a pipe


def k_event_id_8(ctx):
    ctx.set_flag("MTE2_V", 8)


def k_scalar_read_after_vecin_deque(ctx):
    q = vecin(ctx)
    x = q.alloc_tensor(np.float32)
    ctx.data_copy(x, gm(), 64)
    q.enque(x)
    x = q.deque(np.float32)                                # syncs V, not the scalar unit
    x.get_value(0)


def k_tensor_slice(ctx):
    ctx.data_copy(ub(ctx), gm()[2:10], 8)


def k_cast_without_round_mode(ctx):
    ctx.cast(ub(ctx, np.int32, name="i"), ub(ctx), RoundMode.CAST_NONE, 64)


def k_brcb_block_stride_0(ctx):
    ctx.brcb(ub(ctx, count=64, name="dst"), ub(ctx, count=8), 1, BrcbRepeatParams(0, 8))


def k_select_scalar_mode_with_tensor(ctx):
    a = ub(ctx)
    ctx.select(ub(ctx, name="dst"), ub(ctx, np.uint8, 32, "mask"), a, a, SELMODE.VSEL_TENSOR_SCALAR_MODE, 64)


def k_reduce_max_tmp_too_small(ctx):
    a = ub(ctx, count=1024)
    ctx.reduce_max(ub(ctx, count=8, name="dst"), a, ub(ctx, count=8, name="tmp"), 1024, True)


def k_shift_left_310p(ctx):
    a = ub(ctx, np.int32)
    ctx.shift_left(a, a, 1, 64)


def k_data_copy_converts(ctx):
    ctx.data_copy(ub(ctx), gm(dtype=np.float16), 64)


# ---- issue 15 §4 / §6 (round 3) -----------------------------------------------------------------
def k_copy_310p(ctx):
    a, b = ub(ctx, count=64, name="a"), ub(ctx, count=64, name="b")
    ctx.copy(b, a, 64, 1, CopyRepeatParams(1, 1, 8, 8))


def k_cast_floor_f32_f16_310p(ctx):
    ctx.cast(ub(ctx, np.float16, 64, "h"), ub(ctx, np.float32, 64, "f"), RoundMode.CAST_FLOOR, 64)


def k_cast_pair_not_in_table(ctx):
    ctx.cast(ub(ctx, np.int32, 32, "i"), ub(ctx, np.uint8, 32, "u"), RoundMode.CAST_NONE, 32)


def k_cast_s32_f16_without_deq_scale(ctx):
    ctx.cast(ub(ctx, np.float16, 64, "h"), ub(ctx, np.int32, 64, "i"), RoundMode.CAST_NONE, 64)


def k_duplicate_uint8(ctx):
    ctx.duplicate(ub(ctx, np.uint8, 64), 1, 64)


def k_create_vec_index_uint32(ctx):
    ctx.create_vec_index(ub(ctx, np.uint32, 64), 0, 64)


def k_adds_uint32(ctx):
    t = ub(ctx, np.uint32, 64)
    ctx.adds(t, t, 1, 64)


def k_sort32_src_not_128b_aligned(ctx):
    pairs = ub(ctx, count=64, name="pairs")
    scores = ub(ctx, count=64, name="scores")
    ctx.sort32(pairs, scores[8], ub(ctx, np.uint32, 32, "idx"), 1)      # 32 B in: 32-B but not 128-B aligned


def k_reduce_max_half_index_past_65535(ctx):
    src = ub(ctx, np.float16, 70000, "src")
    ctx.reduce_max(ub(ctx, np.float16, 16, "dst"), src, ub(ctx, np.float16, 2048, "tmp"), 70000, True)


def k_shift_left_33(ctx):
    t = ub(ctx, np.int32, 64)
    ctx.shift_left(t, t, 33, 64)


def k_brcb_overlapping(ctx):
    t = ub(ctx, count=128)
    ctx.brcb(t, t[8], 1, BrcbRepeatParams(1, 8))


def k_zero_length_data_copy_310p(ctx):
    ctx.data_copy(ub(ctx, count=64), gm(), DataCopyParams(0, 2, 0, 0))


def k_gather_offset_past_src(ctx):
    src = ub(ctx, count=64, name="src")
    off = ub(ctx, np.uint32, 8, "off")
    ctx.duplicate(off.reinterpret_cast(np.int32), 64 * 4, 8)            # element 64: one past the end
    ctx.gather(ub(ctx, count=8, name="dst"), src, off, 0, 8)


def k_gather_base_misaligned(ctx):
    ctx.gather(ub(ctx, count=8, name="dst"), ub(ctx, count=64, name="src"), ub(ctx, np.uint32, 8, "off"), 2, 8)


def k_transpose_float32(ctx):
    ctx.transpose(ub(ctx, count=256, name="dst"), ub(ctx, count=256, name="src"))


def k_relu_int16(ctx):
    t = ub(ctx, np.int16, 128)
    ctx.relu(t, t, 128)


def k_counter_mode_explicit_mask(ctx):
    t = ub(ctx, count=64)
    ctx.set_mask_count()
    ctx.set_vector_mask(64)
    ctx.adds(t, t, 1.0, 64, 1, UnaryRepeatParams())


def k_placeholder_without_vector_mask(ctx):
    t = ub(ctx, count=64)
    ctx.adds(t, t, 1.0, MASK_PLACEHOLDER, 1, UnaryRepeatParams())


def k_atomic_add_type_mismatch(ctx):
    t = ub(ctx, count=64)
    ctx.set_atomic_add(np.float16)
    ctx.data_copy(gm(), t, 64)


def k_atomic_add_int32_310p(ctx):
    ctx.set_atomic_add(np.int32)


def k_tpipe_init_twice(ctx):
    ctx.pipe.init()


def k_init_buffer_after_destroy(ctx):
    ctx.pipe.destroy()
    ub(ctx, count=64)


def k_set_global_buffer_past_data(ctx):
    GlobalTensor.of(np.float32).set_global_buffer(gm(256), 257)


def k_binary_block_stride_over_uint8(ctx):
    a = ub(ctx, count=64 * 300)
    ctx.add(a, a, a, 64, 1, BinaryRepeatParams(256, 1, 1, 8, 8, 8))

# ---- happens-before: races the timeline does not overlap, flags never waited, event ids ----------
def k_race_hidden_by_scalar_work(ctx):
    x = ub(ctx, name="x")
    ctx.data_copy(x, gm(), 64)
    ctx.scalar("long scalar work", ops=20000)              # the load is long done, but unordered
    x.get_value(0)


def k_race_hidden_by_a_long_copy(ctx):
    x, y, big = ub(ctx, name="x"), ub(ctx, name="y"), ub(ctx, count=8192, name="big")
    ctx.data_copy(big, gm(8192), 8192)
    ctx.data_copy(x, gm(), 64)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    ctx.muls(y, x, 2.0, 64)
    ctx.set_flag("MTE2_MTE3", 0)
    ctx.wait_flag("MTE2_MTE3", 0)
    ctx.data_copy(GlobalTensor.empty(8192, np.float32, "big_out"), big, 8192)   # MTE3 busy long after V
    ctx.data_copy(GlobalTensor.empty(64, np.float32, "y_gm"), y, 64)            # no V_MTE3


def k_setvalue_then_vector_without_s_v(ctx):
    a, b = ub(ctx, name="a"), ub(ctx, name="b")
    a.set_value(0, 1.0)
    ctx.adds(b, a, 1.0, 64)


def k_set_flag_never_waited(ctx):
    ctx.data_copy(ub(ctx), gm(), 64)
    ctx.set_flag("MTE2_V", 0)


def k_set_flag_twice_same_id(ctx):
    ctx.data_copy(ub(ctx), gm(), 64)
    ctx.set_flag("MTE2_V", 1)
    ctx.data_copy(ub(ctx, name="b"), gm(), 64)
    ctx.set_flag("MTE2_V", 1)                              # the first is not waited yet


def k_event_ids_exhausted(ctx):
    for _ in range(9):
        ctx.pipe.alloc_event_id("MTE2_V")


def k_release_a_fetched_event_id(ctx):
    ctx.pipe.release_event_id("V_S", ctx.pipe.fetch_event_id("V_S"))


CATALOGUE = [
    Illegal("datacopy-unaligned-count", "DataCopy count * sizeof(T) must be a multiple of 32 B (else rounded down)",
            "M/数据搬运/DataCopy（GM与UB连续数据搬运）.md", k_unaligned_count, B910, AscendCRuleError,
            r"multiple of 32 bytes.*would move 32 B, rounded down.*data_copy_pad"),
    Illegal("datacopy-unaligned-ub-address", "UB operands of DMA start 32-B aligned",
            "M/数据搬运/DataCopy（GM与UB连续数据搬运）.md", k_unaligned_ub_address, B910, AscendCRuleError,
            r"not 32-byte aligned.*multiple of 8 float32 elements"),
    Illegal("datacopyparams-past-tensor", "DataCopyParams blocks and gaps stay inside both tensors",
            "M/数据搬运/DataCopy（GM与UB高维切分数据搬运）.md", k_params_past_tensor, B910, AscendCRuleError,
            r"runs past a tensor"),
    Illegal("datacopypad-blocklen-bytes", "DataCopyPad blockLen is in bytes, a multiple of sizeof(T)",
            "M/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md", k_pad_block_len_bytes, B910, AscendCRuleError,
            r"blockLen=10 B is not a multiple of sizeof\(float32\).*bytes, not elements"),
    Illegal("datacopypad-padding-over-32B", "leftPadding / rightPadding at most 32 bytes each",
            "M/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md", k_pad_over_32_bytes, B910, AscendCRuleError,
            r"rightPadding=9.*0\.\.8 \(32 bytes at most\)"),
    Illegal("datacopypad-on-310p", "DataCopyPad: 'Atlas 推理系列产品AI Core：不支持'",
            "M/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md", k_pad_on_310p, P310, CapabilityError,
            r"ascend-310p3: DataCopyPad does not exist.*instead: copy whole 32-byte blocks with data_copy"),
    Illegal("compare-partial-repeat", "Compare count fills whole 256-B repeats (the tail is dropped)",
            "M/比较与选择/Compare.md", k_compare_partial_repeat, B910, AscendCRuleError,
            r"whole 256-byte repeats.*compares only the first 64.*Pad the data to 128"),
    Illegal("compare-int32-ne-910b", "int32 Compare supports only CMPMODE::EQ on A2",
            "M/比较与选择/Compare.md", k_compare_int32_ne, B910, CapabilityError,
            r"Compare on int32 supports only mode\(s\) EQ.*got NE.*hardware would silently compute EQ"),
    Illegal("compare-int32-310p", "Compare on the 310P AI Core: half, float only",
            "M/比较与选择/Compare.md", k_compare_int32_310p, P310, CapabilityError,
            r"Compare has no int32 form on .*310P"),
    Illegal("compare-level0-mask", "Compare level-0 mask is reserved (保留参数，设置无效)",
            "M/比较与选择/Compare.md", k_compare_level0_mask, B910, AscendCRuleError,
            r"reserved parameter.*compares all 64 lanes.*Pass mask=64"),
    Illegal("sort32-on-310p", "Sort32: 'Atlas 推理系列产品AI Core：不支持'",
            "M/排序组合（ISASI）/Sort32.md", k_sort32_310p, P310, CapabilityError,
            r"Sort32 does not exist on .*310P.*instead: .*whole_reduce_max"),
    Illegal("mrgsort-on-310p", "MrgSort: 'Atlas 推理系列产品AI Core：不支持'",
            "M/排序组合（ISASI）/MrgSort.md", k_mrg_sort_310p, P310, CapabilityError,
            r"MrgSort does not exist on .*310P.*instead"),
    Illegal("gathermask-pattern-8", "GatherMask built-in src1Pattern is 1..7",
            "M/比较与选择/GatherMask.md", k_gather_pattern_8, B910, AscendCRuleError,
            r"built-in pattern must be 1\.\.7.*got 8"),
    Illegal("gathermask-pattern-7-310p", "GatherMask on the 310P AI Core supports patterns 1-6",
            "M/比较与选择/GatherMask.md", k_gather_pattern_7_310p, P310, CapabilityError,
            r"GatherMask pattern 7 does not exist.*instead: pattern 1 and 2"),
    Illegal("enque-past-depth", "TQue<pos, depth>: at most depth EnQue before a DeQue",
            "资源管理/TQue/TQue简介.md", k_enque_past_depth, B910, QueueError,
            r"depth 1 allows only 1.*Declare TQue<VECIN, 2>.*or deque first"),
    Illegal("deque-empty", "DeQue waits for an EnQue (hangs when nothing was enqueued)",
            "资源管理/TQue/DeQue.md", k_deque_empty, B910, QueueError,
            r"deque with nothing enqueued.*waits forever.*enque a tensor first"),
    Illegal("alloc-all-in-use", "AllocTensor waits for a free slot (hangs when all are held)",
            "资源管理/TQue/AllocTensor.md", k_alloc_all_in_use, B910, QueueError,
            r"all 1 buffer\(s\) in use.*waits forever.*free_tensor"),
    Illegal("use-after-free", "FreeTensor gives the buffer back; the tensor must not be used after",
            "资源管理/TQue/FreeTensor.md", k_use_after_free, B910, AscendCRuleError,
            r"Exp x1: UB buffer 'x_in' is used after free_tensor.*Use it before freeing it"),
    Illegal("free-enqueued", "FreeTensor takes a dequeued tensor",
            "资源管理/TQue/FreeTensor.md", k_free_enqueued, B910, QueueError,
            r"free_tensor of a tensor still enqueued; deque it first"),
    Illegal("repeat-stride-past-tensor", "level-0 operands: every repeat and block inside the tensor",
            "Memory矢量计算/SIMD计算说明/高维切分.md", k_repeat_stride_past_tensor, B910, AscendCRuleError,
            r"src0 'buf': 4 repeat\(s\).*reach element 255, past the tensor's 128.*Lower repeat_time"),
    Illegal("vector-operand-unaligned", "vector operands start on a 32-byte UB block",
            "M/基础算术/Add.md", k_vector_operand_unaligned, B910, AscendCRuleError,
            r"UB operand 'buf' starts 12 B into its buffer, not on a 32-byte boundary.*multiple of 8 float32"),
    Illegal("select-without-8kb-reserve", "Select modes 1 and 2 use Ascend C's 8 KB reserved UB: a compile "
            "error under --cce-disable-asc-reserved-ubuf", "M/比较与选择/Select.md", k_select_without_scratch,
            B910_NO_RESERVE, AscendCRuleError,
            r"uses Ascend C's reserved UB \(8192 B.*--cce-disable-asc-reserved-ubuf.*compile error.*Compile without"),
    Illegal("repeat-stride-over-uint8", "BinaryRepeatParams' repeat strides are uint8_t: at most 255 blocks",
            "辅助数据结构/BinaryRepeatParams.md", k_repeat_stride_over_uint8, B910, AscendCRuleError,
            r"Add dst repeat stride \(uint8 in the repeat params\) must be a whole number 0\.\.255, got 256"),
    Illegal("mask-wider-than-repeat", "count-mode mask is 1..256/sizeof(T) lanes",
            "Memory矢量计算/SIMD计算说明/掩码.md", k_mask_wider_than_repeat, B910, AscendCRuleError,
            r"mask=65 is wider than one repeat.*64 32-bit elements"),
    Illegal("mask-hi-32bit", "bit-mode mask[1] must be 0 for 32-bit types",
            "Memory矢量计算/SIMD计算说明/掩码.md", k_mask_hi_32bit, B910, AscendCRuleError,
            r"mask_hi must be 0 for 32-bit types.*only 64 lanes"),
    Illegal("repeat-time-256", "repeatTime is a uint8_t: at most 255",
            "Memory矢量计算/SIMD计算说明/高维切分.md", k_repeat_256, B910, AscendCRuleError,
            r"repeat_time must be 0\.\.255.*got 256; split the work.*tensor form"),
    Illegal("ub-overflow", "the buffers of a TPipe fit the chip's UB (192 KB on the 910B)",
            "资源管理/TPipe/InitBuffer.md", k_ub_overflow, B910, UbOverflowError,
            r"UB overflow: buffer 'x_in\[1\]' needs 131072 bytes.*Use a smaller tile or fewer buffers"),
    Illegal("wait-without-set", "every WaitFlag needs a SetFlag of the same event and id",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_wait_without_set, B910, SimulationError,
            r"wait_flag\(MTE2_V, event 0\) has no matching set_flag.*wait forever.*Set the flag"),
    Illegal("unknown-hard-event", "HardEvent is one of the AIV SRC_DST pairs",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_unknown_event, B910, AscendCRuleError,
            r"unknown HardEvent 'MTE2_UB'; use one of MTE2_V"),
    Illegal("event-id-8", "event ids are 0..7",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_event_id_8, B910, AscendCRuleError,
            r"event id must be a whole number 0\.\.7, got 8"),
    Illegal("race-scalar-after-vecin-deque", "a VECIN DeQue syncs MTE2->V only; GetValue needs MTE2_S",
            "同步控制/核内同步/关键特性说明.md", k_scalar_read_after_vecin_deque, B910, RaceError,
            r"race on UB buffer 'x_in' \(read after write\): GetValue on pipe S.*on pipe MTE2.*no MTE2_S flag.*set_flag\(\"MTE2_S\""),
    Illegal("tensor-slice", "Ascend C tensors have operator[] (an offset), not slices",
            "数据结构/GlobalTensor/operator.md", k_tensor_slice, B910, TypeError,
            r"no slices\. Use x_gm\[offset\].*pass the element count"),
    Illegal("cast-f32-i32-no-round-mode", "Cast float->int32 takes CAST_RINT/FLOOR/CEIL/ROUND/TRUNC",
            "M/类型转换/Cast.md", k_cast_without_round_mode, B910, AscendCRuleError,
            r"Cast float32 -> int32 on ascend-910b2 allows CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC.*got CAST_NONE"),
    Illegal("brcb-dst-blk-stride-0", "Brcb dstBlkStride 0 is undefined",
            "M/数据填充/Brcb.md", k_brcb_block_stride_0, B910, AscendCRuleError,
            r"dst_blk_stride=0 is undefined behaviour.*use 1"),
    Illegal("select-scalar-mode-tensor", "VSEL_TENSOR_SCALAR_MODE takes src1 as a scalar",
            "M/比较与选择/Select.md", k_select_scalar_mode_with_tensor, B910, AscendCRuleError,
            r"VSEL_TENSOR_SCALAR_MODE takes src1 as a scalar; got LocalTensor"),
    Illegal("reducemax-tmp-too-small", "ReduceMax sharedTmpBuffer at least the page's formula",
            "M/归约计算/ReduceMax.md", k_reduce_max_tmp_too_small, B910, AscendCRuleError,
            r"ReduceMax of 1024 float32 needs a sharedTmpBuffer of at least 40 elements.*ReduceMax\.md.*'tmp' has 8"),
    Illegal("shiftleft-310p", "ShiftLeft: 'Atlas 推理系列产品AI Core：不支持'",
            "M/逻辑计算/ShiftLeft.md", k_shift_left_310p, P310, CapabilityError,
            r"ShiftLeft does not exist.*instead: multiply by a power of two"),
    Illegal("datacopy-converts", "DataCopy moves T to T; conversions are Cast on the vector unit",
            "M/数据搬运/DataCopy（GM与UB连续数据搬运）.md", k_data_copy_converts, B910, TypeError,
            r"does not convert: float16 -> float32.*ctx\.cast"),
    # ---- round 3 (issue 15 §4 / §6) ----
    Illegal("copy-on-310p", "level-0 Copy: 'Atlas 推理系列产品AI Core：不支持' (both overloads NOT_SUPPORT in dav_m200)",
            "M/数据搬运/Copy（UBToUB掩码式高维数据搬运）.md", k_copy_310p, P310, CapabilityError,
            r"Copy does not exist on .*310P.*instead: a bit-masked level-0 Adds of 0"),
    Illegal("cast-floor-f32-f16-310p", "Cast float->half on the 310P: CAST_ODD / CAST_NONE only",
            "M/类型转换/Cast.md", k_cast_floor_f32_f16_310p, P310, AscendCRuleError,
            r"Cast float32 -> float16 on ascend-310p3 allows CAST_ODD, CAST_NONE.*got CAST_FLOOR"),
    Illegal("cast-pair-not-in-table", "Cast converts only the pairs of the chip's table",
            "M/类型转换/Cast.md", k_cast_pair_not_in_table, B910, AscendCRuleError,
            r"Cast uint8 -> int32 is not in ascend-910b2's table.*from uint8 it has: uint8->float16.*two steps"),
    Illegal("cast-s32-f16-without-deq-scale", "int32 -> half scales by DEQSCALE: SetDeqScale first",
            "M/类型转换辅助配置接口/SetDeqScale.md", k_cast_s32_f16_without_deq_scale, B910, AscendCRuleError,
            r"DEQSCALE register: call set_deq_scale\(half_scale\) first"),
    Illegal("duplicate-uint8", "Duplicate's A2 types: int16 uint16 half bfloat16 int32 uint32 float",
            "M/数据填充/Duplicate.md", k_duplicate_uint8, B910, AscendCRuleError,
            r"Duplicate takes int16, uint16, float16, int32, uint32, float32.*not uint8"),
    Illegal("create-vec-index-uint32", "CreateVecIndex's A2 types: int16 half int32 float",
            "M/数据填充/CreateVecIndex.md", k_create_vec_index_uint32, B910, AscendCRuleError,
            r"CreateVecIndex takes int16, float16, int32, float32.*not uint32"),
    Illegal("adds-uint32", "Adds' types: int16 half int32 float",
            "M/基础算术/Adds.md", k_adds_uint32, B910, AscendCRuleError, r"Adds takes int16, float16, int32, float32.*not uint32"),
    Illegal("sort32-src-not-128b-aligned", "Sort32: src0 / src1 128-byte aligned per repeat",
            "M/排序组合（ISASI）/Sort32.md", k_sort32_src_not_128b_aligned, B910, AscendCRuleError,
            r"Sort32: 'scores' starts at UB byte \d+, not on a 128-byte boundary.*128字节对齐"),
    Illegal("reduce-max-half-index-past-65535", "ReduceMax on half returns indices up to 65535 (uint16)",
            "M/归约计算/ReduceMax.md", k_reduce_max_half_index_past_65535, B910, AscendCRuleError,
            r"index as a uint16, so it takes at most 65536 elements; got count=70000"),
    Illegal("shift-left-33", "ShiftLeft scalarValue: [0, 32] for 32-bit types",
            "M/逻辑计算/ShiftLeft.md", k_shift_left_33, B910, AscendCRuleError, r"ShiftLeft scalarValue \(0\.\.32 for int32"),
    Illegal("brcb-overlapping", "Brcb: source and destination may not be the same bytes",
            "M/数据填充/Brcb.md", k_brcb_overlapping, B910, AscendCRuleError, r"overlaps what it writes.*不支持源操作数"),
    Illegal("zero-length-datacopy-310p", "DataCopy blockCount/blockLen >= 1 on the 310P (0 is a no-op on the A2)",
            "M/数据搬运/DataCopy（GM与UB高维切分数据搬运）.md", k_zero_length_data_copy_310p, P310, AscendCRuleError,
            r"on the 310P blockCount and blockLen must be >= 1"),
    Illegal("gather-offset-past-src", "Gather's byte offsets must land on elements of src",
            "M/离散与聚合/Gather.md", k_gather_offset_past_src, B910, AscendCRuleError,
            r"srcBaseAddr \+ srcOffset\[0\] = 256 B is not a whole float32 inside 'src'"),
    Illegal("gather-base-misaligned", "Gather srcBaseAddr aligned to the element size",
            "M/离散与聚合/Gather.md", k_gather_base_misaligned, B910, AscendCRuleError,
            r"srcBaseAddr=2 B is not a multiple of sizeof\(float32\)"),
    Illegal("transpose-float32", "the plain Transpose is 16x16 of two-byte elements",
            "M/数据排布转换/Transpose.md", k_transpose_float32, B910, AscendCRuleError,
            r"Transpose takes uint16, int16, float16.*not float32"),
    Illegal("relu-int16", "Relu's types: half int32 float",
            "M/基础算术/Relu.md", k_relu_int16, B910, AscendCRuleError, r"Relu takes float16, int32, float32.*not int16"),
    Illegal("counter-mode-explicit-mask", "in Counter mode a level-0 call takes MASK_PLACEHOLDER",
            "M/掩码操作/SetMaskCount.md", k_counter_mode_explicit_mask, B910, AscendCRuleError,
            r"explicit mask while the mask mode is Counter.*MASK_PLACEHOLDER.*set_mask_norm"),
    Illegal("placeholder-without-vector-mask", "MASK_PLACEHOLDER reads the mask SetVectorMask set",
            "M/掩码操作/SetVectorMask.md", k_placeholder_without_vector_mask, B910, AscendCRuleError,
            r"set_vector_mask was never called"),
    Illegal("atomic-add-type-mismatch", "SetAtomicAdd<T>: T is the type of the data copied to GM",
            "原子操作/SetAtomicAdd.md", k_atomic_add_type_mismatch, B910, AscendCRuleError,
            r"SetAtomicAdd<float16> is on, but this copy writes float32.*set_atomic_add\(float32\)"),
    Illegal("atomic-add-int32-310p", "SetAtomicAdd on the 310P AI Core: int16 half float",
            "原子操作/SetAtomicAdd.md", k_atomic_add_int32_310p, P310, AscendCRuleError,
            r"SetAtomicAdd<int32> is not available on ascend-310p3.*int16, float16, float32"),
    Illegal("tpipe-init-twice", "the TPipe constructor already called Init: Destroy before Init again",
            "资源管理/TPipe/Init.md", k_tpipe_init_twice, B910, QueueError, r"already initialised.*destroy\(\) first"),
    Illegal("init-buffer-after-destroy", "a destroyed TPipe gives out no buffers until Init",
            "资源管理/TPipe/Destroy.md", k_init_buffer_after_destroy, B910, QueueError, r"on a destroyed TPipe: call init\(\)"),
    Illegal("set-global-buffer-past-data", "SetGlobalBuffer's size must stay inside the real data",
            "数据结构/GlobalTensor/SetGlobalBuffer.md", k_set_global_buffer_past_data, B910, ValueError,
            r"only 256 elements of float32 lie behind that address.*Pass at most 256"),
    Illegal("binary-block-stride-over-uint8", "BinaryRepeatParams' block strides are uint8_t",
            "辅助数据结构/BinaryRepeatParams.md", k_binary_block_stride_over_uint8, B910, AscendCRuleError,
            r"dst block stride must be a whole number 0\.\.255, got 256"),
    Illegal("race-hidden-by-scalar-work", "happens-before: GetValue of loaded data needs MTE2_S even when the load is long done",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_race_hidden_by_scalar_work, B910, RaceError,
            r"'x' \(read after write\): GetValue on pipe S.*no MTE2_S flag.*happens to keep them apart"),
    Illegal("race-hidden-by-long-copy", "happens-before: a store of a vector result needs V_MTE3 even behind a long copy",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_race_hidden_by_a_long_copy, B910, RaceError,
            r"'y' \(read after write\).*no V_MTE3 flag between Muls x1 on V and DataCopy.*happens to keep them apart"),
    Illegal("setvalue-then-vector-no-s-v", "a scalar SetValue is ordered before another pipe's read only by a flag (S_V)",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_setvalue_then_vector_without_s_v, B910, RaceError,
            r"'a' \(read after write\): Adds.*SetValue on pipe S.*no S_V flag"),
    Illegal("setflag-never-waited", "SetFlag and WaitFlag must be used in pairs",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_set_flag_never_waited, B910, UnmatchedFlagError,
            r"SetFlag<HardEvent::MTE2_V>\(0\) at test_illegal_programs\.py:\d+ is never waited.*必须成对使用"),
    Illegal("setflag-twice-same-id", "two SetFlags of one event and id in a row are undefined behaviour",
            "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_set_flag_twice_same_id, B910, AscendCRuleError,
            r"SetFlag<HardEvent::MTE2_V>\(1\) again before a WaitFlag consumed the one set at test_illegal_programs\.py:\d+.*alloc_event_id"),
    Illegal("event-ids-exhausted", "AllocEventID: TEventIDs are limited; release each one",
            "资源管理/TPipe/AllocEventID.md", k_event_ids_exhausted, B910, EventIdError,
            r"all 8 TEventIDs of HardEvent::MTE2_V are allocated.*ReleaseEventID"),
    Illegal("release-fetched-event-id", "ReleaseEventID takes an id AllocEventID returned",
            "资源管理/TPipe/ReleaseEventID.md", k_release_a_fetched_event_id, B910, EventIdError,
            r"release_event_id\(HardEvent::V_S, 0\): that id was not allocated"),
]


def test_catalogue_is_big_and_ids_are_unique():
    assert len(CATALOGUE) >= 25 + 24          # round 3 (issue 15) added 24
    assert len({c.id for c in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("case", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_illegal_program_is_caught_with_a_lesson(case: Illegal):
    """The launch stops with the expected exception; its message names the rule and the fix (and,
    for silent hardware behaviour, what the hardware would have done)."""
    with pytest.raises(case.error) as info:
        launch(case.kernel, 1, hw=case.hw)
    assert info.type is case.error or issubclass(info.type, case.error)
    assert re.search(case.match, str(info.value), re.S), \
        f"{case.id}: message does not match {case.match!r}:\n{info.value}"


@pytest.mark.parametrize("case", [c for c in CATALOGUE if c.hw == P310], ids=lambda c: c.id)
def test_the_same_program_is_legal_where_the_chip_has_the_instruction(case: Illegal):
    """Capability errors are about the chip: the 310P programs run on the 910B2 (except where
    they break another rule there, e.g. int32 EQ is fine on the 910B)."""
    launch(case.kernel, 1, hw=B910)


@pytest.mark.skipif(not MIRROR.exists(), reason="asc-devkit mirror not present (CI has none)")
def test_every_rule_cites_a_real_page():
    """Each cited page exists in asc-devkit (M/ = Memory矢量计算/)."""
    for case in CATALOGUE:
        page = BASE + case.page.replace("M/", "Memory矢量计算/", 1)
        done = subprocess.run(["git", "-C", str(MIRROR), "cat-file", "-e", f"HEAD:{page}"], capture_output=True)
        assert done.returncode == 0, f"{case.id}: {page}"
