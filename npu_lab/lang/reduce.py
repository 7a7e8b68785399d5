"""Reductions on the vector unit (pipe ``V``).

Sources: asc-devkit docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMax.md and
WholeReduceSum.md (CANN 8.x / 9.0 names; CANN 9.1 renamed them ``ReduceRepeat``), and
docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/ReduceMax.md, ReduceSum.md.

* ``WholeReduceMax/Min(dst, src, mask, repeatTime, dstRepStride, srcBlkStride, srcRepStride,
  order)`` reduces **each repeat** (≤ 256 bytes) to one result: with ``ORDER_VALUE_INDEX`` the
  pair [value, index], the index relative to the repeat (its lane) and stored as raw integer bits
  in a slot of the value's dtype — read it with ``reinterpret_cast(np.uint32)`` (float) or
  ``np.uint16`` (half). Ties give the lowest index. ``dstRepStride`` counts results (pairs).
  The 310P has only the two pair orders.
* ``WholeReduceSum(dst, src, mask, repeatTime, dstRepStride, srcBlkStride, srcRepStride)``: one
  sum per repeat.
* ``ReduceMax(dst, src, sharedTmpBuffer, count, calIndex)`` / ``ReduceSum(dst, src,
  sharedTmpBuffer, count)``: over the whole ``count``; dst[0] = the result and, with
  ``calIndex``, dst[1] = the global index (bits, as above). ``sharedTmpBuffer`` must be at least
  the size the page's formula gives (:func:`reduce_max_tmp_elements`).

Model note: sums are computed by numpy in float32 (pairwise), not in the hardware's binary-tree
order, so they can differ from a device in the last bits.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import AscendCRuleError
from .vector import _whole, as_index, footprint, lanes_of, need_local, span_of


class ReduceOrder:
    """``ReduceOrder`` of WholeReduceMax / WholeReduceMin."""

    ORDER_VALUE_INDEX = "ORDER_VALUE_INDEX"
    ORDER_INDEX_VALUE = "ORDER_INDEX_VALUE"
    ORDER_ONLY_VALUE = "ORDER_ONLY_VALUE"
    ORDER_ONLY_INDEX = "ORDER_ONLY_INDEX"


_INDEX_DTYPE = {4: np.uint32, 2: np.uint16}


def reduce_max_tmp_elements(count: int, itemsize: int, cal_index: bool) -> int:
    """Elements of ``sharedTmpBuffer`` ReduceMax needs for ``count`` elements (the ReduceMax.md
    formula: every pass also returns indices, so room for pairs)."""
    per_block, per_repeat = 32 // itemsize, 256 // itemsize
    first = max(1, math.ceil(count / per_repeat))
    out1 = first * 2
    start2 = math.ceil(out1 / per_block) * per_block
    if not cal_index:
        return start2
    out2 = math.ceil(out1 / per_repeat) * 2
    end2 = math.ceil(out2 / per_block) * per_block
    if out2 <= 2:
        return start2 + end2
    out3 = math.ceil(out2 / per_repeat) * 2
    return start2 + end2 + math.ceil(out3 / per_block) * per_block


def _need_result(dst, elements: int) -> None:
    """A reduction's dst starts on the size of one result, not 32 bytes (ReduceRepeat.md,
    table 3: 4 B for a float sum, 8 B for a float [value, index] pair)."""
    need_local(dst, align=1)
    need_local(dst, align=elements * dst.dtype.itemsize)


#: checked WholeReduceMax/Min calls (see ReduceOps._whole_arg)
_WHOLE_PLANS: dict = {}


class ReduceOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def whole_reduce_max(self, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride, src_rep_stride,
                         order: str = ReduceOrder.ORDER_VALUE_INDEX):
        """``WholeReduceMax``: per repeat, the max and its lane (see the module docstring)."""
        self._whole_arg("WholeReduceMax", np.argmax, dst, src, mask, repeat_time, dst_rep_stride,
                        src_blk_stride, src_rep_stride, order)

    def whole_reduce_min(self, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride, src_rep_stride,
                         order: str = ReduceOrder.ORDER_VALUE_INDEX):
        """``WholeReduceMin``: per repeat, the min and its lane."""
        self._whole_arg("WholeReduceMin", np.argmin, dst, src, mask, repeat_time, dst_rep_stride,
                        src_blk_stride, src_rep_stride, order)

    def _whole_arg(self, name, argfn, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride,
                   src_rep_stride, order):
        need_local(src)
        self._check_float(name, src)
        self._same_dtype(name, dst, src)
        key = None
        if type(mask) is int and type(repeat_time) is int and type(dst_rep_stride) is int \
                and type(src_blk_stride) is int and type(src_rep_stride) is int and order.__class__ is str:
            key = (name, self.hw.isa, order, mask, repeat_time, dst_rep_stride, src_blk_stride, src_rep_stride,
                   src.dtype, src.offset, src.count, dst.dtype, dst.offset, dst.count)
            plan = _WHOLE_PLANS.get(key)
        else:
            plan = None
        if plan is None:
            plan = self._whole_arg_plan(name, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride,
                                        src_rep_stride, order)
            if key is not None:
                if len(_WHOLE_PLANS) > 4096:
                    _WHOLE_PLANS.clear()
                _WHOLE_PLANS[key] = plan
        else:
            _need_result(dst, plan[2])     # its address alignment is not part of the key
        repeat, n_lanes, _, stride, src_at, src_span, dst_span, rows, lane_index, result_at = plan
        self._vec(name, "reduce", repeat * 256, [(src, *src_span)], [(dst, *dst_span)],
                  repeat * n_lanes, repeats=repeat)
        if self.timing_only or repeat == 0:
            return
        block = src.data[src_at].reshape(repeat, n_lanes)
        pos = argfn(block, axis=1)                       # first occurrence: lowest index on ties
        values = block[rows, pos]
        index = lane_index[pos]
        size = src.dtype.itemsize
        idx_dtype = _INDEX_DTYPE[size]
        if order == ReduceOrder.ORDER_ONLY_INDEX:
            words = dst.reinterpret_cast(np.uint32).data       # the index is 32-bit here
            words[(rows * stride * size) // 4] = index.astype(np.uint32)
            return
        out = dst.data
        v_at, i_at = result_at   # where the values and the indices go (None: no indices)
        out[v_at] = values
        if i_at is not None:
            out.view(idx_dtype)[i_at] = index.astype(idx_dtype)

    def _whole_arg_plan(self, name, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride,
                        src_rep_stride, order) -> tuple:
        """Check a WholeReduceMax/Min call; returns (repeat, lanes per repeat, result width, dst
        stride, src index, src span, dst span, repeat numbers, lane numbers, (value offsets, index
        offsets or None) or None for ORDER_ONLY_INDEX) — a function of the arguments and the
        operands' dtypes, offsets and counts (dst's address alignment aside: ``_whole_arg`` checks
        it on every call)."""
        orders = (ReduceOrder.ORDER_VALUE_INDEX, ReduceOrder.ORDER_INDEX_VALUE, ReduceOrder.ORDER_ONLY_VALUE,
                  ReduceOrder.ORDER_ONLY_INDEX)
        if order not in orders:
            raise AscendCRuleError(f"{name} order must be a ReduceOrder ({', '.join(orders)}), got {order!r}")
        self._require(f"{name} {order}")
        repeat = self._check_repeat(repeat_time)
        lanes = lanes_of(mask, src.dtype.itemsize)
        src_off = footprint(src, lanes, repeat, src_blk_stride, src_rep_stride, "src")
        size = src.dtype.itemsize
        if order == ReduceOrder.ORDER_ONLY_VALUE:
            width = 1
        elif order == ReduceOrder.ORDER_ONLY_INDEX:
            width = 4 // size
        else:
            width = 2
        _need_result(dst, width)
        stride = _whole(f"{name} dst_rep_stride", dst_rep_stride, 0, 65535) * width
        dst_off = (np.arange(repeat)[:, None] * stride + np.arange(width)).ravel()
        if len(dst_off) and dst_off.max() >= dst.count:
            raise AscendCRuleError(f"{name}: {repeat} results of {width} {dst.dtype.name} each with "
                                   f"dst_rep_stride={dst_rep_stride} run past '{dst.name}' ({dst.count} elements)")
        rows = np.arange(repeat)
        if order == ReduceOrder.ORDER_ONLY_INDEX:
            at = None
        else:
            v_at, i_at = {ReduceOrder.ORDER_VALUE_INDEX: (0, 1), ReduceOrder.ORDER_INDEX_VALUE: (1, 0),
                          ReduceOrder.ORDER_ONLY_VALUE: (0, None)}[order]
            at = (rows * stride + v_at, None if i_at is None else rows * stride + i_at)
        return (repeat, len(lanes), width, stride, as_index(src_off), span_of(src, src_off)[1:],
                span_of(dst, dst_off)[1:], rows, np.asarray(lanes, dtype=np.int64), at)

    def whole_reduce_sum(self, dst, src, mask, repeat_time, dst_rep_stride, src_blk_stride, src_rep_stride):
        """``WholeReduceSum``: one sum per repeat, written every ``dst_rep_stride`` elements."""
        need_local(src)
        _need_result(dst, 1)
        self._check_float("WholeReduceSum", src)
        self._same_dtype("WholeReduceSum", dst, src)
        repeat = self._check_repeat(repeat_time)
        lanes = lanes_of(mask, src.dtype.itemsize)
        src_off = footprint(src, lanes, repeat, src_blk_stride, src_rep_stride, "src")
        stride = _whole("WholeReduceSum dst_rep_stride", dst_rep_stride, 0, 65535)
        dst_off = np.arange(repeat) * stride
        if len(dst_off) and dst_off.max() >= dst.count:
            raise AscendCRuleError(f"WholeReduceSum: {repeat} sums with dst_rep_stride={stride} run past "
                                   f"'{dst.name}' ({dst.count} elements)")
        self._vec("WholeReduceSum", "reduce", repeat * 256, [span_of(src, src_off)], [span_of(dst, dst_off)],
                  repeat * len(lanes), repeats=repeat)
        if not self.timing_only and repeat:
            dst.data[dst_off] = src.data[src_off].reshape(repeat, len(lanes)).sum(axis=1, dtype=src.dtype)

    def reduce_max(self, dst, src, shared_tmp_buffer, count, cal_index: bool = False):
        """``ReduceMax(dst, src, sharedTmpBuffer, count, calIndex)``: dst[0] = max of the first
        ``count`` elements; with ``cal_index`` dst[1] = the lowest index holding it (bits)."""
        self._reduce_all("ReduceMax", dst, src, shared_tmp_buffer, count, cal_index)

    def reduce_sum(self, dst, src, shared_tmp_buffer, count):
        """``ReduceSum(dst, src, sharedTmpBuffer, count)``: dst[0] = sum of the first ``count``."""
        self._reduce_all("ReduceSum", dst, src, shared_tmp_buffer, count, False)

    def _reduce_all(self, name, dst, src, tmp, count, cal_index):
        need_local(src, tmp)
        _need_result(dst, 2 if cal_index else 1)     # [value, index] with calIndex
        self._check_float(name, src)
        self._same_dtype(name, dst, src, tmp)
        n = self._count(count, src)
        self._count(2 if cal_index else 1, dst)
        size = src.dtype.itemsize
        if cal_index and size == 2 and n > 65536:
            # checked on the count, not the data: a timing-only run must fail the same way
            self._rule(f"{name} on half with calIndex returns its index as a uint16, so it takes at most "
                       f"65536 elements; got count={n} (docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/"
                       "ReduceMax.md: '当输入类型是half的时候，只支持获取最大不超过65535的索引值'). Reduce at most "
                       "65536 halves at a time and combine, or Cast to float32 first")
        need = reduce_max_tmp_elements(n, size, cal_index) if name == "ReduceMax" else \
            math.ceil(max(1, math.ceil(n * size / 256)) / (32 // size)) * (32 // size)
        if tmp.count < need:
            self._rule(f"{name} of {n} {src.dtype.name} needs a sharedTmpBuffer of at least {need} elements "
                       f"({need * size} B, the formula on {name}.md); '{tmp.name}' has {tmp.count}")
        # passes over the data: the count, then the per-repeat results until one is left
        repeats, left = 0, n
        while True:
            r = max(1, math.ceil(left * size / 256))
            repeats += r
            if r == 1:
                break
            left = r * (2 if name == "ReduceMax" else 1)
        self._vec(name, "reduce", repeats * 256,
                  [(src, src.byte_offset, src.byte_offset + n * size)],
                  [(dst, dst.byte_offset, dst.byte_offset + (2 if cal_index else 1) * size),
                   (tmp, tmp.byte_offset, tmp.byte_offset + need * size)], n, repeats=repeats)
        if self.timing_only:
            return
        data = src.data[:n]
        if name == "ReduceSum":
            dst.data[0] = data.sum(dtype=src.dtype)
            return
        pos = int(np.argmax(data))
        dst.data[0] = data[pos]
        if cal_index:
            dst.data.view(_INDEX_DTYPE[size])[1] = pos
