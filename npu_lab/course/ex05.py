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

from .checks import (PERCENT, US, CheckResult, missing as _missing, parse_number as _number,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import simulate_moe_gating
from .pipeline_diagram import STAGES, period_formula, stage_durations, steady_state_period
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


def v2_tile_period_us(tile_s: int = PERIOD_TILE_S, chip: str = PERIOD_CHIP) -> float:
    """The pace (µs per tile) of v2's loop at ``tile_s`` on ``chip``: the slowest of the three stages
    of one v1 tile (article shape), which is what two buffers leave."""
    one_tile = simulate_moe_gating(*SHAPE, version="v1", hw=chip, tile_s=tile_s).timeline
    return max(stage_durations(one_tile).values())


def check_v2_tile_period(answer, tile_s: int = PERIOD_TILE_S, chip: str = PERIOD_CHIP) -> CheckResult:
    """In v2 at tileS = 12 (the article's shape, 'article' preset), how many µs does each extra tile add
    to a block's loop, from the three stage times of one tile? Answer: µs (within 3 %)."""
    if answer is None:
        return _missing("a number of microseconds")
    d = stage_durations(simulate_moe_gating(*SHAPE, version="v1", hw=chip, tile_s=tile_s).timeline)
    truth = v2_tile_period_us(tile_s, chip)
    pacer = max(STAGES, key=d.get)
    table = ", ".join(f"{k} {v:.2f} \u00b5s" for k, v in d.items())
    value = _number(answer, US)
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds.")
    hw = get_preset(chip)
    if abs(value - truth) <= 0.03 * truth:
        why = {"store": (f"v1/v2 copy each point's {SHAPE[3]} indices and {SHAPE[3]} weights out separately, "
                         f"{2 * tile_s} DMAs of {4 * SHAPE[3]} bytes, each paying the fixed DMA latency "
                         f"({hw.cycles_to_us(hw.dma_latency_cycles):.2f} \u00b5s); v2c stores the whole tile with two DMAs."),
               "compute": (f"on {hw.name} the scalar unit's UB access costs {hw.scalar_ub_access_cycles:.0f} cycles, so "
                           f"the {tile_s} heaps (each reading {SHAPE[2]} logits) dwarf the copies; only moving the "
                           "top-K to the vector unit (notebook 06) shortens it."),
               "load": "one DMA per point in, each paying the fixed DMA latency; v2c loads the whole tile in one."}[pacer]
        return _right(f"One tile of {tile_s} points takes {table}: the {pacer} sets the pace at {truth:.2f} \u00b5s, "
                      f"growing with the points per tile. {why}")
    if abs(value - sum(d.values())) <= 0.03 * sum(d.values()):
        return _wrong(f"{value:g} \u00b5s is load + compute + store: that is v1 (one buffer and a wait). With "
                      "two buffers, which stage alone sets the pace?")
    return _wrong(f"{value:g} \u00b5s is not it. Hint: at tileS = 8 the notebook printed the three stages; "
                  "each stage issues one DMA or one heap per point, so how do they scale with tileS? Or measure: "
                  f"stage_durations(simulate_moe_gating(1, 1024, 64, 2, version='v1', tile_s={tile_s}).timeline).")


def db_gain_pct(S: int = DB_GAIN_CASE["S"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> float:
    """Percent by which v2 cuts v1's latency at (1, S, 64, 2), ``tile_s``, 910B2 preset."""
    v1, v2 = (simulate_moe_gating(1, S, SHAPE[2], SHAPE[3], version=v, hw=CHIP, tile_s=tile_s).latency_us
              for v in ("v1", "v2"))
    return 100 * (1 - v2 / v1)


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
