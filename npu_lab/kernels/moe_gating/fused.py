"""Fused MoeGatingTopK, scalar versions, in teaching order (README.md's notebook table: 04, 05, 06):

* **v1** — the article's kernel: one block per tile of tileS points. Copy every point's E scores
  into UB (one DataCopy per point, as the article writes it), wait, then per point a min-heap
  top-K and a softmax over the K winners on the scalar unit, then copy the K indices and weights
  of every point out. Pipes: MTE2 → S → MTE3, strictly one after the other.
* **v2** — double-buffered: block_dim ≤ cores, each block loops over its tiles. The next tile's
  copy-in is issued *before* this tile's compute (a 2-slot input queue), and outputs go through a
  2-slot output queue, so MTE2, S and MTE3 overlap.
* **v2_bad_sync** — the article's pitfall: double buffers, but the next copy-in waits for this
  tile's copy-out (a barrier in the wrong place). The buffers are there; the overlap is not.
* **v2c** — v2 with coalesced DMA: one copy for the whole tile in, one out, instead of one per
  point; the scalar heap is kept. Set against v3 it separates what coalescing gains from what
  vectorizing gains.

Inputs: gate logits [B·S·E] flat in global memory (float32 or float16). Outputs: indices int32
[B·S·K] and weights float32 [B·S·K]. The tiling struct arrives as packed bytes.

Legal Ascend C (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/): every UB row
starts on a 32-byte block, because DMA moves whole blocks. A row of E scores is loaded with
``DataCopy`` when E·sizeof(T) is a multiple of 32 bytes, else with ``DataCopyPad`` (which pads
the row in UB); a point's K results (8 bytes at K = 2) can only be stored with ``DataCopyPad`` —
``DataCopy`` would round 8 bytes down to nothing. The 310P's AI core has no DataCopyPad, so v1
and v2 do not run there (v2c does whenever its tile's outputs are whole blocks).

Sync: a ``TQue`` synchronises MTE2 with V (VECIN) and V with MTE3 (VECOUT). Here the consumer and
producer is the *scalar* unit, so the kernels add the flags a scalar kernel needs by hand:
MTE2_S (scores loaded → S may read), S_MTE3 (results written → MTE3 may store), and for the
double-buffered versions S_MTE2 and MTE3_S (a slot may be refilled only after S, resp. MTE3, is
done with it). Without any of them the simulator raises a RaceError, as the hardware would
compute with stale bytes.
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np

from ...lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue, npu_kernel
from .tiling import MoeGatingTiling

BLOCK_BYTES = 32


def row_stride(n: int, itemsize: int) -> int:
    """Elements from one UB row to the next: ``n`` elements rounded up to whole 32-byte blocks."""
    per_block = BLOCK_BYTES // itemsize
    return -(-n // per_block) * per_block


# ---- the scalar routine both versions run per point -------------------------------------------
def heap_topk(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of one row with a size-k min-heap, as the scalar unit runs it.

    The heap orders by (value, -index): its root is the current worst winner, and an equal value
    seen later (higher index) never displaces it — so ties go to the lower expert index.
    Returns values (descending) and indices."""
    heap = [(float(row[e]), -e) for e in range(k)]
    heapq.heapify(heap)
    for e in range(k, len(row)):
        candidate = (float(row[e]), -e)
        if candidate > heap[0]:
            heapq.heapreplace(heap, candidate)
    winners = sorted(heap, reverse=True)
    return (np.array([v for v, _ in winners], np.float32),
            np.array([-i for _, i in winners], np.int32))


def heap_topk_cost(E: int, K: int) -> dict:
    """Scalar work of :func:`heap_topk` + softmax over K for one point, charged branchless
    (every candidate is charged a full sift-down, whatever the data):

    * build: K UB reads, K·⌈log2 K⌉ sift steps;
    * scan: E−K candidates × (1 UB read + 1 compare + 2 replace + ⌈log2 K⌉ sift steps of 6 ops);
    * sort the K winners: K·⌈log2 K⌉·3 ops;
    * softmax over K: K−1 compares (max), K subtracts, K exps, K adds, K divides (4 ops each),
      2K UB writes (values and indices)."""
    depth = max(1, math.ceil(math.log2(K))) if K > 1 else 0
    scan = E - K
    ops = (K * depth * 6 + scan * (1 + 2 + depth * 6) + K * depth * 3
           + (K - 1) + K + K + 4 * K)
    return {"ops": ops, "ub_reads": E, "ub_writes": 2 * K, "exps": K}


