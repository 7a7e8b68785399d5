"""Exercise checks for notebooks 05 (double buffering), 06 (vectorization) and 07 (tuning).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.exercises.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
"""

from __future__ import annotations

import math

from .checks import (CYCLES, FACTOR, PERCENT, US, CheckResult, missing as _missing, parse_number as _number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from .kernels.moe_gating import autotune, exp_speedup, simulate_moe_gating
from .kernels.moe_gating.article import DEFAULT_FREE
from .pipeline_diagram import STAGES, period_formula, stage_durations, steady_state_period
from .presets import get_preset

__all__ = [
    "check_steady_state_period", "check_v2_pacing_stage", "check_db_gain_one_tile_per_block",
    "check_topk_vector_instructions", "check_fast_exp_break_even", "check_fast_exp_helps_v3",
    "check_dominant_fitted_field", "check_sweet_spot_direction", "check_article_vs_datasheet",
]

CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)










def _word(answer, allowed: dict[str, str]):
    """Normalise a word answer through ``allowed`` (alias -> canonical), else None."""
    if not isinstance(answer, str):
        return None
    return allowed.get(answer.strip().lower().rstrip(".!"))


_YES_NO = {"yes": "yes", "y": "yes", "true": "yes", "no": "no", "n": "no", "false": "no"}


def _yes_no(answer):
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return _word(answer, _YES_NO)


# ================================================================ notebook 05: double buffering
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
    given = _word(answer, _STAGE_ALIASES)
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


# ================================================================ notebook 06: vectorization
def _v_instructions(K: int, tiles: int, E: int) -> int:
    one_core = get_preset(CHIP).replace(vector_cores=1)
    t = simulate_moe_gating(1, 8 * tiles, E, K, version="v3", hw=one_core, tile_s=8).timeline
    events = t.events()
    return int((events["pipe"] == "V").sum())


def check_topk_vector_instructions(answer, K: int = 8, E: int = 64) -> CheckResult:
    """v3 computes the top-K and the softmax of a whole tile with vector instructions. How many
    vector (V) instructions does it issue per tile for K = 8 (exact exp)? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of instructions")
    truth = _v_instructions(K, 2, E) - _v_instructions(K, 1, E)
    value = _whole(answer, ("instructions",))
    if value is None:
        return _wrong(f"Answer a whole number of instructions, not {answer!r}.")
    per_round = _v_instructions(2, 2, E) - _v_instructions(2, 1, E) - (_v_instructions(1, 2, E) - _v_instructions(1, 1, E))
    fixed = truth - K * per_round
    if value == truth:
        return _right(f"{truth} per tile, whatever tileS is: {per_round} per round of the top-K (WholeReduceMax, "
                      f"GatherMask for the values and for the indices, Brcb + a masked Copy into column k, and the "
                      f"knock-out of the winner: Brcb, Adds, an int32 Compare EQ and a Select) times K = {K}, "
                      f"{fixed:+d} for the softmax over the K winners and the output compaction (the knock-out "
                      "is skipped in the last round). Each instruction covers all points of the tile: the scalar "
                      "heap did per-point work, this does per-tile work.")
    k2 = _v_instructions(2, 2, E) - _v_instructions(2, 1, E)
    return _wrong(f"{value} is not it. Hint: for K = 2 the count is {k2}. Read _topk_softmax_tile: "
                  "which instructions run K times, which K - 1 times, which once?")


def fast_exp_instructions(count: int = 4096) -> int:
    """How many vector instructions the polynomial exp issues (counted on a timeline)."""
    from .kernels.moe_gating.article import _exp_kernel
    from .lang import launch

    events = launch(_exp_kernel, 1, count, True, hw=CHIP, timing_only=True).events()
    return int((events["pipe"] == "V").sum())


def exp_break_even_cycles(hw=CHIP, count: int = 4096, target: float = 1.0) -> float:
    """The ``vector_exp_cycles_per_repeat`` at which :func:`exp_speedup` reaches ``target`` (by
    bisection; the speed-up grows with the exact Exp's cost)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    lo, hi = 0.0, 1024.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if exp_speedup(hw.replace(vector_exp_cycles_per_repeat=mid), count) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def check_fast_exp_break_even(answer, count: int = 4096) -> CheckResult:
    """From how many cycles per repeat of the exact Exp (``vector_exp_cycles_per_repeat``) on does
    the polynomial exp win, for 4096 floats on the 910B2 preset? Answer: cycles per repeat."""
    if answer is None:
        return _missing("a number of cycles per repeat")
    truth = exp_break_even_cycles(CHIP, count)
    hw = get_preset(CHIP)
    value = _number(answer, CYCLES)
    if value is None:
        return _wrong(f"{answer!r} is not a number of cycles.")
    if abs(value - truth) <= max(0.5, 0.03 * truth):
        return _right(f"About {truth:.2f} cycles per repeat. The polynomial costs the same whatever Exp "
                      f"costs ({fast_exp_instructions()} simple instructions, each {hw.vector_issue_cycles:g} cycles "
                      f"to start + 1 per repeat); the exact Exp is one instruction whose per-repeat cost you are varying. "
                      f"The preset assumes {hw.vector_exp_cycles_per_repeat:g}: below the break-even.")
    return _wrong(f"{value:g} is not where the two cost the same. Hint: exp_speedup(hw.replace("
                  f"vector_exp_cycles_per_repeat=c), {count}) grows with c; find the c where it "
                  "crosses 1.0 (or solve issue + repeats x c = the polynomial's cost by hand).")


def check_fast_exp_helps_v3(answer, tile_s: int = 8) -> CheckResult:
    """Does the polynomial exp make v3 faster at the article's shape (tileS = 8, 910B2 preset)?
    Answer ``'yes'`` or ``'no'``."""
    if answer is None:
        return _missing("'yes' or 'no'")
    exact = simulate_moe_gating(*SHAPE, version="v3", hw=CHIP, tile_s=tile_s).latency_us
    fast = simulate_moe_gating(*SHAPE, version="v3_fast_exp", hw=CHIP, tile_s=tile_s).latency_us
    truth = "yes" if fast < exact * (1 - 1e-9) else "no"
    said = _yes_no(answer)
    if said is None:
        return _wrong(f"Answer 'yes' or 'no' (or True / False), not {answer!r}.")
    evidence = f"v3 {exact:.2f} \u00b5s, v3_fast_exp {fast:.2f} \u00b5s"
    if said == truth:
        return _right(f"{evidence}. v3 exponentiates only tileS x K = {tile_s * SHAPE[3]} values per tile: "
                      f"one repeat. The cost is then all issue overhead, and {fast_exp_instructions()} instructions "
                      "lose to 1. "
                      "A fast exp pays off only on long vectors and when the exact Exp is slow.")
    return _wrong(f"The model says {truth} ({evidence}). Hint: how many values does v3 pass to exp per "
                  "tile, and how many vector repeats is that?")


# ================================================================ notebook 07: tuning
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
    given = _word(answer, _DIRECTIONS)
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
    from .data import load_article_tile_sweep

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
