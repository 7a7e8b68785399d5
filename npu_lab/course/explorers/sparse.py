"""SparseKvExplorer: how much attention output does dropping tokens cost? (notebook 12)

Sliders for the keep ratio and the number of attention sinks, a choice of importance score; the
figure is the attention-output error against the memory kept for every score
(:func:`~npu_lab.kernels.sparse_kv.error_vs_memory` on a seeded
:func:`~npu_lab.kernels.sparse_kv.synthetic_kv` cache), the current choice marked, and a strip of
which tokens head 0 keeps. One move = one masked softmax per score (the logits are computed once,
:class:`~npu_lab.kernels.sparse_kv.reference.AttentionError`), well under 50 ms.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ...kernels.sparse_kv import SCORES, error_vs_memory, importance, n_keep_of, select_tokens, synthetic_kv
from ...kernels.sparse_kv.synthetic import SyntheticKV
from ..figure_widget import ExplorerFigureWidget
from ._base import _check_choice, _check_float, _Explorer, _LRU

#: keep ratios the curves are drawn at (the slider moves along them)
CURVE_RATIOS = tuple(round(x, 2) for x in np.arange(0.05, 1.0001, 0.05))
#: sink counts the slider offers (every curve is computed up front, so a move only looks up)
SINK_CHOICES = (0, 1, 2, 4, 8, 16)


class SparseKvExplorer(_Explorer):
    """Controls ``.keep_ratio`` (SelectionSlider), ``.sinks`` (SelectionSlider of SINK_CHOICES) and ``.score`` (Dropdown);
    ``.figure``: error (log) against memory kept, one line per score, the current point marked,
    and head 0's kept tokens below; ``.status``: tokens kept, bytes saved, each score's error and
    how much the key-norm and window choices overlap. ``data``: a SyntheticKV (default: seed 0)."""

    def __init__(self, data: SyntheticKV | None = None, keep_ratio: float = 0.3, sinks: int = 4,
                 score: str = "window"):
        self.data = synthetic_kv() if data is None else data
        if not isinstance(self.data, SyntheticKV):
            raise TypeError(f"data must be a SyntheticKV (synthetic_kv(...)), got {type(self.data).__name__}")
        _check_float("keep_ratio", keep_ratio, CURVE_RATIOS[0], 1.0)
        _check_choice("sinks", sinks, [(str(x), x) for x in SINK_CHOICES])
        _check_choice("score", score, [(s, s) for s in SCORES])
        self._curves, self._orders = _LRU(), _LRU()
        self._scores = {s: importance(self.data.k, s, self.data.queries) for s in SCORES}
        self.keep_ratio = W.SelectionSlider(options=CURVE_RATIOS, value=min(CURVE_RATIOS, key=lambda r: abs(r - keep_ratio)),
                                            description="keep ratio")
        self.sinks = W.SelectionSlider(options=SINK_CHOICES, value=sinks, description="sinks")
        self.score = W.Dropdown(options=list(SCORES), value=score, description="score")
        self.status = W.HTML()
        S = self.data.k.shape[1]
        traces = [go.Scatter(x=[], y=[], mode="lines", name=s, xaxis="x", yaxis="y") for s in SCORES]
        traces.append(go.Scatter(x=[], y=[], mode="markers", marker=dict(size=12, color="#d62728"),
                                 name="your choice", xaxis="x", yaxis="y"))
        traces.append(go.Heatmap(z=[[0] * S], x=list(range(S)), y=["head 0"], showscale=False,
                                 colorscale=[[0, "#eeeeee"], [1, "#1f77b4"]], zmin=0, zmax=1, xaxis="x2", yaxis="y2"))
        self.figure = ExplorerFigureWidget(
            data=traces,
            layout=dict(height=440, margin=dict(l=60, r=10, t=40, b=40), title="Sparse KV: error against memory",
                        xaxis=dict(title="memory kept (%)", domain=[0, 1], anchor="y"),
                        yaxis=dict(title="attention-output error", type="log", domain=[0.3, 1]),
                        xaxis2=dict(title="token position (kept = blue)", domain=[0, 1], anchor="y2"),
                        yaxis2=dict(domain=[0, 0.12], showticklabels=False)))
        self.widget = W.VBox([W.HBox([self.keep_ratio, self.sinks, self.score]), self.status, self.figure])
        self.errors = None
        for x in SINK_CHOICES:                 # the curves of every sink count, once
            self._curves.get_or(x, lambda x=x: self._curve(x))
        self._watch(self.keep_ratio, self.sinks, self.score)
        self.update()

    def _curve(self, sinks: int):
        return error_vs_memory(self.data, CURVE_RATIOS, sinks=sinks)

    def _mask(self, score: str, sinks: int, n: int) -> np.ndarray:
        """Kept-token mask [H, S]: the first n of the cached full ranking (select_tokens)."""
        S = self.data.k.shape[1]
        order = self._orders.get_or((score, sinks), lambda: select_tokens(self._scores[score], S, sinks))
        mask = np.zeros(self.data.k.shape[:2], dtype=bool)
        np.put_along_axis(mask, order[:, :n].astype(np.int64), True, axis=1)
        return mask

    def update(self) -> None:
        r, sinks, score = self.keep_ratio.value, self.sinks.value, self.score.value
        df = self._curves.get_or(sinks, lambda: self._curve(sinks))
        here = df[df.keep_ratio == r].set_index("score")
        self.errors = here.error.to_dict()
        n = n_keep_of(self.data.k.shape[1], r, sinks)
        mask = self._mask(score, sinks, n)
        a, b = self._mask("key_norm", sinks, n), self._mask("window", sinks, n)
        jaccard = float(np.mean((a & b).sum(axis=1) / (a | b).sum(axis=1)))
        mf, e = float(here.loc[score, "memory_fraction"]), float(here.loc[score, "error"])
        with self.figure.batch_update():
            for i, s in enumerate(SCORES):
                g = df[(df.score == s) & (df.error > 0)]
                self.figure.data[i].x = (100 * g.memory_fraction).round(2).tolist()
                self.figure.data[i].y = g.error.round(6).tolist()
            self.figure.data[len(SCORES)].x = [round(100 * mf, 2)]
            self.figure.data[len(SCORES)].y = [round(max(e, 1e-6), 6)]
            self.figure.data[len(SCORES) + 1].z = [mask[0].astype(int).tolist()]
        errs = ", ".join(f"{s} {100 * self.errors[s]:.1f} %" for s in SCORES)
        self.status.value = (f"<b>{n}</b> of {self.data.k.shape[1]} tokens per head kept ({100 * mf:.1f} % of the "
                             f"memory, {int(here.loc[score, 'bytes_saved']):,} B saved); error: {errs}; key-norm "
                             f"and window keep the same tokens {100 * jaccard:.0f} % (Jaccard)")
