"""Sorting on the vector unit (pipe ``V``): ``Sort32`` and ``MrgSort`` on (score, index) pairs.

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/排序组合（ISASI）/Sort32.md and
MrgSort.md. Neither exists on the 310P's AI core (it sorts region proposals with RpSort16 and
MrgSort4, not modelled).

* ``Sort32(dst, src0, src1, repeatTime)``: each repeat sorts 32 scores (src0, float16/float32)
  **descending**, carrying their uint32 indices (src1); ties keep the lower position first.
  dst holds 8-byte pairs: for float, [score, index bits] — view dst as float32 for the scores
  (even elements) and as uint32 for the indices (odd elements), and split them with GatherMask
  patterns 1 and 2.
* ``MrgSort(dst, MrgSortSrcList(src1, src2, src3, src4), MrgSort4Info(elementLengths,
  ifExhaustedSuspension, validBit, repeatTimes))``: merge 2–4 sorted pair lists (``validBit`` 3,
  7 or 15) of ``elementLengths[i]`` pairs each into one, descending; ties keep the earlier list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import AscendCRuleError
from .tensor import LocalTensor
from .vector import _whole, need_local

_VALID_BITS = {3: 2, 7: 3, 15: 4}


@dataclass(frozen=True)
class MrgSortSrcList:
    """``MrgSortSrcList<T>(src1, src2, src3, src4)``: the sorted lists (unused ones may repeat one)."""

    src1: LocalTensor
    src2: LocalTensor
    src3: LocalTensor | None = None
    src4: LocalTensor | None = None


@dataclass(frozen=True)
class MrgSort4Info:
    """``MrgSort4Info(elementLengths[4], ifExhaustedSuspension, validBit, repeatTimes)``;
    lengths in pairs (8 bytes each)."""

    element_lengths: tuple
    if_exhausted_suspension: bool = False
    valid_bit: int = 15
    repeat_times: int = 1


def _pairs(t: LocalTensor, n: int):
    """(scores, index bits) of the first ``n`` pairs of a float32 pair tensor."""
    flat = t.data[:2 * n]
    return flat[0::2].copy(), flat.view(np.uint32)[1::2].copy()


class SortOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def sort32(self, dst, src0, src1, repeat_time):
        """``Sort32(dst, src0, src1, repeatTime)``: see the module docstring."""
        need_local(dst, src0, src1)
        self._require("Sort32")
        if src0.dtype != np.float32 or dst.dtype != np.float32:
            raise AscendCRuleError("Sort32 here sorts float32 scores into a float32 pair tensor "
                                   f"(got src0 {src0.dtype.name}, dst {dst.dtype.name}); Sort32.md also lists "
                                   "half on the A2 (score in the low 2 B of each 8-B pair), which npu_lab does "
                                   "not model: Cast to float32 first")
        if src1.dtype != np.uint32:
            raise AscendCRuleError(f"Sort32's indices are uint32 (reinterpret_cast an int32 index tensor); "
                                   f"'{src1.name}' is {src1.dtype.name}")
        repeat = self._check_repeat(repeat_time)
        for t in (src0, src1):          # each repeat's 32 scores / indices: 128 B, 128-B aligned
            if t.ub_address % 128:
                self._rule(f"Sort32: '{t.name}' starts at UB byte {t.ub_address}, not on a 128-byte boundary; "
                           "each repeat reads 32 elements from a 128-byte aligned address (docs/zh/api/SIMD-API/"
                           "基础API/Memory矢量计算/排序组合（ISASI）/Sort32.md: 每次迭代输入src0要求128字节对齐，"
                           "src1要求128字节对齐). Start it at a multiple of 32 elements of a 128-B aligned buffer")
        if dst.ub_address % 256:
            self._rule(f"Sort32: dst '{dst.name}' must start on a 256-byte boundary (each repeat writes "
                       "256 bytes of pairs)")
        n = 32 * repeat
        self._count(max(n, 1), src0, src1)
        self._count(max(2 * n, 1), dst)
        self._vec("Sort32", "sort", repeat * 256,
                  [(src0, src0.byte_offset, src0.byte_offset + 4 * n), (src1, src1.byte_offset, src1.byte_offset + 4 * n)],
                  [(dst, dst.byte_offset, dst.byte_offset + 8 * n)], n, repeats=repeat)
        if self.timing_only or repeat == 0:
            return
        scores = src0.data[:n].reshape(repeat, 32)
        order = np.argsort(-scores, axis=1, kind="stable")     # descending, ties keep position
        out = dst.data[:2 * n]
        out[0::2] = np.take_along_axis(scores, order, axis=1).ravel()
        out.view(np.uint32)[1::2] = np.take_along_axis(src1.data[:n].reshape(repeat, 32), order, axis=1).ravel()

    def mrg_sort(self, dst, src: MrgSortSrcList, params: MrgSort4Info):
        """``MrgSort(dst, MrgSortSrcList, MrgSort4Info)``: see the module docstring."""
        self._require("MrgSort")
        if not isinstance(src, MrgSortSrcList) or not isinstance(params, MrgSort4Info):
            raise TypeError("mrg_sort takes (dst, MrgSortSrcList(...), MrgSort4Info(...))")
        if params.valid_bit not in _VALID_BITS:
            raise AscendCRuleError(f"MrgSort4Info.valid_bit must be 3 (2 lists), 7 (3) or 15 (4), got {params.valid_bit!r}")
        lists = [src.src1, src.src2, src.src3, src.src4][:_VALID_BITS[params.valid_bit]]
        if any(t is None for t in lists):
            raise AscendCRuleError(f"valid_bit={params.valid_bit} merges {len(lists)} lists; give that many tensors")
        need_local(dst)
        need_local(*lists, align=8)             # "src tensors 8-B aligned" (MrgSort.md)
        lengths = tuple(params.element_lengths)
        if len(lengths) != 4:
            raise AscendCRuleError(f"MrgSort4Info.element_lengths has 4 entries (pairs per list), got {lengths!r}")
        lengths = [_whole("element_lengths", x, 0, 4095) for x in lengths[:len(lists)]]
        repeat = _whole("MrgSort4Info.repeat_times", params.repeat_times, 0, 255)
        if repeat > 1 and not (len(lists) == 4 and len(set(lengths)) == 1 and not params.if_exhausted_suspension):
            self._rule("MrgSort repeat_times > 1 works only for 4 lists of equal length stored one after "
                       "another, with if_exhausted_suspension=False and valid_bit=15")
        if params.if_exhausted_suspension:
            self._rule("MrgSort with if_exhausted_suspension=True stops when a list runs out (then "
                       "GetMrgSortResult tells how far it got); the course kernels merge whole lists: pass False")
        for t in (dst, *lists):
            if t.dtype != np.float32:
                raise AscendCRuleError(f"MrgSort here merges float32 pair tensors; '{t.name}' is {t.dtype.name}")
        if dst.ub_address % 32:
            self._rule(f"MrgSort: dst '{dst.name}' must be 32-byte aligned")
        total = sum(lengths) * max(repeat, 1)
        if repeat > 1:
            for r in range(1, len(lists)):
                if lists[r].region is not lists[0].region or lists[r].offset != lists[0].offset + 2 * r * lengths[0]:
                    self._rule("MrgSort repeat_times > 1 needs the 4 lists stored one after another")
        for t, n in zip(lists, lengths):
            self._count(max(2 * n * (repeat if repeat > 1 else 1), 1) if t is lists[0] else max(2 * n, 1), t)
        self._count(max(2 * total, 1), dst)
        for t in lists:
            if t.region is dst.region and t.offset < dst.offset + 2 * total and dst.offset < t.offset + 2 * total:
                self._rule("MrgSort: the source lists and dst must not overlap")
        reads = [(t, t.byte_offset, t.byte_offset + 8 * n) for t, n in zip(lists, lengths)]
        self._vec("MrgSort", "sort", max(1, total * 8), reads, [(dst, dst.byte_offset, dst.byte_offset + 8 * total)],
                  total)
        if self.timing_only or repeat == 0:
            return
        out_s, out_i = [], []
        for r in range(max(repeat, 1)):
            parts = [_pairs(t if repeat <= 1 else lists[0][2 * (r * len(lists) + k) * lengths[0]], n)
                     for k, (t, n) in enumerate(zip(lists, lengths))]
            scores = np.concatenate([p[0] for p in parts])
            index = np.concatenate([p[1] for p in parts])
            order = np.argsort(-scores, kind="stable")        # ties: the earlier list first
            out_s.append(scores[order])
            out_i.append(index[order])
        out = dst.data[:2 * total]
        out[0::2] = np.concatenate(out_s)
        out.view(np.uint32)[1::2] = np.concatenate(out_i)
