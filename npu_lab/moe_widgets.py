"""ipywidgets explorers for MoeGatingTopK (notebooks 02, 03 and 04).

Each explorer is a small class: its controls are attributes (``.S``, ``.E``, ``.tile_s``,
``.chip`` ...), ``.figure`` is a plotly ``go.FigureWidget`` built once with its full layout and
updated in place inside one ``fig.batch_update()``, ``.status`` is an HTML line, ``.widget`` is
the box to display (the explorer displays itself too), and ``update()`` recomputes from the
current control values. Setting a control's ``.value`` from code drives it exactly as a slider
move does; ``set(**values)`` changes several controls and redraws once.

Every number comes from timing-only simulations (:func:`~npu_lab.kernels.moe_gating.sweep`,
:func:`~npu_lab.kernels.moe_gating.simulate_moe_gating`), cached per configuration so moving
the tileS slider over values already seen costs well under a millisecond of simulation.
Configurations the library refuses (K > E, a tile that overflows the Unified Buffer, a row too
wide for one core) show the library's error message in ``.status`` instead of raising; the
message is also kept in ``.error`` (None after a successful update).

* :class:`TileSweepExplorer` -- latency against tileS, the current tileS highlighted, the
  article's measured points overlaid, a per-tileS table (notebook 04);
* :class:`UbBudgetExplorer` -- the Unified Buffer budget as a stacked bar, the tiling struct and
  its packed bytes, the article's estimate against the honest budget (notebook 03);
* :class:`DiscreteChainExplorer` -- the three launches of the discrete chain: launch overhead
  against work, HBM bytes moved against the minimum (notebook 02).

No library module imports this one (DESIGN.md §2).
"""

from __future__ import annotations

import html
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import astuple, fields

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .data import ARTICLE_SWEEP_SHAPE, load_article_tile_sweep
from .hardware import HardwareSpec, HardwareSpecError
from .kernels.moe_gating import (VERSIONS, MoeGatingTiling, article_calculate_tiling,
                                 article_ub_estimate_bytes, calculate_moe_gating_tiling,
                                 moe_ub_budget, simulate_moe_gating, sweep, ub_used_bytes)
from .kernels.moe_gating.sweep import candidate_tile_sizes
from .lang import UbOverflowError
from .presets import get_preset
from .sim import SimulationError
from .viz import latency_sweep_figure, sync_widget_state

__all__ = ["MOE_CHIPS", "FUSED_VERSIONS", "TileSweepExplorer", "UbBudgetExplorer",
           "DiscreteChainExplorer", "minimum_hbm_bytes"]

#: Chips the explorers offer: the article-fitted preset and the two datasheet presets.
MOE_CHIPS = ("article", "ascend-910b2", "ascend-310p3")
#: Fused kernel versions (everything but the discrete chain), in teaching order.
FUSED_VERSIONS = tuple(v for v in VERSIONS if v != "discrete")
#: The article's UB assumption, in bytes.
ARTICLE_UB_BYTES = 256 * 1024

# Errors a learner can provoke with the controls: shown in the status line, never raised.
_EXPECTED_ERRORS = (ValueError, UbOverflowError, HardwareSpecError, SimulationError)
_CACHE_SIZE = 512
_SHORT_VERSION = {"v1": "synchronous", "v2": "double-buffered", "v2_bad_sync": "the sync pitfall",
                  "v3": "vectorized", "v3_fast_exp": "polynomial exp"}
_DROPDOWN = dict(width="300px")
_ERROR_STYLE = "color:#b00020"


def minimum_hbm_bytes(B: int, S: int, E: int, K: int, dtype_bytes: int = 4) -> int:
    """The least HBM traffic any MoeGatingTopK can move: read the logits once
    (B·S·E·dtype) and write the outputs once (B·S·K indices int32 + weights float32 = 8 B each)."""
    return B * S * E * dtype_bytes + B * S * K * 8


# ---------------------------------------------------------------------------- helpers
def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(value)


def _chip_options(chips=MOE_CHIPS) -> list[tuple[str, str]]:
    options = []
    for name in chips:
        try:
            spec = get_preset(name)
        except (FileNotFoundError, HardwareSpecError):
            continue  # e.g. the fitted preset before its data file is generated
        label = "article (fitted)" if name == "article" else name
        options.append((f"{label} \u00b7 UB {spec.ub_bytes // 1024} KB", name))
    return options


