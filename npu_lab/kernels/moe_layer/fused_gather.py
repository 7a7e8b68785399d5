"""Gather fused into the expert up-projection: the grouped GEMM reads its tokens' rows of ``hidden``
by index (issue 20 §4b, the first article's second fusion), instead of a gather launch writing the
permuted copy ``expanded_x`` to GM first (gather.py).

One cube launch (``KERNEL_TYPE_AIC_ONLY``) for every expert, as CANN's GroupedMatmul launches once:
tasks (expert e, M tile of e's rows, N tile of F) in expert order, block b taking tasks b, b + B, ...
Per task (pipes S, MTE2 -> MTE1 -> M -> FIX; :mod:`.cube_tile`):

* **S** reads the tile's ``vm`` row ids from the dispatch's permutation ``sorted_row_idx`` (slot
  n·K + k; the token is slot // K), one scalar load each;
* **MTE2**, per K panel: ``gathered=True`` (fused): one ``DataCopy`` GM -> L1 with ``Nd2NzParams``
  (nValue = 1) per gathered row, from ``hidden[token]`` to row j of the NZ panel (``a1[16·j]``, the
  panel's C0 stride = round16(vm) rows); ``gathered=False`` (the unfused chain's GEMM): one
  ``DataCopy`` of ``vm`` consecutive rows of ``expanded_x``. B = W_up[e] panel as the GEMM's half
  path copies it. Then LoadData, Mmad (fp32 accumulate), Fixpipe fp32 to ``out[M, F]`` (rows in the
  dispatch's expert order, as the GEMM over ``expanded_x`` writes them).

Row ids: asc-devkit has ``GlobalTensor::GetValue`` (docs/zh/api/SIMD-API/基础API/数据结构/GlobalTensor/
GetValue.md, pipe S) for a scalar read of GM; npu_lab's lang has GetValue on UB tensors only, so
the kernel charges each id read as one scalar access (``ctx.scalar``, priced as a data-cache hit:
a simplification) and reads the value in a full run. The copies' costs depend on sizes, never on
addresses (docs/cost_model.md), so the timeline depends on the expert row counts alone and a
timing-only run needs no indices. Copies are one per row (not merged over runs of consecutive
tokens): the price of the fusion is ``vm`` small copies per panel instead of one.

Listing: ``fused_gather.cpp``.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...lang import GlobalTensor, Nd2NzParams, launch, npu_kernel
from ...presets import get_preset
from ..gemm.kernels import round16
from .cube_tile import CubeTiling, cube_queues, cube_tile, fixpipe_out, pick_cube_tiling

__all__ = ["GatherMatmulPlan", "gather_matmul", "gather_matmul_kernel", "gather_matmul_plan",
           "gather_matmul_reference"]


class GatherMatmulPlan:
    """Host plan: ``counts`` rows per expert (the dispatch's expert_tokens_count), ``offsets``
    their first row in the expert-ordered layout, H, F, top-K, the cube tiling, the task list
    ``(expert, m0, vm, n0, vn)`` and ``blocks`` (block_dim)."""

    def __init__(self, counts, h: int, f: int, k: int, n_tokens: int, cube: CubeTiling, blocks_max: int,
                 resident: bool = False):
        self.counts = [int(c) for c in counts]
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(int).tolist()
        self.h, self.f, self.k, self.n, self.cube, self.resident = h, f, k, n_tokens, cube, bool(resident)
        self.m = self.offsets[-1]
        n_tiles = [(0, f)] if resident else [(n0, min(cube.bn, f - n0)) for n0 in range(0, f, cube.bn)]
        self.tasks = [(e, m0, min(cube.bm, c - m0), n0, vn)
                      for e, c in enumerate(self.counts) for m0 in range(0, c, cube.bm) for n0, vn in n_tiles]
        # tiles of one shape together (stable): a block's equal tiles are consecutive, so a timing-only
        # run fast-forwards over them (ctx.tile_loop); the order of independent tiles changes no result
        self.tasks.sort(key=lambda t: (-t[2], -t[4]))
        self.blocks = max(1, min(blocks_max, len(self.tasks)))

    def block_tasks(self, b: int) -> list:
        return self.tasks[b::self.blocks]

    def __repr__(self):
        return (f"GatherMatmulPlan(M={self.m}, H={self.h}, F={self.f}, experts={sum(1 for c in self.counts if c)}, "
                f"tasks={len(self.tasks)}, blocks={self.blocks}, {self.cube})")


def _whole(name, v, lo=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def gather_matmul_plan(expert_rows, hidden_dim: int, ffn_dim: int, top_k: int, num_tokens: int, *,
                       hw: HardwareSpec | str = "ascend-910b2", base=None, long_a: bool = True,
                       resident: bool = False) -> GatherMatmulPlan:
    """Tiles: bm = round16 of the largest expert's rows (at most 128), bn = F (at most 128);
    ``base`` = (bm, bn) overrides. Raises ValueError on negative counts or no rows at all."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    h, f, k, n = (_whole(a, b) for a, b in (("hidden_dim", hidden_dim), ("ffn_dim", ffn_dim), ("top_k", top_k),
                                            ("num_tokens", num_tokens)))
    rows = [int(r) for r in np.asarray(expert_rows).reshape(-1)]
    if not rows or min(rows) < 0 or sum(rows) < 1:
        raise ValueError("expert_rows must be counts >= 0 per expert with at least one row")
    if sum(rows) > n * k:
        raise ValueError(f"expert_rows sum to {sum(rows)} rows, more than the N·K = {n * k} slots")
    if base is None:
        bm, bn = min(128, round16(max(rows))), min(128, f)
    else:
        bm, bn = (_whole("base", v) for v in base)
        if bm % 16:
            raise ValueError(f"base rows must be a multiple of 16 (an L0A fractal is 16 rows); got {bm}")
    if resident:
        cube = _resident_tiling(bm, bn, h, hw)
        if cube is not None:
            return GatherMatmulPlan(rows, h, f, k, n, cube, hw.cube_cores, resident=True)
    return GatherMatmulPlan(rows, h, f, k, n, pick_cube_tiling(bm, bn, h, hw, long_a=long_a), hw.cube_cores)


