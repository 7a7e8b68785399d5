"""Exercise checks for notebook 05 (double buffering).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
Each exercise varies the case the notebook demonstrates (other stage times, another tileS or S),
so its answer is not printed above it; :func:`expected_answers` gives every check's truth,
computed by the same function the check uses.
"""

from __future__ import annotations

import math

from .checks import checked_keywords
from .checks import (PERCENT, US, CheckResult, missing as _missing, parse_number as _number,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import simulate_moe_gating
from .pipeline_diagram import STAGES, handoff_costs, period_formula, stage_durations, steady_state_period
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_steady_state_period', 'check_v2_tile_period', 'check_db_gain_two_tiles_per_core', 'PERIOD_EXERCISE',
           'PERIOD_BUFFERS', 'expected_answers', 'exercise_period_us', 'v2_tile_period_us', 'db_gain_pct']

#: Exercise 05.1's tile loop: load, compute, store (µs per tile), and its number of buffers per queue.
PERIOD_EXERCISE = (4.2, 8.9, 4.4)
PERIOD_BUFFERS = 1
#: Exercise 05.2: v2's loop at this tileS on this preset (the notebook measures tileS = 8 on both presets).
PERIOD_TILE_S = 12
PERIOD_CHIP = "article"
#: Exercise 05.3: S and tileS with more tiles than cores, but fewer than two per core.
DB_GAIN_CASE = dict(S=2048, tile_s=32)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 05, by check name (computed as the checks compute it)."""
    return {"check_steady_state_period": exercise_period_us(),
            "check_v2_tile_period": v2_tile_period_us(),
            "check_db_gain_two_tiles_per_core": db_gain_pct()}


def exercise_period_us() -> float:
    """Steady-state period (µs) of :data:`PERIOD_EXERCISE` with :data:`PERIOD_BUFFERS` buffers."""
    return steady_state_period(*PERIOD_EXERCISE, buffers=PERIOD_BUFFERS)


def check_steady_state_period(answer) -> CheckResult:
    """A tile loop takes load 4.2 µs, compute 8.9 µs and store 4.4 µs per tile. With **one** buffer per
    queue, how many µs does each extra tile add once the loop is running? Answer: µs."""
    if answer is None:
        return _missing("a number of microseconds")
    l, c, s = PERIOD_EXERCISE
    truth = exercise_period_us()
    value = _number(answer, US)
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds.")
    _, formula = period_formula(l, c, s, buffers=PERIOD_BUFFERS)
    if math.isclose(value, truth, abs_tol=1e-6):
        return _right(f"{truth:g} \u00b5s = {formula}. With {PERIOD_BUFFERS} buffer(s) per queue, the load of the "
                      "next tile needs the input slot the compute is still reading, and the compute needs the "
                      "output slot the store is still reading: only the next load and this store overlap.")
    serial = steady_state_period(l, c, s, buffers=2, barrier=True)
    overlapped = steady_state_period(l, c, s, buffers=2)
    if math.isclose(value, serial):
        return _wrong(f"{value:g} \u00b5s = load + compute + store is the period with NO overlap (a barrier "
                      "after every tile). Hint: with one slot per queue, which two stages of neighbouring tiles "
                      "can still run at the same time?")
    if math.isclose(value, overlapped):
        return _wrong(f"{value:g} \u00b5s = max(load, compute, store) is the period with two buffers. With one, "
                      "the compute of the next tile waits for this tile's store. Hint: pipeline_schedule(6, "
                      f"{l}, {c}, {s}, buffers={PERIOD_BUFFERS}), then the gap between two stores.")
    return _wrong(f"{value:g} \u00b5s is not it. Hint: draw the boxes with pipeline_figure(pipeline_schedule(6, "
                  f"{l}, {c}, {s}, buffers={PERIOD_BUFFERS})) and measure the gap between two consecutive stores.")


@checked_keywords
def v2_tile_period_us(tile_s: int = PERIOD_TILE_S, chip: str = PERIOD_CHIP) -> float:
    """The pace (µs per tile) of v2's loop at ``tile_s`` on ``chip``: the hand model's steady-state
    period with two buffers, from the three stages of one v1 tile (article shape) and the chip's
    hand-off costs — the slowest stage, unless a slot's round trip (with the DMA latency) is longer."""
    one_tile = simulate_moe_gating(*SHAPE, version="v1", hw=chip, tile_s=tile_s).timeline
    d = stage_durations(one_tile)
    return steady_state_period(*(d[s] for s in STAGES), buffers=2, **handoff_costs(chip))


