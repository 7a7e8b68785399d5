"""Fused MoeGatingTopK v3 — vectorized (DESIGN.md §6.3, the article's "optimisation 3").

Instead of a heap per point on the scalar unit, the vector unit works on all T points of a tile
at once, K rounds of:

    WholeReduceMax   row max and its (lowest) index, for every row        [T]
    Copy (strided)   into column k of the [T, K] values / indices outputs
    Compare NE       expert_iota (tiled) != row_argmax (per row)         [T·E] mask
    Select           scores = mask ? scores : -inf  (knock out the winner)

then a softmax over the K winners, also vectorized: subtract the row max (column 0), Exp (exact,
or the fast polynomial below), WholeReduceSum, Div. Loads and stores are one DataCopy per tile
(not per point), through 2-slot queues as in v2. Pipes: MTE2 → V → MTE3, overlapped.

Inputs/outputs as in :mod:`.fused`. The UB layout is ``moe_ub_budget("v3", ...)``.
"""

from __future__ import annotations

import numpy as np

from ...lang import npu_kernel
from .fused import _iteration_key, block_tiles, looping_block_classes
from .tiling import MoeGatingTiling

LOG2E = float(np.log2(np.e))


def _fast_exp2_coefficients(degree: int = 3) -> np.ndarray:
    """Least-squares polynomial for 2**f on f in [0, 1), highest power first (Horner order)."""
    f = np.linspace(0.0, 1.0, 2049)
    return np.polyfit(f, np.exp2(f), degree)


FAST_EXP_COEFFS = _fast_exp2_coefficients()


def fast_exp_numpy(x: np.ndarray) -> np.ndarray:
    """The same arithmetic as :func:`fast_exp` in plain numpy float32 (for error plots):
    exp(x) = 2**n · p(f) with t = max(x, −87)·log2(e), n = floor(t), f = t − n (the clamp keeps
    2**n a normal float, so inputs below −87 give exp(−87) ≈ 1.6e-38, as the kernel does)."""
    try:
        x64 = np.asarray(x, np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"x must be a number or an array of numbers; got {type(x).__name__}") from None
    if x64.size and not (np.isfinite(x64).all() and x64.max() <= 88.0):
        raise ValueError("x must be finite and <= 88 (exp overflows float32 above ~88.7); got "
                         f"max {x64.max()}" if not np.isnan(x64).any() else "x must not contain NaN")
    x = np.maximum(x64, -87.0).astype(np.float32)   # the kernel's clamp (maxs) at -87
    t = x * np.float32(LOG2E)
    n = np.floor(t).astype(np.int32)
    f = t - n.astype(np.float32)
    p = f * np.float32(FAST_EXP_COEFFS[0]) + np.float32(FAST_EXP_COEFFS[1])
    for c in FAST_EXP_COEFFS[2:]:
        p = p * f + np.float32(c)
    scale = ((n + 127) << 23).view(np.float32)
    return (p * scale).astype(np.float32)


def fast_exp_max_rel_error(lo: float = -80.0, hi: float = 0.0, samples: int = 200_001) -> float:
    """Measured max relative error of :func:`fast_exp_numpy` against numpy's exp on [lo, hi]
    (``samples`` evenly spaced points, 1 to 10**7). Below −87 the kernel's clamp makes the
    relative error large: there exp underflows anyway."""
    import numbers

    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not -1e30 < v < 1e30:   # also NaN
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not lo <= hi:
        raise ValueError(f"lo must be <= hi; got lo={lo!r}, hi={hi!r}")
    if lo < -700:
        raise ValueError(f"lo must be >= -700 (exact exp underflows float64 below about -745, so a "
                         f"relative error means nothing there); got {lo!r}")
    if hi > 88:
        raise ValueError(f"hi must be <= 88 (exp overflows float32 above ~88.7); got {hi!r}")
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or not 1 <= samples <= 10**7:
        raise ValueError(f"samples must be a whole number from 1 to 10**7, got {samples!r}")
    x = np.linspace(lo, hi, int(samples), dtype=np.float32)
    exact = np.exp(x.astype(np.float64))
    return float(np.max(np.abs(fast_exp_numpy(x) - exact) / exact))


def fast_exp(ctx, dst, src, work, count: int) -> None:
    """exp on the vector unit with simple instructions only (no Exp): 14 instructions over
    ``count`` elements instead of one Exp. ``work`` holds 3·count float32 of scratch.
    Inputs must be ≥ −87 (here they are x − max ≤ 0, and exp underflows below that anyway)."""
    t, nf, p = work[0:count], work[count:2 * count], work[2 * count:3 * count]
    n = nf.reinterpret(np.int32)
    ctx.maxs(t, src, -87.0, count)                  # keep 2**n a normal float
    ctx.muls(t, t, LOG2E, count)                    # t = x·log2(e)
    ctx.cast(n, t, count, round_mode="floor")       # n = floor(t)   (int32, in nf's bytes)
    ctx.cast(p, n, count)                           # p = float(n)
    ctx.sub(t, t, p, count)                         # f = t − n ∈ [0, 1)
    ctx.muls(p, t, float(FAST_EXP_COEFFS[0]), count)   # Horner: p = c0·f + c1, then p = p·f + c
    ctx.adds(p, p, float(FAST_EXP_COEFFS[1]), count)
    for c in FAST_EXP_COEFFS[2:]:
        ctx.mul(p, p, t, count)
        ctx.adds(p, p, float(c), count)
    ctx.adds_int(n, n, 127, count)                  # 2**n as float bits: (n + 127) << 23
    ctx.shift_left(n, n, 23, count)
    ctx.mul(dst, p, n.reinterpret(np.float32), count)


