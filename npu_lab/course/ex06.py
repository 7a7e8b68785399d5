"""Exercise checks for notebook 06 (vectorization).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
Each exercise varies the case the notebook demonstrates (another K, vector length or tileS), so
its answer is not printed above it; :func:`expected_answers` gives every check's truth, computed
by the same function the check uses.
"""

from __future__ import annotations


from .checks import (CYCLES, CheckResult, missing as _missing, parse_number as _number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import exp_speedup, simulate_moe_gating
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_topk_vector_instructions', 'fast_exp_instructions', 'exp_break_even_cycles', 'check_fast_exp_break_even',
           'check_fast_exp_vector_cost', 'expected_answers', 'topk_vector_instructions', 'fast_exp_vector_cost_pct']

#: Exercise 06.1: the top-K's K (the notebook's tiny run has K = 2).
TOPK_K = 6
#: Exercise 06.2: the vector length (the notebook prints the break-even for 4096 and 16 floats).
BREAK_EVEN_COUNT = 3000
#: Exercise 06.3: v3 at this tileS and K (the notebook runs tileS = 8, K = 2).
FAST_EXP_CASE = dict(tile_s=32, K=4)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 06, by check name (computed as the checks compute it)."""
    return {"check_topk_vector_instructions": topk_vector_instructions(),
            "check_fast_exp_break_even": exp_break_even_cycles(CHIP, BREAK_EVEN_COUNT),
            "check_fast_exp_vector_cost": fast_exp_vector_cost_pct()}


def topk_vector_instructions(K: int = TOPK_K, E: int = 64) -> int:
    """Vector instructions v3 issues per tile for (E, K): a two-tile run minus a one-tile run."""
    return _v_instructions(K, 2, E) - _v_instructions(K, 1, E)

def _v_instructions(K: int, tiles: int, E: int) -> int:
    one_core = get_preset(CHIP).replace(vector_cores=1)
    t = simulate_moe_gating(1, 8 * tiles, E, K, version="v3", hw=one_core, tile_s=8).timeline
    events = t.events()
    return int((events["pipe"] == "V").sum())


def check_topk_vector_instructions(answer, K: int = TOPK_K, E: int = 64) -> CheckResult:
    """v3 computes the top-K and the softmax of a whole tile with vector instructions. How many
    vector (V) instructions does it issue per tile for K = 6 (exact exp)? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of instructions")
    truth = topk_vector_instructions(K, E)
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
    from ..kernels.moe_gating.article import _exp_kernel
    from ..lang import launch

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


def check_fast_exp_break_even(answer, count: int = BREAK_EVEN_COUNT) -> CheckResult:
    """From how many cycles per repeat of the exact Exp (``vector_exp_cycles_per_repeat``) on does
    the polynomial exp win, for 3000 floats on the 910B2 preset? Answer: cycles per repeat."""
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


def fast_exp_vector_cost_pct(tile_s: int = FAST_EXP_CASE["tile_s"], K: int = FAST_EXP_CASE["K"]) -> float:
    """Percent by which v3_fast_exp raises v3's vector (V) busy time, all cores, at (1, 1024, 64, K), ``tile_s``."""
    busy = {v: simulate_moe_gating(1, 1024, SHAPE[2], K, version=v, hw=CHIP, tile_s=tile_s).timeline.busy_us_by_pipe()["V"]
            for v in ("v3", "v3_fast_exp")}
    return float(100 * (busy["v3_fast_exp"] / busy["v3"] - 1))


def check_fast_exp_vector_cost(answer, tile_s: int = FAST_EXP_CASE["tile_s"], K: int = FAST_EXP_CASE["K"]) -> CheckResult:
    """By how many percent does the polynomial exp raise v3's vector busy time (all cores) at S = 1024,
    E = 64, K = 4, tileS = 32 on the 910B2 preset? Answer: a percentage (negative if it lowers it);
    within 2 points counts."""
    if answer is None:
        return _missing("a percentage, e.g. 15 (negative if the polynomial saves time)")
    truth = fast_exp_vector_cost_pct(tile_s, K)
    runs = {v: simulate_moe_gating(1, 1024, SHAPE[2], K, version=v, hw=CHIP, tile_s=tile_s) for v in ("v3", "v3_fast_exp")}
    busy = {v: r.timeline.busy_us_by_pipe()["V"] for v, r in runs.items()}
    value = _number(answer, ("%",))
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    values = tile_s * K
    repeats = -(-values * 4 // 256)
    evidence = (f"vector busy: v3 {busy['v3']:.2f} \u00b5s, v3_fast_exp {busy['v3_fast_exp']:.2f} \u00b5s "
                f"({truth:+.1f} %); latency {runs['v3'].latency_us:.2f} against {runs['v3_fast_exp'].latency_us:.2f} \u00b5s")
    if abs(value - truth) <= 2:
        return _right(f"{evidence}. Per tile v3 exponentiates tileS x K = {values} values, {repeats} repeat(s): "
                      f"the exact Exp is one instruction, the polynomial {fast_exp_instructions()}, each paying its "
                      "issue cost. On so few values the polynomial loses; the latency barely moves, because the "
                      "vector unit is not what limits v3 here.")
    if value < 0 < truth:
        return _wrong(f"The polynomial does not save vector time here ({evidence}). Hint: count instructions and "
                      "repeats per tile for both.")
    return _wrong(f"The model does not say {value:g} %. Hint: simulate_moe_gating(1, 1024, 64, {K}, version=v, "
                  f"tile_s={tile_s}).timeline.busy_us_by_pipe()['V'] for v = 'v3' and 'v3_fast_exp'.")
