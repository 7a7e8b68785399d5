"""The KV-cache calculator as a widget (notebook 11): a model picker over
:data:`~npu_lab.llm.MODEL_CONFIGS`, context length, batch and the KV / weights storage types; the
bytes one token adds per layer and over every layer, a sequence's cache at the context, the batch's
cache, and the weights, as a table and as bars (GB).

Every figure is :func:`~npu_lab.llm.kv_memory_table`'s (exact byte counts from the models'
published configurations); this module only wires controls to it. No simulation: a move costs a
table of one row.
"""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ...llm import MODEL_CONFIGS, kv_memory_table
from ..figure_widget import ExplorerFigureWidget
from ._base import _DROPDOWN, _EXPECTED_ERRORS, _check_choice, _error_html, _Explorer

__all__ = ["KvCalculatorExplorer", "KV_CONTEXTS", "KV_BATCHES", "KV_DTYPES", "WEIGHTS_DTYPES"]

#: context lengths the slider offers (tokens per sequence)
KV_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: batch sizes the slider offers (sequences)
KV_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: storage types of the cached K and V, and of the weights
KV_DTYPES = ("fp16", "bf16", "int8", "fp8")
WEIGHTS_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")


class KvCalculatorExplorer(_Explorer):
    """Controls ``.model`` (Dropdown over :data:`MODEL_CONFIGS`), ``.context`` and ``.batch``
    (SelectionSliders over :data:`KV_CONTEXTS`, :data:`KV_BATCHES`), ``.kv_dtype`` (ToggleButtons
    over :data:`KV_DTYPES`) and ``.weights_dtype`` (Dropdown over :data:`WEIGHTS_DTYPES`).
    ``.table``: the row of :func:`~npu_lab.llm.kv_memory_table` shown (a one-row DataFrame, or
    None on a refusal); ``.status``: the same numbers as text; ``.figure`` traces: 0 ``"KV cache"``
    (one sequence, the batch; GB), 1 ``"weights"`` (GB)."""

    TRACE_NAMES = ("KV cache", "weights")

    def __init__(self, model: str = "Llama-3-70B", context: int = 8192, batch: int = 16, kv_dtype: str = "fp16",
                 weights_dtype: str = "bf16"):
        names = list(MODEL_CONFIGS)
        _check_choice("model", model, [(n, n) for n in names])
        _check_choice("context", context, [(None, c) for c in KV_CONTEXTS])
        _check_choice("batch", batch, [(None, b) for b in KV_BATCHES])
        _check_choice("kv_dtype", kv_dtype, [(d, d) for d in KV_DTYPES])
        _check_choice("weights_dtype", weights_dtype, [(d, d) for d in WEIGHTS_DTYPES])
        self.model = W.Dropdown(options=names, value=model, description="model", layout=_DROPDOWN)
        self.context = W.SelectionSlider(options=list(KV_CONTEXTS), value=context, description="context")
        self.batch = W.SelectionSlider(options=list(KV_BATCHES), value=batch, description="batch")
        self.kv_dtype = W.ToggleButtons(options=list(KV_DTYPES), value=kv_dtype, description="KV dtype")
        self.weights_dtype = W.Dropdown(options=list(WEIGHTS_DTYPES), value=weights_dtype, description="weights")
        self.status = W.HTML()
        self.table = None
        self.figure = ExplorerFigureWidget(
            data=[go.Bar(x=[], y=[], name="KV cache", marker_color="#1f77b4"),
                  go.Bar(x=[], y=[], name="weights", marker_color="#bbbbbb")],
            layout=dict(height=320, margin=dict(l=10, r=10, t=50, b=40), title="KV cache against the weights",
                        yaxis=dict(title="GB (1e9 B)")))
        self.widget = W.VBox([W.HBox([self.model, self.weights_dtype]), W.HBox([self.context, self.batch]),
                              self.kv_dtype, self.status, self.figure])
        self._watch(self.model, self.context, self.batch, self.kv_dtype, self.weights_dtype)
        self.update()

    def update(self) -> None:
        m, c, b = self.model.value, self.context.value, self.batch.value
        kv, wdt = self.kv_dtype.value, self.weights_dtype.value
        try:
            row = kv_memory_table(m, context_len=c, batch=b, dtypes=[kv], weights_dtype=wdt)
        except _EXPECTED_ERRORS as err:
            self.error, self.table = str(err), None
            self.status.value = _error_html(f"{m} at context {c}, batch {b}", str(err))
            return
        self.error, self.table = None, row
        r = row.iloc[0]
        seq_gb = r.bytes_per_sequence / 1e9
        with self.figure.batch_update():
            self.figure.data[0].x = ["one sequence", f"batch of {b}"]
            self.figure.data[0].y = [round(seq_gb, 3), round(r.batch_gb, 3)]
            self.figure.data[1].x, self.figure.data[1].y = [f"weights ({wdt})"], [round(r.weights_gb, 3)]
            self.figure.layout.title = (f"{m}, {kv} KV, {c:,} tokens x {b}: {r.batch_gb:.1f} GB = "
                                        f"{r.kv_over_weights:.2f}x the weights")
        mla = " (MLA: one latent + RoPE key per token, not K and V per head)" if MODEL_CONFIGS[m].is_mla else ""
        self.status.value = (
            f"<b>{html.escape(m)}</b>{mla}: {int(r.bytes_per_token_per_layer):,} B per token per layer, "
            f"{int(r.bytes_per_token):,} B per token (every layer); one sequence at {c:,} tokens "
            f"<b>{seq_gb:.2f} GB</b>; a batch of {b} <b>{r.batch_gb:.2f} GB</b> ({r.batch_gib:.2f} GiB); "
            f"weights in {wdt} {r.weights_gb:.1f} GB: the batch's cache is <b>{r.kv_over_weights:.2f}x</b> the weights.")
