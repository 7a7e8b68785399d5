"""Instruction costs, all read from the HardwareSpec (docs/cost_model.md). Never
from data values.

A cost here is a pipe's *occupancy*; the latency after it (DMA request latency, vector pipeline
depth) is added by :class:`~npu_lab.sim.core.CoreState`.

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
    """The old single-request figure, latency + bytes / bandwidth (bytes rounded up to whole
    32-byte blocks): what one isolated, full-burst copy takes from issue to completion, minus
    the issue. Kept for explanations; the simulator uses :func:`dma_occupancy_cycles`."""
    moved = round_up(int(nbytes), hw.block_bytes)
    return whole_cycles(hw.dma_latency_cycles + moved / bytes_per_cycle)


def burst_efficiency(hw: HardwareSpec, burst_bytes: int) -> float:
    """Fraction of the full bandwidth a copy gets when it moves ``burst_bytes`` per block.

    Source: asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/内存访问/尽量一次搬运较大的数据块.md
    (单次搬运数据长度16KB以上时，通常能较好地发挥出带宽的最佳性能): a table of four points —
    32 B, 512 B, 4 KB (``dma_burst_efficiency_*``, assumed values with the guide's shape) and
    ``dma_burst_full_bytes`` (1.0, the guide's 16 KB) — interpolated linearly in log2(bytes);
    1.0 above the last point, the 32-B value below the first. Monotone by construction (the
    spec validates that the points do not fall)."""
    if burst_bytes >= hw.dma_burst_full_bytes:
        return 1.0
    b = max(float(burst_bytes), 32.0)
    points = ((32.0, hw.dma_burst_efficiency_32b), (512.0, hw.dma_burst_efficiency_512b),
              (4096.0, hw.dma_burst_efficiency_4kb), (float(hw.dma_burst_full_bytes), 1.0))
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if b <= x1:
            f = (math.log2(b) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + f * (y1 - y0)
    return 1.0


def gm_aligned(hw: HardwareSpec, burst_bytes: int, block_count: int = 1, gm_step_bytes: int = 0) -> bool:
    """True when a copy keeps every GM access on a ``dma_gm_align_bytes`` (512 B) boundary.

    Source: asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/内存访问/GM地址尽量512B对齐.md.

    Judged from the copy's geometry, not its absolute address: a copy whose burst (bytes per
    block) and GM step between blocks are whole 512-B units keeps a 512-B aligned tensor's every
    copy — tile after tile — aligned; any other length drifts tiles (or blocks) onto 32-B
    boundaries. The absolute address is left out on purpose: blocks a kernel declares identical
    and loop iterations with equal keys must cost the same (block classes and the tile_loop
    fast-forward rely on it), and an address-dependent cost would break that silently
    (docs/cost_model.md says what this changes)."""
    align = hw.dma_gm_align_bytes
    if burst_bytes % align:
        return False
    return block_count <= 1 or gm_step_bytes % align == 0


def dma_occupancy_cycles(hw: HardwareSpec, moved_bytes: int, bytes_per_cycle: float,
                         burst_bytes: int, aligned: bool = True) -> float:
    """Cycles one copy holds its MTE pipe: ``dma_issue_cycles`` + moved bytes / effective
    bandwidth, where effective = ``bytes_per_cycle`` x :func:`burst_efficiency` (x
    ``dma_gm_misaligned_efficiency`` when the GM address is not 512-B aligned). ``moved_bytes``
    are whole 32-byte blocks. The request latency (``dma_latency_cycles``) comes after this
    occupancy and overlaps later copies: the core model adds it. Whole cycles."""
    efficiency = burst_efficiency(hw, burst_bytes)
    if not aligned:
        efficiency *= hw.dma_gm_misaligned_efficiency
    return whole_cycles(hw.dma_issue_cycles + moved_bytes / (bytes_per_cycle * efficiency))


def vector_repeats(hw: HardwareSpec, nbytes: int) -> int:
    return max(1, math.ceil(nbytes / hw.vector_repeat_bytes))


def vector_cycles(hw: HardwareSpec, kind: str, nbytes: int) -> tuple[float, int]:
    """(cycles, repeats) of one vector instruction over ``nbytes`` of its widest operand: the V
    pipe's occupancy, one issue per hardware instruction + repeats x cycles-per-repeat. Its result
    is complete ``vector_latency_cycles`` later (added by the core model).

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
