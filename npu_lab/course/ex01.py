"""Exercise checks for the notebooks: ``check_<name>(answer)`` returns a message that says what
is right or wrong and gives a hint — never just True/False.

Every expected answer is computed here from the library (the preset, a timing-only run of the
kernel), never typed in, so a check stays true when the model changes. The message is a
:class:`CheckResult`: a ``str`` (print it) with a ``.correct`` attribute (True / False, or None
when no answer was given yet).
"""

from __future__ import annotations

import math

from .checks import (US, CheckResult, missing as _missing, parse_number as _as_number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from ..presets import get_preset
from ..sim.launch_cost import full_launch_overhead_us

__all__ = ["CheckResult", "check_launch_overhead", "check_busiest_pipe",
           "check_double_buffering_one_tile", "check_largest_tile_len"]

#: The run notebook 01 times: scaled_add on 2**20 float32 elements on the 910B2, defaults.
NOTEBOOK01_N = 1 << 20
NOTEBOOK01_CHIP = "ascend-910b2"


def check_launch_overhead(answer) -> CheckResult:
    """How many µs does one kernel launch cost on the ``ascend-910b2`` preset (before any block
    runs)? Answer: a number of microseconds."""
    if answer is None:
        return _missing("a number of microseconds, e.g. 3.5")
    hw = get_preset("ascend-910b2")
    truth = full_launch_overhead_us(hw)        # fixed part + per core, on all vector cores
    value = _as_number(answer, US)
    kind, note = hw.provenance.get("launch_overhead_us", ("unspecified", ""))
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds. Hint: look for the "
                      "launch_overhead_us row of the preset table.")
    if math.isclose(value, truth, rel_tol=0.01):
        return _right(f"The 910B2 preset charges {truth:g} \u00b5s per launch on all {hw.vector_cores} vector "
                      f"cores: a fixed {hw.launch_overhead_us:g} \u00b5s (provenance: {kind}, {note}) plus "
                      f"{hw.launch_per_core_us:g} \u00b5s per core started. It is paid once per launch, however "
                      "many blocks run, which is why a chain of small kernels is launch-bound.")
    if math.isclose(value, truth * 1000, rel_tol=0.01):
        return _wrong(f"{value:g} looks like nanoseconds; the answer is wanted in microseconds.")
    return _wrong(f"{value:g} \u00b5s is not what the preset says. Hint: "
                  "the `host` bar at the start of the timeline, or the preset table: launch_overhead_us "
                  "plus launch_per_core_us for each of the 48 vector cores.")


_PIPE_ALIASES = {"scalar": "S", "vector": "V", "dma in": "MTE2", "dma out": "MTE3", "cube": "M"}


def check_busiest_pipe(answer, timeline=None) -> CheckResult:
    """Which pipe is busiest (most busy time summed over cores) in notebook 01's scaled-add run
    (2**20 elements on the 910B2), or in ``timeline`` if one is given? Answer: a pipe name such
    as ``"V"``."""
    if answer is None:
        return _missing("a pipe name as a string: 'S', 'MTE2', 'V' or 'MTE3'")
    if timeline is None:
        from ..kernels.scaled_add import scaled_add

        _, timeline = scaled_add(NOTEBOOK01_N, None, timing_only=True, hw=NOTEBOOK01_CHIP)
    busy = {p: b for p, b in timeline.busy_us_by_pipe().items() if b > 0}
    truth = max(busy, key=busy.get)
    table = ", ".join(f"{p} {b:.0f} \u00b5s" for p, b in sorted(busy.items(), key=lambda kv: -kv[1]))
    if not isinstance(answer, str):
        return _wrong(f"Answer with a pipe name as a string, one of {sorted(busy)}.")
    given = answer.strip()
    given = _PIPE_ALIASES.get(given.lower(), given.upper())
    if given == truth:
        return _right(f"{truth} is busiest (busy time summed over cores: {table}). Every element "
                      "is loaded twice (x and y) and stored once, while the vector work per 256 bytes "
                      "is one cycle: this kernel is about moving data, not computing.")
    if given not in {"S", "MTE2", "V", "MTE3", "MTE1", "M", "FIX"}:
        return _wrong(f"{answer!r} is not a pipe. A vector core's pipes are S, MTE2, V and MTE3.")
    return _wrong(f"{given} is busy {busy.get(given, 0.0):.0f} \u00b5s in total. Hint: "
                  "timeline.pipe_table(), or count the bytes: how many loads and stores does each "
                  "element need, and how cheap is one vector repeat?")


