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
