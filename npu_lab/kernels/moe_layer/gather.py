"""Gather after dispatch: ``expanded_x[i] = x[sorted_row_idx[i] // K]`` on the vector cores (MoeInitRoutingV2's
gather phase, ops-transformer ``moe/moe_init_routing_v2/op_kernel/moe_v2_gather_out.h``).

Per block (rows ``[b·R, b·R + r)`` of ``expanded_x``; R = ``ceil(M / cores)``): MTE2 one ``DataCopyPad`` of
the block's source indices (int32), MTE2→S; then per row: S reads the index (``GetValue``; the token is
index // K), MTE2 copies that token's H-element row GM→UB, MTE3 copies it to ``expanded_x``'s row; two UB
slots ordered by MTE2_MTE3 / MTE3_MTE2 flags, so row i+1's load overlaps row i's store. Rows are copied whole (``DataCopyPad``, any H).
Costs depend on M, H and the dtype only: the source address changes the row, never the price (npu_lab's
DMA cost is judged from the copy's geometry; docs/cost_model.md)."""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...lang import DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TBuf, TPosition, launch, npu_kernel
from ...presets import get_preset
from ...sim.timeline import Timeline

__all__ = ["gather_rows", "gather_rows_kernel"]


def _classes(block_dim, src_gm, x_gm, out_gm, rows_per_block, top_k, hidden):
    labels = np.zeros(block_dim, dtype=np.int64)
    if src_gm.size - (block_dim - 1) * rows_per_block != rows_per_block:
        labels[-1] = 1
    return labels


@npu_kernel(block_classes=_classes)
def gather_rows_kernel(ctx, src_gm, x_gm, out_gm, rows_per_block: int, top_k: int, hidden: int):
    """``out_gm[i, :] = x_gm[src_gm[i] // top_k, :]`` for this block's rows (see the module doc)."""
    b = ctx.get_block_idx()
    M = src_gm.size
    first = b * rows_per_block
    rows = min(rows_per_block, M - first)
    size = x_gm.dtype.itemsize
    pipe = ctx.pipe
    idx_buf = TBuf(TPosition.VECCALC)
    pipe.init_buffer(idx_buf, 4 * (-(-rows // 8) * 8), name="src_idx")
    slot_bytes = -(-hidden * size // 32) * 32
    slots = []
    for j in range(2):                              # ping-pong: row i+1 loads while row i stores
        buf = TBuf(TPosition.VECCALC)
        pipe.init_buffer(buf, slot_bytes, name=f"row{j}")
        slots.append(buf.get(x_gm.dtype))
    in_ev = [pipe.alloc_event_id("MTE2_MTE3") for _ in range(2)]
    out_ev = [pipe.alloc_event_id("MTE3_MTE2") for _ in range(2)]
    idx = idx_buf.get(np.int32)
    ctx.data_copy_pad(idx, src_gm[first], DataCopyExtParams(1, 4 * rows, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
    ev = pipe.fetch_event_id("MTE2_S")
    ctx.set_flag("MTE2_S", ev)
    ctx.wait_flag("MTE2_S", ev)
    row = DataCopyExtParams(1, hidden * size, 0, 0, 0)
    for i in ctx.tile_loop(rows, key=lambda i: (i % 2, i >= 2)):
        s = i % 2
        if i >= 2:                                  # the slot's previous store has read it
            ctx.wait_flag("MTE3_MTE2", out_ev[s])
        token = idx.get_value(i) // top_k          # 0 in a timing-only run: the price is the same
        ctx.data_copy_pad(slots[s], x_gm[int(token) * hidden], row, DataCopyPadExtParams(False, 0, 0, 0))
        ctx.set_flag("MTE2_MTE3", in_ev[s])
        ctx.wait_flag("MTE2_MTE3", in_ev[s])
        ctx.data_copy_pad(out_gm[(first + i) * hidden], slots[s], row)
        ctx.set_flag("MTE3_MTE2", out_ev[s])
    for s in range(min(2, rows)):                   # the last stores' flags
        ctx.wait_flag("MTE3_MTE2", out_ev[s])
    for e in in_ev:
        pipe.release_event_id("MTE2_MTE3", e)
    for e in out_ev:
        pipe.release_event_id("MTE3_MTE2", e)


def gather_rows(x, sorted_row_idx, top_k: int, *, hw: HardwareSpec | str = "ascend-910b2",
                timing_only: bool = False) -> tuple[np.ndarray | None, Timeline]:
    """``expanded_x`` [M, H] = ``x[sorted_row_idx // top_k]`` on the simulator; returns (rows, timeline).

    ``x`` [N, H] float16/float32 (a shape (N, H) with ``timing_only``; then ``sorted_row_idx`` may be
    the int M). Raises ValueError on an index outside [0, N·K)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if timing_only and isinstance(x, tuple):
        (n, h), dtype = x, np.float16
        m = int(sorted_row_idx) if np.isscalar(sorted_row_idx) else int(np.size(sorted_row_idx))
    else:
        x = np.asarray(x)
        if x.ndim != 2 or x.dtype not in (np.float16, np.float32):
            raise ValueError(f"x must be [N, H] float16 or float32; got {x.shape} {x.dtype}")
        (n, h), dtype = x.shape, x.dtype
        src = np.asarray(sorted_row_idx)
        if src.ndim != 1 or src.dtype.kind not in "iu":
            raise ValueError(f"sorted_row_idx must be a 1-D int array; got {src.shape} {src.dtype}")
        if src.size and (src.min() < 0 or src.max() >= n * top_k):
            raise ValueError(f"sorted_row_idx must index the N·K = {n * top_k} slots; got values in "
                             f"[{src.min()}, {src.max()}]")
        m = src.size
    if m == 0:
        return (np.zeros((0, h), dtype) if not timing_only else None), Timeline.concat([])
    cores = hw.vector_cores
    per = -(-m // cores)
    blocks = -(-m // per)
    if timing_only:
        src_gm = GlobalTensor.empty(m, np.int32, "sorted_row_idx", timing_only=True)
        x_gm = GlobalTensor.empty(n * h, dtype, "x", timing_only=True)
        out = GlobalTensor.empty(m * h, dtype, "expanded_x", timing_only=True)
    else:
        src_gm = GlobalTensor.from_array(src.astype(np.int32), "sorted_row_idx")
        x_gm = GlobalTensor.from_array(np.ascontiguousarray(x), "x")
        out = GlobalTensor.from_array(np.zeros(m * h, dtype), "expanded_x")
    tl = launch(gather_rows_kernel, blocks, src_gm, x_gm, out, per, int(top_k), int(h), hw=hw,
                timing_only=timing_only, name="gather")
    return (None if timing_only else out.data.reshape(m, h).copy()), tl