_YES = {"yes", "y", "true", "it helps", "helps"}
_NO = {"no", "n", "false", "it does not", "does not help", "no help", "not"}


def check_double_buffering_one_tile(answer) -> CheckResult:
    """With exactly 1 tile per core, does double buffering (2 buffers per queue) make scaled-add
    faster? Answer ``"yes"`` or ``"no"`` (or True / False)."""
    if answer is None:
        return _missing("'yes' or 'no'")
    from ..kernels.scaled_add import scaled_add

    hw = get_preset("ascend-910b2")
    n = 1 << 18
    tile_len = math.ceil(n / hw.vector_cores / 8) * 8     # each core's share in one tile
    single = scaled_add(n, None, timing_only=True, hw=hw, tile_len=tile_len, num_buffers=1)[1].total_us
    double = scaled_add(n, None, timing_only=True, hw=hw, tile_len=tile_len, num_buffers=2)[1].total_us
    helps = double < single * (1 - 1e-9)
    if isinstance(answer, bool):
        said = answer
    elif isinstance(answer, str) and answer.strip().lower().rstrip(".!") in _YES | _NO:
        said = answer.strip().lower().rstrip(".!") in _YES
    else:
        return _wrong(f"Answer 'yes' or 'no' (or True / False), not {answer!r}.")
    evidence = (f"on the 910B2 with {n:,} elements and one tile per core: 1 buffer {single:.2f} \u00b5s, "
                f"2 buffers {double:.2f} \u00b5s")
    if said == helps:
        if helps:
            return _right(f"It helps here ({evidence}).")
        return _right(f"No gain ({evidence}). A second buffer lets the load of the NEXT tile "
                      "overlap the compute of this one; with one tile there is no next tile, and "
                      "load -> compute -> store of the same tile must stay in order.")
    return _wrong(f"The model says {'it helps' if helps else 'no'} ({evidence}). Hint: what could "
                  "the second buffer hold while the vector unit works on the first, if every core "
                  "has only one tile?")


def check_largest_tile_len(answer) -> CheckResult:
    """The scaled-add kernel holds 3 queues (x, y, z) of float32 tiles. With 2 buffers per queue,
    what is the largest ``tile_len`` (elements, a multiple of 8) that fits the 910B2's Unified
    Buffer? Answer: a whole number of elements."""
    if answer is None:
        return _missing("a whole number of elements")
    hw = get_preset("ascend-910b2")
    per_element = 3 * 2 * 4          # 3 queues x 2 buffers x 4 bytes
    truth = hw.ub_bytes // per_element // 8 * 8
    value = _whole(answer, ("elements",))
    if value is None:
        return _wrong(f"Answer a whole number of elements, not {answer!r}.")
    if value == truth:
        return _right(f"{truth} elements: 3 queues x 2 buffers x {truth} x 4 B = "
                      f"{per_element * truth} B = the whole {hw.ub_bytes // 1024} KB UB. (The article "
                      "assumes 256 KB of UB; the 910B2's vector cores have 192 KB.)")
    if value % 8:
        return _wrong(f"{value} is not a multiple of 8: UB buffers are whole 32-byte blocks.")
    if value * per_element > hw.ub_bytes:
        return _wrong(f"{value} elements need {value * per_element} B but the UB has "
                      f"{hw.ub_bytes} B. Hint: ub_bytes / (queues x buffers x bytes per element).")
    return _wrong(f"{value} fits, but a larger tile does too. Hint: ub_bytes / (3 queues x 2 buffers "
                  "x 4 bytes), rounded down to a multiple of 8.")
