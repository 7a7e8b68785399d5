"""Exercise checks for notebook 04 (the fused kernel).

``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a ``str``
to print) that says what is right or wrong and gives a hint, with ``.correct`` True, False, or
None when no answer was given yet. Every expected answer is computed here from the library
(timing-only runs, the UB budget, the presets), never typed in, so a check stays true when the
model changes.
"""

from __future__ import annotations

import math


from ..data import ARTICLE_SWEEP_SHAPE
from .checks import (parse_percent, CheckResult, missing as _missing, parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import (simulate_moe_gating, sweep, unsupported_reason)
from ..kernels.moe_gating.run import ALWAYS_NEEDS
from ..presets import get_preset


#: The shape the exercises use unless they say otherwise: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: tileS values the sweet-spot exercises compare.
SWEEP_TILE_S = (1, 2, 4, 8, 16, 32, 64)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)


__all__ = ['check_sweet_spot', 'check_missing_instruction', 'check_double_buffer_gain']

def _tile_sweep(chip: str, version: str):
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    return sweep(version, B, S, E, K, chip, SWEEP_TILE_S).dropna(subset=["latency_us"])


def check_sweet_spot(answer, chip: str = "ascend-910b2", version: str = "v1") -> CheckResult:
    """Which tileS of 1, 2, 4, ..., 64 gives the lowest ``version`` latency at the article's shape
    (B=1, S=1024, E=64, K=2) on ``chip``? Answer: a whole number. The message says why (or that
    ``version`` cannot run on ``chip`` at all: v1 needs DataCopyPad, which the 310P3 lacks)."""
    if answer is None:
        return _missing("a tileS, e.g. 8")
    hw = get_preset(chip)
    why_not = unsupported_reason(version, hw)
    if why_not:
        return _wrong(f"There is no sweet spot to find: {why_not}.")
    df = _tile_sweep(chip, version)
    best = df.loc[df["latency_us"].idxmin()]
    truth, best_us = int(best["tileS"]), float(best["latency_us"])
    spread = df["latency_us"].max() / best_us - 1
    table = ", ".join(f"{int(r.tileS)}: {r.latency_us:.1f}" for r in df.itertuples())
    verdicts = sorted(set(df["bottleneck"]))
    if spread < 0.05:
        why = (f"The curve is nearly flat (all within {spread:.1%}): every tileS is {'/'.join(verdicts)}-bound, "
               f"so what dominates does not depend on how the points are grouped into tiles.")
        if "memory" in verdicts and version in ("v1", "v2", "v2_bad_sync"):
            dma_us = hw.cycles_to_us(hw.dma_latency_cycles)
            why += (f" Here that is the DMAs: {version} copies every point on its own ({SHAPE['E'] * 4} B in, "
                    f"two {SHAPE['K'] * 4}-B copies out), each paying the fixed {dma_us:.2f} µs DMA "
                    f"latency, and the {3 * SHAPE['S']} copies are shared by only {hw.vector_cores} cores "
                    "whatever the tile size.")
    else:
        cores = hw.vector_cores
        waves = int(math.ceil(best["blocks"] / cores))
        why = (f"Smaller tiles mean more blocks, each paying dispatch and its own copy-in/out; larger tiles "
               f"mean fewer blocks than the chip can run at once. At tileS={truth} there are "
               f"{int(best['blocks'])} blocks for {cores} cores ({waves} wave{'s' if waves > 1 else ''}).")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    evidence = simulate_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=truth).timeline.bottleneck()[1]
    why += f" The model's evidence at tileS={truth}: {evidence}."
    value = _whole(answer)
    if value is None or value not in set(df["tileS"]):
        return _wrong(f"Answer one of {sorted(int(t) for t in df['tileS'])}, not {answer!r}.")
    mine = float(df.loc[df["tileS"] == value, "latency_us"].iloc[0])
    head = f"{version} on {hw.name}, latency (\u00b5s) by tileS: {table}."
    if value == truth:
        return _right(f"tileS={truth} at {best_us:.1f} \u00b5s. {head} {why}")
    if mine <= best_us * 1.02:
        return CheckResult(f"Right, practically: tileS={value} is within {mine / best_us - 1:.1%} of the "
                           f"best, tileS={truth}. {head} {why}", True)
    return _wrong(f"tileS={value} takes {mine:.1f} \u00b5s, {mine / best_us - 1:.0%} more than the best. Hint: "
                  "run the TileSweepExplorer with this chip and version, or `sweep(...)`.")


