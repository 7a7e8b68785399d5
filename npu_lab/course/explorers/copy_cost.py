"""What does a copy cost? Effective DMA bandwidth against burst size and GM alignment (notebook 01).

A core streams copies of ``burst_bytes`` each (one block per copy) from GM into UB. Every number
comes from the simulator's own cost functions (:mod:`npu_lab.sim.costs`, docs/cost_model.md §1-2):

* a copy **occupies** its MTE pipe for :func:`~npu_lab.sim.costs.dma_occupancy_cycles` — the
  issue (``dma_issue_cycles``) + its bytes (whole 32-byte blocks) at the core's bandwidth
  (:func:`~npu_lab.sim.l2.core_bytes_per_cycle`) x :func:`~npu_lab.sim.costs.burst_efficiency` of
  the burst (the guide's shape: full bandwidth from ``dma_burst_full_bytes``, about 16 KB) x
  ``dma_gm_misaligned_efficiency`` unless :func:`~npu_lab.sim.costs.gm_aligned` (512-B units; the
  910B2 only — the 310P3's factor is 1.0);
* its data is complete ``dma_latency_cycles`` later, and the engine keeps
  ``dma_outstanding_requests`` copies in flight: copy *i* starts no earlier than copy *i - N*
  completed (:class:`npu_lab.sim.core.CoreState`).

So in a long stream the copies start one **period** apart, ``max(occupancy, scalar issue,
(occupancy + latency) / N)`` cycles: the latencies overlap, and a stream of small copies is bound
by issue and bandwidth, not by latency (tests/test_course_explorers.py checks the period against a
simulated stream). One copy the kernel *waits* for still costs occupancy + latency.

"GM alignment 32 B" prices every copy at the misaligned factor (a tensor that starts on a 32-B
boundary); "512 B" asks :func:`~npu_lab.sim.costs.gm_aligned`, which judges the copy's geometry as
the simulator does: a burst that is not whole 512-B units drifts later copies off the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ...hardware import HardwareSpec
from ...presets import get_preset
from ...sim.costs import burst_efficiency, dma_occupancy_cycles, gm_aligned, round_up
from ...sim.l2 import core_bytes_per_cycle
from ..figure_widget import ExplorerFigureWidget
from ._base import _check_bool, _check_choice, _check_list, _chip_options, _Explorer, _LRU

__all__ = ["CopyCost", "copy_cost", "copy_cost_curve", "CopyCostExplorer", "BURST_CHOICES", "ALIGN_CHOICES"]

#: burst sizes (bytes per copy) the slider offers: 32 B to 64 KB, powers of two
BURST_CHOICES = tuple(32 << i for i in range(12))
#: GM alignments the toggle offers, bytes
ALIGN_CHOICES = (512, 32)
_COPY_CHIPS = ("ascend-910b2", "ascend-310p3")


@dataclass(frozen=True)
class CopyCost:
    """One copy of a stream, priced by the model. Cycles are the chip's clock cycles."""

    chip: str
    burst_bytes: int            # GM bytes per copy (one block)
    gm_align_bytes: int         # 512 or 32
    cores: int                  # cores streaming at once (they share HBM)
    moved_bytes: int            # whole 32-byte blocks the DMA moves
    aligned: bool               # priced as 512-B aligned
    efficiency: float           # burst efficiency x alignment factor
    occupancy_cycles: float     # MTE pipe time of one copy (issue + transfer)
    latency_cycles: float       # its data is complete this long after the occupancy
    period_cycles: float        # one copy every this many cycles in a long stream
    in_flight: float            # copies in flight in the steady state (average)
    peak_gbps: float            # the core's bandwidth at 100 % efficiency
    effective_gbps: float       # GM bytes / period, GB/s
    time_per_copy_us: float     # period, µs
    waited_copy_us: float       # occupancy + latency: a copy the kernel waits for, µs
    bound: str                  # "issue + bandwidth" or "requests in flight"


def _spec(hw) -> HardwareSpec:
    return get_preset(hw) if isinstance(hw, str) else hw


