"""Instruction costs, all read from the HardwareSpec (DESIGN.md §4.2). Never from data values.

Every cost is a whole number of cycles (rounded up), as on real hardware. Whole cycles also keep
the simulator's arithmetic exact, so a timing-only run can fast-forward a steady-state loop and
still match a full run to the cycle.
"""

from __future__ import annotations

import math

from ..hardware import HardwareSpec

# Which spec field prices one repeat of each kind of vector instruction.
VECTOR_COST_FIELD = {
    "simple": "vector_cycles_per_repeat",
    "div": "vector_div_cycles_per_repeat",
    "exp": "vector_exp_cycles_per_repeat",
    "reduce": "vector_reduce_cycles_per_repeat",
    "sort": "vector_sort_cycles_per_repeat",
}


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def dma_cycles(hw: HardwareSpec, nbytes: int, bytes_per_cycle: float) -> float:
    """latency + bytes / bandwidth, bytes rounded up to whole 32-byte blocks."""
    moved = round_up(int(nbytes), hw.block_bytes)
    return whole_cycles(hw.dma_latency_cycles + moved / bytes_per_cycle)


def vector_repeats(hw: HardwareSpec, nbytes: int) -> int:
    return max(1, math.ceil(nbytes / hw.vector_repeat_bytes))


def vector_cycles(hw: HardwareSpec, kind: str, nbytes: int) -> tuple[float, int]:
    """(cycles, repeats) of one vector instruction over ``nbytes`` of its widest operand.

    More than ``max_repeat`` repeats are split into several hardware instructions, each paying
    the issue cost again (what Ascend C's high-level API does for you)."""
    try:
        per_repeat = getattr(hw, VECTOR_COST_FIELD[kind])
    except KeyError:
        raise ValueError(f"unknown vector cost kind {kind!r}; known: {sorted(VECTOR_COST_FIELD)}") from None
    repeats = vector_repeats(hw, nbytes)
    instructions = math.ceil(repeats / hw.max_repeat)
    return whole_cycles(instructions * hw.vector_issue_cycles + repeats * per_repeat), repeats


def scalar_cycles(hw: HardwareSpec, ops: int = 0, ub_accesses: int = 0, exps: int = 0) -> float:
    return whole_cycles(ops * hw.scalar_op_cycles + ub_accesses * hw.scalar_ub_access_cycles
                        + exps * hw.scalar_exp_cycles)


def mmad_cycles(hw: HardwareSpec, m: int, n: int, k: int, dtype_scale: float = 1.0) -> tuple[float, int]:
    """Cube MMAD of [m,k]x[k,n]: 16x16x16 fractals; fp32 runs at 1/4 rate (dtype_scale=4)."""
    fractals = math.ceil(m / 16) * math.ceil(n / 16) * math.ceil(k / 16)
    return whole_cycles(fractals * hw.cube_fractal_cycles * dtype_scale), fractals


def whole_cycles(cycles: float) -> float:
    """Round a duration up to whole cycles (ignoring float noise: 126.00000000000001 -> 126)."""
    return float(math.ceil(round(cycles, 6)))
