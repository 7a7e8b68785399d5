"""A catalogue of illegal kernels (DESIGN.md §5.1; issue 8 §2): each breaks one rule of Ascend C or
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

from npu_lab import GlobalTensor, SimulationError, UbOverflowError, launch
from npu_lab.lang import (SELMODE, AscendCRuleError, BinaryRepeatParams, BrcbRepeatParams, CapabilityError,
                          DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, GatherMaskParams, MrgSort4Info,
                          MrgSortSrcList, QueueError, RaceError, RoundMode, TBuf, TPosition, TQue, UnaryRepeatParams)

B910, P310 = "ascend-910b2", "ascend-310p3"
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
    filler = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(filler, ctx.ub.free_bytes - 4096, name="filler")   # leaves 4 KB free
    ctx.select(a, mask, a, a, SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)


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
    Illegal("select-without-8kb-scratch", "Select modes 1 and 2 need 8 KB of UB left free",
            "M/比较与选择/Select.md", k_select_without_scratch, B910, AscendCRuleError,
            r"uses 8192 B of UB as the library's scratch.*leave only 4096 B free.*Allocate 4096 B less"),
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
            r"race on UB buffer 'x_in': GetValue on pipe S.*MTE2 is still writing.*set_flag/wait_flag"),
    Illegal("tensor-slice", "Ascend C tensors have operator[] (an offset), not slices",
            "数据结构/GlobalTensor/operator.md", k_tensor_slice, B910, TypeError,
            r"no slices\. Use x_gm\[offset\].*pass the element count"),
    Illegal("cast-f32-i32-no-round-mode", "Cast float->int32 takes CAST_RINT/FLOOR/CEIL/ROUND/TRUNC",
            "M/类型转换/Cast.md", k_cast_without_round_mode, B910, AscendCRuleError,
            r"cast float32 -> int32 must say how to round \(CAST_RINT"),
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
]


def test_catalogue_is_big_and_ids_are_unique():
    assert len(CATALOGUE) >= 25
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
