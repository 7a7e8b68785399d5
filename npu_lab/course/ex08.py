"""Exercise checks for notebook 08 (debugging).

Two kernels to fix and two predictions:

* **08.1** :func:`check_race_fix` — ``scale_tiles(ctx, x_gm, y_gm, tiles)`` (y = 2·x in tiles of
  :data:`TILE_ELEMENTS` floats through one scratch buffer each) with its missing flags added;
* **08.2** :func:`check_address_fix` — ``copy_tile(ctx, x_gm, y_gm, tiling)`` (y = x over
  ``[B, S, E]``, one block per tile of tileB × tileS points) with its GM offset fixed;
* **08.3** :func:`check_idle_pipe` — which pipe of core 0 idles longest in ``v2_bad_sync``;
* **08.4** :func:`check_idle_us` — how many µs that pipe sits idle.

Every check returns a :class:`~npu_lab.course.checks.CheckResult` (print it) and never raises on a
wrong or unfinished answer: a kernel that races, overflows the UB or computes the wrong thing gets
the simulator's message, the kernel line and a hint. Expected answers are computed from the
library (timing-only runs, :mod:`npu_lab.course.debugging`), never typed in.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import checked_keywords
from .checks import US, CheckResult, missing, parse_number, parse_word, right, wrong
from .debugging import compare_by_tile, explain_error, pipe_bubbles
from ..kernels.moe_gating import MoeGatingTiling, simulate_moe_gating
from ..lang import GlobalTensor, launch

__all__ = ["CHIP", "TILE_ELEMENTS", "RACE_TILES", "ADDRESS_CASES", "SLOW_SHAPE", "SLOW_TILE_S",
           "run_scale_tiles", "run_copy_tile", "idle_by_pipe", "check_race_fix", "check_address_fix",
           "check_idle_pipe", "check_idle_us", "expected_answers"]

CHIP = "ascend-910b2"
#: 08.1: elements per tile of scale_tiles, and the tile counts the check runs
TILE_ELEMENTS = 512
RACE_TILES = (1, 4)
#: 08.2: (B, S, E, tileB, tileS) the check runs: tileB = 1 (where the bug hides), tileB > 1, tails
#: along B and S, and E of one to four 32-byte blocks per point
ADDRESS_CASES = ((2, 8, 24, 1, 4), (4, 12, 32, 2, 4), (3, 10, 8, 2, 4), (5, 7, 24, 3, 2))
#: 08.3 / 08.4: the article's shape (B, S, E, K) and tileS, run as v2_bad_sync
SLOW_SHAPE = (1, 1024, 64, 2)
SLOW_TILE_S = 8
#: the checks whose answer is a kernel (code), not a value: not in expected_answers()
KERNEL_CHECKS = ("check_race_fix", "check_address_fix")

#: Checks whose answer is one of a few names every notebook prints (the pipes): the name showing up
#: above the question reveals nothing; the question is asked before the cell that ranks the pipes.
CHOICE_CHECKS = ("check_idle_pipe",)


def _not_a_kernel(kernel, name: str):
    if kernel is None:
        return missing(f"your fixed {name} kernel (run its cell first, then pass {name})")
    if not callable(kernel):
        return wrong(f"pass the kernel function {name} itself, not {type(kernel).__name__} {kernel!r}")
    return None


def _failed(kernel_name: str, case: str, exc: BaseException) -> CheckResult:
    from ..sim import SimulationError

    what = "the simulator stopped it" if isinstance(exc, SimulationError) else "it raised an error"
    return wrong(f"{kernel_name} on {case}: {what}.\n{explain_error(exc)}")


# --------------------------------------------------------------------------- 08.1
@checked_keywords
def run_scale_tiles(kernel, tiles: int, *, seed: int = 0, hw=CHIP):
    """Run ``kernel(ctx, x_gm, y_gm, tiles)`` on one block over ``tiles`` × TILE_ELEMENTS random
    float32 numbers; returns ``(x, y, timeline)``. Errors of the kernel propagate."""
    if isinstance(tiles, bool) or not isinstance(tiles, (int, np.integer)) or tiles < 1:
        raise ValueError(f"tiles must be a whole number >= 1, got {tiles!r}")
    x = np.random.default_rng(seed).standard_normal(int(tiles) * TILE_ELEMENTS).astype(np.float32)
    y_gm = GlobalTensor.empty(x.size, np.float32, "y")
    timeline = launch(kernel, 1, GlobalTensor.from_array(x, "x"), y_gm, int(tiles), hw=hw)
    return x, y_gm.data.copy(), timeline


def check_race_fix(kernel) -> CheckResult:
    """08.1: ``scale_tiles`` must compute y = 2·x on 1 and 4 tiles without a race."""
    bad = _not_a_kernel(kernel, "scale_tiles")
    if bad is not None:
        return bad
    latency = {}
    from ..lang.context import record_calls

    for tiles in RACE_TILES:
        try:
            with record_calls() as logs:
                x, y, timeline = run_scale_tiles(kernel, tiles)
        except Exception as exc:          # a check never raises: it says what went wrong
            hint = ("\nHint: read which pipe came too early and which was still using the buffer, "
                    "then add that HardEvent's set_flag/wait_flag pair; run again for the next race.")
            return CheckResult(_failed("scale_tiles", f"{tiles} tile(s)", exc) + hint, False)
        if not np.array_equal(y, 2 * x):
            cmp = compare_by_tile(y, 2 * x, TILE_ELEMENTS)
            return wrong(f"scale_tiles runs on {tiles} tile(s) but y != 2·x, by tile of "
                         f"{TILE_ELEMENTS} elements: {cmp}")
        latency[tiles] = timeline.total_us
    (few, t_few), (many, t_many) = sorted(latency.items())
    per_tile_ns = 1000 * (t_many - t_few) / (many - few)
    return right(f"no race, y = 2·x on {few} and {many} tiles; each extra tile adds {per_tile_ns:.0f} ns. "
                 + _what_you_added(logs[0] if logs else []))


#: the flags scale_tiles already had (read-after-write within a tile)
_GIVEN_FLAGS = ("MTE2_V", "V_MTE3")
_WHY = {"V_MTE2": "MTE2 waits for V to finish reading x (V_MTE2)",
        "MTE3_V": "V waits for MTE3 to finish reading y (MTE3_V)",
        "MTE3_MTE2": "MTE2 waits for MTE3 (MTE3_MTE2), which itself came after V",
        "PIPE_ALL": "PipeBarrier<PIPE_ALL> makes every pipe wait for every other one, the scalar unit too"}


def _what_you_added(log) -> str:
    """What the learner's scale_tiles added to the two given flags, read from its call log (so the
    feedback names what they wrote, not the course's answer)."""
    added = []
    for pipe, call in log:
        if pipe is not None:
            continue
        if call.startswith("SetFlag<"):
            event = call[len("SetFlag<"):-1]
            if event not in _GIVEN_FLAGS and event not in added:
                added.append(event)
        elif call == "PipeBarrier<PIPE_ALL>" and "PIPE_ALL" not in added:
            added.append("PIPE_ALL")
    if not added:
        return "Your kernel orders the reuse of x and y without new flags."
    said = "; ".join(_WHY.get(e, "{1} waits for {0} ({2})".format(*e.split("_"), e)) for e in added)
    text = f"You added {', '.join(added)}: {said}. "
    if "PIPE_ALL" in added:
        return text + "Correct, and it stalls the scalar unit too: flags between the two pipes that share a buffer cost less."
    return (text + "Correct, but the pipes take turns — part 3 shows what that costs, and a second buffer "
            "(two event ids, or a TQue of depth 2) is the cure.")


