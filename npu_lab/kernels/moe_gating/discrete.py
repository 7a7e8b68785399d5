"""The discrete chain: what a framework runs before anyone fuses the operator (DESIGN.md §6.3 v0).

Three separate launches, each a generic kernel with a generic, conservative tiling (a few rows
per tile, single-buffered), each paying its own launch overhead, each writing its result to HBM
for the next one to read back:

1. ``Softmax`` over E:     logits [N, E] → probs [N, E]                       (HBM round trip)
2. ``TopK`` by full sort:  probs [N, E]  → values [N, K], indices [N, K]      (sorts all E)
3. ``Renormalise``:        values [N, K] → weights [N, K]

It computes exp for all E experts (the fused kernel needs only K) and moves
N·E·4 bytes twice more than necessary. A teaching detail: because it ranks *probabilities*,
logits that differ but whose probabilities round to the same float32 (e.g. both underflow to 0)
become ties, and the order can then differ from ranking the logits — the fused kernel does not
have this problem.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...lang import GlobalTensor, launch, npu_kernel
from ...lang.tiling_struct import Int32Struct
from ...sim.timeline import Timeline


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


def _ub(nbytes: int, block_bytes: int) -> int:
    return -(-nbytes // block_bytes) * block_bytes


def discrete_ub_bytes(rows: int, E: int, K: int, block_bytes: int = 32) -> dict[str, int]:
    """UB bytes each kernel of the chain allocates for a tile of ``rows`` rows: the same buffers,
    in the same sizes, as the kernels below (each rounded up to whole blocks)."""
    def b(n):
        return _ub(n, block_bytes)
    return {
        # softmax_kernel: x, y [rows*E] f32; row_max f32 [rows], row_arg i32 [rows]
        "Softmax": 2 * b(rows * E * 4) + 2 * b(rows * 4),
        # topk_sort_kernel: probs [rows*E] f32; values, indices [rows*K]; sorted values and
        # sorted indices [rows*E] (the full sort keeps all E of every row)
        "TopK": 3 * b(rows * E * 4) + 2 * b(rows * K * 4),
        # renormalise_kernel: values, weights [rows*K] f32; row_sum [rows]
        "Renormalise": 2 * b(rows * K * 4) + b(rows * 4),
    }


def generic_row_tiling(N: int, E: int, K: int, ub_bytes: int, block_bytes: int = 32) -> RowTiling:
    """Conservative: at most 8 rows, and at most a quarter of UB for one tile's [rows, E] floats
    (a generic kernel must leave room for whatever scratch its worst case needs); fewer rows
    while any kernel of the chain would not fit (:func:`discrete_ub_bytes`). Raises
    ``UbBudgetError`` when not even one row fits."""
    from .tiling import UbBudgetError, _check_int

    N, E, K = _check_int("N", N), _check_int("E", E), _check_int("K", K)
    ub_bytes, block_bytes = _check_int("ub_bytes", ub_bytes), _check_int("block_bytes", block_bytes)
    if K > E:
        raise ValueError(f"K must be <= E (cannot pick {K} of {E} experts); got K={K}, E={E}")
    rows = max(1, min(GENERIC_ROWS_PER_TILE, (ub_bytes // 4) // (E * 4 * 4)))
    while rows > 1 and max(discrete_ub_bytes(rows, E, K, block_bytes).values()) > ub_bytes:
        rows -= 1
    need = discrete_ub_bytes(1, E, K, block_bytes)
    if max(need.values()) > ub_bytes:
        worst = max(need, key=need.get)
        raise UbBudgetError(
            f"the discrete chain does not fit one row of E={E}, K={K} in a {ub_bytes}-byte UB: its "
            f"{worst} kernel needs {need[worst]} bytes for a single row ({', '.join(f'{k} {v} B' for k, v in need.items())}). "
            "The generic TopK sorts all E of a row in UB (probabilities, sorted values, sorted "
            "indices: 3·E·4 bytes, plus 2·K·4). Use a smaller E or K, a chip with more UB, or a "
            "fused version (v1-v3).")
    return RowTiling(N, E, K, min(rows, N))


def _row_classes(block_dim, *args):
    t = RowTiling.unpack(args[-1])
    sizes = np.minimum(t.rows, t.N - np.arange(t.tiles) * t.rows)
    seqs = [sizes[b::block_dim].tobytes() for b in range(block_dim)]
    return np.unique(np.array(seqs, dtype=object), return_inverse=True)[1]


def _my_tiles(ctx, t: RowTiling):
    """This block's row tiles, through ctx.tile_loop (fast-forwarded when timing-only)."""
    mine = list(range(ctx.get_block_idx(), t.tiles, ctx.get_block_num()))
    sizes = [t.tile(i)[1] for i in mine]
    return (mine[j] for j in ctx.tile_loop(len(mine), key=sizes.__getitem__))