def check_missing_instruction(answer, version: str = "v1", chip: str = "ascend-310p3") -> CheckResult:
    """Which Ascend C instruction does ``version`` need that ``chip``'s core lacks (v1 on the 310P3:
    DataCopyPad, for its 8-byte per-point stores)? Answer: the Ascend C name, any case, with or
    without ``ctx.`` / snake_case."""
    if answer is None:
        return _missing("an Ascend C instruction name such as 'DataCopy'")
    hw = get_preset(chip)
    why_not = unsupported_reason(version, hw)
    if why_not is None:
        raise ValueError(f"{version} runs on {hw.name}: there is no missing instruction to ask about")
    from ..capabilities import check_supported

    missing_names = [i for i in ALWAYS_NEEDS.get(version, ()) if check_supported(hw.isa, i)]
    if not isinstance(answer, str):
        return _wrong(f"Answer an instruction name as a string, such as 'DataCopy', not {answer!r}.")
    norm = lambda name: name.lower().replace("ctx.", "").replace("_", "").strip()  # noqa: E731
    if norm(answer) in {norm(m) for m in missing_names}:
        return _right(f"{why_not}. Real operators for the 310P pad the tensor in global memory so every "
                      "copy is whole 32-byte blocks, or write each tile's outputs in one whole-block copy.")
    if norm(answer) == "datacopy":
        return _wrong("DataCopy exists on every chip, but it moves whole 32-byte blocks only: a point's K "
                      "results (8 bytes at K = 2) would be rounded down to nothing. Which instruction "
                      "stores an 8-byte row? Try `unsupported_reason('v1', 'ascend-310p3')`.")
    return _wrong(f"{answer!r} is not it. Hint: which instruction does v1 use for its per-point stores? "
                  "`unsupported_reason('v1', 'ascend-310p3')` says it.")


def check_double_buffer_gain(answer, chip: str = "article", tile_s: int = 8) -> CheckResult:
    """By what percentage does v2 (double-buffered) cut v1's latency at tileS = 8 on the
    ``article`` preset (article shape)? Answer: a percentage (or fraction); within 2 points counts."""
    if answer is None:
        return _missing("a percentage such as 10 (or a fraction such as 0.1)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    lat = {v: simulate_moe_gating(B, S, E, K, version=v, hw=chip, tile_s=tile_s).latency_us
           for v in ("v1", "v2_bad_sync", "v2")}
    truth = 100 * (1 - lat["v2"] / lat["v1"])
    from_loop = 100 * (1 - lat["v2_bad_sync"] / lat["v1"])
    value = parse_percent(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage: answer a number such as 25 or '25%' "
                      "(or a fraction such as 0.25).")
    detail = (f"v1 {lat['v1']:.1f} \u00b5s, v2 {lat['v2']:.1f} \u00b5s: {truth:.0f} % less. The article "
              f"claims 15\u201320 %. Part of it ({from_loop:.0f} points, see v2_bad_sync at "
              f"{lat['v2_bad_sync']:.1f} \u00b5s) comes from launching one looping block per core instead of "
              "one block per tile; the rest is the overlap of the next tile's copy-in with this tile's compute.")
    if abs(value - truth) <= 2:
        return _right(detail)
    return _wrong(f"{value:.0f} % is off. Hint: `simulate_moe_gating(1, 1024, 64, 2, version=v, hw='{chip}', "
                  f"tile_s={tile_s}).latency_us` for v = 'v1' and 'v2'; gain = 1 - v2 / v1.")