def copy_cost(hw="ascend-910b2", burst_bytes: int = 8192, gm_align_bytes: int = 512, cores: int = 1) -> CopyCost:
    """Price one copy of ``burst_bytes`` in a long stream of such copies on chip ``hw`` (name or
    HardwareSpec), GM ``gm_align_bytes`` (512 or 32) aligned, while ``cores`` cores stream at once."""
    spec = _spec(hw)
    if not isinstance(spec, HardwareSpec):
        raise TypeError(f"hw must be a preset name or a HardwareSpec, got {type(hw).__name__}")
    if isinstance(burst_bytes, bool) or not isinstance(burst_bytes, (int, np.integer)) or burst_bytes < 1:
        raise ValueError(f"burst_bytes must be a whole number of bytes >= 1, got {burst_bytes!r}")
    if gm_align_bytes not in ALIGN_CHOICES:
        raise ValueError(f"gm_align_bytes must be one of {ALIGN_CHOICES} (bytes), got {gm_align_bytes!r}")
    if isinstance(cores, bool) or not isinstance(cores, (int, np.integer)) or not 1 <= cores <= spec.vector_cores:
        raise ValueError(f"cores must be a whole number from 1 to {spec.vector_cores} ({spec.name}'s vector "
                         f"cores), got {cores!r}")
    burst, cores = int(burst_bytes), int(cores)
    bytes_per_cycle = core_bytes_per_cycle(spec, cores)[0]
    moved = round_up(burst, spec.block_bytes)
    aligned = gm_align_bytes == spec.dma_gm_align_bytes and gm_aligned(spec, burst)
    occupancy = dma_occupancy_cycles(spec, moved, bytes_per_cycle, burst, aligned)
    latency = float(spec.dma_latency_cycles)
    window = (occupancy + latency) / spec.dma_outstanding_requests   # copy i waits for copy i - N
    period = max(occupancy, float(spec.scalar_issue_cycles), window)
    efficiency = burst_efficiency(spec, burst) * (1.0 if aligned else spec.dma_gm_misaligned_efficiency)
    return CopyCost(
        chip=spec.name, burst_bytes=burst, gm_align_bytes=gm_align_bytes, cores=cores, moved_bytes=moved,
        aligned=aligned, efficiency=efficiency, occupancy_cycles=occupancy, latency_cycles=latency,
        period_cycles=period, in_flight=min(spec.dma_outstanding_requests, (occupancy + latency) / period),
        peak_gbps=bytes_per_cycle * spec.clock_ghz, effective_gbps=burst / period * spec.clock_ghz,
        time_per_copy_us=spec.cycles_to_us(period), waited_copy_us=spec.cycles_to_us(occupancy + latency),
        bound="requests in flight" if window > occupancy else "issue + bandwidth")


def copy_cost_curve(hw="ascend-910b2", gm_align_bytes: int = 512, cores: int = 1,
                    bursts=BURST_CHOICES) -> list[CopyCost]:
    """:func:`copy_cost` for each burst of ``bursts`` (bytes)."""
    bursts = _check_list("bursts", bursts)
    return [copy_cost(hw, b, gm_align_bytes, cores) for b in bursts]


def _size(nbytes: int) -> str:
    return f"{nbytes // 1024} KB" if nbytes >= 1024 and nbytes % 1024 == 0 else f"{nbytes} B"


