"""Exercise checks for notebook 06 (vectorization).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
"""

from __future__ import annotations


from .checks import (parse_yes_no, CYCLES, CheckResult, missing as _missing, parse_number as _number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import exp_speedup, simulate_moe_gating
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_topk_vector_instructions', 'fast_exp_instructions', 'exp_break_even_cycles', 'check_fast_exp_break_even', 'check_fast_exp_helps_v3']

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
    said = parse_yes_no(answer)
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
