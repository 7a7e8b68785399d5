"""Vector instructions (pipe ``V``), named after their Ascend C counterparts.

Each computes its result with numpy in a full run and always charges
``issue + repeats x cycles-per-repeat`` where a repeat is 256 bytes of the widest operand
(DESIGN.md §4.2). ``count`` is in elements and defaults to the destination's length.

Two broadcast forms stand in for Ascend C's repeat strides / ``Brcb``: in a binary op with
``rows=R`` the destination is R rows; ``src1`` of one row's length is reused by every row
(``broadcast="tile"``) or holds one value per row (``broadcast="row"``).
Masks are one uint8 per element (the hardware packs bits; the cost is the same per repeat).
"""

from __future__ import annotations

import numpy as np

from ..sim.costs import vector_cycles
from .tensor import LocalTensor

_BINARY = {
    "add": (np.add, "simple"), "sub": (np.subtract, "simple"), "mul": (np.multiply, "simple"),
    "div": (np.divide, "div"), "max": (np.maximum, "simple"), "min": (np.minimum, "simple"),
}
_COMPARE = {"LT": np.less, "GT": np.greater, "EQ": np.equal, "LE": np.less_equal,
            "GE": np.greater_equal, "NE": np.not_equal}


def _expand(data: np.ndarray, how, rows, n: int) -> np.ndarray:
    """The n values an operand contributes: itself, one row reused ('tile'), or one value per
    row ('row')."""
    if how == "tile":
        return np.tile(data[: n // rows], rows)
    if how == "row":
        return np.repeat(data[:rows], n // rows)
    return data[:n]


def _need_local(*tensors):
    for t in tensors:
        if not isinstance(t, LocalTensor):
            raise TypeError(f"vector instructions work on UB LocalTensors, got {type(t).__name__}; "
                            "data_copy global data into UB first")


class VectorOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def _count(self, dst: LocalTensor, count, *srcs) -> int:
        count = dst.count if count is None else int(count)
        for t in (dst, *srcs):
            if count > t.count:
                raise ValueError(f"count={count} exceeds UB tensor '{t.name}' ({t.count} elements)")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        return count

    def _vec(self, name, kind, nbytes, reads, writes, elements):
        cost, repeats = vector_cycles(self.hw, kind, nbytes)
        self.core.vector_repeats += repeats
        self._exec("V", f"{name} x{repeats}", cost, reads, writes, nbytes=nbytes, elements=elements)

    # ---- elementwise ---------------------------------------------------------------------
    def _binary(self, op, dst, src0, src1, count=None, rows=None, broadcast=None):
        _need_local(dst, src0, src1)
        fn, kind = _BINARY[op]
        n = self._count(dst, count, src0)
        if broadcast is None:
            self._count(src1, n)
        elif broadcast not in ("tile", "row") or not rows or n % rows:
            raise ValueError("broadcast must be 'tile' or 'row' with rows dividing count; "
                             f"got broadcast={broadcast!r}, rows={rows}, count={n}")
        width = max(dst.dtype.itemsize, src0.dtype.itemsize)
        self._vec(op.capitalize(), kind, n * width, (src0, src1), (dst,), n)
        if self.timing_only:
            return
        b = _expand(src1.data, broadcast, rows, n)
        with np.errstate(all="ignore"):
            dst.data[:n] = fn(src0.data[:n], b).astype(dst.dtype, copy=False)

    def add(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = src0 + src1 (``Add``)."""
        self._binary("add", dst, src0, src1, count, rows, broadcast)

    def sub(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = src0 - src1 (``Sub``)."""
        self._binary("sub", dst, src0, src1, count, rows, broadcast)

    def mul(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = src0 * src1 (``Mul``)."""
        self._binary("mul", dst, src0, src1, count, rows, broadcast)

    def div(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = src0 / src1 (``Div``; slower per repeat)."""
        self._binary("div", dst, src0, src1, count, rows, broadcast)

    def max(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = maximum(src0, src1) (``Max``)."""
        self._binary("max", dst, src0, src1, count, rows, broadcast)

    def min(self, dst, src0, src1, count=None, *, rows=None, broadcast=None):
        """dst = minimum(src0, src1) (``Min``)."""
        self._binary("min", dst, src0, src1, count, rows, broadcast)

    def _unary(self, name, kind, dst, src, count, fn):
        _need_local(dst, src)
        n = self._count(dst, count, src)
        self._vec(name, kind, n * max(dst.dtype.itemsize, src.dtype.itemsize), (src,), (dst,), n)
        if not self.timing_only:
            with np.errstate(all="ignore"):
                dst.data[:n] = fn(src.data[:n]).astype(dst.dtype, copy=False)

    def adds(self, dst, src, scalar, count=None):
        """dst = src + scalar (``Adds``)."""
        self._unary("Adds", "simple", dst, src, count, lambda x: x + np.asarray(scalar, x.dtype))

    def muls(self, dst, src, scalar, count=None):
        """dst = src * scalar (``Muls``)."""
        self._unary("Muls", "simple", dst, src, count, lambda x: x * np.asarray(scalar, x.dtype))

    def maxs(self, dst, src, scalar, count=None):
        """dst = maximum(src, scalar) (``Maxs``)."""
        self._unary("Maxs", "simple", dst, src, count, lambda x: np.maximum(x, np.asarray(scalar, x.dtype)))

    def exp(self, dst, src, count=None):
        """dst = exp(src), exact (``Exp``; priced by ``vector_exp_cycles_per_repeat``)."""
        self._unary("Exp", "exp", dst, src, count, np.exp)

    def cast(self, dst, src, count=None, round_mode: str = "rint"):
        """dst = src converted to dst's dtype (``Cast``); float→int rounds by ``round_mode``
        ('rint' to nearest even, 'floor', 'trunc')."""
        modes = {"rint": np.rint, "floor": np.floor, "trunc": np.trunc}
        if round_mode not in modes:
            raise ValueError(f"round_mode must be one of {sorted(modes)}, got {round_mode!r}")
        if dst.dtype.kind in "iu" and src.dtype.kind == "f":
            self._unary("Cast", "simple", dst, src, count, modes[round_mode])
        else:
            self._unary("Cast", "simple", dst, src, count, lambda x: x)

    def shift_left(self, dst, src, bits: int, count=None):
        """dst = src << bits on integers (``ShiftLeft``)."""
        if src.dtype.kind not in "iu":
            raise TypeError(f"shift_left works on integer tensors; '{src.name}' is {src.dtype.name}")
        self._unary("ShiftLeft", "simple", dst, src, count, lambda x: np.left_shift(x, bits))

    def adds_int(self, dst, src, scalar: int, count=None):
        """dst = src + scalar on integer tensors (``Adds`` on int32)."""
        self._unary("Adds", "simple", dst, src, count, lambda x: x + np.asarray(scalar, x.dtype))

    def copy(self, dst, src, count=None, *, dst_stride: int = 1, src_stride: int = 1):
        """dst[i*dst_stride] = src[i*src_stride] for i < count (``Copy`` with strides). The
        cost covers every repeat the strided footprint spans."""
        _need_local(dst, src)
        n = dst.count if count is None else int(count)
        if n < 1 or (n - 1) * dst_stride >= dst.count or (n - 1) * src_stride >= src.count:
            raise ValueError(f"strided copy of {n} elements (strides {dst_stride}/{src_stride}) does not "
                             f"fit '{dst.name}' ({dst.count}) / '{src.name}' ({src.count})")
        span = max((n - 1) * dst_stride + 1, (n - 1) * src_stride + 1)
        self._vec("Copy", "simple", span * dst.dtype.itemsize, (src,), (dst,), n)
        if not self.timing_only:
            dst.data[: (n - 1) * dst_stride + 1: dst_stride] = src.data[: (n - 1) * src_stride + 1: src_stride]

    def duplicate(self, dst, scalar, count=None):
        """dst[:] = scalar (``Duplicate``)."""
        _need_local(dst)
        n = self._count(dst, count)
        self._vec("Duplicate", "simple", n * dst.dtype.itemsize, (), (dst,), n)
        if not self.timing_only:
            dst.data[:n] = scalar

    def create_vec_index(self, dst, first_value=0, count=None):
        """dst[i] = first_value + i (``CreateVecIndex``)."""
        _need_local(dst)
        n = self._count(dst, count)
        self._vec("CreateVecIndex", "simple", n * dst.dtype.itemsize, (), (dst,), n)
        if not self.timing_only:
            dst.data[:n] = np.arange(first_value, first_value + n, dtype=dst.dtype)

    # ---- compare / select ----------------------------------------------------------------
    def compare(self, dst_mask, src0, src1, mode: str, count=None, *, rows=None, broadcast=None,
                src0_broadcast=None):
        """dst_mask = (src0 <mode> src1) as 0/1 uint8 (``Compare``); mode LT GT EQ LE GE NE.
        ``src0_broadcast`` ('tile' or 'row') broadcasts src0 the way ``broadcast`` does src1."""
        _need_local(dst_mask, src0, src1)
        if mode not in _COMPARE:
            raise ValueError(f"compare mode must be one of {sorted(_COMPARE)}, got {mode!r}")
        if dst_mask.dtype != np.uint8:
            raise TypeError(f"compare writes a uint8 mask; '{dst_mask.name}' is {dst_mask.dtype.name}")
        n = self._count(dst_mask, count)
        for src, how in ((src0, src0_broadcast), (src1, broadcast)):
            if how is None:
                self._count(src, n)
            elif how not in ("tile", "row") or not rows or n % rows:
                raise ValueError(f"broadcast must be 'tile' or 'row' with rows dividing count={n}")
        self._vec(f"Compare.{mode}", "simple", n * src0.dtype.itemsize, (src0, src1), (dst_mask,), n)
        if self.timing_only:
            return
        a, b = (_expand(t.data, how, rows, n) for t, how in ((src0, src0_broadcast), (src1, broadcast)))
        dst_mask.data[:n] = _COMPARE[mode](a, b)

    def compare_scalar(self, dst_mask, src, scalar, mode: str, count=None):
        """dst_mask = (src <mode> scalar) (``CompareScalar``)."""
        _need_local(dst_mask, src)
        if mode not in _COMPARE:
            raise ValueError(f"compare mode must be one of {sorted(_COMPARE)}, got {mode!r}")
        n = self._count(dst_mask, count, src)
        self._vec(f"CompareScalar.{mode}", "simple", n * src.dtype.itemsize, (src,), (dst_mask,), n)
        if not self.timing_only:
            dst_mask.data[:n] = _COMPARE[mode](src.data[:n], np.asarray(scalar, src.dtype))

    def select(self, dst, mask, src0, src1, count=None):
        """dst = where(mask, src0, src1) (``Select``); src1 may be a Python scalar."""
        _need_local(dst, mask, src0)
        n = self._count(dst, count, mask, src0)
        reads = (mask, src0) + ((src1,) if isinstance(src1, LocalTensor) else ())
        self._vec("Select", "simple", n * dst.dtype.itemsize, reads, (dst,), n)
        if not self.timing_only:
            other = src1.data[:n] if isinstance(src1, LocalTensor) else np.asarray(src1, dst.dtype)
            dst.data[:n] = np.where(mask.data[:n].astype(bool), src0.data[:n], other)

    def sort_rows(self, dst_values, dst_indices, src, rows: int, row_len: int):
        """Sort each row of ``src`` [rows, row_len] descending, ties to the lower index, writing
        values and int32 indices (``Sort32`` on 32-element groups, then ``MrgSort`` passes that
        merge 4 lists at a time: 1 + ceil(log4(groups)) passes over the data)."""
        _need_local(dst_values, dst_indices, src)
        n = rows * row_len
        for t in (src, dst_values, dst_indices):
            self._count(t, n)
        groups = -(-row_len // 32)
        passes, width = 1, 1
        while width < groups:
            width *= 4
            passes += 1
        # each pass reads values and indices (8 bytes per element)
        self._vec(f"Sort32+MrgSort({passes} passes)", "sort", passes * n * 8, (src,),
                  (dst_values, dst_indices), n)
        if self.timing_only:
            return
        block = src.data[:n].reshape(rows, row_len)
        order = np.argsort(-block, axis=1, kind="stable")
        dst_values.data[:n] = np.take_along_axis(block, order, axis=1).reshape(-1)
        dst_indices.data[:n] = order.reshape(-1)

    # ---- reductions ----------------------------------------------------------------------
    def reduce_max(self, dst, src, count=None):
        """dst[0] = max(src[:count]) (``ReduceMax``)."""
        self._reduce("ReduceMax", np.max, dst, src, count)

    def reduce_sum(self, dst, src, count=None):
        """dst[0] = sum(src[:count]) (``ReduceSum``)."""
        self._reduce("ReduceSum", np.sum, dst, src, count)

    def _reduce(self, name, fn, dst, src, count):
        _need_local(dst, src)
        n = src.count if count is None else int(count)
        self._count(src, n)
        self._vec(name, "reduce", n * src.dtype.itemsize, (src,), (dst,), n)
        if not self.timing_only:
            dst.data[0] = fn(src.data[:n])

    def whole_reduce_max(self, dst_value, dst_index, src, rows: int, row_len: int):
        """Per row of ``src`` viewed as [rows, row_len]: the max and the LOWEST index holding it
        (``WholeReduceMax`` with value+index order). Rows longer than one repeat take a second
        pass over the per-repeat partials."""
        self._whole_reduce("WholeReduceMax", dst_value, dst_index, src, rows, row_len)

    def whole_reduce_sum(self, dst, src, rows: int, row_len: int):
        """Per row of ``src`` viewed as [rows, row_len]: the sum (``WholeReduceSum``)."""
        self._whole_reduce("WholeReduceSum", dst, None, src, rows, row_len)

    def _whole_reduce(self, name, dst, dst_index, src, rows, row_len):
        _need_local(dst, src)
        if rows < 1 or row_len < 1 or rows * row_len > src.count or rows > dst.count:
            raise ValueError(f"{name}: rows={rows} x row_len={row_len} must fit '{src.name}' "
                             f"({src.count}) and rows must fit '{dst.name}' ({dst.count})")
        per_repeat = self.hw.vector_repeat_bytes // src.dtype.itemsize
        repeats_per_row = -(-row_len // per_repeat)
        passes = repeats_per_row + (-(-repeats_per_row // per_repeat) if repeats_per_row > 1 else 0)
        nbytes = rows * passes * self.hw.vector_repeat_bytes
        writes = (dst,) + ((dst_index,) if dst_index is not None else ())
        self._vec(name, "reduce", nbytes, (src,), writes, rows * row_len)
        if self.timing_only:
            return
        block = src.data[: rows * row_len].reshape(rows, row_len)
        if dst_index is None:
            dst.data[:rows] = block.sum(axis=1)
        else:
            arg = np.argmax(block, axis=1)  # first occurrence = lowest index on ties
            dst.data[:rows] = block[np.arange(rows), arg]
            dst_index.data[:rows] = arg
