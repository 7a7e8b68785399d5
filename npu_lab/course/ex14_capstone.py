"""Notebook 14's capstone (issue 20 §5): write the grouped sigmoid + bias router kernel (the
DeepSeek-V3 routing: sigmoid scores, a selection-only bias, groups ranked by the sum of their two
best keys, the kept groups merged, the top K renormalised and scaled) from a skeleton.

Checked by :func:`npu_lab.course.kernel_check.check_kernel` (``check_kernel(fn, "14.router")``)
against the numpy reference ``moe_gating_topk_reference(x, k, score="sigmoid", bias=...,
num_groups=..., topk_groups=..., group_select="top2_sum", routed_scaling_factor=...)`` and a
latency target computed from the library's grouped kernel (:mod:`npu_lab.kernels.moe_gating.grouped`)
at a fixed shape.

The exercise kernel keeps the shape simple: 32 experts per group (one Sort32 chunk per group, as
DeepSeek-V3's 256 experts in 8 groups), K <= 8, at most 4 kept groups (one MrgSort). The tiling is
the library's :class:`~npu_lab.kernels.moe_gating.grouped.MoeGatingGroupedTiling` (rows per core,
rows per loop); the given code loads rows, sorts every group and writes the outputs. The learner
writes three regions: the scores and keys, the group choice, the weights.
"""

from __future__ import annotations

import numpy as np

from ..kernels.moe_gating.grouped import MoeGatingGroupedTiling, calculate_grouped_tiling, grouped_block_classes
from ..kernels.moe_gating.grouped_host import simulate_grouped
from ..kernels.moe_gating.reference import moe_gating_topk_reference
from ..lang import (BinaryRepeatParams, BrcbRepeatParams, DataCopyExtParams, DataCopyPadExtParams, MrgSort4Info,
                    MrgSortSrcList, TBuf, TPosition, TQue, launch, npu_kernel, GlobalTensor)
from ..presets import get_preset
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["capstone_router_solution", "CAPSTONE_TIMED", "TARGET_HEADROOM", "RouterBuffers", "rank_groups",
           "router_copy_in", "router_copy_out", "router_setup", "router_topk"]

#: the latency target is the library's grouped kernel at the timed shape times this factor: the
#: exercise kernel (fixed 32-expert groups, no merges inside a group) has room to beat it
TARGET_HEADROOM = 1.0
CAPSTONE_TIMED = {"N": 2048, "E": 256, "K": 8, "groups": 8, "kgroups": 4, "scale": 2.5,
                  "label": "N=2048, E=256 in 8 groups, keep 4, K=8 (DeepSeek-V3-like)"}


class RouterBuffers:
    """What :func:`router_setup` gives the capstone kernel: its tiling fields, queues, the bias row
    and the UB buffers (``get(name, dtype)``), the row split of this block."""


