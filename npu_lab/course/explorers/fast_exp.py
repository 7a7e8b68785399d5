"""FastExpExplorer: is the polynomial exp faster than the exact ``Exp``? (notebook 06)

The speed-up of the polynomial (:func:`~npu_lab.kernels.moe_gating.exp_speedup`, two one-core
micro-kernels) against the cost per repeat of the exact Exp — on the 910B2 the figure asc-devkit
publishes (docs/zh/api/附录/Vector指令理论性能汇总.md: 32 float a cycle, 2 cycles a repeat), which
the slider lets you doubt — for a chosen vector length; the break-even and the article's 2× are marked.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ..ex06 import exp_break_even_cycles
from ...kernels.moe_gating import exp_speedup
from ..figure_widget import ExplorerFigureWidget
from ._base import _check_choice, _check_float, _check_hw, _Explorer, _LRU

#: vector lengths (floats) the slider offers
FLOAT_CHOICES = (16, 256, 1024, 4096, 8192)
#: Exp costs (cycles per repeat) the curve spans
EXP_COSTS = tuple(np.arange(1.0, 64.5, 1.0))


#: The exact Exp's cycles per repeat the slider offers.
EXP_COST_RANGE = (1.0, 64.0)


class FastExpExplorer(_Explorer):
    """Controls ``.n_floats`` (SelectionSlider) and ``.exp_cost`` (FloatSlider, cycles per repeat of
    the exact Exp); ``.figure`` is the speed-up against the Exp cost with the current choice marked
    (dotted lines at 1× and 2×); ``.status`` gives the speed-up, the break-even and the 2× cost."""

    def __init__(self, hw="ascend-910b2", n_floats: int = 4096, exp_cost: float | None = None):
        self.hw = _check_hw("hw", hw)
        if exp_cost is not None:
            _check_float("exp_cost", exp_cost, EXP_COST_RANGE[0], EXP_COST_RANGE[1])
        _check_choice("n_floats", n_floats, [(str(n), n) for n in FLOAT_CHOICES])
        preset = float(self.hw.vector_exp_cycles_per_repeat)
        self._curves, self._points, self._break_even = _LRU(), _LRU(), _LRU()
        self.n_floats = W.SelectionSlider(options=FLOAT_CHOICES, value=n_floats, description="floats")
        self.exp_cost = W.FloatSlider(value=preset if exp_cost is None else float(exp_cost), min=EXP_COST_RANGE[0],
                                      max=EXP_COST_RANGE[1], step=0.5, description="Exp cyc/rep")
        self.status = W.HTML()
        self.figure = ExplorerFigureWidget(
            data=[go.Scatter(x=EXP_COSTS, y=[], mode="lines", name="polynomial speed-up"),
                  go.Scatter(x=[], y=[], mode="markers", marker=dict(size=12, color="#d62728"),
                             name="your choice")],
            layout=dict(title="Polynomial exp vs exact Exp (one core)", height=360,
                        margin=dict(l=10, r=10, t=50, b=40),
                        xaxis_title=f"exact Exp: cycles per repeat (the preset: {preset:g})",
                        yaxis=dict(title="speed-up", range=[0, 5]),
                        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y, line=dict(dash="dot"))
                                for y in (1, 2)]))
        self.widget = W.VBox([W.HBox([self.n_floats, self.exp_cost]), self.status, self.figure])
        self.speedup = None
        self._watch(self.n_floats, self.exp_cost)
        self.update()

    def _speedup(self, cost: float, n: int) -> float:
        return exp_speedup(self.hw.replace(vector_exp_cycles_per_repeat=float(cost)), n)

    def _curve(self, n: int) -> list[float]:
        """The speed-up at every cost of EXP_COSTS. The exact Exp's time is linear in its cost per
        repeat and the polynomial's does not depend on it, so three runs give the line; it is used
        only when the middle run lies on the line through the ends (else every cost is run)."""
        lo, mid, hi = EXP_COSTS[0], EXP_COSTS[len(EXP_COSTS) // 2], EXP_COSTS[-1]
        s_lo, s_mid, s_hi = (self._speedup(c, n) for c in (lo, mid, hi))
        slope = (s_hi - s_lo) / (hi - lo)
        if abs(s_lo + slope * (mid - lo) - s_mid) <= 1e-9 * abs(s_mid):
            return [s_lo + slope * (c - lo) for c in EXP_COSTS]
        return [self._speedup(c, n) for c in EXP_COSTS]

    def _neighbours(self):
        """The other lengths, nearest first (curve, break-even costs and the point: the break-even
        bisections are what a first move of the floats slider waited for), then the Exp cost one
        step either side."""
        n, cost = self.n_floats.value, self.exp_cost.value
        here = FLOAT_CHOICES.index(n)
        for i in sorted(range(len(FLOAT_CHOICES)), key=lambda i: abs(i - here)):
            m = FLOAT_CHOICES[i]
            yield lambda m=m: self._curves.get_or(m, lambda: self._curve(m))
            yield lambda m=m: self._point_at(cost, m)
            yield lambda m=m: self._break_even_of(m)
        for c in (cost + self.exp_cost.step, cost - self.exp_cost.step):
            if self.exp_cost.min <= c <= self.exp_cost.max:
                yield lambda c=c: self._point_at(c, n)

    def _point_at(self, cost: float, n: int) -> float:
        return self._points.get_or((cost, n), lambda: self._speedup(cost, n))

    def _break_even_of(self, n: int):
        # the break-even costs depend on the length only: bisected once per length, not per move
        return self._break_even.get_or(n, lambda: (exp_break_even_cycles(self.hw, n),
                                                   exp_break_even_cycles(self.hw, n, 2.0)))

    def update(self) -> None:
        n, cost = self.n_floats.value, self.exp_cost.value
        curve = self._curves.get_or(n, lambda: self._curve(n))
        self.speedup = self._point_at(cost, n)
        with self.figure.batch_update():
            self.figure.data[0].y = curve
            self.figure.data[1].x, self.figure.data[1].y = [cost], [self.speedup]
        even, double = self._break_even_of(n)
        self.status.value = (f"<b>{self.speedup:.2f}x</b> with Exp at {cost:g} cycles/repeat over {n} floats; "
                             f"break-even at {even:.1f}, 2x at {double:.1f} cycles/repeat")
