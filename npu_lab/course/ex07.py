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