@npu_kernel(block_classes=_row_classes)
def softmax_kernel(ctx, logits_gm, probs_gm, tiling_bytes):
    """Softmax over each row of [N, E]. Pipes: MTE2 → V (max, sub, exp, sum, div) → MTE3."""
    t = RowTiling.unpack(tiling_bytes)
    x_q = ctx.pipe.init_queue("VECIN", 1, t.rows * t.E * 4, "x")
    y_q = ctx.pipe.init_queue("VECOUT", 1, t.rows * t.E * 4, "y")
    row_max = ctx.pipe.alloc_local(np.float32, t.rows, "row_max")
    row_arg = ctx.pipe.alloc_local(np.int32, t.rows, "row_arg")
    for tile in _my_tiles(ctx, t):
        first, r = t.tile(tile)
        n = r * t.E
        x = x_q.alloc_tensor(np.float32).reinterpret(logits_gm.dtype)
        ctx.data_copy(x, logits_gm[first * t.E:first * t.E + n], n)
        x_q.enque(x)
        x = x_q_slot = x_q.deque()
        y = y_q.alloc_tensor(np.float32)
        if x.dtype != np.float32:        # float16 logits: widen first
            ctx.cast(y, x, n)
            x = y
        ctx.whole_reduce_max(row_max, row_arg, x, rows=r, row_len=t.E)
        ctx.sub(y, x, row_max, n, rows=r, broadcast="row")
        ctx.exp(y, y, n)                                  # all E exponentials
        ctx.whole_reduce_sum(row_max, y, rows=r, row_len=t.E)
        ctx.div(y, y, row_max, n, rows=r, broadcast="row")
        x_q.free_tensor(x_q_slot)
        y_q.enque(y)
        y = y_q.deque()
        ctx.data_copy(probs_gm[first * t.E:first * t.E + n], y, n)
        y_q.free_tensor(y)


@npu_kernel(block_classes=_row_classes)
def topk_sort_kernel(ctx, probs_gm, values_gm, indices_gm, tiling_bytes):
    """Generic TopK: sort every row fully (Sort32 + MrgSort), keep the first K."""
    t = RowTiling.unpack(tiling_bytes)
    x_q = ctx.pipe.init_queue("VECIN", 1, t.rows * t.E * 4, "probs")
    v_q = ctx.pipe.init_queue("VECOUT", 1, t.rows * t.K * 4, "values")
    i_q = ctx.pipe.init_queue("VECOUT", 1, t.rows * t.K * 4, "indices")
    sorted_v = ctx.pipe.alloc_local(np.float32, t.rows * t.E, "sorted_values")
    sorted_i = ctx.pipe.alloc_local(np.int32, t.rows * t.E, "sorted_indices")
    for tile in _my_tiles(ctx, t):
        first, r = t.tile(tile)
        x = x_q.alloc_tensor(np.float32)
        ctx.data_copy(x, probs_gm[first * t.E:(first + r) * t.E], r * t.E)
        x_q.enque(x)
        x = x_q.deque()
        ctx.sort_rows(sorted_v, sorted_i, x, rows=r, row_len=t.E)
        x_q.free_tensor(x)
        v = v_q.alloc_tensor(np.float32)
        i = i_q.alloc_tensor(np.int32)
        for row in range(r):                                # the first K of each sorted row
            ctx.copy(v[row * t.K:], sorted_v[row * t.E:], t.K)
            ctx.copy(i[row * t.K:], sorted_i[row * t.E:], t.K)
        v_q.enque(v)
        i_q.enque(i)
        v, i = v_q.deque(), i_q.deque()
        ctx.data_copy(values_gm[first * t.K:(first + r) * t.K], v, r * t.K)
        ctx.data_copy(indices_gm[first * t.K:(first + r) * t.K], i, r * t.K)
        v_q.free_tensor(v)
        i_q.free_tensor(i)


@npu_kernel(block_classes=_row_classes)
def renormalise_kernel(ctx, values_gm, weights_gm, tiling_bytes):
    """weights = values / sum(values) per row of [N, K]."""
    t = RowTiling.unpack(tiling_bytes)
    x_q = ctx.pipe.init_queue("VECIN", 1, t.rows * t.K * 4, "values")
    y_q = ctx.pipe.init_queue("VECOUT", 1, t.rows * t.K * 4, "weights")
    row_sum = ctx.pipe.alloc_local(np.float32, t.rows, "row_sum")
    for tile in _my_tiles(ctx, t):
        first, r = t.tile(tile)
        n = r * t.K
        x = x_q.alloc_tensor(np.float32)
        ctx.data_copy(x, values_gm[first * t.K:first * t.K + n], n)
        x_q.enque(x)
        x = x_q.deque()
        y = y_q.alloc_tensor(np.float32)
        ctx.whole_reduce_sum(row_sum, x, rows=r, row_len=t.K)
        ctx.div(y, x, row_sum, n, rows=r, broadcast="row")
        x_q.free_tensor(x)
        y_q.enque(y)
        y = y_q.deque()
        ctx.data_copy(weights_gm[first * t.K:first * t.K + n], y, n)
        y_q.free_tensor(y)


def run_discrete_chain(logits_gm: GlobalTensor, indices_gm: GlobalTensor, weights_gm: GlobalTensor,
                       N: int, E: int, K: int, hw, timing_only: bool) -> Timeline:
    """Launch Softmax → TopK → Renormalise back to back; intermediates live in HBM."""
    t = generic_row_tiling(N, E, K, hw.ub_bytes, hw.block_bytes)
    block_dim = min(hw.vector_cores, t.tiles)
    probs = GlobalTensor.empty(N * E, np.float32, "probs", timing_only)
    values = GlobalTensor.empty(N * K, np.float32, "topk_values", timing_only)
    packed = t.pack()
    timelines = [
        launch(softmax_kernel, block_dim, logits_gm, probs, packed, hw=hw, timing_only=timing_only,
               name="Softmax"),
        launch(topk_sort_kernel, block_dim, probs, values, indices_gm, packed, hw=hw,
               timing_only=timing_only, name="TopK (full sort)"),
        launch(renormalise_kernel, block_dim, values, weights_gm, packed, hw=hw,
               timing_only=timing_only, name="Renormalise"),
    ]
    return Timeline.concat(timelines)
