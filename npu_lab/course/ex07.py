"""Exercise checks for notebook 07 (tuning); the model-fit checks of its appendix are in :mod:`.ex07b`.

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
Each exercise asks about a shape the notebook does not print; :func:`expected_answers` gives every
check's truth, computed by the same function the check uses.
"""

from __future__ import annotations


from .checks import checked_keywords
from .checks import (US, CheckResult, missing as _missing, parse_number as _number,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import autotune, simulate_moe_gating
from ..kernels.moe_gating.fit_ranges import ARTICLE_FREE


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_fixed_tile_loss', 'check_sweet_spot_shift', 'expected_answers', 'fixed_tile_loss_pct',
           'sweet_spot_shift_us', 'FITTED_FIELDS']

#: The fields the 'article' preset fits (the library's choice, stated before the fit: :data:`ARTICLE_FREE`).
FITTED_FIELDS = ARTICLE_FREE
#: Exercise 07.1: v3 at this shape on the 910B2 preset, a fixed tileS = 8 against the tuner.
FIXED_TILE_CASE = dict(S=32768, E=128, K=4, tile_s=8)
#: Exercise 07.2: v1 on the 'article' preset at this (E, K), keeping the E = 64, K = 2 sweet spot.
SHIFT_CASE = dict(E=384, K=8)
#: tileS candidates of the 'article' preset's v1 sweet spot (the article's table goes to 32).
ARTICLE_TILES = [1, 2, 4, 8, 16, 32]


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 07, by check name (computed as the checks compute it)."""
    return {"check_fixed_tile_loss": fixed_tile_loss_pct(), "check_sweet_spot_shift": sweet_spot_shift_us()}


@checked_keywords
def fixed_tile_loss_pct(S: int = FIXED_TILE_CASE["S"], E: int = FIXED_TILE_CASE["E"], K: int = FIXED_TILE_CASE["K"],
                        tile_s: int = FIXED_TILE_CASE["tile_s"]) -> float:
    """Percent by which v3 at a fixed ``tile_s`` is slower than at the autotuner's tileS, (1, S, E, K), 910B2."""
    tuned = autotune(1, S, E, K, version="v3", hw=CHIP)
    fixed = simulate_moe_gating(1, S, E, K, version="v3", hw=CHIP, tile_s=tile_s).latency_us
    return 100 * (fixed / tuned.latency_us - 1)


def check_fixed_tile_loss(answer) -> CheckResult:
    """v3 at S = 32768, E = 128, K = 4 on the 910B2 preset: how many percent slower is a fixed tileS = 8
    than the tileS the autotuner picks? Answer: a percentage; within 2 points counts."""
    if answer is None:
        return _missing("a percentage, e.g. 15")
    S, E, K, tile_s = (FIXED_TILE_CASE[k] for k in ("S", "E", "K", "tile_s"))
    tuned = autotune(1, S, E, K, version="v3", hw=CHIP)
    truth = fixed_tile_loss_pct()
    value = _number(answer, ("%",))
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    fixed = simulate_moe_gating(1, S, E, K, version="v3", hw=CHIP, tile_s=tile_s)
    if abs(value - truth) <= 2:
        return _right(f"tileS={tile_s}: {fixed.latency_us:.1f} \u00b5s on {fixed.block_dim} blocks; the tuner: "
                      f"{tuned.reason}. {truth:.0f} % lost: v3's compute per tile is cheap, so every tile's fixed "
                      "costs (a DMA in, two out, the instruction issues) dominate, and bigger tiles spread them; "
                      "the UB (twice [tileS, E] for double buffering) sets the upper limit.")
    return _wrong(f"{value:g} % is not it. Hint: autotune(1, {S}, {E}, {K}, version='v3') and "
                  f"simulate_moe_gating(1, {S}, {E}, {K}, version='v3', tile_s={tile_s}).latency_us.")


@checked_keywords
def sweet_spot_shift_us(E: int = SHIFT_CASE["E"], K: int = SHIFT_CASE["K"]) -> float:
    """µs v1 loses on the 'article' preset at (1, 1024, E, K) by keeping the tileS that is best at E = 64, K = 2."""
    base = autotune(*SHAPE, version="v1", hw="article", candidates=ARTICLE_TILES).tile_s
    best = autotune(1, 1024, E, K, version="v1", hw="article", candidates=ARTICLE_TILES)
    kept = simulate_moe_gating(1, 1024, E, K, version="v1", hw="article", tile_s=base).latency_us
    return kept - best.latency_us