def router_setup(ctx, x_gm, bias_gm, tiling_bytes) -> RouterBuffers:
    """Given code of the capstone (the kernel's Init): unpack the tiling, InitBuffer every queue
    and buffer (256-B units: Sort32's alignment), load the bias row (MTE2), write Sort32's positions
    0..E-1 of every row and the Gather offset tables (SetValue), and order S before V."""
    t = MoeGatingGroupedTiling.unpack(tiling_bytes)
    o = RouterBuffers()
    o.t, o.E, o.K, o.Kp, o.groups, o.kg, o.R = t, t.col, t.k, t.kAlign, t.groups, t.kGroup, t.ubFormer
    E, K, Kp, groups, kg, R = o.E, o.K, o.Kp, o.groups, o.kg, o.R
    b = ctx.get_block_idx()
    last = b == t.blockNum - 1
    o.loops = t.ubLoopOfTailBlock if last else t.ubLoopOfFormerBlock
    o.rows = [R] * (o.loops - 1) + [t.ubTailOfTailBlock if last else t.ubTailOfFormerBlock]
    o.row0 = t.blockFormer * b
    o.half = -(-R * groups // 8) * 8                 # the second heads start on a 32-B block
    up = lambda nbytes: -(-nbytes // 256) * 256
    o.x_q, bias_q, o.out_q = TQue(TPosition.VECIN, 2), TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(o.x_q, 2, up(4 * R * E), name="x")
    ctx.pipe.init_buffer(bias_q, 1, up(4 * E), name="bias")
    ctx.pipe.init_buffer(o.out_q, 1, up(2 * 4 * R * Kp), name="out")     # weights [R, Kp], then indices
    bufs = {}
    for name, nbytes in (("pairs", 8 * R * E), ("final", 8 * R * kg * 32), ("norm", 4 * R * E), ("key", 4 * R * E),
                         ("index", 4 * R * E), ("gscore", 4 * 2 * R * groups + 32), ("goffs", 4 * 2 * R * groups + 32),
                         ("offs", 4 * 2 * R * Kp), ("rowbase", 4 * R * Kp), ("stat", 4 * R + 32),
                         ("bcast", 32 * R + 32)):
        bufs[name] = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(bufs[name], up(nbytes), name=name)
    o.get = lambda name, dt=np.float32: bufs[name].get(dt)
    bias = bias_q.alloc_tensor(np.float32)
    ctx.data_copy_pad(bias, bias_gm, DataCopyExtParams(1, E * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
    bias_q.enque(bias)
    o.bias = bias_q.deque(np.float32)
    index = o.get("index", np.int32)
    for i in range(R):
        ctx.create_vec_index(index[i * E], 0, E)
    offs, rowbase, goffs = o.get("offs", np.uint32), o.get("rowbase", np.int32), o.get("goffs", np.uint32)
    for i in range(R):
        for j in range(Kp):
            offs.set_value(i * Kp + j, (i * kg * 32 + min(j, K - 1)) * 8 + 4)   # index lane of final pair j
            rowbase.set_value(i * Kp + j, i * E * 4)
        for g in range(groups):
            goffs.set_value(i * groups + g, (i * E + g * 32) * 8)               # best key of group g
            goffs.set_value(o.half + i * groups + g, (i * E + g * 32) * 8 + 8)  # its second best
    ctx.duplicate(o.get("final"), 0.0, R * kg * 64)      # no stale positions before the first merge
    ev = ctx.pipe.fetch_event_id("S_V")
    ctx.set_flag("S_V", ev)
    ctx.wait_flag("S_V", ev)
    ctx.pipe_barrier("PIPE_V")
    return o


def router_copy_in(ctx, o: RouterBuffers, x_gm, i: int):
    """Loop i's rows of logits into a VECIN slot (DataCopyPad, one burst)."""
    x = o.x_q.alloc_tensor(np.float32)
    ctx.data_copy_pad(x, x_gm[(o.row0 + i * o.R) * o.E], DataCopyExtParams(1, o.rows[i] * o.E * 4, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    o.x_q.enque(x)


def router_topk(ctx, o: RouterBuffers, out, r: int):
    """The first K pairs of every final list: their positions (the indices, at out[R·Kp]) and the
    un-biased scores there (at out[0], [r, Kp])."""
    offs, rowbase = o.get("offs", np.uint32), o.get("rowbase", np.int32)
    idx, pos_off = out[o.R * o.Kp].reinterpret_cast(np.int32), offs[o.R * o.Kp].reinterpret_cast(np.int32)
    ctx.gather(idx, o.get("final").reinterpret_cast(np.int32), offs, 0, r * o.Kp)
    ctx.pipe_barrier("PIPE_V")
    ctx.muls(pos_off, idx, 4, r * o.Kp)
    ctx.pipe_barrier("PIPE_V")
    ctx.add(pos_off, pos_off, rowbase, r * o.Kp)
    ctx.pipe_barrier("PIPE_V")
    ctx.gather(out, o.get("norm"), pos_off.reinterpret_cast(np.uint32), 0, r * o.Kp)
    ctx.pipe_barrier("PIPE_V")


def router_copy_out(ctx, o: RouterBuffers, idx_gm, w_gm, i: int):
    """Loop i's indices and weights to GM (DataCopyPad, r blocks of K values)."""
    out = o.out_q.deque(np.float32)
    base, r = (o.row0 + i * o.R) * o.K, o.rows[i]
    ctx.data_copy_pad(idx_gm[base], out[o.R * o.Kp].reinterpret_cast(np.int32), DataCopyExtParams(r, o.K * 4, 0, 0, 0))
    ctx.data_copy_pad(w_gm[base], out, DataCopyExtParams(r, o.K * 4, 0, 0, 0))
    o.out_q.free_tensor(out)


def rank_groups(ctx, scores, kg: int):
    """The scalar unit's group ranking (charged as scalar work, ``groups · kg`` compares): the
    ``kg`` best of ``scores`` (a list of floats; equal: the lower group), returned in group order.
    A timing-only run reads zeros and gets groups 0..kg-1 (the cost does not depend on the choice)."""
    kept = ctx.scalar("rank groups", ops=len(scores) * kg, compute=lambda: sorted(
        np.argsort(-np.asarray(scores, np.float32), kind="stable")[:kg].tolist()))
    return list(range(kg)) if kept is None else kept


# ---- kernel exercises ---------------------------------------------------------------------------
@npu_kernel(block_classes=grouped_block_classes)
def capstone_router_solution(ctx, x_gm: GlobalTensor, bias_gm: GlobalTensor, idx_gm: GlobalTensor,
                             w_gm: GlobalTensor, tiling_bytes: bytes):
    """Grouped sigmoid + bias routing for groups of 32 experts. x_gm [N*E] float32, bias_gm [E]
    float32, idx_gm [N*K] int32, w_gm [N*K] float32. Per loop of r rows: DataCopyPad in (MTE2),
    scores, keys, Sort32, group choice, MrgSort, Gather, weights (V; the group ranking on S),
    DataCopyPad out (MTE3)."""
    o = router_setup(ctx, x_gm, bias_gm, tiling_bytes)      # buffers, the bias row, offset tables
    t, E, K, Kp, groups, kg = o.t, o.E, o.K, o.Kp, o.groups, o.kg
    norm, key, pairs, final, gs = (o.get(n) for n in ("norm", "key", "pairs", "final", "gscore"))
    goffs = o.get("goffs", np.uint32)
    stat, bcast, bias, half = o.get("stat"), o.get("bcast"), o.bias, o.half
    router_copy_in(ctx, o, x_gm, 0)
    for i in ctx.tile_loop(o.loops, key=lambda i: (o.rows[i], i + 1 < o.loops, i >= 2, i + 2 < o.loops)):
        r = o.rows[i]
        x = o.x_q.deque(np.float32)
        # YOUR CODE (14.router): the scores and the selection keys of r rows of E experts.
        #   norm = sigmoid(x) = 1 / (1 + exp(-x)): ctx.muls by -1.0, ctx.exp, ctx.adds 1.0,
        #   ctx.reciprocal, each over r * E elements (ctx.pipe_barrier("PIPE_V") between them);
        #   key = norm + bias, the same bias row for every row: for every 64-column chunk c,
        #   ctx.add(key[c], norm[c], bias[c], min(64, E - c), r, BinaryRepeatParams(1, 1, 1, E // 8, E // 8, 0)).
        ### BEGIN SOLUTION
        ctx.muls(norm, x, -1.0, r * E)
        ctx.pipe_barrier("PIPE_V")
        ctx.exp(norm, norm, r * E)
        ctx.pipe_barrier("PIPE_V")
        ctx.adds(norm, norm, 1.0, r * E)
        ctx.pipe_barrier("PIPE_V")
        ctx.reciprocal(norm, norm, r * E)
        ctx.pipe_barrier("PIPE_V")
        for c in range(0, E, 64):
            ctx.add(key[c], norm[c], bias[c], min(64, E - c), r, BinaryRepeatParams(1, 1, 1, E // 8, E // 8, 0))
        ### END SOLUTION
        ctx.pipe_barrier("PIPE_V")
        o.x_q.free_tensor(x)
        ctx.sort32(pairs, key, o.get("index", np.uint32), r * E // 32)   # every group sorted, with positions
        ctx.pipe_barrier("PIPE_V")
        # YOUR CODE (14.router): choose the groups. Gather every group's best key
        #   (ctx.gather(gs, pairs, goffs, 0, r * groups)) and its second best (goffs[half:] into gs[half]),
        #   add them (top-2 sum), then a "V_S" flag (the scalar unit reads what V wrote). For each row q:
        #   read its group scores (gs.get_value), kept = rank_groups(ctx, scores, kg), and MrgSort the kept
        #   groups' lists (32 pairs each, at pairs[(q * E + g * 32) * 2]) in that (group) order into
        #   final[q * kg * 64]: MrgSort4Info((32,) * kg + (0,) * (4 - kg), False, (1 << kg) - 1, 1); one
        #   kept group: ctx.copy(..., 64, 1, CopyRepeatParams(1, 1, 8, 8)). End with an "S_V" flag.
        ### BEGIN SOLUTION
        ctx.gather(gs, pairs, goffs, 0, r * groups)
        ctx.gather(gs[half], pairs, goffs[half], 0, r * groups)
        ctx.pipe_barrier("PIPE_V")
        ctx.add(gs, gs, gs[half], r * groups)
        ctx.pipe_barrier("PIPE_V")
        ev = ctx.pipe.fetch_event_id("V_S")
        ctx.set_flag("V_S", ev)
        ctx.wait_flag("V_S", ev)
        for q in range(r):
            kept = rank_groups(ctx, [gs.get_value(q * groups + g) for g in range(groups)], kg)
            lists = [pairs[(q * E + g * 32) * 2] for g in kept]
            if kg == 1:
                ctx.copy(final[q * kg * 64], lists[0], 64, 1, CopyRepeatParams(1, 1, 8, 8))
            else:
                ctx.mrg_sort(final[q * kg * 64], MrgSortSrcList(*(lists + [lists[0]] * (4 - kg))),
                             MrgSort4Info((32,) * kg + (0,) * (4 - kg), False, (1 << kg) - 1, 1))
        ev = ctx.pipe.fetch_event_id("S_V")
        ctx.set_flag("S_V", ev)
        ctx.wait_flag("S_V", ev)
        ### END SOLUTION
        ctx.pipe_barrier("PIPE_V")
        out = o.out_q.alloc_tensor(np.float32)
        router_topk(ctx, o, out, r)                     # indices, and the un-biased scores in out [r, Kp]
        w = out
        # YOUR CODE (14.router): the weights in w [r, Kp] (row i's K values at w[i * Kp]):
        #   w = w / (sum of the row's first K + eps) * routed scaling. ctx.whole_reduce_sum(stat, w, K, r,
        #   1, 1, Kp // 8) sums each row, ctx.adds(stat, stat, t.eps, ...) adds eps, ctx.brcb(bcast, stat,
        #   ceil(r / 8), BrcbRepeatParams(1, 8)) spreads each row's sum over one 32-B block, then
        #   ctx.div(w, w, bcast, Kp, r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1)) and
        #   ctx.muls(w, w, t.routedScalingFactor, r * Kp).
        ### BEGIN SOLUTION
        ctx.whole_reduce_sum(stat, w, K, r, 1, 1, Kp // 8)
        ctx.pipe_barrier("PIPE_V")
        ctx.adds(stat, stat, t.eps, -(-r // 8) * 8)
        ctx.pipe_barrier("PIPE_V")
        ctx.brcb(bcast, stat, -(-r // 8), BrcbRepeatParams(1, 8))
        ctx.pipe_barrier("PIPE_V")
        ctx.div(w, w, bcast, Kp, r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
        ctx.pipe_barrier("PIPE_V")
        ctx.muls(w, w, t.routedScalingFactor, r * Kp)
        ### END SOLUTION
        ctx.pipe_barrier("PIPE_V")
        o.out_q.enque(out)
        if i + 1 < o.loops:
            router_copy_in(ctx, o, x_gm, i + 1)
        router_copy_out(ctx, o, idx_gm, w_gm, i)


_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import (BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams, GlobalTensor,\n"
            "                          MrgSort4Info, MrgSortSrcList)\n"
            "from npu_lab.course.ex14_capstone import rank_groups, router_copy_in, router_copy_out, router_setup, router_topk\n"
            "from npu_lab.kernels.moe_gating.grouped import grouped_block_classes")

from ..lang import CopyRepeatParams  # noqa: E402  (the solution's one-group copy)


def _cases(rng) -> list[dict]:
    """DeepSeek-like shapes: 8 groups keep 4, a tail loop, 2 groups keep 1, K = 1, then random ones."""
    fixed = [(37, 256, 8, 8, 4, 2.5), (300, 256, 8, 8, 4, 1.0), (5, 64, 2, 2, 1, 1.0), (50, 128, 1, 4, 2, 2.5),
             (1, 96, 3, 3, 3, 1.0)]
    for _ in range(2):
        groups = int(rng.integers(1, 9))
        kg = int(rng.integers(1, min(groups, 4) + 1))
        fixed.append((int(rng.integers(1, 120)), 32 * groups, int(rng.integers(1, min(8, 32 * kg) + 1)), groups, kg,
                      float(rng.choice([1.0, 2.5]))))
    return [{"N": n, "E": e, "K": k, "groups": g, "kgroups": kg, "scale": s,
             "label": f"N={n}, E={e} in {g} groups, keep {kg}, K={k}, scale {s}"} for n, e, k, g, kg, s in fixed]


def _inputs(case):
    rng = np.random.default_rng([case["N"], case["E"], case["K"], case["groups"]])
    x = rng.standard_normal((case["N"], case["E"])).astype(np.float32)
    bias = (rng.standard_normal(case["E"]) * 0.1).astype(np.float32)
    return x, bias


def _tiling(case, hw):
    return calculate_grouped_tiling(case["N"], case["E"], case["K"], hw, score="sigmoid", has_bias=True,
                                    num_groups=case["groups"], topk_groups=case["kgroups"], group_select="top2_sum",
                                    routed_scaling_factor=case["scale"])


def _launch(fn, case, hw, timing_only):
    """Host code: the grouped kernel's tiling, x [N, E] and bias [E] in GM, the outputs NaN / a
    marker until written."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    t = _tiling(case, hw)
    N, E, K = case["N"], case["E"], case["K"]
    if timing_only:
        gms = [GlobalTensor.empty(n, dt, name, timing_only=True) for n, dt, name in
               ((N * E, np.float32, "x"), (E, np.float32, "bias"), (N * K, np.int32, "indices"),
                (N * K, np.float32, "weights"))]
    else:
        x, bias = _inputs(case)
        gms = [GlobalTensor.from_array(x.reshape(-1), "x"), GlobalTensor.from_array(bias, "bias"),
               GlobalTensor.from_array(sentinel_array(N * K, np.int32), "indices"),
               GlobalTensor.from_array(sentinel_array(N * K, np.float32), "weights")]
    tl = launch(fn, t.blockNum, *gms, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"indices": gms[2].data.copy(), "weights": gms[3].data.copy()}), tl


def _reference(case) -> dict:
    x, bias = _inputs(case)
    idx, w = moe_gating_topk_reference(x, case["K"], score="sigmoid", bias=bias, num_groups=case["groups"],
                                       topk_groups=case["kgroups"], group_select="top2_sum",
                                       routed_scaling_factor=case["scale"])
    return {"indices": idx.reshape(-1), "weights": w.reshape(-1)}


def _locate(case, name, i) -> str:
    t = _tiling(case, get_preset("ascend-910b2"))
    row, slot = divmod(i, case["K"])
    block = row // t.blockFormer
    return f"{name}[{row}, {slot}]: block {block}, loop {(row - block * t.blockFormer) // t.ubFormer}"


def _target(hw):
    c = CAPSTONE_TIMED
    tl, _ = simulate_grouped(1, c["N"], c["E"], c["K"], hw=hw, score="sigmoid", bias=True, num_groups=c["groups"],
                             topk_groups=c["kgroups"], group_select="top2_sum", routed_scaling_factor=c["scale"])
    return tl.total_us * TARGET_HEADROOM, "the library's grouped routing kernel at this shape"


register_exercise(KernelExercise(
    id="14.router", notebook="ex14", title="Capstone: the grouped sigmoid + bias router",
    teaches="DeepSeek-V3's routing on the vector unit: sigmoid scores, a bias that changes which experts "
            "win but not their weights, groups ranked by their two best keys (Sort32 per group, Gather of the "
            "heads), the kept groups merged by MrgSort in group order (ties to the lower expert), and the K "
            "weights renormalised and scaled",
    solution=capstone_router_solution, cell_name="my_router", imports=_IMPORTS,
    place_after="## Capstone",
    cases=_cases, launch=_launch, reference=_reference, locate=_locate, target=_target,
    target_case=CAPSTONE_TIMED, speed=True, tolerance=(0.0, 0.0),
    slow_hint="compare with the library's grouped kernel: one instruction per row where one per loop would do?"))