def _topk_softmax_tile(ctx, scores, values, indices, tmp, points: int, E: int, K: int, fast: bool):
    """All `points` rows of one tile on the vector unit (see the module docstring)."""
    row_max, row_arg, iota, mask, exp_work = tmp
    n = points * E
    for k in range(K):
        ctx.whole_reduce_max(row_max, row_arg, scores, rows=points, row_len=E)
        ctx.copy(values[k:], row_max, points, dst_stride=K)
        ctx.copy(indices[k:], row_arg, points, dst_stride=K)
        if k + 1 < K:   # knock the winner out of every row
            ctx.compare(mask, iota, row_arg, "NE", n, rows=points, src0_broadcast="tile", broadcast="row")
            ctx.select(scores, mask, scores, float("-inf"), n)
    m = points * K
    ctx.copy(row_max, values, points, src_stride=K)                 # column 0 = row max
    ctx.sub(values, values, row_max, m, rows=points, broadcast="row")
    if fast:
        fast_exp(ctx, values, values, exp_work, m)
    else:
        ctx.exp(values, values, m)
    ctx.whole_reduce_sum(row_max, values, rows=points, row_len=K)   # row_max now holds the sums
    ctx.div(values, values, row_max, m, rows=points, broadcast="row")


def _v3(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, fast: bool):
    t = MoeGatingTiling.unpack(tiling_bytes)
    E, K, T = t.E, t.K, t.tileBS
    my_tiles = block_tiles(t, ctx.get_block_idx(), ctx.get_block_num())
    scores_q = ctx.pipe.init_queue("VECIN", 2, T * E * 4, "scores")
    values_q = ctx.pipe.init_queue("VECOUT", 2, T * K * 4, "topk_values")
    indices_q = ctx.pipe.init_queue("VECOUT", 2, T * K * 4, "topk_indices")
    row_max = ctx.pipe.alloc_local(np.float32, T, "row_max")
    row_arg = ctx.pipe.alloc_local(np.int32, T, "row_argmax")
    iota = ctx.pipe.alloc_local(np.int32, E, "expert_iota")
    mask_region = ctx.pipe.alloc_local(np.float32, T * E, "select_mask")
    exp_work = ctx.pipe.alloc_local(np.float32, 3 * T * K, "exp_work")
    mask = mask_region.reinterpret(np.uint8)
    ctx.create_vec_index(iota, 0, E)
    half = gate_gm.dtype == np.float16

    def rows_of(tile):
        b0, _b1, s0, s1 = t.tile_range(tile)
        return b0 * t.S + s0, s1 - s0

    def copy_in(tile):
        first, points = rows_of(tile)
        scores = scores_q.alloc_tensor(np.float32)
        # one DataCopy for the whole tile (rows are contiguous); float16 lands in the mask
        # scratch and is widened by the vector unit after deque
        staging = mask_region.reinterpret(np.float16) if half else scores
        ctx.data_copy(staging, gate_gm[first * E:(first + points) * E], points * E)
        scores_q.enque(scores)

    copy_in(my_tiles[0])
    for j in ctx.tile_loop(len(my_tiles), key=_iteration_key(t, my_tiles)):
        tile = my_tiles[j]
        first, points = rows_of(tile)
        scores = scores_q.deque()
        if half:
            ctx.cast(scores, mask_region.reinterpret(np.float16), points * E)
        if j + 1 < len(my_tiles) and not half:
            copy_in(my_tiles[j + 1])          # prefetch the next tile into the other slot
        values = values_q.alloc_tensor(np.float32)
        indices = indices_q.alloc_tensor(np.int32)
        _topk_softmax_tile(ctx, scores, values, indices, (row_max, row_arg, iota, mask, exp_work),
                           points, E, K, fast)
        scores_q.free_tensor(scores)
        values_q.enque(values)
        indices_q.enque(indices)
        if j + 1 < len(my_tiles) and half:
            ctx.set_flag("V", "MTE2")         # the staging bytes are the mask scratch:
            ctx.wait_flag("V", "MTE2")        # load the next tile only after V is done with it
            copy_in(my_tiles[j + 1])
        values, indices = values_q.deque(), indices_q.deque()
        ctx.data_copy(indices_gm[first * K:(first + points) * K], indices, points * K)
        ctx.data_copy(weights_gm[first * K:(first + points) * K], values, points * K)
        values_q.free_tensor(values)
        indices_q.free_tensor(indices)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v3_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v3: vectorized top-K + softmax, exact Exp. Pipes MTE2 → V → MTE3, double-buffered."""
    _v3(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, fast=False)


@npu_kernel(block_classes=looping_block_classes)
def moe_gating_v3_fast_exp_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v3 with the polynomial exp (simple vector instructions instead of Exp)."""
    _v3(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, fast=True)