# --------------------------------------------------------------------------- 08.2
@checked_keywords
def run_copy_tile(kernel, x, tile_b: int, tile_s: int, *, hw=CHIP):
    """Host side of ``copy_tile``: build the tiling struct for ``x`` [B, S, E] float32 (E·4 a
    multiple of 32 bytes), launch one block per tile, return ``(y [B, S, E], timeline)``."""
    x = np.asarray(x)
    if x.ndim != 3 or x.dtype != np.float32:
        raise ValueError(f"x must be a float32 [B, S, E] array, got {x.dtype} of shape {x.shape}")
    B, S, E = x.shape
    if E * 4 % 32:
        raise ValueError(f"E = {E}: a row of E floats must be whole 32-byte blocks (E a multiple of 8) "
                         "for copy_tile's DataCopy")
    tiling = MoeGatingTiling.from_tiles(B, S, E, 1, tile_b, tile_s, tile_b * tile_s)
    y_gm = GlobalTensor.empty(x.size, np.float32, "y")
    timeline = launch(kernel, tiling.totalTiles, GlobalTensor.from_array(x.ravel(), "x"), y_gm,
                      tiling.pack(), hw=hw)
    return y_gm.data.reshape(B, S, E).copy(), timeline


def check_address_fix(kernel) -> CheckResult:
    """08.2: ``copy_tile`` must copy every point of x to y for tileB = 1, 2 and 3, with tails."""
    bad = _not_a_kernel(kernel, "copy_tile")
    if bad is not None:
        return bad
    rng = np.random.default_rng(8)
    for B, S, E, tb, ts in ADDRESS_CASES:
        case = f"B={B}, S={S}, E={E} with tileB={tb}, tileS={ts}"
        x = rng.standard_normal((B, S, E)).astype(np.float32)
        try:
            y, _ = run_copy_tile(kernel, x, tb, ts)
        except Exception as exc:
            return _failed("copy_tile", case, exc)
        cmp = compare_by_tile(y, x, (tb, ts))
        if not cmp.ok:
            return wrong(f"{case}: {cmp}\nHint: where does batch row b of the tile start in GM? "
                         "Count the elements before it: whole batches of S·E, then points of E.")
    shapes = "; ".join(f"{B}x{S}x{E} tileB={tb} tileS={ts}" for B, S, E, tb, ts in ADDRESS_CASES)
    return right(f"every point lands where it belongs ({shapes}). Batch row b of a tile starts "
                 "(b0 + b)·S·E elements in: with tileB = 1, b is always 0, which is why the bug hid.")


