"""Router MatMul fused with gating: one ``KERNEL_TYPE_MIX_AIC_1_2`` kernel (issue 20 §4b, the first
article's second fusion).

Per AI core group (one AIC + two AIVs; ``block_dim`` = groups), over the router tiles the group
owns (tile ``i`` = rows ``[i·R, i·R + R)`` of the N tokens; group g takes tiles g, g + G, ...):

* **AIC** (pipes MTE2 -> MTE1 -> M -> FIX): logits tile [R, E] = hidden[R, H] · W_router[H, E]
  (fp16 in, fp32 accumulate; :mod:`.cube_tile`: Nd2Nz copies, LoadData, Mmad), ``Fixpipe`` fp32
  (NoQuant) into workspace slot ``i % 2`` of the group, then ``CrossCoreSetFlag<2, PIPE_FIX>(0)``.
  Before tile i >= 2 it waits ``CrossCoreWaitFlag(1)``: both AIVs have finished tile i - 2, whose
  slot it is about to overwrite (ping-pong: the AIVs gate tile i while the AIC computes tile i + 1).
* **AIV** ``sub`` (pipes MTE2 -> V -> MTE3): ``CrossCoreWaitFlag(0)``, then the article's gating
  (softmax over the top-K, renorm = 1) on its half of the tile's rows -- the v4 kernel's body
  (CANN's MoeGatingTopKSoftmaxV2 perf template: DataCopyPad in, Sort32 + MrgSort, GatherMask,
  softmax over K; npu_lab/kernels/moe_gating/sorted_topk.py) reading the slot instead of a logits
  tensor -- indices and weights to GM, then ``CrossCoreSetFlag<2, PIPE_MTE3>(1)``.

Why GM: on the 910B2 (Atlas A2) Fixpipe cannot write L0C to the UB -- asc-devkit
docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/矩阵计算的搬出/Fixpipe（L0C到UB数据搬运）.md lists
"Atlas A2 训练系列产品/Atlas A2 推理系列产品：不支持" -- so the tile goes L0C -> GM workspace -> UB.
The workspace is 2 slots x R x E fp32 per group (at most 2·128·1024·4 B = 1 MiB per group): it stays
in L2, which the simulator's L2 model prices (a read of bytes just written hits L2).
Flags: CrossCoreSetFlag(ISASI).md / CrossCoreWaitFlag(ISASI).md (mode 2, a counter per flag id).

Range: the v4 gating's (1 <= K <= 8, K <= E <= 1024) with the default routing options (the
grouped sigmoid + bias variant is not fused: :func:`fused_router_gating` refuses it). Listing:
``fused_router.cpp``.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...lang import DataCopyExtParams, GlobalTensor, Nd2NzParams, launch, npu_kernel
from ...presets import get_preset
from ...sim.timeline import Timeline
from ..gemm.kernels import round16
from ..moe_gating.reference import moe_gating_topk_reference
from ..moe_gating.sorted_topk import (MAX_E, MAX_K, MoeGatingV4Tiling, _V4, _k1_fast_path,
                                      calculate_moe_gating_v4_tiling)
from .cube_tile import CubeTiling, cube_queues, cube_tile, fixpipe_out, pick_cube_tiling

__all__ = ["unfused_router_gating_timeline", "FusedRouterPlan", "fused_router_gating", "fused_router_gating_kernel", "fused_router_plan",
           "fused_router_reference"]

#: tiles the AIC may run ahead of its AIVs: the two workspace slots
SLOTS = 2


class FusedRouterPlan:
    """The host's choices for N tokens, hidden H, E experts, top-K: ``rows`` R per router tile
    (a multiple of 16, <= 128), ``tiles``, ``groups`` (AI core groups = block_dim), the cube
    tiling (bm = R, bn = E) and the v4 gating tiling of one AIV's half tile (ceil(R / 2) rows)."""

    def __init__(self, n, h, e, k, rows, groups, cube: CubeTiling, gating: MoeGatingV4Tiling):
        self.n, self.h, self.e, self.k, self.rows, self.groups = n, h, e, k, rows, groups
        self.tiles = -(-n // rows)
        self.cube, self.gating = cube, gating

    def tile_rows(self, tile: int) -> int:
        return min(self.rows, self.n - tile * self.rows)

    def group_tiles(self, group: int) -> list[int]:
        return list(range(group, self.tiles, self.groups))

    def __repr__(self):
        return (f"FusedRouterPlan(N={self.n}, H={self.h}, E={self.e}, K={self.k}, rows={self.rows}, "
                f"tiles={self.tiles}, groups={self.groups}, {self.cube})")


def _whole(name, v, lo=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def _best_rows(n: int, h: int, e: int, cap: int, groups: int) -> int:
    """R minimising the busiest group's GM reads, rounds · (R·H + H·E) (every tile reads its R rows
    of hidden and all of W_router); ties go to the smaller R (more tiles, more overlap)."""
    best = None
    for r in range(16, min(cap, round16(n)) + 1, 16):
        rounds = -(-(-(-n // r)) // groups)
        score = rounds * (r * h + h * e)
        if best is None or score < best[0]:
            best = (score, r)
    return best[1]


def fused_router_plan(num_tokens: int, hidden_dim: int, num_experts: int, top_k: int, *,
                      hw: HardwareSpec | str = "ascend-910b2", rows: int | None = None) -> FusedRouterPlan:
    """Tile rows R (a multiple of 16, at most 128 and what one L0C tile holds, R·round16(E)·4 B):
    the R of :func:`_best_rows` -- W_router is read again by every tile, so fewer, larger tiles
    read less; more tiles let the AIVs' gating of one overlap the AIC's next. ``rows`` overrides."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    n, h, e, k = (_whole(a, b) for a, b in (("num_tokens", num_tokens), ("hidden_dim", hidden_dim),
                                            ("num_experts", num_experts), ("top_k", top_k)))
    if k > e:
        raise ValueError(f"top_k = {k} > num_experts = {e}: a token cannot pick more experts than there are")
    if k > MAX_K or e > MAX_E:
        raise ValueError(f"the fused router's gating is the v4 perf template: K <= {MAX_K} and E <= {MAX_E}; "
                         f"got K = {k}, E = {e} (run the router GEMM and moe_gating_topk separately)")
    cap = 128
    while cap > 16 and cap * round16(e) * 4 > hw.l0c_bytes:
        cap -= 16
    if rows is None:
        rows = _best_rows(n, h, e, cap, hw.cube_cores)
    else:
        rows = _whole("rows", rows)
        if rows % 16 or rows > cap:
            raise ValueError(f"rows must be a multiple of 16 <= {cap} (an fp32 [rows, E = {e}] tile in the "
                             f"{hw.l0c_bytes} B L0C); got {rows}")
    tiles = -(-n // rows)
    groups = min(hw.cube_cores, tiles)
    cube = pick_cube_tiling(rows, e, h, hw)
    one = hw.replace(vector_cores=1, provenance_note="one AIV's half of a router tile")
    gating = calculate_moe_gating_v4_tiling(1, -(-rows // 2), e, k, one)
    return FusedRouterPlan(n, h, e, k, rows, groups, cube, gating)


class _HalfTileGating(_V4):
    """The v4 gating on one AIV's half of a router tile: the same Init / CopyIn / Compute /
    CopyOut methods (sorted_topk.py), pointed at the workspace slot and the outputs' rows."""

    def __init__(self, ctx, t: MoeGatingV4Tiling):
        self.ctx, self.t = ctx, t
        self.E, self.K, self.C = t.col, t.k, t.colAlign
        self.chunks = self.C // 32
        self.fast = _k1_fast_path(t.col, t.k)
        self.dtype = np.dtype(np.float32)

    def rows(self, x_gm, idx_gm, w_gm, r: int):
        """Gate ``r`` rows of ``x_gm`` (fp32 logits, E per row) into ``idx_gm`` / ``w_gm``."""
        self.x_gm, self.idx_gm, self.w_gm = x_gm, idx_gm, w_gm
        u = self.t.ubFormer
        loops = [u] * (r // u) + ([r % u] if r % u else [])     # none for an AIV without rows
        for i, ri in enumerate(loops):
            if i == 0:
                self.copy_in(0, ri)
            self.compute(i, ri)
            if i + 1 < len(loops):
                self.copy_in(i + 1, loops[i + 1])      # prefetch into the other VECIN slot
            self.copy_out(i, ri)


@npu_kernel(mix=(1, 2))
def fused_router_gating_kernel(ctx, x_gm: GlobalTensor, w_gm: GlobalTensor, ws_gm: GlobalTensor,
                               idx_gm: GlobalTensor, weight_gm: GlobalTensor, plan: FusedRouterPlan,
                               drop_wait: str | None = None):
    """``__mix__(1, 2)``: x [N, H] fp16, W_router [H, E] fp16, ws [groups, 2, R, E] fp32, indices
    [N, K] int32, weights [N, K] fp32 (module docstring). ``drop_wait`` ("aic" / "aiv"): leave out
    that side's ordering wait (the AIC's slot wait, moved after the loop so the counts still pair;
    the AIVs' tile wait) -- what the race detector must catch (tests only)."""
    p = plan
    R, E, H, K = p.rows, p.e, p.h, p.k
    if ctx.is_aic():
        g = ctx.get_block_idx()
        tiles = p.group_tiles(g)
        qs = cube_queues(ctx, p.cube)
        for i, tile in enumerate(tiles):
            if i >= SLOTS and drop_wait != "aic":
                ctx.cross_core_wait_flag(1)            # both AIVs are done with this slot's last tile
            vm = p.tile_rows(tile)
            row0 = tile * R

            def fill_a(a1, kc, vkc, m16, row0=row0, vm=vm):
                ctx.data_copy(a1, x_gm[row0 * H + kc], Nd2NzParams(1, vm, vkc, 0, H, m16, 1, 0))

            c = cube_tile(ctx, p.cube, qs, fill_a, w_gm, 0, vm, E, H, E)
            fixpipe_out(ctx, qs[4], ws_gm[(g * SLOTS + i % SLOTS) * R * E], c, vm, E, E)
            ctx.cross_core_set_flag(2, "PIPE_FIX", 0)  # tile i is in the workspace: release both AIVs
        waited = max(0, len(tiles) - SLOTS) if drop_wait != "aic" else 0
        for _ in range(len(tiles) - waited):
            ctx.cross_core_wait_flag(1)                # pair the AIVs' last sets
    else:
        g, sub = ctx.get_block_idx() // 2, ctx.get_sub_block_idx()
        op = _HalfTileGating(ctx, p.gating)
        op.init()
        op.compute_phase0()
        for i, tile in enumerate(p.group_tiles(g)):
            if drop_wait != "aiv":
                ctx.cross_core_wait_flag(0)
            vm = p.tile_rows(tile)
            half = -(-vm // 2)
            r = max(0, min(half, vm - sub * half))
            first = min(tile * R + sub * half, p.n - 1)
            op.rows(ws_gm[(g * SLOTS + i % SLOTS) * R * E + sub * half * E], idx_gm[first * K],
                    weight_gm[first * K], r)
            ctx.cross_core_set_flag(2, "PIPE_MTE3", 1)  # this AIV's half is out: the AIC may reuse the slot


def fused_router_reference(hidden, router_weight, top_k: int):
    """The unfused numbers: logits = fp16 hidden · fp16 W_router with fp32 products and sums, then
    ``moe_gating_topk_reference`` (softmax over the top-K). Returns (indices, weights, logits)."""
    x = np.asarray(hidden).astype(np.float16).astype(np.float32)
    w = np.asarray(router_weight).astype(np.float16).astype(np.float32)
    logits = x @ w
    idx, wt = moe_gating_topk_reference(logits, top_k)
    return idx, wt, logits


def fused_router_gating(hidden, router_weight, top_k: int, *, hw: HardwareSpec | str = "ascend-910b2",
                        timing_only: bool = False, rows: int | None = None, drop_wait: str | None = None):
    """Router logits and gating in one mixed launch: ``hidden`` [N, H] and ``router_weight``
    [H, E] (cast to float16; timing-only: the shapes ``(N, H)``, ``(H, E)``). Returns
    ``(indices int32 [N, K], weights float32 [N, K], timeline)`` (None, None timing-only)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if timing_only and isinstance(hidden, tuple):
        if not isinstance(router_weight, tuple) or len(hidden) != 2 or len(router_weight) != 2:
            raise ValueError("timing-only: pass the shapes (N, H) and (H, E)")
        (n, h), (h2, e) = hidden, router_weight
        x = w = None
    else:
        x, w = np.asarray(hidden), np.asarray(router_weight)
        if x.ndim != 2 or 0 in x.shape or x.dtype.kind != "f":
            raise ValueError(f"hidden must be a float array [N, H] with N, H >= 1; got {x.shape} {x.dtype}")
        if w.ndim != 2 or w.dtype.kind != "f":
            raise ValueError(f"router_weight must be a float array [H, E]; got {w.shape} {w.dtype}")
        if not (np.isfinite(x).all() and np.isfinite(w).all()):
            raise ValueError("hidden and router_weight must be finite (the gating refuses NaN / inf logits)")
        (n, h), (h2, e) = x.shape, w.shape
    if h != h2:
        raise ValueError(f"hidden is [N, H = {h}] but router_weight is [{h2}, E]: its first dimension must be H")
    if drop_wait not in (None, "aic", "aiv"):
        raise ValueError(f"drop_wait must be None, 'aic' or 'aiv'; got {drop_wait!r}")
    p = fused_router_plan(n, h, e, top_k, hw=hw, rows=rows)
    if timing_only:
        x_gm = GlobalTensor.empty(n * h, np.float16, "hidden", timing_only=True)
        w_gm = GlobalTensor.empty(h * e, np.float16, "router_weight", timing_only=True)
    else:
        x_gm = GlobalTensor.from_array(np.ascontiguousarray(x, np.float16), "hidden")
        w_gm = GlobalTensor.from_array(np.ascontiguousarray(w, np.float16), "router_weight")
    ws = GlobalTensor.empty(p.groups * SLOTS * p.rows * e, np.float32, "workspace", timing_only=timing_only)
    idx = GlobalTensor.empty(n * p.k, np.int32, "indices", timing_only=timing_only)
    wt = GlobalTensor.empty(n * p.k, np.float32, "weights", timing_only=timing_only)
    tl = launch(fused_router_gating_kernel, p.groups, x_gm, w_gm, ws, idx, wt, p, drop_wait, hw=hw,
                timing_only=timing_only, name="router_gating_fused")
    if timing_only:
        return None, None, tl
    return idx.data.reshape(n, p.k).copy(), wt.data.reshape(n, p.k).copy(), tl


def unfused_router_gating_timeline(n: int, h: int, e: int, k: int, *, hw: HardwareSpec | str = "ascend-910b2",
                                   gemm_version: str = "v3", gating_version: str = "v4") -> Timeline:
    """The unfused chain's timeline (timing-only): the cube GEMM launch [N, H]·[H, E] (fp32 logits
    to GM) then the gating launch (reads them back)."""
    from ..gemm import gemm
    from ..moe_gating.run import simulate_moe_gating

    hw = get_preset(hw) if isinstance(hw, str) else hw
    _, t1 = gemm((n, h), (h, e), version=gemm_version, hw=hw, timing_only=True, dtype=np.float16,
                 out_dtype=np.float32)
    t2 = simulate_moe_gating(1, n, e, k, version=gating_version, hw=hw).timeline
    return Timeline.concat([t1, t2])