def _check_choice(name: str, value, options) -> str:
    values = [v for _, v in options]
    if value not in values:
        raise ValueError(f"{name} must be one of {values}, got {value!r}")
    return value


def _error_html(prefix: str, message: str) -> str:
    return (f"<span style='{_ERROR_STYLE}'><b>{html.escape(prefix)} does not run:</b> "
            f"{html.escape(message)}</span>")


class _LRU(OrderedDict):
    """A small least-recently-used cache: ``get_or(key, make)``."""

    def get_or(self, key, make):
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        if len(self) > _CACHE_SIZE:
            self.popitem(last=False)
        return value


class _Explorer:
    """Shared plumbing: observers, ``set(...)``, display, timing of the last update."""

    figure: go.FigureWidget
    status: W.HTML
    widget: W.Box
    error: str | None = None
    last_update_s: float = 0.0
    _controls: tuple = ()

    def _watch(self, *controls) -> None:
        self._controls = controls
        self._held = False
        for control in controls:
            control.observe(self._on_change, names="value")

    def _on_change(self, change=None) -> None:
        if self._held:
            return
        start = time.perf_counter()
        self.update()
        self._sync_figure_state()
        self.last_update_s = time.perf_counter() - start

    def _sync_figure_state(self) -> None:
        sync_widget_state(self.figure)

    @contextmanager
    def hold(self):
        """Change several controls inside ``with explorer.hold(): ...``; redraw once at the end."""
        self._held = True
        try:
            yield self
        finally:
            self._held = False
            self._on_change()

    def set(self, **values) -> None:
        """``explorer.set(S=2048, E=256)``: set several controls, then redraw once."""
        unknown = [k for k in values if not isinstance(getattr(self, k, None), W.ValueWidget)]
        if unknown:
            names = [k for k, v in vars(self).items() if any(v is c for c in self._controls)]
            raise AttributeError(f"no control named {unknown}; controls: {names}")
        with self.hold():
            for key, value in values.items():
                getattr(self, key).value = value

    def update(self) -> None:  # pragma: no cover - each explorer defines it
        raise NotImplementedError

    def _spec(self, chip: str) -> HardwareSpec:
        return get_preset(chip)

    def _repr_mimebundle_(self, **kwargs):
        self._sync_figure_state()
        return self.widget._repr_mimebundle_(**kwargs)