@checked_keywords
def check_v2_tile_period(answer, tile_s: int = PERIOD_TILE_S, chip: str = PERIOD_CHIP) -> CheckResult:
    """In v2 at tileS = 12 (the article's shape, 'article' preset), how many µs does each extra tile add
    to a block's loop, from the three stage times of one tile? Answer: µs (within 3 %)."""
    if answer is None:
        return _missing("a number of microseconds")
    d = stage_durations(simulate_moe_gating(*SHAPE, version="v1", hw=chip, tile_s=tile_s).timeline)
    truth = v2_tile_period_us(tile_s, chip)
    pacer = max(STAGES, key=d.get)              # the slowest stage (the truth is the period, which is
    #                                             this stage's time unless a slot round trip is longer)
    table = ", ".join(f"{k} {v:.2f} \u00b5s" for k, v in d.items())
    value = _number(answer, US)
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds.")
    hw = get_preset(chip)
    if abs(value - truth) <= 0.03 * truth:
        why = {"store": (f"v1/v2 copy each point's {SHAPE[3]} indices and {SHAPE[3]} weights out separately, "
                         f"{2 * tile_s} DMAs of {4 * SHAPE[3]} bytes, each paying the DMA issue cost at a tiny "
                         f"burst's low efficiency (at most {hw.dma_burst_efficiency_32b:g} of the bandwidth); v2c stores the "
                         "whole tile with two DMAs."),
               "compute": (f"on {hw.name} the scalar unit's UB access costs {hw.scalar_ub_access_cycles:.0f} cycles, so "
                           f"the {tile_s} heaps (each reading {SHAPE[2]} logits) dwarf the copies; only moving the "
                           "top-K to the vector unit (notebook 06) shortens it."),
               "load": "one DMA per point in, each paying the DMA issue cost at a small burst's efficiency; "
                        "v2c loads the whole tile in one."}[pacer]
        if truth > d[pacer] * 1.001:           # a slot's round trip, not one stage, is the pace
            why = (f"Here a slot's round trip (two stages plus the DMA latency and two flags, shared by two "
                   f"tiles) is longer than the {pacer} alone. {why}")
            return _right(f"One tile of {tile_s} points takes {table}; the loop's pace is {truth:.2f} \u00b5s, "
                          f"growing with the points per tile. {why}")
        return _right(f"One tile of {tile_s} points takes {table}: the {pacer} sets the pace at {truth:.2f} \u00b5s, "
                      f"growing with the points per tile. {why}")
    if abs(value - sum(d.values())) <= 0.03 * sum(d.values()):
        return _wrong(f"{value:g} \u00b5s is load + compute + store: that is v1 (one buffer and a wait). With "
                      "two buffers, which stage alone sets the pace?")
    return _wrong(f"{value:g} \u00b5s is not it. Hint: at tileS = 8 the notebook printed the three stages; "
                  "each stage issues one DMA or one heap per point, so how do they scale with tileS? Or measure: "
                  f"stage_durations(simulate_moe_gating(1, 1024, 64, 2, version='v1', tile_s={tile_s}).timeline).")


