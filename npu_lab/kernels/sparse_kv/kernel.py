"""The sparse-KV compression kernel on the vector core: per head, the token top-k (Sort32 + MrgSort,
as the MoE v4 kernel sorts experts) and the gather of the kept K/V rows (one whole-row
``DataCopy`` GM→UB per kept token, one ``DataCopy`` UB→GM per tile of rows). The C++ listing is
``sparse_kv.cpp`` beside this file (same calls, same order).

Inputs (GM): scores [H·S] float32 (the importance of every token, computed on the host by
:func:`~.reference.importance`), k, v [H·S·D] (float16 / float32); outputs: k_out, v_out
[H·n_keep·D], indices [H·n_keep] int32 (kept positions, sinks first, then descending score).
One block per head (blockDim = H; blocks beyond the vector cores queue on them).

Per block (pipes MTE2 → V → S / MTE3, then MTE2 → MTE3):

=================  ============================================================================
CopyIn (MTE2)      ``DataCopyPad`` the head's S scores into a C = ceil32(S) slot (MTE2_V flag)
index (V)          ``CreateVecIndex`` 0..C−1 (Sort32's uint32 indices), issued before the copy lands
pad, sinks (V)     masked ``Duplicate`` of −inf over columns S..C−1 (one 32-column repeat, MoE's
                   pad), count-mode ``Duplicate`` of +inf over the first ``sinks`` scores: the sinks
                   sort first, in position order (ties keep the lower position)
Sort32 (V)         C/32 repeats: every 32 scores → 32 descending (score, index) pairs
merge (V)          rounds of ``MrgSort``: 4 equal lists in one call with repeatTimes = the number of
                   whole groups; the rest (2–4 lists, the last one shorter) in one call; a lone list
                   is moved with ``Copy``; ping-pong between two pair buffers. The whole row is
                   sorted (MoE v4 keeps only 8 pairs per list because K ≤ 8; here n_keep is large)
extract (V)        ``GatherMask`` built-in pattern 2 (the odd 32-bit words: the indices) of the
                   first n_keep pairs → kept [n_keep] int32
V_MTE3, V_S        the indices go out (``DataCopyPad``), the scalar unit may read them
gather             per tile of ``rowsPerTile`` rows, K then V: ``GetValue`` the position, one
(S → MTE2 → MTE3)  ``DataCopy`` GM→UB of its D-element row (whole 32-B blocks); MTE2_MTE3; one
                   ``DataCopy`` UB→GM of the tile (the kept rows are contiguous in the output);
                   MTE3_MTE2 frees the slot (two ping-pong slots, as the KV append kernel)
=================  ============================================================================

Where this differs from the article's kernel: no scalar element-by-element copy (the gather is
whole rows on the MTE pipes), no run-time-sized array (``uint32_t selected_indices[keep_tokens]``
is not C++; here a UB buffer sized by the tiling), no mask written on the device (the host builds a
fresh one from the indices), sinks a parameter (not fixed at two), and the top-k is the vector
unit's sort, not a scalar loop.

Where it differs from CANN's sparse attention (hicann/ops-transformer @ c29bc106):
``attention/nsa_compress`` (NativeSparseAttention's compression, Atlas A2 training) does not drop
tokens: it replaces every window of ``compressBlockSize`` tokens (stride ``compressStride``) by a
learned weighted sum (``weight`` [blockSize, N]), TND layout, D a multiple of 16 up to 256.
``attention/nsa_selected_attention`` gathers whole *blocks* of ``selectedBlockSize`` (≤ 128, a
multiple of 16) tokens by ``topkIndices`` computed elsewhere and fuses the gather with the
attention on the cube. This kernel selects single tokens, computes the top-k itself, and only
compresses (the attention over the kept tokens is the decode kernel's job).

Rules used (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/): 排序组合（ISASI）/Sort32.md,
MrgSort.md; 比较与选择/GatherMask.md; 数据填充/Duplicate.md, CreateVecIndex.md;
数据搬运/Copy.md, DataCopy.md, DataCopyPad（GMToUB非对齐数据搬运）.md;
同步控制/核内同步/SetFlag-WaitFlag(ISASI).md.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (CopyRepeatParams, DataCopyExtParams, DataCopyPadExtParams, GatherMaskParams, GlobalTensor,
                     MrgSort4Info, MrgSortSrcList, TBuf, TPosition, npu_kernel)
from ...lang.tiling_struct import Int32Struct

SORT_UNIT = 32            # Sort32 sorts 32 scores per repeat
MAX_REPEAT = 255
MAX_LIST = 4095           # MrgSort4Info.elementLengths: at most 4095 pairs per list (MrgSort.md)
MAX_TOKENS = 4096         # C/32 <= 128 Sort32 repeats; the last merge's lists stay <= 4095 pairs
BLOCK_BYTES = 32
NEG_INF, POS_INF = float("-inf"), float("inf")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


@dataclass(frozen=True)
class SparseKvTiling(Int32Struct):
    """heads, tokens (S), headDim (D), nKeep, sinks, colAlign (ceil32(S), the Sort32 row),
    keptLen (ceil32(nKeep): GatherMask writes whole 32-index repeats), rowsPerTile (rows of a
    gather tile; two tiles fit the UB beside the sort buffers)."""

    heads: int
    tokens: int
    headDim: int
    nKeep: int
    sinks: int
    colAlign: int
    keptLen: int
    rowsPerTile: int

    def __post_init__(self):
        if not 1 <= self.nKeep <= self.tokens or not 0 <= self.sinks <= self.nKeep:
            raise ValueError(f"SparseKvTiling: need max(sinks, 1) <= nKeep <= tokens; got sinks={self.sinks}, "
                             f"nKeep={self.nKeep}, tokens={self.tokens}")
        if self.colAlign != _round_up(self.tokens, SORT_UNIT) or self.keptLen != _round_up(self.nKeep, SORT_UNIT):
            raise ValueError("SparseKvTiling: colAlign must be ceil32(tokens) and keptLen ceil32(nKeep)")
        if not 1 <= self.rowsPerTile <= self.nKeep:
            raise ValueError(f"SparseKvTiling: rowsPerTile must be in 1..nKeep={self.nKeep}, got {self.rowsPerTile}")


def sparse_kv_ub_layout(tokens: int, n_keep: int, head_dim: int, itemsize: int, rows_per_tile: int):
    """The kernel's UB buffers in allocation order, ``(name, bytes)``: two pair buffers
    (8·C B each; the first starts the UB, so Sort32's dst is 256-B aligned), the scores and the
    index row (4·C B each, 128-B aligned for Sort32), the kept indices (4·ceil32(n_keep) B) and
    two gather slots of ``rows_per_tile`` rows of D elements."""
    C = _round_up(tokens, SORT_UNIT)
    return [("pairs_a", 8 * C), ("pairs_b", 8 * C), ("scores", 4 * C), ("index", 4 * C),
            ("kept", 4 * _round_up(n_keep, SORT_UNIT)), ("rows", 2 * rows_per_tile * head_dim * itemsize)]


def sparse_kv_tiling(heads: int, tokens: int, head_dim: int, n_keep: int, sinks: int, itemsize: int,
                     hw: HardwareSpec, rows_per_tile: int | None = None) -> SparseKvTiling:
    """Host tiling: check the kernel's limits and pick the largest gather tile (≤ n_keep rows)
    whose two slots fit ``hw.ub_usable_bytes`` beside the sort buffers."""
    for name, x, lo in (("heads", heads, 1), ("tokens", tokens, 1), ("head_dim", head_dim, 1),
                        ("n_keep", n_keep, 1), ("sinks", sinks, 0)):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < lo:
            raise ValueError(f"{name} must be a whole number >= {lo}, got {x!r}")
    if tokens > MAX_TOKENS:
        raise ValueError(f"the kernel sorts one head's tokens in the UB: at most {MAX_TOKENS} tokens (Sort32's 255 "
                         f"repeats, MrgSort's 4095-pair lists, the UB); got {tokens}. Split the sequence")
    if head_dim * itemsize % BLOCK_BYTES:
        raise ValueError(f"head_dim={head_dim} x {itemsize} B = {head_dim * itemsize} B: the gather copies whole rows "
                         f"with DataCopy, which moves whole 32-byte blocks; use head_dim a multiple of "
                         f"{BLOCK_BYTES // itemsize}")
    fixed = sum(b for n, b in sparse_kv_ub_layout(tokens, n_keep, head_dim, itemsize, 0) if n != "rows")
    fit = (hw.ub_usable_bytes - fixed) // (2 * head_dim * itemsize)
    if fit < 1:
        raise ValueError(f"{tokens} tokens of sort buffers ({fixed} B) plus two rows of {head_dim * itemsize} B do "
                         f"not fit {hw.name}'s {hw.ub_usable_bytes} B of UB")
    rpt = min(n_keep, fit) if rows_per_tile is None else rows_per_tile
    if isinstance(rpt, bool) or not isinstance(rpt, numbers.Integral) or not 1 <= rpt <= min(n_keep, fit):
        raise ValueError(f"rows_per_tile must be a whole number in 1..{min(n_keep, fit)}, got {rows_per_tile!r}")
    return SparseKvTiling(heads, tokens, head_dim, n_keep, sinks, _round_up(tokens, SORT_UNIT),
                          _round_up(n_keep, SORT_UNIT), int(rpt))


def _block_classes(block_dim, *args, **kwargs):
    """Every head runs the same instruction stream (only the gathered addresses differ)."""
    return np.zeros(block_dim, dtype=np.int64)


def merge_sorted_lists(ctx, src, dst, C: int):
    """Merge the C/32 sorted 32-pair lists of ``src`` into one; returns the buffer holding it."""
    lengths = [SORT_UNIT] * (C // SORT_UNIT)
    while len(lengths) > 1:
        L, full = lengths[0], 0
        while 4 * full + 4 <= len(lengths) and all(x == L for x in lengths[4 * full:4 * full + 4]):
            full += 1
        new = []
        if full:                                   # whole groups: 4 equal lists, one call
            ctx.mrg_sort(dst, MrgSortSrcList(src[0], src[2 * L], src[4 * L], src[6 * L]),
                         MrgSort4Info((L,) * 4, False, 15, full))
            new += [4 * L] * full
        rest, off = lengths[4 * full:], 4 * L * full
        if len(rest) == 1:                         # a lone list: move it (64 floats per repeat)
            ctx.copy(dst[2 * off], src[2 * off], 64, rest[0] // SORT_UNIT, CopyRepeatParams(1, 1, 8, 8))
            new.append(rest[0])
        elif rest:
            starts = [off + sum(rest[:j]) for j in range(len(rest))]
            lists = [src[2 * s] for s in starts] + [None] * (4 - len(rest))
            ctx.mrg_sort(dst[2 * off], MrgSortSrcList(*lists),
                         MrgSort4Info(tuple(rest) + (0,) * (4 - len(rest)), False, {2: 3, 3: 7, 4: 15}[len(rest)], 1))
            new.append(sum(rest))
        ctx.pipe_barrier("PIPE_V")
        src, dst, lengths = dst, src, new
    return src


@npu_kernel(block_classes=_block_classes)
def sparse_kv_kernel(ctx, scores_gm: GlobalTensor, k_gm: GlobalTensor, v_gm: GlobalTensor, k_out: GlobalTensor,
                     v_out: GlobalTensor, idx_out: GlobalTensor, tiling_bytes: bytes):
    """One head per block: top-n_keep tokens (sinks first) by Sort32 + MrgSort, then the kept K and
    V rows gathered with whole-row DataCopy. See the module docstring; listing ``sparse_kv.cpp``."""
    t = SparseKvTiling.unpack(tiling_bytes)                 # GET_TILING_DATA
    if ctx.get_block_num() != t.heads:
        raise ValueError(f"sparse_kv_kernel runs one block per head: blockDim must be heads = {t.heads}, "
                         f"got {ctx.get_block_num()}")
    h = ctx.get_block_idx()
    S, D, n, C = t.tokens, t.headDim, t.nKeep, t.colAlign
    dt = k_gm.dtype
    bufs = {}
    for name, nbytes in sparse_kv_ub_layout(S, n, D, dt.itemsize, t.rowsPerTile):
        bufs[name] = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(bufs[name], nbytes, name=name)
    pairs_a, pairs_b = bufs["pairs_a"].get(np.float32), bufs["pairs_b"].get(np.float32)
    scores, index = bufs["scores"].get(np.float32), bufs["index"].get(np.int32)
    kept = bufs["kept"].get(np.int32)
    slots = [bufs["rows"].get(dt)[i * t.rowsPerTile * D] for i in range(2)]

    # ---- the head's scores in, the index row, pad and sinks ---------------------------------
    ctx.data_copy_pad(scores, scores_gm[h * S], DataCopyExtParams(1, S * 4, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    ctx.create_vec_index(index, 0, C)                      # V: runs while the copy lands
    ev = ctx.pipe.fetch_event_id("MTE2_V")
    ctx.set_flag("MTE2_V", ev)
    ctx.wait_flag("MTE2_V", ev)
    if C != S:                                             # -inf into columns S..C-1 of the last chunk
        pad = C - S
        ctx.duplicate(scores[C - SORT_UNIT], NEG_INF, [((1 << pad) - 1) << (SORT_UNIT - pad), 0], 1, 1, 8)
    if t.sinks:                                            # the sinks sort first
        ctx.duplicate(scores, POS_INF, t.sinks)
    ctx.pipe_barrier("PIPE_V")

    # ---- top-k: Sort32, merge, extract the indices -----------------------------------------
    ctx.sort32(pairs_a, scores, index.reinterpret_cast(np.uint32), C // SORT_UNIT)
    ctx.pipe_barrier("PIPE_V")
    sorted_pairs = merge_sorted_lists(ctx, pairs_a, pairs_b, C)
    ctx.gather_mask(kept, sorted_pairs.reinterpret_cast(np.int32), 2, False, 0,
                    GatherMaskParams(1, t.keptLen // SORT_UNIT, 8, 0))
    ev = ctx.pipe.fetch_event_id("V_MTE3")
    ctx.set_flag("V_MTE3", ev)
    ctx.wait_flag("V_MTE3", ev)
    ctx.data_copy_pad(idx_out[h * n], kept, DataCopyExtParams(1, n * 4, 0, 0, 0))
    ev = ctx.pipe.fetch_event_id("V_S")
    ctx.set_flag("V_S", ev)
    ctx.wait_flag("V_S", ev)

    # ---- gather: one DataCopy per kept row, one per tile out --------------------------------
    ev_loaded = [ctx.pipe.alloc_event_id("MTE2_MTE3") for _ in range(2)]
    ev_stored = [ctx.pipe.alloc_event_id("MTE3_MTE2") for _ in range(2)]
    j = 0
    for src, dst in ((k_gm, k_out), (v_gm, v_out)):
        for r0 in range(0, n, t.rowsPerTile):
            rows = min(t.rowsPerTile, n - r0)
            slot = slots[j % 2]
            if j >= 2:
                ctx.wait_flag("MTE3_MTE2", ev_stored[j % 2])     # tile j-2's store left this slot
            for r in range(rows):
                pos = kept.get_value(r0 + r)                   # GetValue: the scalar unit reads a position
                ctx.data_copy(slot[r * D], src[(h * S + pos) * D], D)
            ctx.set_flag("MTE2_MTE3", ev_loaded[j % 2])
            ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])
            ctx.data_copy(dst[(h * n + r0) * D], slot, rows * D)
            ctx.set_flag("MTE3_MTE2", ev_stored[j % 2])
            j += 1
    for i in range(max(0, j - 2), j):                      # the last two stores, waited once
        ctx.wait_flag("MTE3_MTE2", ev_stored[i % 2])
    for e in ev_loaded:
        ctx.pipe.release_event_id("MTE2_MTE3", e)
    for e in ev_stored:
        ctx.pipe.release_event_id("MTE3_MTE2", e)