# ---------------------------------------------------------------------------- tileS sweep
def _table_html(rows: list[dict], current: int, with_article: bool) -> str:
    head = ["tileS", "blocks", "UB KB", "\u00b5s", "util.", "bound"]
    if with_article:
        head.append("article \u00b5s")
    out = ["<table style='border-collapse:collapse;font-size:11px;font-family:monospace;"
           "white-space:nowrap;line-height:1.3'>",
           "<tr>" + "".join(f"<th style='padding:1px 4px;border-bottom:1px solid #999;text-align:right'>"
                            f"{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        style = "background:#fde0dc;font-weight:bold" if r["tileS"] == current else ""
        if r.get("note"):
            cells = [str(r["tileS"]), f"<td colspan='{len(head) - 1}' style='color:#b00020;"
                     "padding:1px 4px'>does not fit the UB</td>"]
            out.append(f"<tr style='{style}'><td style='padding:1px 4px;text-align:right'>{cells[0]}"
                       f"</td>{cells[1]}</tr>")
            continue
        cells = [str(r["tileS"]), str(int(r["blocks"])), f"{r['ub_used_kb']:.2f}",
                 f"{r['latency_us']:.1f}", f"{r['core_utilisation']:.0%}", str(r["bottleneck"])]
        if with_article:
            cells.append("" if r.get("article_us") is None else f"{r['article_us']:.0f}")
        out.append(f"<tr style='{style}'>" + "".join(
            f"<td style='padding:1px 4px;text-align:right'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


class TileSweepExplorer(_Explorer):
    """Latency against tileS for one shape, chip and kernel version (notebook 04).

    Controls: ``.tile_s`` (IntSlider "tileS", 1..64), ``.B``, ``.S``, ``.E``, ``.K`` (IntSliders
    with those descriptions), ``.chip`` (Dropdown "chip": ``article``, ``ascend-910b2``,
    ``ascend-310p3``), ``.version`` (Dropdown "version": the fused versions).

    ``.figure`` traces, in this fixed order (see ``TRACE_NAMES``):

    0. ``"model"`` -- the sweep over tileS = 1, 2, 4, ..., 64 (only values <= S, plus S itself
       when S < 64; only those that fit the UB);
    1. ``"current tileS"`` -- one point: x = ``.tile_s.value``, y =
       ``simulate_moe_gating(B, S, E, K, version=..., hw=chip, tile_s=tile_s).latency_us``
       (empty when that configuration does not run);
    2. ``"article (measured)"`` -- the article's measured latencies, shown only at its shape
       (B=1, S=1024, E=64, K=2), empty otherwise.

    ``.table`` is an HTML table (tileS, blocks, UB KB, latency, core utilisation, bottleneck);
    ``.status`` starts ``"tileS=8: 77.6 us, 128 blocks, ..."``; ``.result`` is the last
    successful :class:`~npu_lab.kernels.moe_gating.MoeGatingResult` of the current tileS and
    ``.sweep_table`` the last sweep DataFrame.
    """

    TRACE_NAMES = ("model", "current tileS", "article (measured)")
    TRACE_MODEL, TRACE_CURRENT, TRACE_ARTICLE = 0, 1, 2
    MAX_TILE_S = 64

    def __init__(self, B: int = 1, S: int = 1024, E: int = 64, K: int = 2, *, chip: str = "article",
                 version: str = "v1", tile_s: int = 8, max_S: int = 8192, max_E: int = 16384):
        chip_options = _chip_options()
        version_options = [(f"{v} ({_SHORT_VERSION.get(v, VERSIONS[v])[:30]})", v) for v in FUSED_VERSIONS]
        _check_choice("chip", chip, chip_options)
        _check_choice("version", version, version_options)
        max_S = _check_int("max_S", max_S, 1, 1 << 20)
        max_E = _check_int("max_E", max_E, 1, 1 << 20)
        self.tile_s = W.IntSlider(value=_check_int("tile_s", tile_s, 1, self.MAX_TILE_S), min=1,
                                  max=self.MAX_TILE_S, description="tileS", continuous_update=True)
        self.B = W.IntSlider(value=_check_int("B", B, 1, 64), min=1, max=64, description="B")
        self.S = W.IntSlider(value=_check_int("S", S, 1, max_S), min=1, max=max_S, description="S")
        self.E = W.IntSlider(value=_check_int("E", E, 1, max_E), min=1, max=max_E, description="E")
        self.K = W.IntSlider(value=_check_int("K", K, 1, 64), min=1, max=64, description="K")
        self.chip = W.Dropdown(options=chip_options, value=chip, description="chip",
                               layout=W.Layout(**_DROPDOWN))
        self.version = W.Dropdown(options=version_options, value=version, description="version",
                                  layout=W.Layout(**_DROPDOWN))
        self.status = W.HTML()
        self.table = W.HTML()
        self.result = None
        self.sweep_table = None
        self._sweeps = _LRU()
        self._points = _LRU()
        article = load_article_tile_sweep()
        self._article = article.rename(columns={"tile_s": "tileS"})
        self._article_us = dict(zip(article["tile_s"].astype(int), article["latency_us"].astype(float)))

        empty = pd.DataFrame({"tileS": [], "latency_us": []})
        fig = latency_sweep_figure(empty, "tileS", "latency_us", reference=self._article,
                                   reference_name=self.TRACE_NAMES[self.TRACE_ARTICLE], log_x=True,
                                   title="MoeGatingTopK: latency vs tileS")
        fig.data[self.TRACE_MODEL].name = self.TRACE_NAMES[self.TRACE_MODEL]
        fig.data[self.TRACE_CURRENT].name = self.TRACE_NAMES[self.TRACE_CURRENT]
        ticks = [1 << i for i in range(7)]
        fig.update_layout(
            width=620, height=420, margin=dict(l=10, r=10, t=60, b=40),
            xaxis=dict(title=dict(text="tileS (points per tile, log scale)"), tickvals=ticks,
                       ticktext=[str(t) for t in ticks], range=[np.log10(0.8), np.log10(80)]),
            yaxis=dict(title=dict(text="latency (\u00b5s)")))
        self.figure = go.FigureWidget(data=fig.data, layout=fig.layout)
        self.update()
        self._watch(self.tile_s, self.B, self.S, self.E, self.K, self.chip, self.version)
        controls = W.VBox([W.HBox([self.tile_s, self.chip, self.version]),
                           W.HBox([self.B, self.S]), W.HBox([self.E, self.K])])
        self.widget = W.VBox([controls, self.status, W.HBox([self.figure, self.table])])

    # ---- simulation (cached) -----------------------------------------------------------------
    def sweep_tile_sizes(self, S: int | None = None) -> list[int]:
        """The tileS values the curve sweeps: powers of two up to min(S, 64), plus S if S < 64."""
        return candidate_tile_sizes(self.S.value if S is None else S, self.MAX_TILE_S)

    def _key(self):
        return (self.B.value, self.S.value, self.E.value, self.K.value, self.chip.value, self.version.value)

    def _sweep(self, key) -> pd.DataFrame:
        B, S, E, K, chip, version = key
        return self._sweeps.get_or(key, lambda: sweep(version, B, S, E, K, self._spec(chip),
                                                      self.sweep_tile_sizes(S)))

    def _point(self, key, tile_s: int):
        B, S, E, K, chip, version = key
        return self._points.get_or(key + (tile_s,), lambda: simulate_moe_gating(
            B, S, E, K, version=version, hw=self._spec(chip), tile_s=tile_s))

    def at_article_shape(self) -> bool:
        return (self.B.value, self.S.value, self.E.value, self.K.value) == tuple(
            ARTICLE_SWEEP_SHAPE[k] for k in "BSEK")

    # ---- redraw ----------------------------------------------------------------------------
    def update(self) -> None:
        key, ts = self._key(), self.tile_s.value
        B, S, E, K, chip, version = key
        hw = self._spec(chip)
        df = result = None
        try:
            df = self._sweep(key)
            result = self._point(key, ts)
            self.error = None
        except _EXPECTED_ERRORS as exc:
            self.error = str(exc)
        article = self.at_article_shape()
        ok = df.dropna(subset=["latency_us"]) if df is not None else None
        with self.figure.batch_update():
            model = self.figure.data[self.TRACE_MODEL]
            model.x = ok["tileS"].to_numpy() if ok is not None else []
            model.y = ok["latency_us"].to_numpy(dtype=float) if ok is not None else []
            current = self.figure.data[self.TRACE_CURRENT]
            current.x = [ts] if result is not None else []
            current.y = [result.latency_us] if result is not None else []
            ref = self.figure.data[self.TRACE_ARTICLE]
            ref.x = self._article["tileS"].to_numpy() if article else []
            ref.y = self._article["latency_us"].to_numpy(dtype=float) if article else []
            self.figure.layout.title.text = (
                f"MoeGatingTopK {version} on {hw.name}: B={B}, S={S}, E={E}, K={K}"
                + ("" if article else " <span style='font-size:0.8em'>(article points only at "
                   "B=1, S=1024, E=64, K=2)</span>"))
        if result is not None:
            self.result = result
        self.sweep_table = df
        self._show(df, ok, result, ts, hw, article)

    def _current_row(self, result, ts: int) -> dict:
        t = result.timeline
        return {"tileS": ts, "blocks": sum(l.block_dim for l in t.launches),
                "ub_used_kb": ub_used_bytes(result.tiling, result.version) / 1024,
                "latency_us": t.total_us, "core_utilisation": t.core_utilisation,
                "bottleneck": t.bottleneck()[0]}

    def _show(self, df, ok, result, ts: int, hw: HardwareSpec, article: bool) -> None:
        rows = []
        if df is not None:
            for r in df.to_dict("records"):
                if r.get("note"):
                    rows.append({"tileS": int(r["tileS"]), "note": r["note"]})
                else:
                    rows.append({**r, "tileS": int(r["tileS"])})
        if result is not None and all(r["tileS"] != ts for r in rows):
            rows.append(self._current_row(result, ts))
        elif result is None and df is not None and all(r["tileS"] != ts for r in rows):
            rows.append({"tileS": ts, "note": self.error or "does not run"})
        rows.sort(key=lambda r: r["tileS"])
        for r in rows:
            r["article_us"] = self._article_us.get(r["tileS"]) if article else None
        self.table.value = _table_html(rows, ts, article)

        if result is None:
            self.status.value = _error_html(f"tileS={ts}", self.error or "unknown error")
            return
        row = self._current_row(result, ts)
        verdict, evidence = result.timeline.bottleneck()
        text = (f"tileS={ts}: {row['latency_us']:.1f} us, {row['blocks']} blocks, "
                f"UB {row['ub_used_kb']:.2f} KB of {hw.ub_bytes // 1024} KB, "
                f"core utilisation {row['core_utilisation']:.0%}, {verdict}-bound")
        if result.tiling is not None and result.tiling.tileS != ts:
            text += f" (tileS clamped to S={result.tiling.tileS})"
        if ok is not None and len(ok):
            best = ok.loc[ok["latency_us"].idxmin()]
            text += f" \u00b7 best of the sweep: tileS={int(best.tileS)} at {best.latency_us:.1f} us"
        if article and ts in self._article_us:
            text += f" \u00b7 article measured {self._article_us[ts]:.0f} us"
        self.status.value = (f"<b>{html.escape(text)}</b><br><span style='font-size:0.9em'>"
                             f"{html.escape(evidence)}</span>")


# ---------------------------------------------------------------------------- UB budget
_BUFFER_NAMES = tuple(b.name for b in moe_ub_budget("v3", 1, 1, 1))
_BUFFER_COLOURS = dict(zip(_BUFFER_NAMES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                            "#e377c2", "#17becf", "#bcbd22")))
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
        self.E = W.IntSlider(value=_check_int("E", E, 1, max_E), min=1, max=max_E, description="E")
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
        self.figure = go.FigureWidget(data=traces, layout=layout)
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
        ub_kb = hw.ub_bytes / 1024
        with self.figure.batch_update():
            if tiling is None:
                for trace in self.figure.data:
                    trace.x = [0] * len(trace.y)
                    trace.hovertext = [""] * len(trace.y)
            else:
                self._draw(tiling, version, hw)
            self.figure.layout.shapes[0].x0 = self.figure.layout.shapes[0].x1 = ub_kb
            same = hw.ub_bytes == ARTICLE_UB_BYTES
            self.figure.layout.annotations[0].x = ub_kb
            self.figure.layout.annotations[0].text = (f"{hw.name} UB {ub_kb:.0f} KB"
                                                      + (" = the article's assumption" if same else ""))
            self.figure.layout.annotations[1].text = "" if same else "article: 256 KB"
            self.figure.layout.xaxis.range = self._x_range(tiling, version, hw)
            self.figure.layout.title.text = (f"UB budget of {version} on {hw.name}: B={B}, S={S}, "
                                             f"E={E}, K={K}")
        if tiling is None:
            self.status.value = _error_html(f"E={E}, K={K} ({version} on {hw.name})", self.error)
            self.details.value = ""
            return
        self.tiling = tiling
        self._describe(tiling, version, hw)

    def _x_range(self, tiling, version: str, hw: HardwareSpec) -> list[float]:
        full = max(hw.ub_bytes, ARTICLE_UB_BYTES) / 1024 * 1.08
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
        free.x = [max(0, hw.ub_bytes - u) / 1024 for u in used]
        free.hovertext = [f"free: {hw.ub_bytes - u:,} B of {hw.ub_bytes:,} B ({u / hw.ub_bytes:.1%} used)"
                          for u in used]
        est = article_ub_estimate_bytes(tiling.tileBS, E, K, ub_assumed_bytes=None)
        art = self.figure.data[self.TRACE_ARTICLE]
        art.x = [est / 1024]
        art.hovertext = [f"{tiling.tileBS} \u00d7 ({E}\u00b74 + {K}\u00b78) = {est:,} B"]

    def _describe(self, tiling: MoeGatingTiling, version: str, hw: HardwareSpec) -> None:
        used = ub_used_bytes(tiling, version)
        self.status.value = (
            f"<b>tileS={tiling.tileS} by the host rule ({tiling.totalTiles} tiles); {version} holds "
            f"{used / 1024:.2f} KB of {hw.ub_bytes // 1024} KB UB ({used / hw.ub_bytes:.1%}); "
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
            f"{', '.join(parts)}.<br>{their_rule} The {hw.name} has {hw.ub_bytes // 1024} KB, "
            "not 256.</div></div>")



# ---------------------------------------------------------------------------- discrete chain
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
        self.figure = go.FigureWidget(data=fig.data, layout=fig.layout)
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