def _resident_tiling(bm: int, bn: int, h: int, hw) -> CubeTiling | None:
    """The largest bm (<= the given, a multiple of 16) whose whole-K A panel [bm, H] fits L1 beside
    two B panels (two A panels if they fit, else one); None if not even 16 rows fit."""
    while bm >= 16:
        t = pick_cube_tiling(bm, bn, h, hw)
        b1 = 2 * t.k_l1 * round16(t.bn) * 2
        for copies in (2, 1):
            if copies * bm * round16(h) * 2 + b1 <= hw.l1_bytes:
                return CubeTiling(bm, t.bn, t.bk, t.k_l1, t.c_buffers, k_a=round16(h), a_buffers=copies)
        bm -= 16
    return None


def _classes(block_dim, x_gm, src_gm, w_gm, out_gm, plan, gathered):
    seen: dict = {}
    return np.array([seen.setdefault(tuple((t[2], t[4]) for t in plan.block_tasks(b)), len(seen))
                     for b in range(block_dim)])


@npu_kernel(core_type="cube", block_classes=_classes)
def gather_matmul_kernel(ctx, x_gm: GlobalTensor, src_gm: GlobalTensor, w_gm: GlobalTensor, out_gm: GlobalTensor,
                         plan: GatherMatmulPlan, gathered: bool):
    """``out[r, :] = x[src[r] // K, :] · W_up[e(r)]`` (``gathered``; else ``x`` is ``expanded_x``
    [M, H] and row r is read in place). x fp16, src int32 [M], W_up [E, H, F] fp16, out fp32 [M, F]."""
    p = plan
    H, F, K = p.h, p.f, p.k
    work = p.block_tasks(ctx.get_block_idx())
    qs = cube_queues(ctx, p.cube)
    qa1, qc = qs[0], qs[4]
    for i in ctx.tile_loop(len(work), key=lambda i: (work[i][2], work[i][4])):
        e, m0, vm, n0, vn = work[i]
        row = p.offsets[e] + m0                       # first row of the tile in the expert-ordered layout
        if gathered:
            # S: the tile's row ids (GlobalTensor::GetValue each; module docstring)
            toks = ctx.scalar("read row ids", ub_reads=vm,
                              compute=lambda row=row, vm=vm: (src_gm.data[row:row + vm] // K).tolist())
            toks = toks or [0] * vm                   # timing-only: addresses do not move the price

            def fill_a(a1, kc, vkc, m16, toks=toks):
                for j, tok in enumerate(toks):        # one Nd2Nz copy per gathered row, into NZ row j
                    ctx.data_copy(a1[16 * j], x_gm[tok * H + kc], Nd2NzParams(1, 1, vkc, 0, H, m16, 1, 0))
        else:
            def fill_a(a1, kc, vkc, m16, row=row, vm=vm):
                ctx.data_copy(a1, x_gm[row * H + kc], Nd2NzParams(1, vm, vkc, 0, H, m16, 1, 0))
        w_e = w_gm[e * H * F]
        if p.resident:                                # the gathered rows stay in L1 for every N tile
            a1 = qa1.alloc_tensor(np.float16)
            fill_a(a1, 0, H, round16(vm))
            qa1.enque(a1)
            a1 = qa1.deque(np.float16)
            for n0 in range(0, F, p.cube.bn):
                vn = min(p.cube.bn, F - n0)
                c = cube_tile(ctx, p.cube, qs, None, w_e, n0, vm, vn, H, F, a1=a1)
                fixpipe_out(ctx, qc, out_gm[row * F + n0], c, vm, vn, F)
            qa1.free_tensor(a1)
        else:
            c = cube_tile(ctx, p.cube, qs, fill_a, w_e, n0, vm, vn, H, F)
            fixpipe_out(ctx, qc, out_gm[row * F + n0], c, vm, vn, F)


def gather_matmul_reference(x, sorted_row_idx, expert_rows, w_up, top_k: int) -> np.ndarray:
    """numpy: row r of the expert-ordered layout = fp16 x[sorted_row_idx[r] // K] · fp16 W_up[e(r)],
    fp32 products and sums. Returns float32 [M, F]."""
    x16 = np.asarray(x).astype(np.float16).astype(np.float32)
    w16 = np.asarray(w_up).astype(np.float16).astype(np.float32)
    src = np.asarray(sorted_row_idx).astype(np.int64) // top_k
    out, start = [], 0
    for e, c in enumerate(int(v) for v in expert_rows):
        out.append(x16[src[start:start + c]] @ w16[e])
        start += c
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, w16.shape[2]), np.float32)


