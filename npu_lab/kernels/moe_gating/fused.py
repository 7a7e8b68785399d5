"""Fused MoeGatingTopK, scalar versions, in teaching order (DESIGN.md §6.3):

* **v1** — the article's kernel: one block per tile of tileS points. Copy every point's E scores
  into UB (one DataCopy per point, as the article writes it), wait, then per point a min-heap
  top-K and a softmax over the K winners on the scalar unit, then copy the K indices and weights
  of every point out. Pipes: MTE2 → S → MTE3, strictly one after the other.
* **v2** — double-buffered: block_dim ≤ cores, each block loops over its tiles. The next tile's
  copy-in is issued *before* this tile's compute (a 2-slot input queue), and outputs go through a
  2-slot output queue, so MTE2, S and MTE3 overlap.
* **v2_bad_sync** — the article's pitfall: double buffers, but the next copy-in waits for this
  tile's copy-out (a barrier in the wrong place). The buffers are there; the overlap is not.

Inputs: gate logits [B·S·E] flat in global memory (float32 or float16). Outputs: indices int32
[B·S·K] and weights float32 [B·S·K]. The tiling struct arrives as packed bytes.
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np

from ...lang import npu_kernel
from .tiling import MoeGatingTiling


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
    """Per point on the scalar unit: heap top-K, then softmax over the K winners (max first)."""
    cost = heap_topk_cost(E, K)

    def compute():
        v, i = heap_topk(scores.data[:E].astype(np.float32), K)
        with np.errstate(over="ignore"):   # x - max may overflow to -inf: exp gives 0, as it should
            e = np.exp(v - v[0])
        values.data[:K] = e / e.sum(dtype=np.float32)
        indices.data[:K] = i

    ctx.scalar("heap top-k + softmax", **cost, reads=(scores,), writes=(values, indices), compute=compute)


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


def _iteration_key(t: MoeGatingTiling, my_tiles: list[int]):
    """What makes one loop iteration's work differ: this tile's points and the next one's (the
    prefetch), or no next tile at all."""
    mine = tile_points(t)[my_tiles].tolist() + [0]
    return lambda j: (mine[j], mine[j + 1])


# ---- copy helpers shared by v1 and v2 --------------------------------------------------------
def _tile_rows(t: MoeGatingTiling, tile: int) -> tuple[int, int]:
    b0, _b1, s0, s1 = t.tile_range(tile)
    return b0 * t.S + s0, (s1 - s0)      # first flat row, points (tileB = 1)


def _copy_in_rows(ctx, scores, gate_gm, first_row: int, points: int, E: int) -> None:
    """One DataCopy per point, as the article does it (E·dtype bytes each)."""
    for p in range(points):
        row = first_row + p
        ctx.data_copy(scores[p * E:(p + 1) * E], gate_gm[row * E:(row + 1) * E])


def _copy_out_rows(ctx, indices_gm, weights_gm, indices, values, first_row: int, points: int, K: int) -> None:
    for p in range(points):
        row = first_row + p
        ctx.data_copy(indices_gm[row * K:(row + 1) * K], indices[p * K:(p + 1) * K])
        ctx.data_copy(weights_gm[row * K:(row + 1) * K], values[p * K:(p + 1) * K])


# ---- v1 ---------------------------------------------------------------------------------------
@npu_kernel(block_classes=one_tile_per_block_classes)
def moe_gating_v1_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v1: one block per tile; MTE2 (per-point loads) → S (heap + softmax) → MTE3 (per-point stores)."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    first_row, points = _tile_rows(t, ctx.get_block_idx())
    E, K = t.E, t.K
    # UB as the host budgeted it (moe_ub_budget "v1"): sized for a full tile
    scores = ctx.pipe.alloc_local(np.float32, t.tileBS * E, "scores").reinterpret(gate_gm.dtype)
    values = ctx.pipe.alloc_local(np.float32, t.tileBS * K, "topk_values")
    indices = ctx.pipe.alloc_local(np.int32, t.tileBS * K, "topk_indices")

    _copy_in_rows(ctx, scores, gate_gm, first_row, points, E)
    ctx.set_flag("MTE2", "S")      # the article's "wait for every copy-in"
    ctx.wait_flag("MTE2", "S")
    for p in range(points):
        scalar_topk_softmax(ctx, scores[p * E:(p + 1) * E], values[p * K:(p + 1) * K],
                            indices[p * K:(p + 1) * K], E, K)
    ctx.set_flag("S", "MTE3")      # results are in UB: the stores may start
    ctx.wait_flag("S", "MTE3")
    _copy_out_rows(ctx, indices_gm, weights_gm, indices, values, first_row, points, K)


# ---- v2 and its pitfall -----------------------------------------------------------------------
def _v2_body(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync: bool):
    t = MoeGatingTiling.unpack(tiling_bytes)
    E, K = t.E, t.K
    my_tiles = block_tiles(t, ctx.get_block_idx(), ctx.get_block_num())
    # UB as budgeted for "v2": two slots per queue
    scores_q = ctx.pipe.init_queue("VECIN", 2, t.tileBS * E * 4, "scores", consumer="S")
    values_q = ctx.pipe.init_queue("VECOUT", 2, t.tileBS * K * 4, "topk_values", producer="S")
    indices_q = ctx.pipe.init_queue("VECOUT", 2, t.tileBS * K * 4, "topk_indices", producer="S")

    def copy_in(tile):
        first_row, points = _tile_rows(t, tile)
        scores = scores_q.alloc_tensor(np.float32).reinterpret(gate_gm.dtype)
        _copy_in_rows(ctx, scores, gate_gm, first_row, points, E)
        scores_q.enque(scores)

    copy_in(my_tiles[0])
    for j in ctx.tile_loop(len(my_tiles), key=_iteration_key(t, my_tiles)):
        tile = my_tiles[j]
        first_row, points = _tile_rows(t, tile)
        if j + 1 < len(my_tiles) and not bad_sync:
            copy_in(my_tiles[j + 1])        # prefetch: MTE2 loads tile j+1 while S computes tile j
        scores = scores_q.deque()           # S waits for tile j's load only
        values = values_q.alloc_tensor(np.float32)
        indices = indices_q.alloc_tensor(np.int32)
        for p in range(points):
            scalar_topk_softmax(ctx, scores[p * E:(p + 1) * E], values[p * K:(p + 1) * K],
                                indices[p * K:(p + 1) * K], E, K)
        scores_q.free_tensor(scores)
        values_q.enque(values)
        indices_q.enque(indices)
        values, indices = values_q.deque(), indices_q.deque()
        _copy_out_rows(ctx, indices_gm, weights_gm, indices, values, first_row, points, K)
        values_q.free_tensor(values)
        indices_q.free_tensor(indices)
        if bad_sync:
            ctx.pipe_barrier("ALL")         # BUG (the lesson): waits for this tile's copy-out ...
            if j + 1 < len(my_tiles):
                copy_in(my_tiles[j + 1])    # ... before the next copy-in even starts


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v2_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v2: block_dim ≤ cores, each block loops over tiles; 2-slot queues let MTE2 (next tile),
    S (this tile) and MTE3 (previous tile) overlap."""
    _v2_body(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync=False)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v2_bad_sync_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v2 with the article's sync pitfall: the next copy-in waits for this copy-out."""
    _v2_body(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, bad_sync=True)
