"""DiscreteChainExplorer: the discrete chain's launches, overhead against work (notebook 02)."""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...kernels.moe_gating import simulate_moe_gating
from ..figure_widget import ExplorerFigureWidget
from ._base import (minimum_hbm_bytes, _check_choice, _check_int, _chip_options, _error_html,
                    _EXPECTED_ERRORS, _Explorer, _LRU)


class DiscreteChainExplorer(_Explorer):
    """The discrete chain Softmax → TopK (full sort) → Renormalise, launch by launch (notebook 02).

    Controls: ``.S``, ``.E``, ``.K`` (IntSliders with those descriptions), ``.chip`` (Dropdown).
    ``.figure`` has two panels. Left, time per launch: traces ``"launch overhead"`` (0) and
    ``"work"`` (1), one bar per launch plus the fused kernel (``FUSED_VERSION``, host tiling)
    for comparison. Right, HBM traffic in KB: one trace per discrete launch (2, 3, 4: its bytes,
    stacked on the "discrete chain" row), ``"fused"`` (5) and ``"minimum"`` (6, reading the logits
    once and writing the outputs once: B·S·E·4 + B·S·K·8). ``.timeline`` is the discrete chain's
    last timeline, ``.fused`` the fused run's result.
    """

    TRACE_NAMES = ("launch overhead", "work", "Softmax", "TopK (full sort)", "Renormalise",
                   "fused", "minimum")
    LAUNCHES = ("Softmax", "TopK (full sort)", "Renormalise")
    BYTE_ROWS = ("discrete chain", "fused kernel", "minimum")
    FUSED_VERSION = "v3"

    def __init__(self, S: int = 1024, E: int = 64, K: int = 2, *, B: int = 1, chip: str = "ascend-910b2"):
        chip_options = _chip_options()
        _check_choice("chip", chip, chip_options)
        self.B_value = _check_int("B", B, 1, 1024)
        self.S = W.IntSlider(value=_check_int("S", S, 1, 16384), min=1, max=16384, description="S")
        self.E = W.IntSlider(value=_check_int("E", E, 1, 4096), min=1, max=4096, description="E")
        self.K = W.IntSlider(value=_check_int("K", K, 1, 64), min=1, max=64, description="K")
        self.chip = W.Dropdown(options=chip_options, value=chip, description="chip")
        self.status = W.HTML()
        self.timeline = None
        self.fused = None
        self._runs = _LRU()

        time_rows = [*self.LAUNCHES, f"fused {self.FUSED_VERSION}"]
        fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.2,
                            subplot_titles=("time per launch (\u00b5s)", "HBM traffic (KB)"))
        hover_t = "%{y}: %{x:.2f} \u00b5s<extra>%{fullData.name}</extra>"
        fig.add_trace(go.Bar(name="launch overhead", orientation="h", y=time_rows, x=[0] * 4,
                             marker_color="#444444", hovertemplate=hover_t), 1, 1)
        fig.add_trace(go.Bar(name="work", orientation="h", y=time_rows, x=[0] * 4,
                             marker_color="#ff7f0e", hovertemplate=hover_t), 1, 1)
        hover_b = "%{fullData.name}: %{x:.1f} KB<extra></extra>"
        for name, colour in zip(self.LAUNCHES, ("#1f77b4", "#6baed6", "#c6dbef")):
            fig.add_trace(go.Bar(name=name, orientation="h", y=[self.BYTE_ROWS[0]], x=[0],
                                 marker_color=colour, hovertemplate=hover_b, legendgroup="bytes"), 1, 2)
        fig.add_trace(go.Bar(name="fused", orientation="h", y=[self.BYTE_ROWS[1]], x=[0],
                             marker_color="#2ca02c", hovertemplate=hover_b, legendgroup="bytes"), 1, 2)
        fig.add_trace(go.Bar(name="minimum", orientation="h", y=[self.BYTE_ROWS[2]], x=[0],
                             marker_color="#bbbbbb", hovertemplate=hover_b, legendgroup="bytes"), 1, 2)
        fig.update_layout(
            barmode="stack", height=360, margin=dict(l=10, r=10, t=70, b=30),
            title=dict(text="The discrete chain", x=0.01),
            legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0, traceorder="normal"),
            uirevision="discrete")
        fig.update_yaxes(type="category", autorange="reversed", automargin=True)
        self.figure = ExplorerFigureWidget(data=fig.data, layout=fig.layout)
        self.update()
        self._watch(self.S, self.E, self.K, self.chip)
        self.widget = W.VBox([W.HBox([self.S, self.E]), W.HBox([self.K, self.chip]), self.status,
                              self.figure])

    def _run(self, key):
        B, S, E, K, chip = key
        hw = self._spec(chip)

        def both():
            discrete = simulate_moe_gating(B, S, E, K, version="discrete", hw=hw)
            fused = simulate_moe_gating(B, S, E, K, version=self.FUSED_VERSION, hw=hw)
            return discrete, fused
        return self._runs.get_or(key, both)

    def _neighbours(self):
        """Each slider one, then two steps away (two timing-only runs each)."""
        B, S, E, K, chip = self.B_value, self.S.value, self.E.value, self.K.value, self.chip.value
        for step in (1, -1, 2, -2):
            for name, slider in (("S", self.S), ("E", self.E), ("K", self.K)):
                value = slider.value + step
                if slider.min <= value <= slider.max:
                    shape = {**dict(S=S, E=E, K=K), name: value}
                    if shape["K"] <= shape["E"]:
                        yield lambda k=(B, shape["S"], shape["E"], shape["K"], chip): self._run(k)

    def update(self) -> None:
        B, S, E, K, chip = key = (self.B_value, self.S.value, self.E.value, self.K.value, self.chip.value)
        try:
            discrete, fused = self._run(key)
            self.error = None
        except _EXPECTED_ERRORS as exc:
            self.error = str(exc)
            with self.figure.batch_update():
                for trace in self.figure.data:
                    trace.x = [0] * len(trace.y)
                self.figure.layout.title.text = f"The discrete chain: B={B}, S={S}, E={E}, K={K}: does not run"
            self.status.value = _error_html(f"S={S}, E={E}, K={K}", self.error)
            return
        t = discrete.timeline
        launches = t.launches
        over = [l.hw.cycles_to_us(l.overhead_cycles) for l in launches]
        total = [l.hw.cycles_to_us(l.total_cycles) for l in launches]
        ft = fused.timeline
        f_over, f_total = ft.launch_overhead_us, ft.total_us
        minimum = minimum_hbm_bytes(B, S, E, K)
        with self.figure.batch_update():
            d = self.figure.data
            d[0].x = [*over, f_over]
            d[1].x = [*(tt - o for tt, o in zip(total, over)), f_total - f_over]
            for i, l in enumerate(launches[:3]):
                d[2 + i].x = [l.hbm_bytes / 1024]
            d[5].x = [ft.hbm_bytes / 1024]
            d[6].x = [minimum / 1024]
            self.figure.layout.title.text = (f"The discrete chain on {t.hw.name}: B={B}, S={S}, E={E}, K={K}: "
                                             f"{t.total_us:.1f} \u00b5s vs fused {f_total:.1f} \u00b5s")
        self.timeline, self.fused = t, fused
        moved = t.hbm_bytes
        self.status.value = (
            f"<b>discrete: {t.total_us:.1f} us in {len(launches)} launches, {t.bottleneck()[0]}-bound; "
            f"{t.launch_overhead_us:.1f} us of it launch overhead ({t.launch_overhead_us / t.total_us:.0%}); "
            f"HBM traffic "
            f"{moved / 1024:.1f} KB = {moved / minimum:.2f}\u00d7 the minimum {minimum / 1024:.1f} KB</b><br>"
            f"fused {self.FUSED_VERSION} (tileS={fused.tiling.tileS}): {f_total:.1f} us, "
            f"{ft.hbm_bytes / 1024:.1f} KB \u2192 the chain is {t.total_us / f_total:.1f}\u00d7 slower")