def gather_matmul(x, sorted_row_idx, expert_rows, w_up, top_k: int, *, gathered: bool = True,
                  hw: HardwareSpec | str = "ascend-910b2", timing_only: bool = False, base=None,
                  long_a: bool = True, resident: bool = False):
    """The expert up-projection over the dispatch's layout; returns ``(out float32 [M, F] or None,
    timeline)``.

    ``x``: hidden [N, H] (``gathered=True``) or expanded_x [M, H] (``gathered=False``: the unfused
    chain's GEMM); ``sorted_row_idx`` int [M] (slots n·K + k, the dispatch's permutation);
    ``expert_rows`` [E] (expert_tokens_count, summing to M); ``w_up`` [E, H, F]. Timing-only: ``x``
    and ``w_up`` may be the shapes (N or M, H) and (E, H, F) and ``sorted_row_idx`` None."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if not isinstance(gathered, bool):
        raise TypeError(f"gathered must be True or False, got {gathered!r}")
    rows = np.asarray(expert_rows).reshape(-1)
    if rows.dtype.kind not in "iu":
        raise ValueError(f"expert_rows must be integer counts, got {rows.dtype}")
    m = int(rows.sum())
    shapes = timing_only and isinstance(x, tuple)
    if shapes:
        if not (isinstance(w_up, tuple) and len(w_up) == 3 and len(x) == 2):
            raise ValueError("timing-only with shapes: x = (N, H), w_up = (E, H, F)")
        (n, h), (E, h2, f) = x, w_up
    else:
        x, w = np.asarray(x), np.asarray(w_up)
        if x.ndim != 2 or 0 in x.shape or x.dtype.kind != "f" or not np.isfinite(x).all():
            raise ValueError(f"x must be a finite float array [N, H]; got {x.shape} {x.dtype}")
        if w.ndim != 3 or w.dtype.kind != "f":
            raise ValueError(f"w_up must be a float array [E, H, F]; got {w.shape} {w.dtype}")
        (n, h), (E, h2, f) = x.shape, w.shape
    if h != h2:
        raise ValueError(f"x is [., H = {h}] but w_up is [E, {h2}, F]: the middle dimension must be H")
    if rows.size != E:
        raise ValueError(f"expert_rows must hold E = {E} counts (one per expert of w_up); got {rows.size}")
    n_tokens = n if gathered else -(-m // top_k)
    if not gathered and n != m:
        raise ValueError(f"gathered=False reads expanded_x [M = {m}, H]; got x with {n} rows")
    p = gather_matmul_plan(rows, h, f, top_k, max(n_tokens, -(-m // top_k)), hw=hw, base=base, long_a=long_a,
                           resident=resident)
    if shapes:
        src_gm = GlobalTensor.empty(m, np.int32, "sorted_row_idx", timing_only=True)
    else:
        src = np.asarray(sorted_row_idx) if sorted_row_idx is not None else np.arange(m)
        if src.shape != (m,) or src.dtype.kind not in "iu":
            raise ValueError(f"sorted_row_idx must be an int array [M = sum(expert_rows) = {m}]; got "
                             f"{src.shape} {src.dtype}")
        if gathered and m and (src.min() < 0 or src.max() >= n * top_k):
            raise ValueError(f"sorted_row_idx must index the N·K = {n * top_k} slots; got values in "
                             f"[{src.min()}, {src.max()}]")
        src_gm = GlobalTensor.from_array(src.astype(np.int32), "sorted_row_idx", timing_only=timing_only)
    if shapes:
        x_gm = GlobalTensor.empty(n * h, np.float16, "hidden" if gathered else "expanded_x", timing_only=True)
        w_gm = GlobalTensor.empty(E * h * f, np.float16, "w_up", timing_only=True)
    else:
        x_gm = GlobalTensor.from_array(np.ascontiguousarray(x, np.float16), "hidden" if gathered else "expanded_x",
                                       timing_only=timing_only)
        w_gm = GlobalTensor.from_array(np.ascontiguousarray(w, np.float16), "w_up", timing_only=timing_only)
    out = GlobalTensor.empty(m * f, np.float32, "expert_up", timing_only=timing_only)
    tl = launch(gather_matmul_kernel, p.blocks, x_gm, src_gm, w_gm, out, p, gathered, hw=hw, timing_only=timing_only,
                name="gather_matmul" if gathered else "grouped_matmul")
    return (None if timing_only else out.data.reshape(m, f).copy()), tl
