"""Exercise checks for notebook 07 (tuning).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
"""

from __future__ import annotations


from .checks import (parse_word, FACTOR, CheckResult, missing as _missing, parse_number as _number,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import autotune, simulate_moe_gating
from ..kernels.moe_gating.article import DEFAULT_FREE
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_dominant_fitted_field', 'check_sweet_spot_direction', 'check_article_vs_datasheet', 'FITTED_FIELDS']

#: The fields the 'article' preset fits (the library's choice, :data:`DEFAULT_FREE`).
FITTED_FIELDS = DEFAULT_FREE


def _field_effects(tile_s: int = 1) -> dict[str, float]:
    """µs the article preset's v1 latency at ``tile_s`` drops by when one fitted field goes back
    to its 910B2 datasheet/assumed value."""
    article, base = get_preset("article"), get_preset(CHIP)
    fitted = simulate_moe_gating(*SHAPE, version="v1", hw=article, tile_s=tile_s).latency_us
    return {f: fitted - simulate_moe_gating(*SHAPE, version="v1", tile_s=tile_s,
                                            hw=article.replace(**{f: getattr(base, f)})).latency_us
            for f in FITTED_FIELDS}


def check_dominant_fitted_field(answer) -> CheckResult:
    """The article measured 1500 µs at tileS = 1 (1024 blocks). Which of the fitted fields
    explains most of it — put back to its 910B2 value, which lowers the 'article' preset's tileS = 1
    latency the most? Answer with the field name."""
    if answer is None:
        return _missing(f"a field name, one of {', '.join(FITTED_FIELDS)}")
    effects = _field_effects()
    truth = max(effects, key=effects.get)
    if not isinstance(answer, str) or answer.strip() not in FITTED_FIELDS:
        return _wrong(f"Answer with one of the fitted field names: {', '.join(FITTED_FIELDS)}.")
    table = ", ".join(f"{f} -{v:.0f} \u00b5s" for f, v in sorted(effects.items(), key=lambda kv: -kv[1]))
    if answer.strip() == truth:
        return _right(f"{table}. The task scheduler hands blocks out one at a time: 1024 blocks x "
                      f"{get_preset('article').block_dispatch_us:.2f} \u00b5s is most of the 1500 \u00b5s. "
                      "Fewer, bigger blocks (or a fixed number of looping blocks, as v2 and v3 use) avoid it.")
    return _wrong(f"{answer.strip()} lowers it by {effects[answer.strip()]:.0f} \u00b5s only. Hint: which "
                  "cost is paid once per block, and how many blocks does tileS = 1 launch?")


_DIRECTIONS = {"up": "up", "larger": "up", "bigger": "up", "higher": "up", "increase": "up",
               "down": "down", "smaller": "down", "lower": "down", "decrease": "down",
               "same": "same", "stays": "same", "unchanged": "same", "no change": "same"}


def check_sweet_spot_direction(answer, E: int = 256, K: int = 8) -> CheckResult:
    """On the 'article' preset v1's best tileS at E = 64, K = 2 is 8. Where does it go for
    E = 256, K = 8 (S = 1024, tileS from 1 to 32): ``'up'``, ``'down'`` or ``'same'``?"""
    if answer is None:
        return _missing("'up', 'down' or 'same'")
    cand = [1, 2, 4, 8, 16, 32]
    base = autotune(1, 1024, 64, 2, version="v1", hw="article", candidates=cand).tile_s
    new = autotune(1, 1024, E, K, version="v1", hw="article", candidates=cand).tile_s
    truth = "up" if new > base else ("down" if new < base else "same")
    given = parse_word(answer, _DIRECTIONS)
    if given is None:
        return _wrong(f"Answer 'up', 'down' or 'same', not {answer!r}.")
    if given == truth:
        if truth == "down":
            why = (f"Each point now costs far more scalar work (a heap of {K} over {E} experts), so the "
                   "fixed per-block costs (dispatch, DMA latency) weigh less against the work, and spreading "
                   "it over more, smaller blocks pays off.")
        elif truth == "up":
            why = ("Each point now costs less work, so the fixed per-block costs weigh more and bigger "
                   "tiles amortise them better.")
        else:
            why = "The balance between per-block costs and per-tile work happens to land on the same size."
        return _right(f"tileS {base} -> {new}. {why} The sweet spot moves with the shape: the host needs "
                      "a tuner or a bucket table, not one constant.")
    return _wrong(f"The tuner says {truth} ({base} -> {new}). Hint: per point, how does the heap's work "
                  "grow with E and K? With more work per tile, do fixed per-block costs matter more or "
                  "less than using more cores?")


def check_article_vs_datasheet(answer, tile_s: int = 8) -> CheckResult:
    """The article measured 280 µs for v1 at tileS = 8. How many times slower is that than what the
    datasheet 910B2 preset predicts for the same run? Answer: a factor (e.g. 1.5)."""
    if answer is None:
        return _missing("a factor, e.g. 1.5")
    from ..data import load_article_tile_sweep

    table = load_article_tile_sweep()
    measured = float(table.loc[table["tile_s"] == tile_s, "latency_us"].iloc[0])
    model = simulate_moe_gating(*SHAPE, version="v1", hw=CHIP, tile_s=tile_s).latency_us
    truth = measured / model
    value = _number(answer, FACTOR)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    if abs(value - truth) <= 0.1 * truth:
        hw = get_preset(CHIP)
        return _right(f"{measured:.0f} / {model:.1f} = {truth:.1f}x. The datasheet model "
                      f"({hw.launch_overhead_us:g} \u00b5s launch, {hw.block_dispatch_us:g} \u00b5s per block) "
                      "cannot reach the article's numbers; the fit has to make the launch, "
                      "the dispatch per block and the scalar UB access several times dearer. Host-side timing "
                      "(runtime calls, synchronisation) included in the measurement would do exactly that.")
    if value > 0 and abs(1 / value - truth) <= 0.1 * truth:
        return _wrong(f"{value:g} is the inverse: the article is slower, so the factor is > 1.")
    return _wrong(f"{value:g} is not it. Hint: simulate_moe_gating(1, 1024, 64, 2, version='v1', "
                  "hw='ascend-910b2', tile_s=8).latency_us, and the article's 280 \u00b5s.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 07.pick_tile_s: a host function choosing tileS, checked against the autotuner.
# 07.faster: open — make the MoE kernel faster than v2; a leaderboard against the course's kernels.
import functools  # noqa: E402

import numpy as np  # noqa: E402

from ..kernels.moe_gating import MoeGatingTiling  # noqa: E402
from ..kernels.moe_gating.fused import block_tiles, iteration_key, row_stride, scalar_topk_softmax  # noqa: E402
from ..lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue, npu_kernel  # noqa: E402
from .kernel_check import (KernelCheckResult, KernelExercise, moe_cases, moe_launcher, moe_locator,  # noqa: E402
                           moe_reference, moe_target, register_exercise)

#: shapes the learner's tileS is timed on (v3, the 910B2), and how close to the tuner's best it must be
PICK_SHAPES = ((1, 1024, 64, 2), (1, 8192, 64, 8), (4, 512, 256, 4))
PICK_TOLERANCE = 0.05


def pick_tile_s_solution(B, S, E, K, hw):
    """The tileS the host should launch v3 with for this shape on chip ``hw``."""
    # YOUR CODE: return a whole number of points per tile. npu_lab.kernels.moe_gating.autotune
    # times every candidate; or write your own rule from what the heat maps showed.
    ### BEGIN SOLUTION
    from npu_lab.kernels.moe_gating import autotune
    return autotune(B, S, E, K, version="v3", hw=hw).tile_s
    ### END SOLUTION


@functools.lru_cache(maxsize=32)
def _tuned(B, S, E, K, hw):
    return autotune(B, S, E, K, version="v3", hw=hw)


def _pick_check(fn, hw):
    lines, ok = [], True
    for B, S, E, K in PICK_SHAPES:
        try:
            tile_s = fn(B, S, E, K, hw)
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
    tail = "" if ok else ("\nHint: a larger tile amortises each DMA's fixed latency; too large leaves cores idle "
                          "(fewer tiles than cores) or does not fit UB. Look at the sweep's table (autotune(...).table).")
    return KernelCheckResult(head + "\n" + "\n".join(lines) + tail, ok)


register_exercise(KernelExercise(
    id="07.pick_tile_s", notebook="ex07", title="Pick tileS with the autotuner, and explain",
    teaches="the host decides the tiling: time the candidates (autotune), then say why the winner wins "
            "(DMA latency amortised vs cores left idle vs UB)",
    solution=pick_tile_s_solution, cell_name="my_pick_tile_s",
    imports="from npu_lab.kernels.moe_gating import autotune, simulate_moe_gating",
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


FASTER_TIMED = {"B": 1, "S": 2048, "E": 64, "K": 2, "dtype": "float32", "label": "B=1, S=2048, E=64, K=2, float32"}
LEADERBOARD_VERSIONS = ("v1", "v2", "v2c", "v3")


def leaderboard(latency_us: float, hw="ascend-910b2") -> str:
    """A latency table: the learner's kernel against the course's versions at FASTER_TIMED."""
    rows = [(f"course {v}", simulate_moe_gating(FASTER_TIMED["B"], FASTER_TIMED["S"], FASTER_TIMED["E"],
                                                FASTER_TIMED["K"], version=v, hw=hw).latency_us)
            for v in LEADERBOARD_VERSIONS]
    rows.append(("your kernel", latency_us))
    rows.sort(key=lambda r: r[1])
    return "Leaderboard at " + FASTER_TIMED["label"] + ":\n" + "\n".join(
        f"  {i + 1}. {name:<12} {us:8.1f} µs" for i, (name, us) in enumerate(rows))


register_exercise(KernelExercise(
    id="07.faster", notebook="ex07", title="Make it faster (open)",
    teaches="putting the course together: start from v2 and beat it — coalesced DMA (v2c), a larger tile, "
            "the vector top-K (v3) — with the leaderboard as the judge",
    solution=moe_faster_solution, cell_name="my_fast_moe",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, TQue\n"
            "from npu_lab.kernels.moe_gating import MoeGatingTiling\n"
            "from npu_lab.kernels.moe_gating.fused import block_tiles, iteration_key, row_stride, scalar_topk_softmax",
    place_after="## What to try (as its first item)",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v2"), reference=moe_reference,
    locate=moe_locator("v2"), target=moe_target("v2", FASTER_TIMED, factor=0.9, label="10 % faster than the course's v2"),
    target_case=FASTER_TIMED, speed=True, extra=leaderboard,
    slow_hint="look at MTE2 and MTE3 in the timeline: a DMA per point pays the request latency every time"))
