"""Data movement between global memory and UB: ``DataCopy`` and ``DataCopyPad`` (MTE2 in, MTE3 out).

Sources (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/):

* ``DataCopy（GM与UB连续数据搬运）.md`` — ``DataCopy(dst, src, count)``: the UB address must be
  32-byte aligned and ``count * sizeof(T)`` a multiple of 32 bytes; "若未对齐，搬运量会向下取整到
  32字节对齐" — the hardware silently moves fewer bytes. Here that raises, saying how many bytes
  the hardware would have moved.
* ``DataCopy（GM与UB切片数据搬运）.md`` — ``DataCopy(dst, src, DataCopyParams)``: ``blockCount``
  blocks of ``blockLen`` 32-byte units, with gaps ``srcStride`` / ``dstStride`` (32-byte units)
  between them: one instruction, one request.
* ``DataCopyPad（GMToUB非对齐数据搬运）.md`` / ``DataCopyPad（UBToGM非对齐数据搬运）.md`` —
  ``DataCopyPad(dst, src, DataCopyExtParams, DataCopyPadExtParams)``: ``blockLen`` in **bytes**
  (a multiple of sizeof(T)); the GM-side stride in bytes, the UB-side stride in 32-byte blocks;
  every block lands in UB padded to a whole 32 bytes (left / right padding of at most 32 bytes
  each, filled with ``paddingValue`` when ``isPad``; with no padding asked, the "dummy" bytes
  repeat the block's first element). Going out, exactly ``blockLen`` bytes per block reach GM.
  The 310P's AI core has no DataCopyPad.

Cost (docs/cost_model.md §1-2): one instruction is ONE request, however many blocks it has. It
occupies its MTE pipe for ``dma_issue_cycles`` + the bytes moved (whole 32-byte blocks) at the
core's DMA bandwidth x the burst efficiency of its block size (尽量一次搬运较大的数据块: full from
~16 KB) x the GM-alignment factor (GM地址尽量512B对齐, A2 only); its data is complete
``dma_latency_cycles`` later, and an engine keeps ``dma_outstanding_requests`` copies in flight
(:mod:`npu_lab.sim.core`). All of it depends on sizes and addresses only, never on data.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..sim.costs import dma_occupancy_cycles, gm_aligned, round_up
from ..sim.l2 import gm_bytes_per_cycle
from .errors import AscendCRuleError
from .tensor import GlobalTensor, LocalTensor

BLOCK_BYTES = 32


def _whole(name, value, lo, hi):
    if type(value) is int and lo <= value <= hi:       # the common case, without ABC checks
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise AscendCRuleError(f"{name} must be a whole number in [{lo}, {hi}], got {value!r}")
    return int(value)


@dataclass(frozen=True)
class DataCopyParams:
    """``DataCopyParams{blockCount, blockLen, srcStride, dstStride}``; blockLen and the strides
    in 32-byte blocks (the stride is the gap from one block's end to the next one's start)."""

    block_count: int = 1
    block_len: int = 0
    src_stride: int = 0
    dst_stride: int = 0

    def __post_init__(self):
        # [0, 4095] and [0, 65535] (DataCopy（GM与UB高维切分数据搬运）.md): 0 moves nothing
        _whole("DataCopyParams.block_count", self.block_count, 0, 4095)
        _whole("DataCopyParams.block_len (32-byte blocks)", self.block_len, 0, 65535)
        _whole("DataCopyParams.src_stride (32-byte blocks)", self.src_stride, 0, 65535)
        _whole("DataCopyParams.dst_stride (32-byte blocks)", self.dst_stride, 0, 65535)


@dataclass(frozen=True)
class DataCopyExtParams:
    """``DataCopyExtParams{blockCount, blockLen, srcStride, dstStride, rsv}``: blockLen in bytes;
    the GM-side stride in bytes, the UB-side stride in 32-byte blocks."""

    block_count: int = 1
    block_len: int = 0
    src_stride: int = 0
    dst_stride: int = 0
    rsv: int = 0

    def __post_init__(self):
        _whole("DataCopyExtParams.block_count", self.block_count, 0, 4095)
        _whole("DataCopyExtParams.block_len (bytes)", self.block_len, 0, 2097151)
        _whole("DataCopyExtParams.src_stride", self.src_stride, 0, 2**32 - 1)
        _whole("DataCopyExtParams.dst_stride", self.dst_stride, 0, 2**32 - 1)


@dataclass(frozen=True)
class DataCopyPadExtParams:
    """``DataCopyPadExtParams<T>{isPad, leftPadding, rightPadding, paddingValue}``: paddings in
    elements, at most 32 bytes each."""

    is_pad: bool = False
    left_padding: int = 0
    right_padding: int = 0
    padding_value: float = 0


def _direction(dst, src, what):
    if isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor):
        return "MTE2", src, dst
    if isinstance(dst, GlobalTensor) and isinstance(src, LocalTensor):
        return "MTE3", dst, src
    raise TypeError(f"{what} moves GlobalTensor -> LocalTensor (MTE2) or LocalTensor -> "
                    f"GlobalTensor (MTE3); got {type(src).__name__} -> {type(dst).__name__}")


class DmaOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    # ---- atomic accumulation into GM (docs/zh/api/SIMD-API/基础API/原子操作/SetAtomicAdd.md) ----------
    _atomic = None          # None, or the dtype SetAtomicAdd<T> accumulates in

    def set_atomic_add(self, dtype) -> None:
        """``SetAtomicAdd<T>()``: every following copy UB -> GM adds to what GM holds instead of
        overwriting it (GM is not cleared first: zero it yourself). T: int8, int16, half,
        int32, float on the A2; int16, half, float on the 310P AI core (the page's lists).
        Model notes: the sum is numpy's in the destination dtype, and an accumulating copy costs
        what a plain one does (assumed; the page gives no cost)."""
        dt = np.dtype(dtype)
        allowed = ("int8", "int16", "float16", "int32", "float32") if self.hw.isa == "ascend910b" \
            else ("int16", "float16", "float32")
        if dt.name not in allowed:
            self._rule(f"SetAtomicAdd<{dt.name}> is not available on {self.hw.name}: it accumulates "
                       f"{', '.join(allowed)} (原子操作/SetAtomicAdd.md, 数据类型)")
        self._atomic = dt
        self.scalar("SetAtomicAdd", ops=1)

    def set_atomic_none(self) -> None:
        """``SetAtomicNone()``: copies to GM overwrite again
        (kernel_operator_set_atomic_intf.h; 原子操作/DisableDmaAtomic.md: 累加操作完成后建议关闭)."""
        self._atomic = None
        self.scalar("SetAtomicNone", ops=1)

    def disable_dma_atomic(self) -> None:
        """``DisableDmaAtomic()``: the same switch as :meth:`set_atomic_none` under its other
        Ascend C name (原子操作/DisableDmaAtomic.md); logged under the name the kernel used, so a
        listing that calls DisableDmaAtomic() matches the trace."""
        self._atomic = None
        self.scalar("DisableDmaAtomic", ops=1)

    def _gm_store(self, gm, index, values) -> None:
        """Write ``values`` to ``gm.data[index]``: overwrite, or accumulate under SetAtomicAdd."""
        if self._atomic is None:
            gm.data[index] = values
            return
        if self.replaying:      # a block timed again (npu_lab.lang.launch) has added its values already
            return
        gm.data[index] = gm.data[index] + values       # the dtype was checked in _dma

    def _dma(self, pipe, name, local, ub_lo, ub_hi, moved_bytes, gm_bytes, count, *, gm=None,
             block_count=1, burst_bytes=None, gm_step_bytes=0):
        """Issue one copy request of ``block_count`` blocks of ``burst_bytes`` GM bytes each
        (default: all of ``moved_bytes`` in one block), ``gm_step_bytes`` apart in GM; ``gm`` is
        the GlobalTensor view copied from / to (the L2 model chooses its bandwidth by it)."""
        if pipe == "MTE3" and self._atomic is not None and gm is not None and gm.dtype != self._atomic:
            self._rule(f"SetAtomicAdd<{self._atomic.name}> is on, but this copy writes {gm.dtype.name} to "
                       f"'{gm.name}': the accumulation type must match the data (SetAtomicAdd.md). Call "
                       f"set_atomic_add({gm.dtype.name}) or set_atomic_none() first")
        rows = None if gm is None else ((gm.address_bytes, gm_step_bytes, gm_bytes // block_count, block_count)
                                        if block_count > 1 else (gm.address_bytes, 0, gm_bytes, 1))
        bytes_per_cycle, from_hbm = gm_bytes_per_cycle(self, gm, pipe, rows)    # HBM or L2 (sim/l2.py)
        burst = moved_bytes if burst_bytes is None else burst_bytes
        aligned = gm_aligned(self.hw, burst, block_count, gm_step_bytes)
        key = (moved_bytes, burst, aligned, bytes_per_cycle)
        cost = self._dma_costs.get(key)
        if cost is None:     # costs depend on sizes and addresses only: cache them
            cost = self._dma_costs[key] = dma_occupancy_cycles(self.hw, moved_bytes, bytes_per_cycle,
                                                               burst, aligned)
        span = ((local, ub_lo, ub_hi),)
        reads, writes = ((), span) if pipe == "MTE2" else (span, ())
        self._exec(pipe, name, cost, reads, writes, nbytes=gm_bytes, elements=count)
        if pipe == "MTE2":
            self.core.hbm_read_bytes += gm_bytes if from_hbm else 0
        else:
            self.core.hbm_write_bytes += gm_bytes

    def _check_ub_address(self, local: LocalTensor, what: str) -> None:
        if local.ub_address % BLOCK_BYTES:
            self._rule(f"{what}: the UB address of '{local.name}' (+{local.byte_offset} B into the "
                       f"buffer) is not 32-byte aligned; UB operands of DMA must start on a 32-byte "
                       "block. Start the tensor at a multiple of "
                       f"{BLOCK_BYTES // local.dtype.itemsize} {local.dtype.name} elements")

    def data_copy(self, dst, src, count_or_params) -> None:
        """``DataCopy(dst, src, count)`` or ``DataCopy(dst, src, DataCopyParams)``: GM→UB on MTE2,
        UB→GM on MTE3, whole 32-byte blocks only (see the module docstring)."""
        pipe, gm, local = _direction(dst, src, "data_copy")
        if dst.dtype != src.dtype:
            raise TypeError(f"data_copy does not convert: {src.dtype.name} -> {dst.dtype.name}; "
                            "copy as is, then use ctx.cast on the vector unit")
        self._check_ub_address(local, "DataCopy")
        size = local.dtype.itemsize
        if isinstance(count_or_params, DataCopyParams):
            self._data_copy_blocks(pipe, gm, local, count_or_params)
            return
        count = count_or_params
        if type(count) is not int and (isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral)) \
                or count < 1:
            raise AscendCRuleError(f"data_copy count must be a whole number of elements >= 1 (or a "
                                   f"DataCopyParams), got {count!r}")
        count = int(count)
        nbytes = count * size
        if nbytes % BLOCK_BYTES:
            moved = nbytes // BLOCK_BYTES * BLOCK_BYTES
            self._rule(
                f"DataCopy of {count} {local.dtype.name} = {nbytes} B: count * sizeof(T) must be a "
                f"multiple of 32 bytes. The hardware would move {moved} B, rounded down "
                f"(silently dropping the last {nbytes - moved} B). Copy a whole number of blocks "
                f"(a multiple of {BLOCK_BYTES // size} elements) or use data_copy_pad with "
                "DataCopyExtParams(1, count * sizeof(T), 0, 0, 0)")
        limit = min(local.count, gm.size)
        if count > limit:
            short = local.name if local.count <= gm.size else gm.name
            where = "UB" if local.count <= gm.size else "GM"
            raise AscendCRuleError(
                f"data_copy of {count} elements between '{local.name}' ({local.count} from its address) and "
                f"'{gm.name}' ({gm.size}): at most {limit} fit. The hardware does not check: it would "
                f"{'read' if (pipe == 'MTE2') == (where == 'GM') else 'write'} {count - limit} element(s) past the "
                f"end of '{short}' in {where} — whatever lies there (another buffer, another block's data). "
                f"Copy at most {limit} elements; for a length that is not whole 32-byte blocks, data_copy_pad "
                "with DataCopyExtParams(1, exact bytes, 0, 0, 0) moves exactly those bytes")
        direction = "GM->UB" if pipe == "MTE2" else "UB->GM"
        self._dma(pipe, f"DataCopy {direction} {nbytes} B", local, local.byte_offset,
                  local.byte_offset + nbytes, nbytes, nbytes, count, gm=gm)
        if not self.timing_only:
            if pipe == "MTE3" and self._atomic is not None:
                self._gm_store(gm, slice(0, count), src.data[:count])
            else:
                dst.data[:count] = src.data[:count]

    def _data_copy_blocks(self, pipe, gm, local, p: DataCopyParams) -> None:
        if p.block_count == 0 or p.block_len == 0:
            if self.hw.isa == "ascend310p":
                # dav_m200/kernel_operator_data_copy_impl.h: ASCENDC_CHECK_VALUE_RANGE(blockCount, 1, ...)
                self._rule(f"DataCopy with {p}: on the 310P blockCount and blockLen must be >= 1 (asc-devkit "
                           "impl/basic_api/dav_m200/kernel_operator_data_copy_impl.h checks blockCount in "
                           "[1, 4095], blockLen in [1, 65535]); skip the copy instead")
            # the A2 allows 0 (DataCopy（GM与UB高维切分数据搬运）.md: blockCount∈[0, 4095]): nothing
            # moves; the model issues nothing either (the page gives no cost for an empty copy)
            return
        per_block = p.block_len * BLOCK_BYTES // local.dtype.itemsize     # elements
        gm_stride = p.src_stride if pipe == "MTE2" else p.dst_stride
        ub_stride = p.dst_stride if pipe == "MTE2" else p.src_stride
        gm_step = per_block + gm_stride * BLOCK_BYTES // local.dtype.itemsize
        ub_step = per_block + ub_stride * BLOCK_BYTES // local.dtype.itemsize
        gm_need = (p.block_count - 1) * gm_step + per_block
        ub_need = (p.block_count - 1) * ub_step + per_block
        if gm_need > gm.size or ub_need > local.count:
            raise AscendCRuleError(
                f"DataCopy with {p}: spans {gm_need} elements of '{gm.name}' (it has {gm.size}) and "
                f"{ub_need} of '{local.name}' (it has {local.count}); the copy runs past a tensor")
        nbytes = p.block_count * per_block * local.dtype.itemsize
        direction = "GM->UB" if pipe == "MTE2" else "UB->GM"
        self._dma(pipe, f"DataCopy {direction} {p.block_count}x{p.block_len * BLOCK_BYTES} B", local,
                  local.byte_offset, local.byte_offset + ub_need * local.dtype.itemsize, nbytes, nbytes,
                  p.block_count * per_block, gm=gm, block_count=p.block_count,
                  burst_bytes=p.block_len * BLOCK_BYTES, gm_step_bytes=gm_step * local.dtype.itemsize)
        if self.timing_only:
            return
        g = np.arange(p.block_count)[:, None] * gm_step + np.arange(per_block)
        u = np.arange(p.block_count)[:, None] * ub_step + np.arange(per_block)
        if pipe == "MTE2":
            local.data[u.ravel()] = gm.data[g.ravel()]
        else:
            self._gm_store(gm, g.ravel(), local.data[u.ravel()])

    def data_copy_pad(self, dst, src, copy_params: DataCopyExtParams,
                      pad_params: DataCopyPadExtParams | None = None) -> None:
        """``DataCopyPad(dst, src, DataCopyExtParams, DataCopyPadExtParams)`` GM→UB (MTE2), or
        ``DataCopyPad(dst, src, DataCopyExtParams)`` UB→GM (MTE3): any byte length per block; UB
        blocks are padded to 32 bytes (see the module docstring)."""
        pipe, gm, local = _direction(dst, src, "data_copy_pad")
        self._require("DataCopyPad")
        if dst.dtype != src.dtype:
            raise TypeError(f"data_copy_pad does not convert: {src.dtype.name} -> {dst.dtype.name}")
        if not isinstance(copy_params, DataCopyExtParams):
            raise TypeError(f"data_copy_pad takes a DataCopyExtParams, got {type(copy_params).__name__}")
        if pipe == "MTE3" and pad_params is not None:
            raise AscendCRuleError("DataCopyPad UB->GM takes no DataCopyPadExtParams: padding exists "
                                   "only in UB; exactly blockLen bytes per block reach GM")
        pad = pad_params or DataCopyPadExtParams()
        if not isinstance(pad, DataCopyPadExtParams):
            raise TypeError(f"data_copy_pad takes a DataCopyPadExtParams, got {type(pad).__name__}")
        self._check_ub_address(local, "DataCopyPad")
        p, size = copy_params, local.dtype.itemsize
        if p.block_len % size:
            self._rule(f"DataCopyPad: blockLen={p.block_len} B is not a multiple of sizeof("
                       f"{local.dtype.name}) = {size}; blockLen is in bytes, not elements")
        if p.block_count == 0 or p.block_len == 0:
            return                                          # the hardware treats it as a NOP
        left, right = int(pad.left_padding), int(pad.right_padding)
        if left < 0 or right < 0 or left * size > BLOCK_BYTES or right * size > BLOCK_BYTES:
            self._rule(f"DataCopyPad: leftPadding={left} and rightPadding={right} elements must each "
                       f"be 0..{BLOCK_BYTES // size} ({BLOCK_BYTES} bytes at most)")
        per_block = p.block_len // size                                   # data elements per block
        ub_block = round_up(left * size + p.block_len + right * size, BLOCK_BYTES) // size
        ub_gap = (p.dst_stride if pipe == "MTE2" else p.src_stride) * BLOCK_BYTES
        gm_gap = p.src_stride if pipe == "MTE2" else p.dst_stride          # bytes
        if gm_gap % size:
            self._rule(f"DataCopyPad: the GM stride {gm_gap} B is not a multiple of sizeof(T) = {size}")
        ub_step = ub_block + ub_gap // size
        gm_step = per_block + gm_gap // size
        gm_need = (p.block_count - 1) * gm_step + per_block
        ub_need = (p.block_count - 1) * ub_step + ub_block
        if gm_need > gm.size or ub_need > local.count:
            raise AscendCRuleError(
                f"DataCopyPad with {p}: spans {gm_need} elements of '{gm.name}' (it has {gm.size}) and "
                f"{ub_need} (32-byte padded) of '{local.name}' (it has {local.count}); the copy runs "
                "past a tensor")
        moved = p.block_count * round_up(p.block_len, BLOCK_BYTES)
        gm_bytes = p.block_count * p.block_len
        direction = "GM->UB" if pipe == "MTE2" else "UB->GM"
        self._dma(pipe, f"DataCopyPad {direction} {p.block_count}x{p.block_len} B", local, local.byte_offset,
                  local.byte_offset + ub_need * size, moved, gm_bytes, p.block_count * per_block, gm=gm,
                  block_count=p.block_count, burst_bytes=round_up(p.block_len, BLOCK_BYTES),
                  gm_step_bytes=gm_step * size)
        if self.timing_only:
            return
        g = (np.arange(p.block_count)[:, None] * gm_step + np.arange(per_block)).ravel()
        u0 = np.arange(p.block_count)[:, None] * ub_step
        u = (u0 + left + np.arange(per_block)).ravel()
        if pipe == "MTE3":
            self._gm_store(gm, g, local.data[u])
            return
        rows = gm.data[g].reshape(p.block_count, per_block)
        block = np.empty((p.block_count, ub_block), local.dtype)
        # the page's fill rules: with no left/right padding the dummy repeats the block's first
        # element (whatever isPad says); with padding, isPad fills it all with paddingValue and
        # otherwise padding and dummy are "随机值" (undefined bytes)
        if not (left or right):
            block[:] = rows[:, :1]
        elif pad.is_pad:
            block[:] = np.asarray(pad.padding_value).astype(local.dtype)
        else:
            block.view(np.uint8)[:] = 0xFF
        block[:, left:left + per_block] = rows
        idx = (u0 + np.arange(ub_block)).ravel()
        local.data[idx] = block.ravel()
