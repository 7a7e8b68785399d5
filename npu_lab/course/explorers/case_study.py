"""The case-study explorer (notebook 13): the article's 8x910B Llama-3-70B service on paper.

Sliders over the batch (1..256) and the context every sequence holds, a choice of storage (16-bit
or int8 weights and KV); the figure is the decode-step roofline's service curve — tokens/s against
the step time, one point per batch — with the current batch marked and the article's two claims
(1,200 tokens/s at P99 45 ms, 3,850 at 15 ms) placed on the same axes: a claim above the curve at
its latency is not physically possible under the stated assumptions
(:func:`npu_lab.llm.case_study_assumptions`). Numbers: :func:`npu_lab.llm.service_curve` and
:func:`npu_lab.llm.case_study_point`; the 18 curves (context x storage) are computed when the
explorer is built (about half a second), so a move only reads a cached curve.
"""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ...llm.case_study import ARTICLE_SERVICE, CURVE_MAX_BATCH, STORAGE_FORMATS, case_study_point, service_curve
from ..figure_widget import ExplorerFigureWidget
from ._base import _DROPDOWN, _check_choice, _check_int, _Explorer, _LRU

__all__ = ["CaseStudyExplorer", "CONTEXTS"]

#: contexts the slider offers (tokens per sequence)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
_STORAGE = {label: (kv, w) for label, kv, w in STORAGE_FORMATS}


class CaseStudyExplorer(_Explorer):
    """Controls ``.batch`` (IntSlider 1..256), ``.context`` (SelectionSlider over :data:`CONTEXTS`),
    ``.storage`` (Dropdown over :data:`npu_lab.llm.STORAGE_FORMATS`). ``.figure``: the service
    curve (fits the HBM: solid; does not: dotted), the current batch, the article's claims.
    ``.status``: the step's figures and both claims' verdicts. ``.point``: the last
    :func:`~npu_lab.llm.case_study_point`."""

    def __init__(self, batch: int = 64, context: int = 8192, storage: str = STORAGE_FORMATS[0][0],
                 hw: str = "ascend-910b2"):
        _check_int("batch", batch, 1, 256)
        _check_choice("context", context, [(None, c) for c in CONTEXTS])
        _check_choice("storage", storage, [(None, s) for s in _STORAGE])
        self.hw = hw
        self._curves = _LRU()
        for c in CONTEXTS:                     # every curve up front (~20 ms each): a move only reads them
            for st in _STORAGE:
                self._curve(c, st)
        self.batch = W.IntSlider(value=batch, min=1, max=256, description="batch")
        self.context = W.SelectionSlider(options=list(CONTEXTS), value=context, description="context")
        self.storage = W.Dropdown(options=list(_STORAGE), value=storage, description="storage", layout=_DROPDOWN)
        self.status = W.HTML()
        self.point = None
        claims = [go.Scatter(x=[p99], y=[tps], mode="markers+text", name=f"article {claim}",
                             text=[f"article {claim}: {tps:,.0f} tok/s @ {p99:g} ms"], textposition="top center",
                             marker=dict(size=12, symbol="x", color="#d62728" if claim == "after" else "#9467bd"))
                  for claim, tps, p99 in ARTICLE_SERVICE]
        self.figure = ExplorerFigureWidget(
            data=[go.Scatter(x=[], y=[], mode="lines", name="fits the HBM", line=dict(color="#1f77b4")),
                  go.Scatter(x=[], y=[], mode="lines", name="does not fit", line=dict(color="#1f77b4", dash="dot")),
                  go.Scatter(x=[], y=[], mode="markers", name="this batch", marker=dict(size=13, color="#2ca02c")),
                  *claims],
            layout=dict(height=400, margin=dict(l=10, r=10, t=50, b=40), title="Decode service curve",
                        xaxis=dict(type="log", title="step time = per-token latency floor (ms)"),
                        yaxis=dict(type="log", title="tokens/s (8 cards)"),
                        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0)))
        self.widget = W.VBox([W.HBox([self.batch, self.context, self.storage]), self.status, self.figure])
        self._watch(self.batch, self.context, self.storage)
        self.update()

    def _curve(self, context, storage):
        kv, w = _STORAGE[storage]
        return self._curves.get_or((context, storage), lambda: service_curve(context, kv, w, self.hw, CURVE_MAX_BATCH))

    def update(self) -> None:
        b, ctx, st = self.batch.value, self.context.value, self.storage.value
        kv, w = _STORAGE[st]
        curve = self._curve(ctx, st)
        p = self.point = case_study_point(b, ctx, kv, w, self.hw, curve=curve)
        r = p["row"]
        shown = curve[curve.batch <= 256]
        fits, over = shown[shown.fits_hbm], shown[~shown.fits_hbm]
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = fits.step_ms.to_numpy(), fits.tokens_per_s.to_numpy()
            self.figure.data[1].x, self.figure.data[1].y = over.step_ms.to_numpy(), over.tokens_per_s.to_numpy()
            self.figure.data[2].x, self.figure.data[2].y = [r["step_ms"]], [r["tokens_per_s"]]
            self.figure.layout.title = f"Llama-3-70B on 8 cards, context {ctx:,}, {st}"
        claims = "; ".join(
            f"{c['claim']} ({c['article_tokens_per_s']:,.0f} tok/s at P99 {c['article_p99_ms']:g} ms): "
            f"<b>{c['verdict']}</b> — at most {c['best_tokens_per_s']:,.0f} tok/s with a step ≤ "
            f"{c['article_p99_ms']:g} ms (batch {c['best_batch']})" for c in p["claims"])
        fit = "fits" if r["fits_hbm"] else "<b>does not fit</b>"
        self.error = None
        self.status.value = (
            f"batch {b}: step <b>{r['step_ms']:.1f} ms</b> ({html.escape(r['bound'])}-bound: memory "
            f"{r['memory_us'] / 1e3:.1f} ms, compute {r['compute_us'] / 1e3:.1f} ms, all-reduce "
            f"{r['allreduce_us'] / 1e3:.1f} ms), <b>{r['tokens_per_s']:,.0f} tokens/s</b>; weights + KV "
            f"{r['weights_gb_per_card'] + r['kv_gb_per_card']:.1f} GB per card {fit} the HBM.<br>{claims}")