def check_sweet_spot_shift(answer) -> CheckResult:
    """On the 'article' preset v1 has a best tileS at E = 64, K = 2 (the autotuner's, printed in the
    notebook; not the article's tileS = 8, see the appendix 07b). At E = 384, K = 8 (S = 1024, tileS
    from 1 to 32), how many µs does keeping that tileS cost against the new best?
    Answer: µs (within 5 %, or 1 µs)."""
    if answer is None:
        return _missing("a number of microseconds")
    E, K = SHIFT_CASE["E"], SHIFT_CASE["K"]
    base = autotune(*SHAPE, version="v1", hw="article", candidates=ARTICLE_TILES).tile_s
    best = autotune(1, 1024, E, K, version="v1", hw="article", candidates=ARTICLE_TILES)
    truth = sweet_spot_shift_us()
    value = _number(answer, US)
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds.")
    if abs(value - truth) <= max(1.0, 0.05 * truth):
        direction = "down" if best.tile_s < base else ("up" if best.tile_s > base else "nowhere")
        return _right(f"tileS {base} -> {best.tile_s} ({direction}): {truth:.1f} \u00b5s. {best.reason}. Each point now "
                      f"costs far more scalar work (a heap of {K} over {E} experts), so the fixed per-block costs weigh "
                      "less against the work and spreading it over more, smaller blocks pays. The sweet spot moves "
                      "with the shape: the host needs a tuner or a bucket table, not one constant.")
    return _wrong(f"{value:g} \u00b5s is not it. Hint: autotune(1, 1024, {E}, {K}, version='v1', hw='article', "
                  f"candidates={ARTICLE_TILES}) gives the new best; simulate the same shape at tile_s={base}.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 07.pick_tile_s: a host function choosing tileS, checked against the autotuner.
# 07.faster: open — make the MoE kernel as fast as the course's v2c (computed); a leaderboard against the course's kernels.
import contextlib  # noqa: E402
import functools  # noqa: E402

import numpy as np  # noqa: E402

from ..kernels.moe_gating import MoeGatingTiling  # noqa: E402
from ..kernels.moe_gating.fused import block_tiles, iteration_key, row_stride, scalar_topk_softmax  # noqa: E402
from ..lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue, npu_kernel  # noqa: E402
from .kernel_check import (KernelCheckResult, KernelExercise, moe_cases, moe_launcher, moe_locator,  # noqa: E402
                           moe_reference, moe_target, register_exercise)

#: shapes the learner's tileS is timed on (v3, the 910B2), and how close to the tuner's best it must be
PICK_SHAPES = ((1, 1024, 64, 2), (1, 8192, 64, 8), (4, 512, 256, 4), (2, 4096, 128, 4), (1, 2048, 512, 8),
               (1, 256, 64, 2))
PICK_TOLERANCE = 0.05


def pick_tile_s_solution(B, S, E, K, hw):
    """The tileS the host should launch v3 with for this shape on chip ``hw`` — by a rule, in
    microseconds: no simulation (the host does not time candidates at launch)."""
    # YOUR CODE: return a whole number of points per tile, from the shape and the chip alone.
    # moe_ub_capacity(version, E, K, ub_bytes) is the largest tile whose buffers fit the UB;
    # get_preset(hw) has the chip's numbers (ub_bytes, vector_cores, ...). What did the heat
    # maps say v3 wants, and what stops it?
    ### BEGIN SOLUTION
    from npu_lab.kernels.moe_gating.ub_budget import moe_ub_capacity
    from npu_lab.presets import get_preset
    largest = min(S, moe_ub_capacity("v3", E, K, get_preset(hw).ub_usable_bytes))
    tile_s = 1
    while tile_s * 2 <= largest:          # the biggest power of two that fits: v3's fixed costs per
        tile_s *= 2                       # tile want few, big tiles; the UB caps them
    return tile_s
    ### END SOLUTION


@functools.lru_cache(maxsize=32)
def _tuned(B, S, E, K, hw):
    return autotune(B, S, E, K, version="v3", hw=hw)


class _SimulationForbidden(RuntimeError):
    """Raised inside a host rule that tries to simulate a launch."""


@contextlib.contextmanager
def _no_simulation():
    """Every simulated launch goes through ``npu_lab.lang.launch.launch``, which validates its
    block count first: while the learner's rule runs, that validation refuses."""
    import importlib
    launch_module = importlib.import_module("npu_lab.lang.launch")

    def refuse(*_args, **_kwargs):
        raise _SimulationForbidden("a host tiling rule must not simulate")

    original = launch_module._check_block_dim
    launch_module._check_block_dim = refuse
    try:
        yield
    finally:
        launch_module._check_block_dim = original


def _pick_check(fn, hw):
    lines, ok = [], True
    for B, S, E, K in PICK_SHAPES:
        try:
            with _no_simulation():
                tile_s = fn(B, S, E, K, hw)
        except _SimulationForbidden:
            return KernelCheckResult(
                f"Not yet: for B={B}, S={S}, E={E}, K={K} your function simulated a launch. The host picks "
                "tileS when the operator is called, in microseconds: it cannot time candidates (that is "
                "what autotune does offline). Write a rule from the shape and the chip's numbers — what "
                "did the heat maps say v3 wants, and what stops it?", False)
        except Exception as exc:
            from .kernel_check import _error_result
            return _error_result(exc, fn, {"label": f"B={B}, S={S}, E={E}, K={K}"}, None)
        if tile_s is None:
            return KernelCheckResult("No answer yet: your function returns None; return a tileS.", None)
        if isinstance(tile_s, bool) or not isinstance(tile_s, (int, np.integer)) or not 1 <= tile_s <= S:
            return KernelCheckResult(f"Not yet: for B={B}, S={S}, E={E}, K={K} your function returned {tile_s!r}; "
                                     f"return a whole number from 1 to S = {S}.", False)
        best = _tuned(B, S, E, K, hw)
        try:
            mine = simulate_moe_gating(B, S, E, K, version="v3", hw=hw, tile_s=int(tile_s)).latency_us
        except Exception as exc:
            return KernelCheckResult(f"Not yet: tileS = {tile_s} does not run for B={B}, S={S}, E={E}, K={K}: "
                                     f"{exc}", False)
        good = mine <= best.latency_us * (1 + PICK_TOLERANCE)
        ok &= good
        lines.append(f"  B={B}, S={S}, E={E}, K={K}: your tileS={int(tile_s)} → {mine:.1f} µs; the tuner's "
                     f"best tileS={best.tile_s} → {best.latency_us:.1f} µs {'✓' if good else '✗'}")
    head = ("Right: within " if ok else "Not yet: not within ") + f"{PICK_TOLERANCE:.0%} of the autotuner on every shape."
    tail = "" if ok else ("\nHint: every v3 tile pays fixed costs (three copies, the issue of each vector "
                          "instruction), so fewer, bigger tiles win even with cores idle (the heat maps); "
                          "what caps the tile is the UB: moe_ub_capacity('v3', E, K, get_preset(hw).ub_usable_bytes).")
    return KernelCheckResult(head + "\n" + "\n".join(lines) + tail, ok)


register_exercise(KernelExercise(
    id="07.pick_tile_s", notebook="ex07", title="Pick tileS like the host: a rule, not a search",
    teaches="the host decides the tiling at call time, without timing candidates: v3's fixed costs per "
            "tile want few, big tiles, and the UB caps them (a rule checked against the autotuner)",
    solution=pick_tile_s_solution, cell_name="my_pick_tile_s",
    imports="from npu_lab.kernels.moe_gating.ub_budget import moe_ub_capacity\nfrom npu_lab.presets import get_preset",
    place_after="## The shape-bucket table (after the heat maps, before the table is printed)",
    kind="host", host_check=_pick_check))


@npu_kernel
def moe_faster_solution(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """A faster MoeGatingTopK: the course's v2 (looping blocks, prefetch) with one DMA per tile in
    and out instead of one per point (v2c): rows padded to Es in UB, results packed [points, K]."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    E, K, T, size = t.E, t.K, t.tileBS, gate_gm.dtype.itemsize
    Es = row_stride(E, size)
    my_tiles = block_tiles(t, ctx.get_block_idx(), ctx.get_block_num())
    n = len(my_tiles)
    scores_q = TQue(TPosition.VECIN, 2)
    ctx.pipe.init_buffer(scores_q, 2, T * row_stride(E, 4) * 4, name="scores")
    values_buf, indices_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(values_buf, 2 * T * row_stride(K, 4) * 4, name="topk_values")
    ctx.pipe.init_buffer(indices_buf, 2 * T * row_stride(K, 4) * 4, name="topk_indices")
    out_v, out_i = values_buf.get(np.float32), indices_buf.get(np.int32)
    Ks = row_stride(K, 4)

    def rows_of(j):
        b0, _b1, s0, s1 = t.tile_range(my_tiles[j])
        return b0 * t.S + s0, s1 - s0

    def copy_in(j):
        first_row, points = rows_of(j)
        if j >= 2:
            ctx.wait_flag("S_MTE2", j % 2)
        scores = scores_q.alloc_tensor(gate_gm.dtype)
        # YOUR CODE (or anything faster): this loads a copy per point, as v2 does.
        ### BEGIN SOLUTION
        if E * size % 32 == 0:
            ctx.data_copy(scores, gate_gm[first_row * E], points * E)
        else:
            ctx.data_copy_pad(scores, gate_gm[first_row * E], DataCopyExtParams(points, E * size, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))
        ### END SOLUTION
        ctx.set_flag("MTE2_S", j % 2)
        scores_q.enque(scores)

    copy_in(0)
    for j in ctx.tile_loop(n, key=iteration_key(t, my_tiles)):
        first_row, points = rows_of(j)
        if j + 1 < n:
            copy_in(j + 1)
        scores = scores_q.deque(gate_gm.dtype)
        ctx.wait_flag("MTE2_S", j % 2)
        if j >= 2:
            ctx.wait_flag("MTE3_S", j % 2)
        values, indices = out_v[(j % 2) * T * Ks], out_i[(j % 2) * T * Ks]
        for p in range(points):                            # results packed densely: [points, K]
            scalar_topk_softmax(ctx, scores[p * Es], values[p * K], indices[p * K], E, K)
        if j + 2 < n:
            ctx.set_flag("S_MTE2", j % 2)
        scores_q.free_tensor(scores)
        ctx.set_flag("S_MTE3", j % 2)
        ctx.wait_flag("S_MTE3", j % 2)
        # YOUR CODE: store the tile's points x K indices and weights to indices_gm / weights_gm
        # [first_row * K] (the results are packed: point p's at [p * K]).
        ### BEGIN SOLUTION
        ctx.data_copy_pad(indices_gm[first_row * K], indices, DataCopyExtParams(1, points * K * 4, 0, 0, 0))
        ctx.data_copy_pad(weights_gm[first_row * K], values, DataCopyExtParams(1, points * K * 4, 0, 0, 0))
        ### END SOLUTION
        if j + 2 < n:
            ctx.set_flag("MTE3_S", j % 2)


#: Timed at tileS = 128 with E = 16: tiles of many short rows, where a DMA per point costs (the course's v2c
#: is well under v2 here; at the article's E = 64 with the bucket table's tileS they are within 1 %).
FASTER_TIMED = {"B": 1, "S": 8192, "E": 16, "K": 2, "dtype": "float32", "tile_s": 128,
                "label": "B=1, S=8192, E=16, K=2, float32, tileS=128"}
LEADERBOARD_VERSIONS = ("v1", "v2", "v2c", "v3")


def _faster_target(hw):
    t = FASTER_TIMED
    v2, v2c = (simulate_moe_gating(t["B"], t["S"], t["E"], t["K"], version=v, hw=hw, tile_s=t["tile_s"]).latency_us
               for v in ("v2", "v2c"))
    return (v2 + v2c) / 2, (f"halfway between the course's v2 ({v2:.1f} µs, a copy per point) and v2c "
                            f"({v2c:.1f} µs, one copy per tile in and out)")


@checked_keywords
def leaderboard(latency_us: float, hw="ascend-910b2") -> str:
    """A latency table: the learner's kernel against the course's versions at FASTER_TIMED."""
    t = FASTER_TIMED
    rows = [(f"course {v}", simulate_moe_gating(t["B"], t["S"], t["E"], t["K"], version=v, hw=hw,
                                                tile_s=t["tile_s"]).latency_us)
            for v in LEADERBOARD_VERSIONS]
    rows.append(("your kernel", latency_us))
    rows.sort(key=lambda r: r[1])
    return "Leaderboard at " + FASTER_TIMED["label"] + ":\n" + "\n".join(
        f"  {i + 1}. {name:<12} {us:8.1f} µs" for i, (name, us) in enumerate(rows))


register_exercise(KernelExercise(
    id="07.faster", notebook="ex07", title="Make it faster (open)",
    teaches="putting the course together: start from v2 and beat it — coalesced DMA reaches the course's v2c; "
            "the scalar heap then sets the pace, and only the vector top-K (v3) goes far below — with the "
            "leaderboard as the judge",
    solution=moe_faster_solution, cell_name="my_fast_moe",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue\n"
            "from npu_lab.kernels.moe_gating import MoeGatingTiling\n"
            "from npu_lab.kernels.moe_gating.fused import block_tiles, iteration_key, row_stride, scalar_topk_softmax",
    place_after="## What to try (as its first item)",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v2"), reference=moe_reference,
    # The target is halfway between the course's v2 (a copy per point: what the skeleton does) and
    # v2c (one copy per tile in and out), both at FASTER_TIMED's tiling: coalescing meets it with half
    # the saving to spare, copying per point misses it by as much. Going far below takes the vector
    # top-K (v3 on the leaderboard).
    locate=moe_locator("v2"), target=_faster_target,
    target_case=FASTER_TIMED, speed=True, extra=leaderboard,
    slow_hint="look at MTE2 and MTE3 in the timeline: a DMA per point pays its issue cost at a small burst's "
              "efficiency every time; one copy per tile in and one per output out removes that"))
