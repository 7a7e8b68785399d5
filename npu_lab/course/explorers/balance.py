"""The balance explorer (notebook 13): variable-length decode work over cores, four schedules.

Sliders over the length spread (the lognormal sigma of the sequence lengths), the number of
sequences and of cores; the figure is each core's load (positions) under round-robin, contiguous,
LPT and split-long (:func:`npu_lab.sched.compare_schedules`), with the perfect share as a line; the
status gives each schedule's makespan, utilisation and P99, LPT against Graham's bound when the
brute-force optimum is small enough to compute. With ``.simulate`` ticked the chosen schedule also
runs on the simulator (the decode kernel, :func:`~npu_lab.kernels.decode.scheduled.scheduled_decode_attention`,
timing-only) and the status adds the monitor's verdict and first advice: that costs 0.05–0.3 s the
first time per configuration (cached after), so it is off by default; the model alone redraws in
a few milliseconds.
"""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ...kernels.decode.scheduled import SCHEDULES, random_decode_inputs, scheduled_decode_attention
from ...sched import compare_schedules, sample_lengths
from ...sched.lpt import (MAX_BRUTE_FORCE_ITEMS, contiguous_schedule, lpt_bound, lpt_schedule, optimal_makespan,
                          round_robin_schedule, split_long_schedule)
from ...sim.monitor import monitor
from ..figure_widget import ExplorerFigureWidget
from ._base import _DROPDOWN, _check_bool, _check_choice, _check_float, _check_int, _Explorer, _LRU

__all__ = ["BalanceExplorer", "SCHEDULE_COLOURS", "LENGTH_RANGE"]

SCHEDULE_COLOURS = {"round-robin": "#7f7f7f", "contiguous": "#ff7f0e", "LPT": "#1f77b4", "split-long": "#2ca02c"}
#: (low, high, median) of the sequence lengths (positions): short enough that a simulated run is quick
LENGTH_RANGE = (16, 1024, 128)
MAX_CORES = 16


class BalanceExplorer(_Explorer):
    """Controls ``.spread`` (FloatSlider 0.1..2, lognormal sigma), ``.items`` (IntSlider 1..64
    sequences), ``.cores`` (IntSlider 1..16), ``.seed`` (IntSlider 0..9), ``.schedule`` (Dropdown:
    the one to simulate), ``.simulate`` (Checkbox). ``.figure``: per-core loads of the four
    schedules. ``.table``: :func:`~npu_lab.sched.compare_schedules`'s DataFrame; ``.report``: the
    monitor's report of the simulated run, or None."""

    def __init__(self, spread: float = 1.0, items: int = 24, cores: int = 8, seed: int = 0,
                 schedule: str = "LPT", simulate: bool = False, hw: str = "ascend-910b2"):
        _check_float("spread", spread, 0.1, 2.0)
        _check_int("items", items, 1, 64)
        _check_int("cores", cores, 1, MAX_CORES)
        _check_int("seed", seed, 0, 9)
        _check_choice("schedule", schedule, [(None, s) for s in SCHEDULES])
        _check_bool("simulate", simulate)
        self.hw = hw
        self._runs = _LRU()
        self.spread = W.FloatSlider(value=spread, min=0.1, max=2.0, step=0.1, description="spread σ")
        self.items = W.IntSlider(value=items, min=1, max=64, description="sequences")
        self.cores = W.IntSlider(value=cores, min=1, max=MAX_CORES, description="cores")
        self.seed = W.IntSlider(value=seed, min=0, max=9, description="seed")
        self.schedule = W.Dropdown(options=list(SCHEDULES), value=schedule, description="simulate", layout=_DROPDOWN)
        self.simulate = W.Checkbox(value=simulate, description="run it on the simulator")
        self.status = W.HTML()
        self.table = self.report = None
        self.figure = ExplorerFigureWidget(
            data=[go.Bar(x=[], y=[], name=s, marker_color=c) for s, c in SCHEDULE_COLOURS.items()],
            layout=dict(height=380, barmode="group", margin=dict(l=10, r=10, t=50, b=40),
                        title="Load per core", xaxis=dict(title="core", type="category"),
                        yaxis=dict(title="positions (work)", rangemode="tozero"),
                        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
                        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=0, y1=0,
                                     line=dict(color="black", dash="dash"))]))
        self.widget = W.VBox([W.HBox([self.spread, self.items, self.cores, self.seed]),
                              W.HBox([self.schedule, self.simulate]), self.status, self.figure])
        self._watch(self.spread, self.items, self.cores, self.seed, self.schedule, self.simulate)
        self.update()

    def lengths(self) -> list[int]:
        lo, hi, med = LENGTH_RANGE
        return sample_lengths(self.items.value, "lognormal", self.seed.value, low=lo, high=hi, median=med,
                              sigma=round(self.spread.value, 1))

    def _simulated(self, lens, schedule, cores):
        def run():
            q, k, v, l = random_decode_inputs(lens, q_heads=2, kv_heads=1)
            r = scheduled_decode_attention(q, k, v, l, schedule, cores=cores, hw=self.hw, timing_only=True)
            return r.timeline.total_us, monitor(r.timeline)
        return self._runs.get_or((tuple(lens), schedule, cores), run)

    def update(self) -> None:
        lens, m = self.lengths(), self.cores.value
        df = self.table = compare_schedules(lens, m)
        scheds = {"round-robin": round_robin_schedule(lens, m), "contiguous": contiguous_schedule(lens, m),
                  "LPT": lpt_schedule(lens, m), "split-long": split_long_schedule(lens, m)}
        mean = sum(lens) / m
        with self.figure.batch_update():
            for trace, (name, s) in zip(self.figure.data, scheds.items()):
                trace.x, trace.y = [str(c) for c in range(m)], list(s.loads)
            self.figure.layout.shapes[0].y0 = self.figure.layout.shapes[0].y1 = mean
            self.figure.layout.title = f"Load per core: {len(lens)} sequences on {m} cores (dashed: a perfect share)"
        rows = "".join(f"<tr><td>{r.schedule}</td><td>{r.makespan:,}</td><td>{r.utilisation:.0%}</td>"
                       f"<td>{r.p99:,.0f}</td></tr>" for r in df.itertuples())
        bound = ""
        if len(lens) <= MAX_BRUTE_FORCE_ITEMS and m <= 6:
            opt = optimal_makespan(lens, m)
            bound = (f"<br>optimum {opt:,}; LPT / optimum = {scheds['LPT'].makespan / opt:.3f} "
                     f"≤ Graham's bound {lpt_bound(m):.3f}")
        sim = ""
        self.report = None
        if self.simulate.value:
            us, rep = self._simulated(lens, self.schedule.value, m)
            self.report = rep
            sim = (f"<br>simulated ({html.escape(self.schedule.value)}): <b>{us:.1f} µs</b>, "
                   f"{html.escape(rep.verdict)}-bound; balance max/mean {rep.summary['balance_max_over_mean']:.2f}; "
                   f"{html.escape(rep.advice[0]) if rep.advice else ''}")
        self.error = None
        self.status.value = ("<table><tr><th>schedule</th><th>makespan</th><th>utilisation</th><th>P99</th></tr>"
                             f"{rows}</table>{bound}{sim}")
