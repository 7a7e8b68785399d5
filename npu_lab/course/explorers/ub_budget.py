"""UbBudgetExplorer: the Unified Buffer budget as a stacked bar, the tiling struct (notebook 03)."""

from __future__ import annotations

from dataclasses import astuple, fields

import ipywidgets as W
import plotly.graph_objects as go

from ...hardware import HardwareSpec
from ...kernels.moe_gating import (MoeGatingTiling, article_calculate_tiling, article_ub_estimate_bytes,
                                  calculate_moe_gating_tiling, moe_ub_budget,
                                  ub_used_bytes)
from ..figure_widget import ExplorerFigureWidget
from ._base import (ARTICLE_UB_BYTES, _check_choice, _check_int, _chip_options, _error_html,
                    _EXPECTED_ERRORS, _Explorer)


_BUFFER_NAMES = tuple(b.name for b in moe_ub_budget("v3", 1, 1, 1))
_BUFFER_COLOURS = dict(zip(_BUFFER_NAMES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                            "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")))
_MAIN_BUFFERS = ("scores", "topk_values", "topk_indices")
_TILING_FIELDS = tuple(f.name for f in fields(MoeGatingTiling))


def ub_breakdown(version: str, tile_points: int, E: int, K: int, block_bytes: int = 32) -> dict:
    """How the honest UB budget of ``version`` grows from the article's formula:
    ``formula`` (T·(E·4 + K·8)) + ``alignment`` (rounding the three buffers up to 32-B blocks)
    + ``second_buffers`` (double-buffered queues) + ``temporaries`` (v3's scratch) = ``total``."""
    buffers = moe_ub_budget(version, tile_points, E, K, block_bytes)
    main = [b for b in buffers if b.name in _MAIN_BUFFERS]
    formula = tile_points * (E * 4 + K * 8)
    alignment = sum(b.bytes_each for b in main) - formula
    second = sum(b.bytes_each * (b.copies - 1) for b in main)
    temporaries = sum(b.total_bytes for b in buffers if b.name not in _MAIN_BUFFERS)
    total = sum(b.total_bytes for b in buffers)
    assert formula + alignment + second + temporaries == total
    return {"formula": formula, "alignment": alignment, "second_buffers": second,
            "temporaries": temporaries, "total": total}