@checked_keywords
def db_gain_pct(S: int = DB_GAIN_CASE["S"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> float:
    """Percent by which v2 cuts v1's latency at (1, S, 64, 2), ``tile_s``, 910B2 preset."""
    v1, v2 = (simulate_moe_gating(1, S, SHAPE[2], SHAPE[3], version=v, hw=CHIP, tile_s=tile_s).latency_us
              for v in ("v1", "v2"))
    return 100 * (1 - v2 / v1)


@checked_keywords
def check_db_gain_two_tiles_per_core(answer, S: int = DB_GAIN_CASE["S"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> CheckResult:
    """At S = 2048 and tileS = 32 there are 64 tiles for the 910B2's 48 vector cores (E = 64, K = 2).
    By how many percent is v2 faster than v1 there? Answer: a percentage (e.g. 12 for 12 %)."""
    if answer is None:
        return _missing("a percentage, e.g. 12")
    E, K = SHAPE[2], SHAPE[3]
    v1 = simulate_moe_gating(1, S, E, K, version="v1", hw=CHIP, tile_s=tile_s)
    v2 = simulate_moe_gating(1, S, E, K, version="v2", hw=CHIP, tile_s=tile_s)
    truth = db_gain_pct(S, tile_s)
    value = _number(answer, PERCENT)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    tiles = v1.block_dim
    evidence = (f"v1 {v1.latency_us:.2f} \u00b5s with {tiles} blocks, v2 {v2.latency_us:.2f} \u00b5s "
                f"with {v2.block_dim} blocks: {truth:.1f} %")
    if abs(value - truth) <= 1.0:
        return _right(f"{evidence}. v1 runs its {tiles} blocks in two waves, one tile after the other on the "
                      f"busiest cores; in v2 the {tiles - v2.block_dim} cores with a second tile load it while "
                      "they compute the first. Double buffering needs at least two tiles per core, and the slowest "
                      "core sets the latency.")
    if 0 < value <= 1 and abs(100 * value - truth) <= 1.0:
        return _wrong(f"{value:g} looks like a fraction; the answer is wanted in percent.")
    return _wrong(f"The model does not say {value:g} %. Hint: how many tiles does the busiest v2 block loop "
                  "over when there are 64 tiles and 48 cores? What could the second buffer hold?")


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


def load_tile_rows(ctx, j, scores, gate_gm, first_row, points, E, Es):
    """CopyIn of tile ``j`` into slot ``j % 2``, as v2 does it: from the third tile on, wait until the
    scalar unit has read the slot (tile j-2: S_MTE2), then one copy per point into a row of
    ``scores`` (rows ``Es`` elements apart), DataCopyPad when a row is not whole 32-byte blocks
    (pipe MTE2). Exercise 05.prefetch writes this itself; 05.sync's skeleton calls it, so the flags
    05.sync asks for are all that cell leaves out."""
    size = gate_gm.dtype.itemsize
    if j >= 2:
        ctx.wait_flag("S_MTE2", j % 2)
    for p in range(points):
        row = first_row + p
        if E * size % 32 == 0:
            ctx.data_copy(scores[p * Es], gate_gm[row * E], E)
        else:
            ctx.data_copy_pad(scores[p * Es], gate_gm[row * E], DataCopyExtParams(1, E * size, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))


def prefetched_tiles(ctx, n, copy_in, key):
    """The tile loop of 05.sync's cell with v2's loads already placed: yields j = 0 .. n-1 (through
    ``ctx.tile_loop(n, key=key)``), having called ``copy_in`` for every tile that must be in flight
    by then. Exercise 05.prefetch asks where those calls go, so 05.sync's skeleton does not show
    them: that cell is about the flags alone."""
    copy_in(0)
    for j in ctx.tile_loop(n, key=key):
        if j + 1 < n:
            copy_in(j + 1)
        yield j


@npu_kernel
def moe_v2_sync_solution(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """MoeGatingTopK v2 (05.sync's cell): each block loops over its tiles; tile j+1 is loaded into
    the other slot while the scalar unit computes tile j. Pipes: MTE2 (tile j+1) ‖ S (tile j) ‖ MTE3."""
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

    def copy_in(j):                                        # the load of tile j into slot j % 2
        first_row, points = rows_of(j)
        scores = scores_q.alloc_tensor(gate_gm.dtype)
        load_tile_rows(ctx, j, scores, gate_gm, first_row, points, E, Es)   # waits for S to free the slot
        # YOUR CODE: tell the scalar unit the scores of slot j % 2 are loaded.
        ### BEGIN SOLUTION
        ctx.set_flag("MTE2_S", j % 2)
        ### END SOLUTION
        scores_q.enque(scores)

    for j in prefetched_tiles(ctx, n, copy_in, iteration_key(t, my_tiles)):   # loads are given
        first_row, points = rows_of(j)
        scores = scores_q.deque(gate_gm.dtype)
        # YOUR CODE: the scalar unit must wait for this slot's load, and (from j = 2 on)
        # for the stores of tile j-2 that used this output slot (MTE3_S).
        ### BEGIN SOLUTION
        ctx.wait_flag("MTE2_S", j % 2)
        if j >= 2:
            ctx.wait_flag("MTE3_S", j % 2)
        ### END SOLUTION
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
    solution=moe_v2_sync_solution, cell_name="my_moe_v2_sync",
    imports=_MOE_IMPORTS + "\nfrom npu_lab.course.ex05 import load_tile_rows, prefetched_tiles",
    place_after="### Why the flags: a queue does not sync the scalar unit (before ## Check against the reference)",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v2"), reference=moe_reference,
    locate=moe_locator("v2"), target=moe_target("v2", MOE_TIMED, factor=1.02, label="the course's v2 + 2 %"),
    target_case=MOE_TIMED, speed=True,
    slow_hint="a flag waited too early serialises the pipes: wait only for what this tile needs"))
