"""The discrete chain: what a framework runs before anyone fuses the operator (v0; notebook 02_discrete_pipeline, docs/cost_model_system.md).

Three separate launches, each a generic kernel with a generic, conservative tiling (at most 8
rows per tile, single-buffered), each paying its own launch overhead, each writing its result to
global memory for the next one to read back (from L2 when it fits there, npu_lab.sim.l2):

1. ``Softmax`` over E:     logits [N, E] → probs [N, E]                       (HBM round trip)
2. ``TopK`` by full sort:  probs [N, E]  → values [N, K], indices [N, K]      (sorts all E)
3. ``Renormalise``:        values [N, K] → weights [N, K]

It computes exp for all E experts (the fused kernel needs only K) and moves N·E·4 bytes twice
more than necessary. A teaching detail: because it ranks *probabilities*, logits that differ but
whose probabilities round to the same float32 (e.g. both underflow to 0) become ties, and the
order can then differ from ranking the logits — the fused kernel does not have this problem.

All three are legal Ascend C (the listing is ``discrete.cpp`` beside this file):

* **Softmax** — a tile of r rows lands at a stride of Es = ceil16(E) elements (one
  DataCopy / DataCopyPad, see :func:`.vectorized.load_rows`); float16 is ``Cast`` to float32.
  Row max: ``WholeReduceMax`` (mask = E lanes, one repeat per row) + ``GatherMask`` pattern 1
  when E ≤ 64, else ``ReduceMax`` per row; ``Brcb`` the maxima; level-0 ``Sub`` in 64-column
  chunks with src1 block stride 0 / repeat stride 1 (the broadcast); ``Exp`` over everything;
  row sums by ``WholeReduceSum`` (mask = E) or ``ReduceSum`` per row; ``Brcb``; ``Div``; one
  store (exactly E per row reach GM).
* **TopK**, 910B: the rows at a stride of Ea = ceil32(E), columns E..Ea−1 = −inf (DataCopyPad's
  right padding plus a one-time ``Duplicate`` of the slot, which the copy's UB gap never
  overwrites); ``Sort32`` of every 32 columns against an expert iota (``CreateVecIndex`` once,
  ``Copy`` to the other rows), then ``MrgSort`` 4 lists at a time until one list of Ea (score,
  index) pairs is left — one instruction for all rows (a repeat per group of 4) when every list
  of the round has one length and a row has 2 or 4k of them, else per row (a leftover single
  list moved with ``Copy``); ``GatherMask`` with a user pattern (the even / odd lanes of the first
  K pairs) gives the compact [r, K] values / indices in one go: normal mode, a repeat per row
  reusing one 64-lane pattern (K ≤ 32, Ea/4 ≤ 255), else counter mode over all rows' patterns.
  **310P** (no Sort32 / MrgSort, Sort32.md / MrgSort.md): K rounds of argmax per row, like a
  generic small-K TopK — ``ReduceMax`` with calIndex, then the scalar unit reads the pair
  (``GetValue``), writes value and index into the outputs and −inf over the winner
  (``SetValue``), with the V_S / S_V / S_MTE3 / MTE3_S / S_MTE2 flags a scalar stage needs.
* **Renormalise** — on a chip with DataCopyPad and K % 8 ≠ 0, the rows one per 32-B block
  (DataCopyPad, blockCount = r): one ``WholeReduceSum`` (mask K, a repeat per row), ``Brcb``, one
  ``Div`` (src1 block stride 0), one DataCopyPad out. Otherwise (K % 8 = 0, or the 310P) the
  compact [r, K] values in one copy; a ``WholeReduceSum`` whose bit mask
  picks a row's K lanes inside the 32-byte-aligned repeat that holds them, one instruction per
  *phase* (rows ≡ ph mod p, p = 8 / gcd(K, 8), start on the same lane of their block and lie
  p·K/8 blocks apart: a repeat per row); ``Brcb`` the sums; per phase a bit-masked ``Div`` with
  src1 block stride 0, repeat stride p (no padded layout, so no
  DataCopyPad when r·K·4 is whole blocks — it runs on the 310P too).

Stores use DataCopy when the bytes are whole 32-byte blocks, else DataCopyPad (which the 310P
lacks: a CapabilityError there for such shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...capabilities import check_supported
from ...lang import (BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams, GatherMaskParams, GlobalTensor,
                     MrgSort4Info, MrgSortSrcList, RoundMode, TBuf, TPosition, TQue, launch, npu_kernel)
from ...lang.reduce import reduce_max_tmp_elements
from ...lang.tiling_struct import Int32Struct
from ...sim.l2 import L2Cache
from ...sim.timeline import Timeline
from .k_limits import larger_k_advice
from .tiling import UbBudgetError
from .vectorized import ceil_div, load_rows, row_pairs_max, store_rows

NEG_INF = float("-inf")
MAX_REPEAT = 255          # repeatTimes is a uint8


@dataclass(frozen=True)
class RowTiling(Int32Struct):
    """Generic row tiling of a [N, width] operator: ``rows`` rows per tile."""

    N: int
    E: int
    K: int
    rows: int

    @property
    def tiles(self) -> int:
        return -(-self.N // self.rows)

    def tile(self, i: int) -> tuple[int, int]:
        first = i * self.rows
        return first, min(self.rows, self.N - first)


GENERIC_ROWS_PER_TILE = 8   # what a shape-agnostic library kernel picks: small and safe
#: a row of K weights must sit inside one 256-byte repeat from its 32-byte-aligned start:
#: 64 floats minus up to 7 of misalignment, rounded down to whole blocks
RENORM_MAX_K = 56


def align_up(n: int, m: int) -> int:
    """``n`` rounded up to a multiple of ``m`` (AlignUp in Ascend C's host code)."""
    return ceil_div(n, m) * m


def aligned_bytes(n_elements: int, itemsize: int = 4) -> int:
    """Bytes of ``n_elements`` of ``itemsize`` bytes, rounded up to whole 32-byte UB blocks."""
    return align_up(n_elements * itemsize, 32)


def reduce_tmp_elements(E: int) -> int:
    """sharedTmpBuffer for ReduceMax(calIndex) and ReduceSum over E float32 (the larger)."""
    return align_up(max(reduce_max_tmp_elements(E, 4, True), ceil_div(max(1, ceil_div(E * 4, 256)), 8) * 8), 8)


def topk_ub_buffers(rows: int, E: int, K: int) -> dict:
    """UB bytes of every buffer the TopK kernel's sort path (the 910B's) allocates for ``rows``
    rows: the largest of the three kernels' budgets (the 310P's argmax path needs less)."""
    Ea = align_up(E, 32)
    return {"sorted_a": aligned_bytes(2 * rows * Ea), "sorted_b": aligned_bytes(2 * rows * Ea),
            "probs": aligned_bytes(rows * Ea), "expert_iota": aligned_bytes(rows * Ea),
            "value_pattern": aligned_bytes(ceil_div(2 * rows * Ea, 32)), "index_pattern": aligned_bytes(ceil_div(2 * rows * Ea, 32)),
            "values": aligned_bytes(rows * K), "indices": aligned_bytes(rows * K)}


def generic_row_tiling(N: int, E: int, K: int, ub_bytes: int) -> RowTiling:
    """Conservative: at most 8 rows a tile, fewer when the TopK kernel's buffers
    (:func:`topk_ub_buffers`) would not fit ``ub_bytes``; UbBudgetError when not even one row does."""
    for name, value in (("N", N), ("E", E), ("K", K), ("ub_bytes", ub_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if K > E:
        raise ValueError(f"K must be <= E; got K={K}, E={E}")
    rows = min(GENERIC_ROWS_PER_TILE, N)
    while rows >= 1 and sum(topk_ub_buffers(rows, E, K).values()) > ub_bytes:
        rows -= 1
    if rows == 0:
        need = sum(topk_ub_buffers(1, E, K).values())
        raise UbBudgetError(f"E={E} is too wide for the generic discrete kernels: one row of the TopK "
                            f"kernel (E={E}, K={K}) needs {need} bytes of UB, but the UB has {ub_bytes} bytes")
    if K > RENORM_MAX_K:
        raise ValueError(f"the generic Renormalise kernel keeps a row inside one 256-byte repeat: "
                         f"K <= {RENORM_MAX_K}, got K={K}; {larger_k_advice(K)}")
    return RowTiling(N, E, K, rows)


def row_block_classes(block_dim, *args):
    """Which blocks run the same instruction stream (the simulator times one block per class):
    blocks whose sequences of row-tile sizes are equal."""
    t = RowTiling.unpack(args[-1])
    sizes = np.minimum(t.rows, t.N - np.arange(t.tiles) * t.rows)
    seqs = [sizes[b::block_dim].tobytes() for b in range(block_dim)]
    return np.unique(np.array(seqs, dtype=object), return_inverse=True)[1]


def row_tiles(ctx, t: RowTiling):
    """(j, tile) of this block's row tiles, through ctx.tile_loop (fast-forwarded when timing-only);
    an iteration's work depends on its tile's rows and on whether it is the block's first."""
    mine = list(range(ctx.get_block_idx(), t.tiles, ctx.get_block_num()))
    sizes = [t.tile(i)[1] for i in mine]
    return ((j, mine[j]) for j in ctx.tile_loop(len(mine), key=lambda j: (sizes[j], j == 0)))


def calc_buffer(ctx, nbytes: int, name: str, dtype=np.float32):
    """Scratch UB: ``TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, nbytes); b.Get<dtype>()``."""
    buf = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(buf, nbytes, name=name)
    return buf.get(dtype)


# ---- 1. Softmax ---------------------------------------------------------------------------------
def row_bcast_op(ctx, op, dst, src0, bcast, rows: int, Es: int, chunks) -> None:
    """dst = src0 <op> row value, the row's value (Brcb: one 32-B block per row) broadcast by
    src1 block stride 0. Rows of up to 255 blocks: a repeat per row, one instruction per 64-wide
    column chunk. Wider rows do not fit the uint8 repeat stride (BinaryRepeatParams.md): one
    instruction per row instead, its repeats walking the row's chunks (src1 repeat stride 0)."""
    if Es // 8 <= 255:
        for c, lanes in chunks:
            op(dst[c], src0[c], bcast, lanes, rows, BinaryRepeatParams(1, 1, 0, Es // 8, Es // 8, 1))
        return
    full, tail = divmod(Es, 64)
    for i in range(rows):
        row = i * Es
        for c0 in range(0, full, 255):          # ≤ 255 repeats an instruction
            n = min(255, full - c0)
            op(dst[row + 64 * c0], src0[row + 64 * c0], bcast[8 * i], 64, n, BinaryRepeatParams(1, 1, 0, 8, 8, 0))
        if tail:
            op(dst[row + 64 * full], src0[row + 64 * full], bcast[8 * i], tail, 1,
               BinaryRepeatParams(1, 1, 0, 8, 8, 0))
@npu_kernel(block_classes=row_block_classes)
def softmax_kernel(ctx, logits_gm, probs_gm, tiling_bytes):
    """Softmax over each row of [N, E]. Pipes: MTE2 → V (max, sub, exp, sum, div) → MTE3."""
    t = RowTiling.unpack(tiling_bytes)
    E, R = t.E, t.rows
    Es = align_up(E, 16)                          # whole 32-B blocks for float32 and float16 rows
    R32 = align_up(R, 32)
    x_q, y_q = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_q, 1, aligned_bytes(R * Es), name="x")
    ctx.pipe.init_buffer(y_q, 1, aligned_bytes(R * Es), name="y")
    scratch = calc_buffer(ctx, aligned_bytes(3 * R32 + reduce_tmp_elements(E)), "row_scratch")
    pairs, row_values, tmp = scratch, scratch[2 * R32], scratch[3 * R32]
    bcast = calc_buffer(ctx, aligned_bytes(align_up(R, 8) * 8), "row_bcast")
    chunks = [(c, min(64, Es - c)) for c in range(0, Es, 64)]
    for _j, tile in row_tiles(ctx, t):
        first, r = t.tile(tile)
        x = x_q.alloc_tensor(np.float32)
        load_rows(ctx, x.reinterpret_cast(logits_gm.dtype), logits_gm[first * E], r, E, Es)
        x_q.enque(x)
        x = x_q.deque(np.float32)
        y = y_q.alloc_tensor(np.float32)
        src = x
        if logits_gm.dtype == np.float16:       # widen first: all compute is float32
            ctx.cast(y, x.reinterpret_cast(np.float16), RoundMode.CAST_NONE, r * Es)
            src = y
        if E <= 64:                             # row max
            row_pairs_max(ctx, pairs, src, r, E, Es, tmp)
            ctx.gather_mask(row_values, pairs, 1, False, 0, GatherMaskParams(1, ceil_div(2 * r, 64), 8, 0))
        else:
            for i in range(r):
                ctx.reduce_max(row_values[i], src[i * Es], tmp, E)
        ctx.brcb(bcast, row_values, ceil_div(r, 8), BrcbRepeatParams(1, 8))
        row_bcast_op(ctx, ctx.sub, y, src, bcast, r, Es, chunks)   # x - max
        ctx.exp(y, y, r * Es)                   # all E exponentials
        if E <= 64:                             # row sums
            ctx.whole_reduce_sum(row_values, y, E, r, 1, 1, Es // 8)
        else:
            for i in range(r):
                ctx.reduce_sum(row_values[i], y[i * Es], tmp, E)
        ctx.brcb(bcast, row_values, ceil_div(r, 8), BrcbRepeatParams(1, 8))
        row_bcast_op(ctx, ctx.div, y, y, bcast, r, Es, chunks)     # / sum
        x_q.free_tensor(x)
        y_q.enque(y)
        y = y_q.deque(np.float32)
        store_rows(ctx, probs_gm[first * E], y, r, E, Es)
        y_q.free_tensor(y)


# ---- 2. TopK ------------------------------------------------------------------------------------
def merge_rows(ctx, a, b, r: int, Ea: int):
    """MrgSort each row's Ea/32 sorted lists of 32 pairs into one, 4 lists at a time, ping-pong
    between ``a`` and ``b``; returns the buffer holding the sorted rows.

    A round whose lists all have one length L, n of them per row with 4 | n or n = 2, is one
    MrgSort with a repeat per group of 4 (MrgSort.md: repeatTimes > 1 takes 4 equal lists stored
    one after another, all rows' groups being consecutive): 4 | n merges 4 lists of L; n = 2
    merges each row's two lists as 4 of L/2 (the halves of a sorted list are sorted lists, and
    earlier lists still win ties, so the result is the same). Other rounds go row by row."""
    lengths = [32] * (Ea // 32)
    src, dst = a, b
    while len(lengths) > 1:
        n = len(lengths)
        groups = [lengths[g:g + 4] for g in range(0, n, 4)]
        if len(set(lengths)) == 1 and (n % 4 == 0 or n == 2):
            each = lengths[0] if n % 4 == 0 else lengths[0] // 2       # pairs per merged list
            repeats = r * n * lengths[0] // (4 * each)
            for rep0 in range(0, repeats, MAX_REPEAT):
                count = min(MAX_REPEAT, repeats - rep0)
                at = 8 * each * rep0                                   # floats: 4 lists of `each` pairs
                ctx.mrg_sort(dst[at], MrgSortSrcList(src[at], src[at + 2 * each], src[at + 4 * each],
                                                     src[at + 6 * each]),
                             MrgSort4Info((each,) * 4, False, 15, count))
        else:
            for i in range(r):
                at = 2 * i * Ea                       # floats: row i's pairs
                for group in groups:
                    if len(group) == 1:               # nothing to merge with: move it along
                        ctx.copy(dst[at], src[at], 64, 2 * group[0] // 64, CopyRepeatParams(1, 1, 8, 8))
                    else:
                        lists = [src[at + 2 * sum(group[:k])] for k in range(len(group))]
                        lists += [None] * (4 - len(lists))
                        ctx.mrg_sort(dst[at], MrgSortSrcList(*lists),
                                     MrgSort4Info(tuple(group) + (0,) * (4 - len(group)), False,
                                                  {2: 3, 3: 7, 4: 15}[len(group)], 1))
                    at += 2 * sum(group)
        lengths = [sum(g) for g in groups]
        src, dst = dst, src
    return src


def per_row_gather(E: int, K: int) -> bool:
    """Can the TopK extract with normal-mode GatherMask, one 256-B repeat per row reusing one
    2-word pattern (src1RepeatStride 0)? Needs a row's first K pairs inside its first 64 floats
    (K <= 32) and the row stride 2·Ea floats = Ea/4 blocks within the uint8 src0RepeatStride."""
    return 2 * K <= 64 and align_up(E, 32) // 4 <= 255


def topk_by_sort(ctx, t, probs_gm, values_gm, indices_gm):
    """910B: full sort of every row (Sort32 + MrgSort), then the first K pairs by GatherMask."""
    E, K, R = t.E, t.K, t.rows
    Ea = align_up(E, 32)
    sizes = topk_ub_buffers(R, E, K)
    sorted_a = calc_buffer(ctx, sizes["sorted_a"], "sorted_a")   # first: Sort32's dst is 256-B aligned
    sorted_b = calc_buffer(ctx, sizes["sorted_b"], "sorted_b")
    x_q = TQue(TPosition.VECIN, 1)
    v_q, i_q = TQue(TPosition.VECOUT, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_q, 1, sizes["probs"], name="probs")
    iota = calc_buffer(ctx, sizes["expert_iota"], "expert_iota", np.int32)
    value_pattern = calc_buffer(ctx, sizes["value_pattern"], "value_pattern", np.uint32)
    index_pattern = calc_buffer(ctx, sizes["index_pattern"], "index_pattern", np.uint32)
    ctx.pipe.init_buffer(v_q, 1, sizes["values"], name="values")
    ctx.pipe.init_buffer(i_q, 1, sizes["indices"], name="indices")

    # once: columns E..Ea-1 of the input slot = -inf (the copy's UB gap never overwrites them)
    x = x_q.alloc_tensor(np.float32)
    ctx.duplicate(x, NEG_INF, R * Ea)
    x_q.free_tensor(x)
    # the expert index of every column: row 0 by CreateVecIndex, the other rows copies of it
    # (a repeat per row, dst repeat stride Ea/8 blocks, src repeat stride 0)
    ctx.create_vec_index(iota, 0, Ea)
    if R > 1 and Ea // 8 <= 255:
        for off in range(0, Ea, 64):
            ctx.copy(iota[Ea + off], iota[off], min(64, Ea - off), R - 1, CopyRepeatParams(1, 1, Ea // 8, 0))
    else:                                                       # rows too far apart for a uint8 stride
        for i in range(1, R):
            ctx.create_vec_index(iota[i * Ea], 0, Ea)
    if per_row_gather(E, K):
        # one 64-lane pattern per kind, reused by every row: even / odd lanes of the first 2K
        even = sum(1 << lane for lane in range(0, 2 * K, 2))
        for w in range(2):
            value_pattern.set_value(w, (even >> (32 * w)) & 0xFFFFFFFF)
            index_pattern.set_value(w, ((even << 1) >> (32 * w)) & 0xFFFFFFFF)
    else:
        # counter mode over r rows of 2·Ea floats: even / odd lanes of the first 2K of every row
        words = ceil_div(2 * R * Ea, 32)
        ctx.duplicate(value_pattern, 0, words)
        ctx.duplicate(index_pattern, 0, words)
        ev_v_s = ctx.pipe.fetch_event_id("V_S")                 # waited at once: a fetched id
        ctx.set_flag("V_S", ev_v_s)
        ctx.wait_flag("V_S", ev_v_s)
        for i in range(R):
            for w in range(ceil_div(2 * K, 32)):
                lanes = range(32 * w, min(32 * w + 32, 2 * K))
                value_pattern.set_value(i * Ea // 16 + w, sum(1 << (l - 32 * w) for l in lanes if l % 2 == 0))
                index_pattern.set_value(i * Ea // 16 + w, sum(1 << (l - 32 * w) for l in lanes if l % 2 == 1))
    ev_s_v = ctx.pipe.fetch_event_id("S_V")
    ctx.set_flag("S_V", ev_s_v)
    ctx.wait_flag("S_V", ev_s_v)

    for _j, tile in row_tiles(ctx, t):
        first, r = t.tile(tile)
        x = x_q.alloc_tensor(np.float32)
        load_rows(ctx, x, probs_gm[first * E], r, E, Ea, pad=NEG_INF)
        x_q.enque(x)
        x = x_q.deque(np.float32)
        ctx.sort32(sorted_a, x, iota.reinterpret_cast(np.uint32), r * Ea // 32)
        x_q.free_tensor(x)
        result = merge_rows(ctx, sorted_a, sorted_b, r, Ea)
        v = v_q.alloc_tensor(np.float32)
        i = i_q.alloc_tensor(np.int32)
        if per_row_gather(E, K):                 # normal mode: a repeat per row, one pattern
            params, mode, mask = GatherMaskParams(1, r, 2 * Ea // 8, 0), False, 0
        else:                                    # counter mode: the rows' patterns back to back
            params, mode, mask = GatherMaskParams(1, 1, 8, 8), True, 2 * r * Ea
        ctx.gather_mask(v, result, value_pattern, mode, mask, params)
        ctx.gather_mask(i.reinterpret_cast(np.uint32), result.reinterpret_cast(np.uint32), index_pattern, mode,
                        mask, params)
        v_q.enque(v)
        i_q.enque(i)
        v, i = v_q.deque(np.float32), i_q.deque(np.int32)
        store_rows(ctx, values_gm[first * K], v, r, K, K)
        store_rows(ctx, indices_gm[first * K], i, r, K, K)
        v_q.free_tensor(v)
        i_q.free_tensor(i)


def topk_by_argmax(ctx, t, probs_gm, values_gm, indices_gm):
    """310P: K rounds of ReduceMax(calIndex) per row; the scalar unit records the winner and
    knocks it out with -inf."""
    E, K, R = t.E, t.K, t.rows
    Ea = align_up(E, 32)
    sizes = topk_ub_buffers(R, E, K)
    x_q = TQue(TPosition.VECIN, 1)
    v_q, i_q = TQue(TPosition.VECOUT, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_q, 1, sizes["probs"], name="probs")
    ctx.pipe.init_buffer(v_q, 1, sizes["values"], name="values")
    ctx.pipe.init_buffer(i_q, 1, sizes["indices"], name="indices")
    scratch = calc_buffer(ctx, aligned_bytes(8 + reduce_tmp_elements(E)), "row_scratch")
    pair, tmp = scratch, scratch[8]
    pair_bits = pair.reinterpret_cast(np.uint32)
    # S_MTE2 and MTE3_S stay set from one tile to the next: ids held (AllocEventID); the others
    # are waited right after they are set: fetched ids
    ev_s_mte2, ev_mte3_s = ctx.pipe.alloc_event_id("S_MTE2"), ctx.pipe.alloc_event_id("MTE3_S")
    for j, tile in row_tiles(ctx, t):
        first, r = t.tile(tile)
        x = x_q.alloc_tensor(np.float32)
        if j > 0:
            ctx.wait_flag("S_MTE2", ev_s_mte2)                  # S's -inf writes are done
        load_rows(ctx, x, probs_gm[first * E], r, E, Ea)
        x_q.enque(x)
        x = x_q.deque(np.float32)
        v = v_q.alloc_tensor(np.float32)
        i = i_q.alloc_tensor(np.int32)
        if j > 0:
            ctx.wait_flag("MTE3_S", ev_mte3_s)                  # the last tile's outputs are out
        ev_v_s, ev_s_v = ctx.pipe.fetch_event_id("V_S"), ctx.pipe.fetch_event_id("S_V")
        for row in range(r):
            for k in range(K):
                ctx.reduce_max(pair, x[row * Ea], tmp, E, True)
                ctx.set_flag("V_S", ev_v_s)
                ctx.wait_flag("V_S", ev_v_s)
                best, at = pair.get_value(0), pair_bits.get_value(1)
                v.set_value(row * K + k, best)
                i.set_value(row * K + k, at)
                x.set_value(row * Ea + at, NEG_INF)             # knock the winner out
                ctx.set_flag("S_V", ev_s_v)
                ctx.wait_flag("S_V", ev_s_v)
        ctx.set_flag("S_MTE2", ev_s_mte2)
        x_q.free_tensor(x)
        ev_s_mte3 = ctx.pipe.fetch_event_id("S_MTE3")
        ctx.set_flag("S_MTE3", ev_s_mte3)                       # results written by S
        ctx.wait_flag("S_MTE3", ev_s_mte3)
        v_q.enque(v)
        i_q.enque(i)
        v, i = v_q.deque(np.float32), i_q.deque(np.int32)
        store_rows(ctx, values_gm[first * K], v, r, K, K)
        store_rows(ctx, indices_gm[first * K], i, r, K, K)
        v_q.free_tensor(v)
        i_q.free_tensor(i)
        ctx.set_flag("MTE3_S", ev_mte3_s)
    ctx.wait_flag("S_MTE2", ev_s_mte2)                          # pair the last set_flags
    ctx.wait_flag("MTE3_S", ev_mte3_s)
    ctx.pipe.release_event_id("S_MTE2", ev_s_mte2)
    ctx.pipe.release_event_id("MTE3_S", ev_mte3_s)


@npu_kernel(block_classes=row_block_classes)
def topk_sort_kernel(ctx, probs_gm, values_gm, indices_gm, tiling_bytes):
    """Generic TopK of every row of [N, E] probabilities: a full sort (Sort32 + MrgSort) on the
    910B, K rounds of ReduceMax on the 310P (which has no Sort32 / MrgSort)."""
    t = RowTiling.unpack(tiling_bytes)
    if check_supported(ctx.hw.isa, "Sort32") is None and check_supported(ctx.hw.isa, "MrgSort") is None:
        topk_by_sort(ctx, t, probs_gm, values_gm, indices_gm)
    else:
        topk_by_argmax(ctx, t, probs_gm, values_gm, indices_gm)


# ---- 3. Renormalise -----------------------------------------------------------------------------
@npu_kernel(block_classes=row_block_classes)
def renormalise_kernel(ctx, values_gm, weights_gm, tiling_bytes):
    """weights = values / sum(values) per row of [N, K]. With DataCopyPad (910B) and K % 8 != 0
    the rows land one per 32-B block (ceil8(K) apart): one WholeReduceSum and one Div with a
    repeat per row. Otherwise the compact rows: a bit-masked WholeReduceSum and a bit-masked Div
    inside the 32-byte-aligned repeat holding each row, one instruction per phase of rows (at
    most 8 / gcd(K, 8), one repeat per row of the phase; K % 8 == 0 is one phase)."""
    t = RowTiling.unpack(tiling_bytes)
    K, R = t.K, t.rows
    if K > RENORM_MAX_K:
        raise ValueError(f"the generic Renormalise kernel keeps a row inside one 256-byte repeat: "
                         f"K <= {RENORM_MAX_K}, got K={K}")
    Kp = align_up(K, 8)
    padded = K % 8 != 0 and check_supported(ctx.hw.isa, "DataCopyPad") is None
    x_q, y_q = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    slot_bytes = aligned_bytes(max(align_up(R * K, 64), R * Kp))
    ctx.pipe.init_buffer(x_q, 1, slot_bytes, name="values")
    ctx.pipe.init_buffer(y_q, 1, slot_bytes, name="weights")
    row_sum = calc_buffer(ctx, aligned_bytes(align_up(R, 8)), "row_sum")
    bcast = calc_buffer(ctx, aligned_bytes(align_up(R, 8) * 8), "row_bcast")
    p = 8 // math.gcd(K, 8)
    for _j, tile in row_tiles(ctx, t):
        first, r = t.tile(tile)
        x = x_q.alloc_tensor(np.float32)
        if padded:                               # one row per block: DataCopyPad, blockCount = r
            load_rows(ctx, x, values_gm[first * K], r, K, Kp)
        else:
            load_rows(ctx, x, values_gm[first * K], 1, r * K, r * K)
        x_q.enque(x)
        x = x_q.deque(np.float32)
        y = y_q.alloc_tensor(np.float32)
        if padded:
            ctx.whole_reduce_sum(row_sum, x, K, r, 1, 1, Kp // 8)
            ctx.brcb(bcast, row_sum, ceil_div(r, 8), BrcbRepeatParams(1, 8))
            ctx.div(y, x, bcast, K, r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
        else:
            # rows start at lane (row·K) % 8 of their block: the rows of one phase (row ≡ ph mod p,
            # p = 8 / gcd(K, 8)) share a bit mask, and p rows apart are p·K/8 whole blocks, so one
            # instruction per phase covers them (a repeat per row)
            for ph in range(min(p, r)):
                base, lane = divmod(ph * K, 8)
                ctx.whole_reduce_sum(row_sum[ph], x[8 * base], [((1 << K) - 1) << lane, 0], ceil_div(r - ph, p),
                                     p, 1, p * K // 8)
            ctx.brcb(bcast, row_sum, ceil_div(r, 8), BrcbRepeatParams(1, 8))
            for ph in range(min(p, r)):
                base, lane = divmod(ph * K, 8)
                ctx.div(y[8 * base], x[8 * base], bcast[8 * ph], [((1 << K) - 1) << lane, 0], ceil_div(r - ph, p),
                        BinaryRepeatParams(1, 1, 0, p * K // 8, p * K // 8, p))
        x_q.free_tensor(x)
        y_q.enque(y)
        y = y_q.deque(np.float32)
        if padded:
            store_rows(ctx, weights_gm[first * K], y, r, K, Kp)
        else:
            store_rows(ctx, weights_gm[first * K], y, 1, r * K, r * K)
        y_q.free_tensor(y)


def run_discrete_chain(logits_gm: GlobalTensor, indices_gm: GlobalTensor, weights_gm: GlobalTensor,
                       N: int, E: int, K: int, hw, timing_only: bool, l2: L2Cache | None = None) -> Timeline:
    """Launch Softmax → TopK → Renormalise back to back. The intermediates (probs [N, E], the top-K
    values [N, K]) are written to global memory; one L2Cache carried through the three launches
    serves the next launch's reads of them from L2 when they fit (npu_lab.sim.l2), from HBM
    otherwise. ``l2``: the chip's L2 as earlier launches left it (None: cold)."""
    t = generic_row_tiling(N, E, K, hw.ub_usable_bytes)
    block_dim = min(hw.vector_cores, t.tiles)
    probs = GlobalTensor.empty(N * E, np.float32, "probs", timing_only)
    values = GlobalTensor.empty(N * K, np.float32, "topk_values", timing_only)
    packed = t.pack()
    l2 = L2Cache(hw) if l2 is None else l2
    timelines = [
        launch(softmax_kernel, block_dim, logits_gm, probs, packed, hw=hw, timing_only=timing_only,
               name="Softmax", l2=l2),
        launch(topk_sort_kernel, block_dim, probs, values, indices_gm, packed, hw=hw,
               timing_only=timing_only, name="TopK (full sort)", l2=l2),
        launch(renormalise_kernel, block_dim, values, weights_gm, packed, hw=hw,
               timing_only=timing_only, name="Renormalise", l2=l2),
    ]
    return Timeline.concat(timelines)
