"""The course's first kernel: z = alpha * x + y over a long vector (the "hello world" of
copy-in → compute → copy-out), in two versions that differ only in ``num_buffers``.

Shapes: x, y, z are float32 [n]. Each block handles ``block_len`` consecutive elements in tiles
of ``tile_len``. Pipes: MTE2 (load x, y), V (Muls + Add), MTE3 (store z).

With ``num_buffers=1`` the load of tile i+1 must wait until tile i's buffers are freed (after its
compute), so MTE2 and V take turns. With ``num_buffers=2`` the load of tile i+1 goes into the
other slot while V works on tile i — double buffering, emerging from the queue rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hardware import HardwareSpec
from ..lang import (DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TPosition, TQue, launch,
                    npu_kernel)
from ..lang.tiling_struct import Int32Struct
from ..presets import get_preset


def scaled_add_reference(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """alpha * x + y in float32 (numpy)."""
    return (np.float32(alpha) * np.asarray(x, np.float32) + np.asarray(y, np.float32)).astype(np.float32)


@dataclass(frozen=True)
class ScaledAddTiling(Int32Struct):
    """Host-side tiling: total elements, elements per block, elements per tile, buffers, and the
    scalar ``alpha`` (float32): an operator's entry takes only GM addresses (``..., GM_ADDR
    workspace, GM_ADDR tiling``), so a scalar operand travels in the tiling struct, as in
    asc-devkit's operator examples."""

    total: int
    block_len: int
    tile_len: int
    num_buffers: int
    alpha: float = 2.0

    @property
    def block_dim(self) -> int:
        return -(-self.total // self.block_len)

    def block_range(self, block_idx: int) -> tuple[int, int]:
        start = block_idx * self.block_len
        return start, min(self.block_len, self.total - start)


def scaled_add_block_classes(block_dim, x_gm, y_gm, z_gm, tiling_bytes):
    """Which blocks run the same instruction stream (the simulator times one block per class):
    every block's element count -- all equal but the last one's."""
    t = ScaledAddTiling.unpack(tiling_bytes)
    lengths = np.full(block_dim, t.block_len)
    lengths[-1] = t.total - (block_dim - 1) * t.block_len
    return lengths


@npu_kernel(block_classes=scaled_add_block_classes)
def scaled_add_kernel(ctx, x_gm: GlobalTensor, y_gm: GlobalTensor, z_gm: GlobalTensor, tiling_bytes: bytes):
    """z = alpha·x + y over this block's slice, tile by tile (alpha from the tiling struct).
    Pipes: MTE2 → V → MTE3. The Ascend C listing is ``scaled_add.cpp`` beside this file."""
    t = ScaledAddTiling.unpack(tiling_bytes)          # GET_TILING_DATA: the host's struct
    alpha = t.alpha
    start, length = t.block_range(ctx.get_block_idx())
    x_in, y_in = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 1)
    z_out = TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_in, t.num_buffers, t.tile_len * 4, name="x_in")
    ctx.pipe.init_buffer(y_in, t.num_buffers, t.tile_len * 4, name="y_in")
    ctx.pipe.init_buffer(z_out, t.num_buffers, t.tile_len * 4, name="z_out")
    for offset in range(0, length, t.tile_len):
        n = min(t.tile_len, length - offset)
        lo = start + offset
        # CopyIn: MTE2 fills a free slot, then hands it to V. A tail that is not whole 32-byte
        # blocks needs DataCopyPad (DataCopy would round it down).
        x = x_in.alloc_tensor(np.float32)
        y = y_in.alloc_tensor(np.float32)
        if n % 8 == 0:
            ctx.data_copy(x, x_gm[lo], n)
            ctx.data_copy(y, y_gm[lo], n)
        else:
            ctx.data_copy_pad(x, x_gm[lo], DataCopyExtParams(1, n * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
            ctx.data_copy_pad(y, y_gm[lo], DataCopyExtParams(1, n * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
        x_in.enque(x)
        y_in.enque(y)
        # Compute: V waits for the loads, writes an output slot
        x, y = x_in.deque(np.float32), y_in.deque(np.float32)
        z = z_out.alloc_tensor(np.float32)
        ctx.muls(z, x, alpha, n)
        ctx.add(z, z, y, n)
        z_out.enque(z)
        x_in.free_tensor(x)
        y_in.free_tensor(y)
        # CopyOut: MTE3 waits for V, then frees the slot for the next tile
        z = z_out.deque(np.float32)
        if n % 8 == 0:
            ctx.data_copy(z_gm[lo], z, n)
        else:
            ctx.data_copy_pad(z_gm[lo], z, DataCopyExtParams(1, n * 4, 0, 0, 0))
        z_out.free_tensor(z)


def largest_tile_len(hw: HardwareSpec | str, num_buffers: int) -> int:
    """The largest ``tile_len`` (elements, a multiple of 8 = one 32-byte block of float32) whose
    three float32 queues (x, y, z) of ``num_buffers`` slots each fit ``hw``'s Unified Buffer."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if not _is_int(num_buffers) or num_buffers not in (1, 2):
        raise ValueError(f"num_buffers must be 1 (single) or 2 (double buffering), got {num_buffers!r}")
    return (hw.ub_usable_bytes // (3 * int(num_buffers) * 4)) // 8 * 8


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def scaled_add(x, y, alpha: float = 2.0, *, hw: HardwareSpec | str = "ascend-910b2",
               block_dim: int | None = None, tile_len: int = 2048, num_buffers: int = 2,
               timing_only: bool = False):
    """Run the kernel; returns ``(z, timeline)`` (z is None in a timing-only run).

    ``x``, ``y``: float32 arrays of equal length n ≥ 1 (or, in a timing-only run, an int n for
    both). ``block_dim`` defaults to the chip's vector core count (capped by the tile count)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if timing_only and isinstance(x, (int, np.integer)):
        n = int(x)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        xs = ys = None
    else:
        xs, ys = np.asarray(x), np.asarray(y)
        if xs.ndim != 1 or xs.shape != ys.shape:
            raise ValueError(f"x and y must be 1-D arrays of the same length; got {xs.shape} and {ys.shape}")
        if xs.size == 0:
            raise ValueError("x and y must not be empty")
        for name, arr in (("x", xs), ("y", ys)):
            if arr.dtype != np.float32:
                raise TypeError(f"{name} must be float32, got {arr.dtype}; use arr.astype(np.float32)")
        n = xs.size
    if not _is_int(num_buffers) or num_buffers not in (1, 2):
        raise ValueError(f"num_buffers must be 1 (single) or 2 (double buffering), got {num_buffers!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) \
            or not abs(float(alpha)) <= float(np.finfo(np.float32).max):
        raise ValueError(f"alpha must be a finite number a float32 holds (it travels in the tiling struct as a C "
                         f"float), got {alpha!r}")
    if not _is_int(tile_len) or tile_len < 8 or tile_len % 8:
        raise ValueError(f"tile_len must be a multiple of 8 elements (32 bytes) and >= 8, got {tile_len!r}")
    num_buffers, tile_len = int(num_buffers), int(tile_len)
    if block_dim is not None and (not _is_int(block_dim) or block_dim < 1):
        raise ValueError(f"block_dim must be a whole number >= 1 (or None for one block per core), got {block_dim!r}")
    need = 3 * num_buffers * tile_len * 4
    if need > hw.ub_usable_bytes:
        largest = largest_tile_len(hw, num_buffers)
        raise ValueError(f"tile_len={tile_len} with {num_buffers} buffer(s) needs {need} B of UB "
                         f"(3 queues); {hw.name} has {hw.ub_usable_bytes} B. Largest tile_len: {largest}")
    if n % 8 and hw.isa == "ascend310p":
        from ..capabilities import check_supported
        from ..lang import CapabilityError
        raise CapabilityError(f"n={n} is not a whole number of 32-byte blocks (8 floats): its tail needs "
                              f"{check_supported(hw.isa, 'DataCopyPad')}")
    if block_dim is None:
        block_dim = min(hw.vector_cores, -(-n // tile_len))
    block_len = -(-(-(-n // int(block_dim))) // 8) * 8   # whole 32-byte blocks per block (DataCopy)
    tiling = ScaledAddTiling(n, block_len, tile_len, num_buffers, float(alpha))
    gm = lambda arr, name, size: (GlobalTensor.empty(size, np.float32, name, timing_only=True)
                                  if arr is None or timing_only else GlobalTensor.from_array(arr, name))
    x_gm, y_gm = gm(xs, "x", n), gm(ys, "y", n)
    z_gm = GlobalTensor.empty(n, np.float32, "z", timing_only=timing_only)
    timeline = launch(scaled_add_kernel, tiling.block_dim, x_gm, y_gm, z_gm, tiling.pack(),
                      hw=hw, timing_only=timing_only, name=f"scaled_add(buffers={num_buffers})")
    return (None if timing_only else z_gm.data.copy()), timeline