def scalar_topk_softmax(ctx, scores, values, indices, E: int, K: int) -> None:
    """Per point on the scalar unit: heap top-K of ``scores[0:E]``, then softmax over the K
    winners (max first), written to ``values[0:K]`` / ``indices[0:K]``. In C++ this is plain
    code with GetValue / SetValue; here its scalar work is charged as one block."""
    cost = heap_topk_cost(E, K)

    def compute():
        v, i = heap_topk(scores.data[:E].astype(np.float32), K)
        e = np.exp(v.astype(np.float64) - float(v[0]))   # float64: no overflow at ±3e38
        values.data[:K] = (e / e.sum()).astype(np.float32)
        indices.data[:K] = i

    span = lambda t, n: (t, t.byte_offset, t.byte_offset + n * t.dtype.itemsize)
    ctx.scalar("heap top-k + softmax", **cost, reads=(span(scores, E),),
               writes=(span(values, K), span(indices, K)), compute=compute)


# ---- which blocks do identical work ----------------------------------------------------------
@functools.lru_cache(maxsize=64)
def tile_points(t: MoeGatingTiling) -> np.ndarray:
    """Points in each tile, by tile index (tileB = 1: the last tile of each batch may be short).
    Cached per tiling (every block of a launch asks); the array is read-only."""
    points = np.full(t.totalTiles, t.tileS * t.tileB, dtype=np.int64)
    tail = t.S - (t.tilesPerBatch - 1) * t.tileS     # the last tile of each batch
    points[t.tilesPerBatch - 1::t.tilesPerBatch] = tail * t.tileB
    points.flags.writeable = False
    return points


def one_tile_per_block_classes(block_dim, gate_gm, indices_gm, weights_gm, tiling_bytes, *args, **kw):
    return tile_points(MoeGatingTiling.unpack(tiling_bytes))[:block_dim]


@functools.lru_cache(maxsize=64)
def tile_order(t: MoeGatingTiling) -> np.ndarray:
    """The order in which looping blocks deal out tiles: full tiles first, short tail tiles last.
    Dealt round-robin, the short tiles then land on the blocks that got fewer full tiles, so a
    static assignment packs as well as the hardware's dynamic block scheduler does."""
    full = tile_points(t) == t.tileBS
    order = np.concatenate([np.flatnonzero(full), np.flatnonzero(~full)])
    order.flags.writeable = False
    return order


def block_tiles(t: MoeGatingTiling, block_idx: int, block_dim: int) -> list[int]:
    """Tile indices block ``block_idx`` of ``block_dim`` processes, in order."""
    return tile_order(t)[block_idx::block_dim].tolist()