class UbBudgetExplorer(_Explorer):
    """The Unified Buffer budget of one kernel version, as the host tiles it (notebook 03).

    Controls: ``.B``, ``.S``, ``.E``, ``.K`` (IntSliders with those descriptions; the readout is
    editable: type a value), ``.chip`` (Dropdown "chip"), ``.version`` (Dropdown "version":
    v1, v2, v3), ``.zoom`` (Checkbox: zoom the x axis to the host's tile).

    ``.figure``: a stacked horizontal bar chart with three rows -- the host rule's tile, the
    largest tile that fits (``ubCapacity`` points) and the article's formula for the host's
    tile. Traces, in fixed order: one per buffer name in ``BUFFER_NAMES`` (zero when the version
    has no such buffer), then ``"free"``, then ``"article's formula"``. Shapes: a solid line at
    the chip's UB size and a dashed line at the article's 256 KB assumption.
    ``.details`` (HTML): the tiling struct's fields, its packed bytes in hex, the unpack round
    trip, and the article's estimate against the honest budget. ``.tiling`` is the last
    successful :class:`~npu_lab.kernels.moe_gating.MoeGatingTiling`.
    """

    BUFFER_NAMES = _BUFFER_NAMES
    ROWS = ("host rule's tile", "largest tile that fits", "article's formula")
    TRACE_FREE = len(_BUFFER_NAMES)
    TRACE_ARTICLE = len(_BUFFER_NAMES) + 1
    VERSIONS = ("v1", "v2", "v3")

    def __init__(self, B: int = 1, S: int = 1024, E: int = 64, K: int = 2, *,
                 chip: str = "ascend-910b2", version: str = "v2", max_E: int = 65536):
        chip_options = _chip_options()
        _check_choice("chip", chip, chip_options)
        what = {"v1": "one copy", "v2": "double-buffered", "v3": "v2 + temporaries"}
        version_options = [(f"{v} ({what[v]})", v) for v in self.VERSIONS]
        _check_choice("version", version, version_options)
        max_E = _check_int("max_E", max_E, 1, 1 << 22)
        self.B = W.IntSlider(value=_check_int("B", B, 1, 64), min=1, max=64, description="B")
        self.S = W.IntSlider(value=_check_int("S", S, 1, 8192), min=1, max=8192, description="S")
        self.E = W.IntSlider(value=_check_int("E (at most max_E)", E, 1, max_E), min=1, max=max_E, description="E")
        self.K = W.IntSlider(value=_check_int("K", K, 1, 64), min=1, max=64, description="K")
        self.chip = W.Dropdown(options=chip_options, value=chip, description="chip")
        self.version = W.Dropdown(options=version_options, value=version, description="version")
        self.zoom = W.Checkbox(value=False, description="zoom to the host's tile")
        self.status = W.HTML()
        self.details = W.HTML()
        self.tiling = None

        y_bars = list(self.ROWS[:2])
        traces = [go.Bar(name=name, orientation="h", y=y_bars, x=[0, 0], hovertext=["", ""],
                         marker=dict(color=_BUFFER_COLOURS[name], line=dict(width=0)),
                         hovertemplate="%{hovertext}<extra>%{fullData.name}</extra>")
                  for name in self.BUFFER_NAMES]
        traces.append(go.Bar(name="free", orientation="h", y=y_bars, x=[0, 0], hovertext=["", ""],
                             marker=dict(color="rgba(0,0,0,0.06)", line=dict(color="#bbb", width=1)),
                             hovertemplate="%{hovertext}<extra>free</extra>"))
        traces.append(go.Bar(name="article's formula", orientation="h", y=[self.ROWS[2]], x=[0],
                             hovertext=[""], marker=dict(color="#aaaaaa", pattern=dict(shape="/")),
                             hovertemplate="%{hovertext}<extra>article's formula</extra>"))
        layout = dict(
            title=dict(text="Unified Buffer budget", x=0.01), barmode="stack", height=400,
            margin=dict(l=10, r=20, t=70, b=40),
            xaxis=dict(title=dict(text="KB of Unified Buffer (one vector core)"), range=[0, 280]),
            yaxis=dict(type="category", categoryorder="array", categoryarray=list(self.ROWS),
                       autorange="reversed", automargin=True),
            legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0,
                        traceorder="normal"),
            shapes=[self._vline(192, "#b00020", "solid"), self._vline(256, "#555555", "dash")],
            annotations=[self._vlabel(192, "chip UB", "#b00020"),
                         self._vlabel(256, "article: 256 KB", "#555555")],
            uirevision="ub")
        self.figure = ExplorerFigureWidget(data=traces, layout=layout)
        self.update()
        self._watch(self.B, self.S, self.E, self.K, self.chip, self.version, self.zoom)
        controls = W.VBox([W.HBox([self.chip, self.version, self.zoom]),
                           W.HBox([self.B, self.S]), W.HBox([self.E, self.K])])
        self.widget = W.VBox([controls, self.status, self.figure, self.details])

    @staticmethod
    def _vline(kb: float, colour: str, dash: str) -> dict:
        return dict(type="line", xref="x", yref="paper", x0=kb, x1=kb, y0=0, y1=1,
                    line=dict(color=colour, width=2, dash=dash))

    @staticmethod
    def _vlabel(kb: float, text: str, colour: str) -> dict:
        """A label just above the plot, ending at the line."""
        return dict(x=kb, xref="x", y=1.0, yref="paper", text=text, showarrow=False,
                    xanchor="right", yanchor="bottom", font=dict(color=colour, size=11))

    def update(self) -> None:
        B, S, E, K = self.B.value, self.S.value, self.E.value, self.K.value
        version, hw = self.version.value, self._spec(self.chip.value)
        try:
            tiling = calculate_moe_gating_tiling(B, S, E, K, hw, version=version)
            self.error = None
        except _EXPECTED_ERRORS as exc:
            self.error = str(exc)
            tiling = None
        ub_kb = hw.ub_usable_bytes / 1024
        with self.figure.batch_update():
            if tiling is None:
                for trace in self.figure.data:
                    trace.x = [0] * len(trace.y)
                    trace.hovertext = [""] * len(trace.y)
            else:
                self._draw(tiling, version, hw)
            # layout only where it changed: a relayout costs the browser a redraw of the axes, a
            # slider move over E alone changes the bars (trace data) and the title
            lay = self.figure.layout
            same = hw.ub_usable_bytes == ARTICLE_UB_BYTES
            if lay.shapes[0].x0 != ub_kb:
                lay.shapes[0].x0 = lay.shapes[0].x1 = ub_kb
                lay.annotations[0].x = ub_kb
            label = f"{hw.name} usable UB {ub_kb:.2f} KB" + (" = the article's assumption" if same else "")
            if lay.annotations[0].text != label:
                lay.annotations[0].text = label
                lay.annotations[1].text = "" if same else "article: 256 KB"
            x_range = self._x_range(tiling, version, hw)
            if list(lay.xaxis.range or ()) != list(x_range):
                lay.xaxis.range = x_range
            title = f"UB budget of {version} on {hw.name}"      # the shape is on the sliders: no relayout per move
            if lay.title.text != title:
                lay.title.text = title
        if tiling is None:
            self.status.value = _error_html(f"E={E}, K={K} ({version} on {hw.name})", self.error)
            self.details.value = ""
            return
        self.tiling = tiling
        self._describe(tiling, version, hw)

    def _x_range(self, tiling, version: str, hw: HardwareSpec) -> list[float]:
        full = max(hw.ub_usable_bytes, ARTICLE_UB_BYTES) / 1024 * 1.08
        if not self.zoom.value or tiling is None:
            return [0, full]
        used = ub_used_bytes(tiling, version)
        article = article_ub_estimate_bytes(tiling.tileBS, tiling.E, tiling.K, ub_assumed_bytes=None)
        return [0, max(used, article) / 1024 * 1.25]

    def _draw(self, tiling: MoeGatingTiling, version: str, hw: HardwareSpec) -> None:
        E, K = tiling.E, tiling.K
        host = {b.name: b for b in moe_ub_budget(version, tiling.tileBS, E, K, hw.block_bytes)}
        most = {b.name: b for b in moe_ub_budget(version, tiling.ubCapacity, E, K, hw.block_bytes)}
        points = (tiling.tileBS, tiling.ubCapacity)
        for i, name in enumerate(self.BUFFER_NAMES):
            trace = self.figure.data[i]
            bufs = (host.get(name), most.get(name))
            trace.x = [0 if b is None else b.total_bytes / 1024 for b in bufs]
            trace.hovertext = ["not used by " + version if b is None else
                               f"{name}: {b.elements:,} {b.dtype} \u00d7 {b.copies} "
                               f"cop{'y' if b.copies == 1 else 'ies'}"
                               f" = {b.total_bytes:,} B ({T} points)" for b, T in zip(bufs, points)]
        used = [sum(b.total_bytes for b in host.values()), sum(b.total_bytes for b in most.values())]
        free = self.figure.data[self.TRACE_FREE]
        free.x = [max(0, hw.ub_usable_bytes - u) / 1024 for u in used]
        free.hovertext = [f"free: {hw.ub_usable_bytes - u:,} B of {hw.ub_usable_bytes:,} B ({u / hw.ub_usable_bytes:.1%} used)"
                          for u in used]
        est = article_ub_estimate_bytes(tiling.tileBS, E, K, ub_assumed_bytes=None)
        art = self.figure.data[self.TRACE_ARTICLE]
        art.x = [est / 1024]
        art.hovertext = [f"{tiling.tileBS} \u00d7 ({E}\u00b74 + {K}\u00b78) = {est:,} B"]

    def _describe(self, tiling: MoeGatingTiling, version: str, hw: HardwareSpec) -> None:
        used = ub_used_bytes(tiling, version)
        self.status.value = (
            f"<b>tileS={tiling.tileS} by the host rule ({tiling.totalTiles} tiles); {version} holds "
            f"{used / 1024:.2f} KB of {hw.ub_usable_bytes / 1024:.2f} KB usable UB ({used / hw.ub_usable_bytes:.1%}); "
            f"at most {tiling.ubCapacity} points fit (ubCapacity)</b>")
        packed = tiling.pack()
        round_trip = MoeGatingTiling.unpack(packed) == tiling
        rows = "".join(
            f"<tr><td style='padding:1px 6px'>{name}</td><td style='padding:1px 6px;text-align:right'>"
            f"{value}</td><td style='padding:1px 6px;font-family:monospace'>"
            f"{packed[4 * i:4 * i + 4].hex(' ')}</td></tr>"
            for i, (name, value) in enumerate(zip(_TILING_FIELDS, astuple(tiling))))
        b = ub_breakdown(version, tiling.tileBS, tiling.E, tiling.K, hw.block_bytes)
        parts = [f"{b['alignment']:,} B of 32-B alignment"]
        if b["second_buffers"]:
            parts.append(f"{b['second_buffers']:,} B for the second buffer of each queue")
        if b["temporaries"]:
            parts.append(f"{b['temporaries']:,} B of vector temporaries")
        theirs = article_calculate_tiling(tiling.B, tiling.S, tiling.E, tiling.K) \
            if tiling.E * 4 + tiling.K * 8 <= ARTICLE_UB_BYTES else None
        their_rule = (f"The article's own rule (256 KB assumed, its formula) picks tileS={theirs.tileS} with "
                      f"ubCapacity={theirs.ubCapacity}." if theirs is not None else
                      "By the article's formula not even one row fits its assumed 256 KB.")
        self.details.value = (
            "<div style='display:flex;gap:24px;font-size:12px'><div><b>MoeGatingTiling</b> (10 little-endian "
            "int32)<table style='border-collapse:collapse'><tr><th>field</th><th>value</th><th>bytes</th></tr>"
            f"{rows}</table><code>pack()</code> = <code>{packed.hex(' ', 4)}</code><br>"
            f"<code>unpack(pack()) == tiling</code>: {round_trip}</div>"
            f"<div style='max-width:480px'><b>The article's estimate against the honest budget</b><br>"
            f"formula: {tiling.tileBS} \u00d7 ({tiling.E}\u00b74 + {tiling.K}\u00b78) = {b['formula']:,} B "
            f"({b['formula'] / 1024:.2f} KB)<br>honest {version} budget: {b['total']:,} B "
            f"({b['total'] / 1024:.2f} KB) = {b['total'] / b['formula']:.2f}\u00d7 the formula: "
            f"{', '.join(parts)}.<br>{their_rule} The {hw.name} has {hw.ub_usable_bytes / 1024:.2f} KB usable, "
            "not 256.</div></div>")



# ---------------------------------------------------------------------------- discrete chain
