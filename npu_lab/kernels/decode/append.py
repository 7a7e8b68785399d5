"""KV-cache append: write this step's K and V rows into the cache, contiguous or paged.

Shapes: k_new, v_new [num_rows, kv_heads, head_dim] (float16 or float32; one row per sequence
that decodes this step); contiguous cache [num_seqs, max_len, kv_heads, head_dim] or paged cache
[num_pages, page_size, kv_heads, head_dim] with block_table [num_seqs, max_pages].

Both caches are a flat array of *slots* (one slot = one token's [kv_heads, head_dim]); the host
turns each row's (seq_id, seq_len) into a slot id before the launch — contiguous:
``seq_id * max_len + seq_len``, paged: ``block_table[seq_id, seq_len // page_size] * page_size +
seq_len % page_size`` — exactly as vLLM's model runner builds ``slot_mapping`` for its
``reshape_and_cache`` kernel. One kernel then serves both layouts; the page-boundary case
(seq_len % page_size == 0: the first row of a fresh page) is just another slot.

The host owns ``seq_lens``: it checks every id, length and page before the launch (nothing
half-written on bad input), and bumps the lengths after the kernel returns (as a serving
scheduler does). The kernel never writes a length — no scalar-unit store racing the copies.

Kernel (one block per range of rows; pipes MTE2 → S for the slot ids, then MTE2 → MTE3): the
block's slot ids are copied into UB (DataCopyPad), a MTE2_S flag lets the scalar unit read them
(GetValue), then each row's K and V go GM → UB → GM in tiles of ``heads_per_tile`` heads through
two UB slots (ping-pong): MTE2_MTE3 says a slot is loaded, MTE3_MTE2 that it was stored and may
be refilled. Ascend C writes such a copy-through queue as ``TQueBind<VECIN, VECOUT, 2>``; the
course API has no TQueBind, so the two slots and their four flags are spelled out (the same
hand-off, the same overlap). Source of the pattern: asc-devkit docs/zh/api/SIMD-API/基础API/
同步控制/核内同步/SetFlag-WaitFlag(ISASI).md; vLLM csrc/cache_kernels.cu reshape_and_cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TBuf, TPosition, launch,
                     npu_kernel)
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from .validate import check_append, check_paged_append

BLOCK_BYTES = 32


@dataclass(frozen=True)
class KvAppendTiling(Int32Struct):
    """rows (this step's tokens), rows per block, kv_heads, head_dim, heads per tile, UB int32
    slots for the block's slot ids (whole 32-byte blocks)."""

    rows: int
    rows_per_block: int
    kv_heads: int
    head_dim: int
    heads_per_tile: int
    slot_ids_len: int

    @property
    def block_dim(self) -> int:
        return -(-self.rows // self.rows_per_block)


def kv_append_tiling(rows: int, kv_heads: int, head_dim: int, itemsize: int, hw: HardwareSpec,
                     heads_per_tile: int | None = None, block_dim: int | None = None) -> KvAppendTiling:
    """Rows split evenly over the vector cores (the last block takes the rest); heads per tile the
    most whose two ping-pong slots fit ``hw.ub_usable_bytes`` beside the slot-id buffer."""
    cores = hw.vector_cores if block_dim is None else int(block_dim)
    rpb = -(-rows // min(cores, rows))
    ids_len = -(-rpb // 8) * 8
    head_bytes = head_dim * itemsize
    if head_bytes % BLOCK_BYTES:
        raise ValueError(f"head_dim={head_dim} x {itemsize} B = {head_bytes} B: a head must be whole 32-byte "
                         "blocks so every UB slot starts on a block (use head_dim a multiple of 16)")
    fit = (hw.ub_usable_bytes - ids_len * 4) // (2 * head_bytes)
    if fit < 1:
        raise ValueError(f"one head of {head_bytes} B twice does not fit {hw.name}'s {hw.ub_usable_bytes} B of UB")
    hpt = min(kv_heads, fit) if heads_per_tile is None else int(heads_per_tile)
    if not 1 <= hpt <= min(kv_heads, fit):
        raise ValueError(f"heads_per_tile must be in 1..{min(kv_heads, fit)} (kv_heads={kv_heads}; two slots of "
                         f"{head_bytes} B per head in {hw.ub_usable_bytes} B of UB), got {heads_per_tile!r}")
    return KvAppendTiling(rows, rpb, kv_heads, head_dim, hpt, ids_len)


def kv_append_block_classes(block_dim, k_new, v_new, k_cache, v_cache, slot_ids, tiling_bytes, sync=None):
    """Blocks with the same number of rows run the same instruction stream."""
    t = KvAppendTiling.unpack(tiling_bytes)
    rows = np.full(block_dim, t.rows_per_block)
    rows[-1] = t.rows - (block_dim - 1) * t.rows_per_block
    return rows


#: the flags of a correct kernel; tests drop one to see the race detector catch it
ALL_FLAGS = frozenset({"MTE2_S", "MTE2_MTE3", "MTE3_MTE2"})


@npu_kernel(block_classes=kv_append_block_classes)
def kv_append_kernel(ctx, k_new: GlobalTensor, v_new: GlobalTensor, k_cache: GlobalTensor,
                     v_cache: GlobalTensor, slot_ids: GlobalTensor, tiling_bytes: bytes, sync=None):
    """This block's rows: slot ids in (MTE2 → S), then per row, per head tile, K then V through
    two ping-pong UB slots (MTE2 → MTE3). ``sync``: the flags used (default all; a test passes a
    smaller set to show the race). Listing: ``append.cpp``."""
    sync = ALL_FLAGS if sync is None else sync
    t = KvAppendTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.rows_per_block
    rows = min(t.rows_per_block, t.rows - first)
    row_elems, tile_elems = t.kv_heads * t.head_dim, t.heads_per_tile * t.head_dim
    ids_buf, kv_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(ids_buf, t.slot_ids_len * 4, name="slot_ids")
    ctx.pipe.init_buffer(kv_buf, 2 * tile_elems * k_new.dtype.itemsize, name="kv_pingpong")
    ids = ids_buf.get(np.int32)
    slots = [kv_buf.get(k_new.dtype)[i * tile_elems] for i in range(2)]
    ctx.data_copy_pad(ids, slot_ids[first], DataCopyExtParams(1, rows * 4, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    ev_ids = ctx.pipe.fetch_event_id("MTE2_S")
    if "MTE2_S" in sync:
        ctx.set_flag("MTE2_S", ev_ids)              # the slot ids are in UB: S may read them
        ctx.wait_flag("MTE2_S", ev_ids)
    ev_loaded = [ctx.pipe.alloc_event_id("MTE2_MTE3") for _ in range(2)]
    ev_stored = [ctx.pipe.alloc_event_id("MTE3_MTE2") for _ in range(2)]
    j = 0
    for r in range(rows):
        slot = ids.get_value(r)                     # GetValue: the scalar unit reads this row's slot
        for h0 in range(0, t.kv_heads, t.heads_per_tile):
            n = min(t.heads_per_tile, t.kv_heads - h0) * t.head_dim
            for src, dst in ((k_new, k_cache), (v_new, v_cache)):
                buf = slots[j % 2]
                if j >= 2 and "MTE3_MTE2" in sync:
                    ctx.wait_flag("MTE3_MTE2", ev_stored[j % 2])    # tile j-2's store left this slot
                ctx.data_copy_pad(buf, src[(first + r) * row_elems + h0 * t.head_dim],
                                  DataCopyExtParams(1, n * src.dtype.itemsize, 0, 0, 0),
                                  DataCopyPadExtParams(False, 0, 0, 0))
                if "MTE2_MTE3" in sync:
                    ctx.set_flag("MTE2_MTE3", ev_loaded[j % 2])     # loaded: MTE3 may store it
                    ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])
                ctx.data_copy_pad(dst[slot * row_elems + h0 * t.head_dim], buf,
                                  DataCopyExtParams(1, n * src.dtype.itemsize, 0, 0, 0))
                if "MTE3_MTE2" in sync:
                    ctx.set_flag("MTE3_MTE2", ev_stored[j % 2])     # stored: MTE2 may refill it
                j += 1
    if "MTE3_MTE2" in sync:
        for k in range(max(0, j - 2), j):           # the last two stores' flags, waited once
            ctx.wait_flag("MTE3_MTE2", ev_stored[k % 2])
    for e in ev_loaded:
        ctx.pipe.release_event_id("MTE2_MTE3", e)
    for e in ev_stored:
        ctx.pipe.release_event_id("MTE3_MTE2", e)


@dataclass
class AppendResult:
    """``k_cache``, ``v_cache``: the updated caches (None in a timing-only run); ``seq_lens``: the
    lengths the host bumps after the kernel; ``full``: sequence ids skipped because they were at
    their limit (only with ``on_full="report"``); ``timeline``."""

    k_cache: np.ndarray | None
    v_cache: np.ndarray | None
    seq_lens: np.ndarray
    full: list
    timeline: object


def _run(k_new, v_new, k_cache, v_cache, slots, rows_idx, hw, heads_per_tile, block_dim, timing_only, name, sync):
    hw = get_preset(hw) if isinstance(hw, str) else hw
    k_new, v_new = np.asarray(k_new)[rows_idx], np.asarray(v_new)[rows_idx]
    shape = np.shape(k_cache)
    if len(slots) == 0:
        return (None if timing_only else np.array(k_cache)), (None if timing_only else np.array(v_cache)), None
    t = kv_append_tiling(len(slots), shape[2], shape[3], k_new.dtype.itemsize, hw, heads_per_tile, block_dim)
    gm = lambda a, n: GlobalTensor.from_array(a, n, timing_only=timing_only)
    if timing_only:
        kc = GlobalTensor.empty(int(np.prod(shape)), k_new.dtype, "k_cache", timing_only=True)
        vc = GlobalTensor.empty(int(np.prod(shape)), k_new.dtype, "v_cache", timing_only=True)
    else:
        kc, vc = gm(np.array(k_cache), "k_cache"), gm(np.array(v_cache), "v_cache")
    ids_gm = gm(np.asarray(slots, np.int32), "slot_ids")
    tl = launch(kv_append_kernel, t.block_dim, gm(k_new, "k_new"), gm(v_new, "v_new"), kc, vc, ids_gm, t.pack(),
                sync, hw=hw, timing_only=timing_only, name=name)
    if timing_only:
        return None, None, tl
    return kc.data.reshape(shape).copy(), vc.data.reshape(shape).copy(), tl


def kv_cache_append(k_new, v_new, k_cache, v_cache, seq_ids, seq_lens, *, on_full="raise",
                    hw: HardwareSpec | str = "ascend-910b2", heads_per_tile=None, block_dim=None,
                    timing_only=False, _sync=None) -> AppendResult:
    """Append row i of k_new / v_new [rows, kv_heads, head_dim] to sequence ``seq_ids[i]`` of the
    contiguous cache [num_seqs, max_len, kv_heads, head_dim] at position ``seq_lens[seq_ids[i]]``.

    Sequences already at max_len raise :class:`KvCacheFullError` naming them, or with
    ``on_full="report"`` are skipped and returned in ``.full``. Inputs are not modified; the
    result holds new caches and the bumped ``seq_lens`` (the host's job, after the kernel)."""
    ids, lens, full = check_append(k_new, v_new, k_cache, v_cache, seq_ids, seq_lens, on_full=on_full)
    max_len = np.shape(k_cache)[1]
    rows = np.array([i for i, s in enumerate(ids) if lens[s] < max_len], np.int64)
    slots = ids[rows] * max_len + lens[ids[rows]]
    kc, vc, tl = _run(k_new, v_new, k_cache, v_cache, slots, rows, hw, heads_per_tile, block_dim, timing_only,
                      "kv_cache_append", _sync)
    new = lens.copy()
    new[ids[rows]] += 1
    return AppendResult(kc, vc, new, full, tl)


def paged_kv_cache_append(k_new, v_new, k_pages, v_pages, seq_ids, seq_lens, block_table, *,
                          on_full="raise", hw: HardwareSpec | str = "ascend-910b2", heads_per_tile=None,
                          block_dim=None, timing_only=False, _sync=None) -> AppendResult:
    """The paged variant: caches [num_pages, page_size, kv_heads, head_dim], block_table
    [num_seqs, max_pages] (page ids, -1 where none is allocated). Position p of sequence s lives
    in page ``block_table[s, p // page_size]``, row ``p % page_size``. A token that starts a page
    needs that page allocated in the table first (IndexError otherwise, before any write)."""
    ids, lens, table, full = check_paged_append(k_new, v_new, k_pages, v_pages, seq_ids, seq_lens, block_table,
                                                on_full=on_full)
    page_size, max_len = np.shape(k_pages)[1], table.shape[1] * np.shape(k_pages)[1]
    rows = np.array([i for i, s in enumerate(ids) if lens[s] < max_len], np.int64)
    pos = lens[ids[rows]]
    slots = table[ids[rows], pos // page_size] * page_size + pos % page_size
    kc, vc, tl = _run(k_new, v_new, k_pages, v_pages, slots, rows, hw, heads_per_tile, block_dim, timing_only,
                      "paged_kv_cache_append", _sync)
    new = lens.copy()
    new[ids[rows]] += 1
    return AppendResult(kc, vc, new, full, tl)