class CopyCostExplorer(_Explorer):
    """Controls ``.burst`` (SelectionSlider, bytes per copy), ``.align`` (ToggleButtons, 512 or 32 B),
    ``.chip`` (Dropdown) and ``.cores`` (ToggleButtons: one core alone, or every vector core
    streaming); ``.figure`` plots effective bandwidth against the burst for both alignments, the
    current choice marked; ``.status`` prices the current copy; ``.cost`` is its :class:`CopyCost`."""

    def __init__(self, chip: str = "ascend-910b2", burst_bytes: int = 512, gm_align_bytes: int = 512,
                 all_cores: bool = False):
        chips = _chip_options(_COPY_CHIPS)
        _check_choice("chip", chip, chips)
        _check_choice("burst_bytes", burst_bytes, [(None, b) for b in BURST_CHOICES])
        _check_choice("gm_align_bytes", gm_align_bytes, [(None, a) for a in ALIGN_CHOICES])
        _check_bool("all_cores", all_cores)
        self._curves = _LRU()
        self.burst = W.SelectionSlider(options=[(_size(b), b) for b in BURST_CHOICES], value=burst_bytes,
                                       description="burst")
        self.align = W.ToggleButtons(options=[("512-B aligned", 512), ("32-B aligned", 32)], value=gm_align_bytes,
                                     description="GM:")
        self.chip = W.Dropdown(options=chips, value=chip, description="chip", layout=dict(width="300px"))
        self.cores = W.ToggleButtons(options=[("one core", False), ("all cores", True)], value=bool(all_cores),
                                     description="streaming:")
        self.status = W.HTML()
        self.cost: CopyCost | None = None
        self.figure = ExplorerFigureWidget(
            data=[go.Scatter(x=BURST_CHOICES, y=[], mode="lines+markers", name="512-B aligned GM"),
                  go.Scatter(x=BURST_CHOICES, y=[], mode="lines+markers", name="32-B aligned GM",
                             line=dict(dash="dash")),
                  go.Scatter(x=[], y=[], mode="markers", marker=dict(size=14, color="#d62728"), name="your copy")],
            layout=dict(title="What does a copy cost? (a long stream of copies on one core)", height=380,
                        margin=dict(l=10, r=10, t=50, b=40),
                        xaxis=dict(type="log", title="burst: bytes per copy", tickvals=list(BURST_CHOICES),
                                   ticktext=[_size(b) for b in BURST_CHOICES]),
                        yaxis=dict(title="effective bandwidth per core (GB/s)", rangemode="tozero")))
        self.widget = W.VBox([W.HBox([self.burst, self.chip]), W.HBox([self.align, self.cores]), self.status,
                              self.figure])
        self._watch(self.burst, self.align, self.chip, self.cores)
        self.update()

    def _cores(self, spec: HardwareSpec) -> int:
        return spec.vector_cores if self.cores.value else 1

    def update(self) -> None:
        spec = self._spec(self.chip.value)
        cores = self._cores(spec)
        curves = [self._curves.get_or((spec.name, a, cores),
                                      lambda a=a: [c.effective_gbps for c in copy_cost_curve(spec, a, cores)])
                  for a in ALIGN_CHOICES]
        c = self.cost = copy_cost(spec, self.burst.value, self.align.value, cores)
        with self.figure.batch_update():
            self.figure.data[0].y, self.figure.data[1].y = curves
            self.figure.data[2].x, self.figure.data[2].y = [c.burst_bytes], [c.effective_gbps]
            self.figure.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, y0=c.peak_gbps,
                                              y1=c.peak_gbps, line=dict(dash="dot", color="grey")),
                                         dict(type="line", yref="paper", y0=0, y1=1, x0=spec.dma_burst_full_bytes,
                                              x1=spec.dma_burst_full_bytes, line=dict(dash="dot", color="grey"))]
        who = f"all {cores} cores streaming" if cores > 1 else "one core alone"
        align = "512-B aligned" if c.aligned else "not 512-B aligned"
        self.status.value = (
            f"<b>{c.effective_gbps:.1f} GB/s</b> of the core's {c.peak_gbps:.1f} GB/s ({c.effective_gbps / c.peak_gbps:.0%})"
            f" \u2014 {_size(c.burst_bytes)} per copy, {align}, {spec.name}, {who}. Each copy holds its DMA engine "
            f"{c.occupancy_cycles:.0f} cycles ({spec.dma_issue_cycles:g} issue + transfer at {c.efficiency:.0%} "
            f"efficiency); its data arrives {c.latency_cycles:.0f} cycles later; about {c.in_flight:.1f} copies in "
            f"flight; one copy every {c.time_per_copy_us * 1000:.1f} ns (bound by {c.bound}). "
            f"A copy the kernel waits for: {c.waited_copy_us * 1000:.0f} ns.")