def looping_block_classes(block_dim, gate_gm, indices_gm, weights_gm, tiling_bytes, *args, **kw):
    """A looping block's work is the sequence of its tiles' sizes."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    points = tile_points(t)[tile_order(t)]
    seqs = [points[b::block_dim].tobytes() for b in range(block_dim)]
    _, labels = np.unique(np.array(seqs, dtype=object), return_inverse=True)
    return labels


def iteration_key(t: MoeGatingTiling, my_tiles: list[int]):
    """What makes one loop iteration's work differ: this tile's points and the next one's (the
    prefetch), or no next tile at all; whether a slot is reused (flags waited, j ≥ 2) and will
    be reused (flags set, j + 2 < n)."""
    mine = tile_points(t)[my_tiles].tolist() + [0]
    n = len(my_tiles)
    return lambda j: (mine[j], mine[j + 1], j >= 2, j + 2 < n)



# ---- v1 ---------------------------------------------------------------------------------------
def _tile_rows(t: MoeGatingTiling, tile: int) -> tuple[int, int]:
    """(first flat row, points) of a tile (tileB = 1)."""
    b0, _b1, s0, s1 = t.tile_range(tile)
    return b0 * t.S + s0, s1 - s0


@npu_kernel(block_classes=one_tile_per_block_classes)
def moe_gating_v1_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v1, the article's kernel: one block per tile. MTE2 (a copy per point) → S (heap top-K and
    softmax per point) → MTE3 (a DataCopyPad per point and output), strictly in turn. The
    Ascend C listing is ``fused_v1.cpp``."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    first_row, points = _tile_rows(t, ctx.get_block_idx())
    E, K = t.E, t.K
    size = gate_gm.dtype.itemsize
    Es, Ks = row_stride(E, size), row_stride(K, 4)        # UB row strides (whole 32-B blocks)
    # UB as the host budgeted it (moe_ub_budget "v1"), sized for a full tile
    scores_buf, values_buf, indices_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(scores_buf, t.tileBS * row_stride(E, 4) * 4, name="scores")
    ctx.pipe.init_buffer(values_buf, t.tileBS * Ks * 4, name="topk_values")
    ctx.pipe.init_buffer(indices_buf, t.tileBS * Ks * 4, name="topk_indices")
    scores = scores_buf.get(gate_gm.dtype)
    values, indices = values_buf.get(np.float32), indices_buf.get(np.int32)
    ev_mte2_s = ctx.pipe.fetch_event_id("MTE2_S")  # each pair is waited before the next is set
    ev_s_mte3 = ctx.pipe.fetch_event_id("S_MTE3")

    for p in range(points):                       # CopyIn: one copy per point
        row = first_row + p
        if E * size % BLOCK_BYTES == 0:
            ctx.data_copy(scores[p * Es], gate_gm[row * E], E)
        else:
            ctx.data_copy_pad(scores[p * Es], gate_gm[row * E], DataCopyExtParams(1, E * size, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))
    ctx.set_flag("MTE2_S", ev_mte2_s)             # the article's "wait for every copy-in"
    ctx.wait_flag("MTE2_S", ev_mte2_s)
    for p in range(points):                       # Compute on the scalar unit
        scalar_topk_softmax(ctx, scores[p * Es], values[p * Ks], indices[p * Ks], E, K)
    ctx.set_flag("S_MTE3", ev_s_mte3)             # results are in UB: the stores may start
    ctx.wait_flag("S_MTE3", ev_s_mte3)
    for p in range(points):                       # CopyOut: K values and K indices per point
        row = first_row + p
        ctx.data_copy_pad(indices_gm[row * K], indices[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
        ctx.data_copy_pad(weights_gm[row * K], values[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))


# ---- v2, its pitfall, and v2c -------------------------------------------------------------------
def _looping_scalar_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, *, bad_sync: bool,
                           coalesced: bool):
    """The body of v2 / v2_bad_sync / v2c (see the module docstring for the flags)."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    E, K, T = t.E, t.K, t.tileBS
    size = gate_gm.dtype.itemsize
    Es, Ks = row_stride(E, size), row_stride(K, 4)
    my_tiles = block_tiles(t, ctx.get_block_idx(), ctx.get_block_num())
    n = len(my_tiles)
    # UB as budgeted for "v2": a 2-slot input queue (depth 2: the prefetch enqueues tile j+1
    # before tile j is dequeued) and two output slots
    scores_q = TQue(TPosition.VECIN, 2)
    ctx.pipe.init_buffer(scores_q, 2, T * row_stride(E, 4) * 4, name="scores")
    values_buf, indices_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(values_buf, 2 * T * Ks * 4, name="topk_values")
    ctx.pipe.init_buffer(indices_buf, 2 * T * Ks * 4, name="topk_indices")
    out_v, out_i = values_buf.get(np.float32), indices_buf.get(np.int32)
    # one event id per slot for the pairs that stay set across a tile (two in flight), held
    # for the whole loop; S_MTE3 is waited right after it is set: a fetched id does
    ev_s_mte2 = [ctx.pipe.alloc_event_id("S_MTE2") for _ in range(2)]
    ev_mte2_s = [ctx.pipe.alloc_event_id("MTE2_S") for _ in range(2)]
    ev_mte3_s = [ctx.pipe.alloc_event_id("MTE3_S") for _ in range(2)]
    ev_s_mte3 = ctx.pipe.fetch_event_id("S_MTE3")

    def copy_in(j):
        first_row, points = _tile_rows(t, my_tiles[j])
        if j >= 2:
            ctx.wait_flag("S_MTE2", ev_s_mte2[j % 2])        # S has finished reading this slot (tile j-2)
        scores = scores_q.alloc_tensor(gate_gm.dtype)
        if coalesced and E * size % BLOCK_BYTES == 0:
            ctx.data_copy(scores, gate_gm[first_row * E], points * E)
        elif coalesced:                           # one DataCopyPad, a padded UB row per point
            ctx.data_copy_pad(scores, gate_gm[first_row * E], DataCopyExtParams(points, E * size, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))
        else:
            for p in range(points):
                row = first_row + p
                if E * size % BLOCK_BYTES == 0:
                    ctx.data_copy(scores[p * Es], gate_gm[row * E], E)
                else:
                    ctx.data_copy_pad(scores[p * Es], gate_gm[row * E], DataCopyExtParams(1, E * size, 0, 0, 0),
                                      DataCopyPadExtParams(False, 0, 0, 0))
        ctx.set_flag("MTE2_S", ev_mte2_s[j % 2])  # the scalar unit may read the slot
        scores_q.enque(scores)

    copy_in(0)
    for j in ctx.tile_loop(n, key=iteration_key(t, my_tiles)):
        first_row, points = _tile_rows(t, my_tiles[j])
        if j + 1 < n and not bad_sync:
            copy_in(j + 1)                        # prefetch: MTE2 loads tile j+1 while S computes tile j
        scores = scores_q.deque(gate_gm.dtype)
        ctx.wait_flag("MTE2_S", ev_mte2_s[j % 2])  # S waits for tile j's load only
        if j >= 2:
            ctx.wait_flag("MTE3_S", ev_mte3_s[j % 2])  # the output slot's stores (tile j-2) are done
        values, indices = out_v[(j % 2) * T * Ks], out_i[(j % 2) * T * Ks]
        step = K if coalesced else Ks             # v2c packs [points, K] densely for one store
        for p in range(points):
            scalar_topk_softmax(ctx, scores[p * Es], values[p * step], indices[p * step], E, K)
        if j + 2 < n:
            ctx.set_flag("S_MTE2", ev_s_mte2[j % 2])  # the slot may be refilled (tile j+2)
        scores_q.free_tensor(scores)
        ctx.set_flag("S_MTE3", ev_s_mte3)
        ctx.wait_flag("S_MTE3", ev_s_mte3)
        if coalesced and points * K * 4 % BLOCK_BYTES == 0:
            ctx.data_copy(indices_gm[first_row * K], indices, points * K)
            ctx.data_copy(weights_gm[first_row * K], values, points * K)
        elif coalesced:
            ctx.data_copy_pad(indices_gm[first_row * K], indices, DataCopyExtParams(1, points * K * 4, 0, 0, 0))
            ctx.data_copy_pad(weights_gm[first_row * K], values, DataCopyExtParams(1, points * K * 4, 0, 0, 0))
        else:
            for p in range(points):
                row = first_row + p
                ctx.data_copy_pad(indices_gm[row * K], indices[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
                ctx.data_copy_pad(weights_gm[row * K], values[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
        if j + 2 < n:
            ctx.set_flag("MTE3_S", ev_mte3_s[j % 2])  # the output slot may be rewritten (tile j+2)
        if bad_sync and j + 1 < n:
            ctx.pipe_barrier("PIPE_ALL")          # BUG (the lesson): waits for this tile's copy-out ...
            copy_in(j + 1)                        # ... before the next copy-in even starts
    for ids, event in ((ev_s_mte2, "S_MTE2"), (ev_mte2_s, "MTE2_S"), (ev_mte3_s, "MTE3_S")):
        for eid in ids:
            ctx.pipe.release_event_id(event, eid)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v2_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v2: block_dim ≤ cores, each block loops over its tiles; the next tile's copy-in is issued
    before this tile's compute, so MTE2 (tile j+1), S (tile j) and MTE3 (tile j-1) overlap.
    Ascend C listing: ``fused_v2.cpp``."""
    _looping_scalar_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync=False, coalesced=False)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v2_bad_sync_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v2 with the article's sync pitfall: the next copy-in waits for this copy-out."""
    _looping_scalar_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync=True, coalesced=False)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v2c_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v2c: v2 with one copy per tile in and out (coalesced DMA); the scalar heap stays."""
    _looping_scalar_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync=False, coalesced=True)
