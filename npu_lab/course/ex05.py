"""Exercise checks for notebook 05 (double buffering).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
"""

from __future__ import annotations

import math

from .checks import (parse_word, PERCENT, US, CheckResult, missing as _missing, parse_number as _number,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import simulate_moe_gating
from .pipeline_diagram import STAGES, period_formula, stage_durations, steady_state_period
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_steady_state_period', 'check_v2_pacing_stage', 'check_db_gain_one_tile_per_block', 'PERIOD_EXERCISE']

#: Exercise 05.1's tile loop: load, compute, store (µs per tile).
PERIOD_EXERCISE = (2.0, 5.0, 3.0)


def check_steady_state_period(answer) -> CheckResult:
    """A tile loop takes load 2 µs, compute 5 µs and store 3 µs per tile. With **two** buffers per
    queue, how many µs does each extra tile add once the loop is running? Answer: µs."""
    if answer is None:
        return _missing("a number of microseconds")
    l, c, s = PERIOD_EXERCISE
    truth = steady_state_period(l, c, s, buffers=2)
    value = _number(answer, US)
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds.")
    if math.isclose(value, truth, abs_tol=1e-6):
        return _right(f"{truth:g} \u00b5s = max(load, compute, store): once the loop runs, the three "
                      "pipes work on three different tiles at once, and the slowest stage sets the pace. "
                      "The other two wait for it part of the time.")
    serial = steady_state_period(l, c, s, buffers=2, barrier=True)
    single, formula = period_formula(l, c, s, buffers=1)
    if math.isclose(value, serial):
        return _wrong(f"{value:g} \u00b5s = load + compute + store is the period with NO overlap (one "
                      "buffer with a barrier, or the pitfall). Hint: with two slots, which stages of "
                      "different tiles can run at the same time?")
    if math.isclose(value, single):
        return _wrong(f"{value:g} \u00b5s = {formula} is the single-buffer period: only the load of the "
                      "next tile overlaps the store of this one. With two buffers more can overlap. Hint: "
                      "pipeline_schedule(8, 2, 5, 3, buffers=2), then look at when the stores end.")
    return _wrong(f"{value:g} \u00b5s is not it. Hint: draw the boxes with "
                  "pipeline_figure(pipeline_schedule(6, 2, 5, 3, buffers=2)) and measure the gap "
                  "between two consecutive stores.")


_STAGE_ALIASES = {"load": "load", "copy-in": "load", "copy in": "load", "copyin": "load", "mte2": "load",
                  "compute": "compute", "s": "compute", "scalar": "compute", "v": "compute",
                  "store": "store", "copy-out": "store", "copy out": "store", "copyout": "store",
                  "mte3": "store"}


def check_v2_pacing_stage(answer, tile_s: int = 8) -> CheckResult:
    """In v2 at tileS = 8 (the article's shape, 910B2 preset), which stage sets the pace of the
    loop: ``'load'``, ``'compute'`` or ``'store'``?"""
    if answer is None:
        return _missing("'load', 'compute' or 'store'")
    one_tile = simulate_moe_gating(*SHAPE, version="v1", hw=CHIP, tile_s=tile_s).timeline
    d = stage_durations(one_tile)
    truth = max(STAGES, key=d.get)
    table = ", ".join(f"{k} {v:.2f} \u00b5s" for k, v in d.items())
    given = parse_word(answer, _STAGE_ALIASES)
    if given is None:
        return _wrong(f"Answer 'load', 'compute' or 'store' (or a pipe name), not {answer!r}.")
    hw = get_preset(CHIP)
    if given == truth:
        return _right(f"One tile of {tile_s} points takes {table}. The store is the slowest: v1/v2 copy "
                      f"each point's {SHAPE[3]} indices and {SHAPE[3]} weights out separately, "
                      f"{2 * tile_s} DMAs of {4 * SHAPE[3]} bytes, and each pays the fixed DMA latency "
                      f"({hw.cycles_to_us(hw.dma_latency_cycles):.2f} \u00b5s). v2c (and v3) store the whole "
                      "tile with two DMAs.")
    return _wrong(f"{given} is not the slowest stage. Hint: stage_durations(v1_run.timeline) gives "
                  "the three durations of one tile; count the DMAs each stage issues per tile.")


def check_db_gain_one_tile_per_block(answer, tile_s: int = 32) -> CheckResult:
    """At tileS = 32 the article's shape has 32 tiles — fewer than the 910B2's 48 vector cores.
    By how many percent is v2 faster than v1 there? Answer: a percentage (e.g. 12 for 12 %)."""
    if answer is None:
        return _missing("a percentage, e.g. 12")
    v1 = simulate_moe_gating(*SHAPE, version="v1", hw=CHIP, tile_s=tile_s)
    v2 = simulate_moe_gating(*SHAPE, version="v2", hw=CHIP, tile_s=tile_s)
    truth = 100 * (1 - v2.latency_us / v1.latency_us)
    value = _number(answer, PERCENT)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    evidence = (f"v1 {v1.latency_us:.2f} \u00b5s with {v1.block_dim} blocks, v2 {v2.latency_us:.2f} \u00b5s "
                f"with {v2.block_dim} blocks: {truth:.1f} %")
    if abs(value - truth) <= 1.0:
        return _right(f"{evidence}. Each block gets exactly one tile, so there is no next tile whose load "
                      "could overlap this tile's compute: the second buffer sits idle. Double buffering "
                      "needs several tiles per core.")
    if 0 < value <= 1 and abs(100 * value - truth) <= 1.0:
        return _wrong(f"{value:g} looks like a fraction; the answer is wanted in percent.")
    return _wrong(f"The model does not say {value:g} %. Hint: how many tiles does each v2 block loop "
                  "over when there are 32 tiles and 48 cores? What could the second buffer hold?")


# ---- kernel exercises ---------------------------------------------------------------------------
# 05.prefetch: write CopyIn and place the prefetch that turns v1's order into v2.
# 05.sync: the same kernel without the scalar unit's flags: add them.
# Both answers ARE the course's v2 (moe_gating_v2_kernel): the tests check the latencies agree.
import numpy as np  # noqa: E402

from ..kernels.moe_gating import MoeGatingTiling  # noqa: E402
from ..kernels.moe_gating.fused import (block_tiles, iteration_key, row_stride,  # noqa: E402
                                        scalar_topk_softmax)
from ..lang import (DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue,  # noqa: E402
                    npu_kernel)
from .kernel_check import (KernelExercise, moe_cases, moe_launcher, moe_locator, moe_reference,  # noqa: E402
                           moe_target, register_exercise)


@npu_kernel
def moe_v2_solution(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """MoeGatingTopK v2: each block loops over its tiles; tile j+1 is loaded into the other slot
    while the scalar unit computes tile j. Pipes: MTE2 (tile j+1) ‖ S (tile j) ‖ MTE3 (tile j-1)."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    E, K, T, size = t.E, t.K, t.tileBS, gate_gm.dtype.itemsize
    Es, Ks = row_stride(E, size), row_stride(K, 4)         # UB rows start on 32-byte blocks
    my_tiles = block_tiles(t, ctx.get_block_idx(), ctx.get_block_num())
    n = len(my_tiles)
    scores_q = TQue(TPosition.VECIN, 2)
    ctx.pipe.init_buffer(scores_q, 2, T * row_stride(E, 4) * 4, name="scores")
    values_buf, indices_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(values_buf, 2 * T * Ks * 4, name="topk_values")
    ctx.pipe.init_buffer(indices_buf, 2 * T * Ks * 4, name="topk_indices")
    out_v, out_i = values_buf.get(np.float32), indices_buf.get(np.int32)

    def rows_of(j):                                        # (first flat row, points) of tile j
        b0, _b1, s0, s1 = t.tile_range(my_tiles[j])
        return b0 * t.S + s0, s1 - s0

    def copy_in(j):
        first_row, points = rows_of(j)
        scores = scores_q.alloc_tensor(gate_gm.dtype)
        # YOUR CODE (05.prefetch): a slot is refilled only after S has read it (tile j-2: wait
        # S_MTE2 on event j % 2 when j >= 2); then one copy per point into a row of `scores`
        # (Es elements apart; DataCopyPad when E * size is not whole 32-byte blocks).
        ### BEGIN SOLUTION [05.prefetch]
        if j >= 2:
            ctx.wait_flag("S_MTE2", j % 2)
        for p in range(points):
            row = first_row + p
            if E * size % 32 == 0:
                ctx.data_copy(scores[p * Es], gate_gm[row * E], E)
            else:
                ctx.data_copy_pad(scores[p * Es], gate_gm[row * E], DataCopyExtParams(1, E * size, 0, 0, 0),
                                  DataCopyPadExtParams(False, 0, 0, 0))
        ### END SOLUTION [05.prefetch]
        # YOUR CODE (05.sync): tell the scalar unit the scores of slot j % 2 are loaded.
        ### BEGIN SOLUTION [05.sync]
        ctx.set_flag("MTE2_S", j % 2)
        ### END SOLUTION [05.sync]
        scores_q.enque(scores)

    copy_in(0)
    for j in ctx.tile_loop(n, key=iteration_key(t, my_tiles)):
        first_row, points = rows_of(j)
        # YOUR CODE (05.prefetch): start loading the next tile here, so MTE2 works while S computes.
        ### BEGIN SOLUTION [05.prefetch]
        if j + 1 < n:
            copy_in(j + 1)
        ### END SOLUTION [05.prefetch]
        scores = scores_q.deque(gate_gm.dtype)
        # YOUR CODE (05.sync): the scalar unit must wait for this slot's load, and (from j = 2 on)
        # for the stores of tile j-2 that used this output slot (MTE3_S).
        ### BEGIN SOLUTION [05.sync]
        ctx.wait_flag("MTE2_S", j % 2)
        if j >= 2:
            ctx.wait_flag("MTE3_S", j % 2)
        ### END SOLUTION [05.sync]
        values, indices = out_v[(j % 2) * T * Ks], out_i[(j % 2) * T * Ks]
        for p in range(points):
            scalar_topk_softmax(ctx, scores[p * Es], values[p * Ks], indices[p * Ks], E, K)
        if j + 2 < n:
            ctx.set_flag("S_MTE2", j % 2)                  # the slot may be refilled (tile j+2)
        scores_q.free_tensor(scores)
        ctx.set_flag("S_MTE3", j % 2)                      # results in UB: the stores may start
        ctx.wait_flag("S_MTE3", j % 2)
        for p in range(points):
            row = first_row + p
            ctx.data_copy_pad(indices_gm[row * K], indices[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
            ctx.data_copy_pad(weights_gm[row * K], values[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
        if j + 2 < n:
            ctx.set_flag("MTE3_S", j % 2)                  # the output slot may be rewritten (tile j+2)


MOE_TIMED = {"B": 1, "S": 2048, "E": 64, "K": 2, "dtype": "float32", "label": "B=1, S=2048, E=64, K=2, float32"}
_MOE_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
                "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue\n"
                "from npu_lab.kernels.moe_gating import MoeGatingTiling\n"
                "from npu_lab.kernels.moe_gating.fused import block_tiles, iteration_key, row_stride, scalar_topk_softmax")

register_exercise(KernelExercise(
    id="05.prefetch", notebook="ex05", title="Place the prefetch: v1's order becomes v2",
    teaches="CopyIn written by hand (a copy per point, DataCopyPad for rows that are not whole blocks) and "
            "where the next tile's load goes so MTE2 overlaps S; a slot is refilled only after S read it",
    solution=moe_v2_solution, cell_name="my_moe_v2", imports=_MOE_IMPORTS,
    place_after="## The kernel (after 'Why the flags'), before ## The timeline: v2 beside v1",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v2"), reference=moe_reference,
    locate=moe_locator("v2"), target=moe_target("v2", MOE_TIMED, factor=1.02, label="the course's v2 + 2 %"),
    target_case=MOE_TIMED, speed=True,
    slow_hint="look at MTE2 and S in the timeline: does the next tile's load run while S computes? "
              "Issue copy_in(j + 1) before this tile's compute, not after its stores"))

register_exercise(KernelExercise(
    id="05.sync", notebook="ex05", title="Add the flags a scalar kernel needs",
    teaches="a TQue syncs MTE2->V and V->MTE3 only: when the scalar unit reads loaded data it needs "
            "SetFlag/WaitFlag<MTE2_S>, and a reused output slot MTE3_S; a missing one is a RaceError",
    solution=moe_v2_solution, cell_name="my_moe_v2_sync", imports=_MOE_IMPORTS,
    place_after="### Why the flags: a queue does not sync the scalar unit (before ## Check against the reference)",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v2"), reference=moe_reference,
    locate=moe_locator("v2"), target=moe_target("v2", MOE_TIMED, factor=1.02, label="the course's v2 + 2 %"),
    target_case=MOE_TIMED, speed=True,
    slow_hint="a flag waited too early serialises the pipes: wait only for what this tile needs"))