# --------------------------------------------------------------------------- 08.3 / 08.4
@checked_keywords
def idle_by_pipe(version: str = "v2_bad_sync", core: int = 0) -> dict[str, float]:
    """µs each pipe of ``core`` sits idle between its first and last instruction (the sum of its
    :func:`~npu_lab.course.debugging.pipe_bubbles`), for MoeGatingTopK ``version`` at
    :data:`SLOW_SHAPE`, tileS = :data:`SLOW_TILE_S` on :data:`CHIP` (a timing-only run)."""
    timeline = simulate_moe_gating(*SLOW_SHAPE, version=version, hw=CHIP, tile_s=SLOW_TILE_S).timeline
    bubbles = pipe_bubbles(timeline, core)
    return {p: float(v) for p, v in bubbles.groupby("pipe")["idle_us"].sum().items()}


_PIPES = {"mte2": "MTE2", "s": "S", "scalar": "S", "mte3": "MTE3", "v": "V", "vector": "V"}


def check_idle_pipe(answer) -> CheckResult:
    """08.3: in v2_bad_sync, which pipe of core 0 sits idle longest between its first and its
    last instruction? ``'MTE2'``, ``'S'`` or ``'MTE3'``."""
    if answer is None:
        return missing("a pipe name: 'MTE2', 'S' or 'MTE3'")
    given = parse_word(answer, _PIPES)
    if given is None:
        return wrong(f"{answer!r} is not a pipe of this kernel: answer 'MTE2', 'S' or 'MTE3'.")
    idle = idle_by_pipe()
    truth = max(idle, key=idle.get)
    # no µs here: 08.4 asks for them next
    order = " > ".join(sorted(idle, key=lambda p: -idle[p]))
    if given == truth:
        return right(f"idle time between first and last instruction on core 0: {order}. With the barrier "
                     "each tile takes the same round — load, its data landing, compute, store, its data "
                     "landing — and each pipe idles for the round minus its own stage: the load is the "
                     "shortest stage, so its pipe waits longest.")
    return wrong(f"{given} is not the one. Hint: with the barrier each tile runs load, compute, store "
                 "in turn; while one stage runs, the other two pipes wait. Which stage is shortest?")


def check_idle_us(answer) -> CheckResult:
    """08.4: how many µs in all does that pipe (08.3's) sit idle on core 0 between its first and
    its last instruction? Answer: µs (within 1 µs)."""
    if answer is None:
        return missing("a number of microseconds")
    value = parse_number(answer, US)
    if value is None:
        return wrong(f"{answer!r} is not a number of microseconds.")
    idle = idle_by_pipe()
    pipe = max(idle, key=idle.get)
    truth = idle[pipe]
    if abs(value - truth) <= 1.0:
        return right(f"{pipe} sits idle {truth:.2f} \u00b5s: core 0 runs 3 tiles, so there are 2 gaps "
                     "between its loads. Each lasts one tile's compute and store plus two DMA latencies "
                     "(the heap waits for the load's data to land, the barrier for the store's), and a "
                     "few flags and issue slots.")
    if math.isclose(value, truth * 1000, rel_tol=0.05):
        return wrong(f"{value:g} looks like nanoseconds; the answer is wanted in \u00b5s.")
    return wrong(f"The model does not say {value:g} \u00b5s. Hint: how many tiles does block 0 loop over "
                 "(128 tiles on 48 blocks)? How many gaps lie between their loads, what runs in each, and which "
                 "data must land (the DMA latency) before the next load may start?")


def expected_answers() -> dict:
    """{check function name: its expected answer} for the value exercises, so a test can check
    that no answer is printed above its question. The kernel exercises (:data:`KERNEL_CHECKS`)
    are left out: their answer is code."""
    idle = idle_by_pipe()
    pipe = max(idle, key=idle.get)
    return {"check_idle_pipe": pipe, "check_idle_us": round(idle[pipe], 2)}
