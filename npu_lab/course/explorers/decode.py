"""The decode explorer (notebook 11): sliders over batch, context length, GQA group size and the
FlashDecode S2 split; the step's time against the HBM roofline (the KV bytes it must read ÷ the
bandwidth), for v2 (no split) and the chosen version.

Timing-only runs of :func:`~npu_lab.kernels.decode.decode_attention` (every sequence at the
context length; KV heads 8, head_dim 128 as Llama-3's; query heads = 8 × the group), cached per
configuration, so a position seen before redraws without simulating. v4 whose tiling does not
split S2 (B·N2 >= 0.4 × cores, or a split of 1) is v2's launch with v2's tiling: it takes v2's
cached run (the host tiling, cheap, decides), so such a move simulates once, not twice. A
configuration the library refuses (a split past the cores) shows its message in ``.status``.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ...kernels.decode import decode_attention
from ...kernels.decode.tiling import decode_tiling
from ._base import _DROPDOWN, _EXPECTED_ERRORS, _check_choice, _check_int, _error_html, _Explorer, _LRU

__all__ = ["DecodeExplorer", "CONTEXTS", "GROUPS", "KV_HEADS", "HEAD_DIM"]

#: Context lengths the slider offers (positions cached per sequence).
CONTEXTS = (256, 512, 1024, 2048, 4096, 8192)
#: GQA group sizes (query heads per KV head): 1 = MHA, 8 = Llama-3-70B's 64 / 8.
GROUPS = (1, 2, 4, 8)
KV_HEADS, HEAD_DIM = 8, 128
_VERSIONS = (("v2: chunks + online softmax", "v2"), ("v4: FlashDecode (split S2)", "v4"),
             ("v5: int8 KV (antiquant)", "v5"))


class DecodeExplorer(_Explorer):
    """Controls ``.batch`` (IntSlider 1..64), ``.context`` (SelectionSlider over :data:`CONTEXTS`),
    ``.group`` (Dropdown over :data:`GROUPS`), ``.splits`` (IntSlider 0..16; 0 = CANN's rule,
    v4 only) and ``.version`` (Dropdown v2 / v4 / v5). ``.figure`` traces: 0 ``"time"`` — bars of
    v2 and the chosen version (µs); 1 ``"HBM roofline"`` — the floor of each (its KV bytes ÷
    the bandwidth). ``.status``: times, achieved fraction, splits. ``.result``: the chosen run's
    (time_us, roofline_us, splits) or None."""

    TRACE_NAMES = ("time", "HBM roofline")

    def __init__(self, batch: int = 4, context: int = 2048, group: int = 8, splits: int = 0, version: str = "v4",
                 chip: str = "ascend-910b2"):
        _check_int("batch", batch, 1, 64)
        _check_choice("context", context, [(None, c) for c in CONTEXTS])
        _check_choice("group", group, [(None, g) for g in GROUPS])
        _check_int("splits", splits, 0, 16)
        _check_choice("version", version, _VERSIONS)
        self.chip = chip
        self._runs = _LRU()
        self.batch = W.IntSlider(value=batch, min=1, max=64, description="batch")
        self.context = W.SelectionSlider(options=list(CONTEXTS), value=context, description="context")
        self.group = W.Dropdown(options=list(GROUPS), value=group, description="GQA group")
        self.splits = W.IntSlider(value=splits, min=0, max=16, description="S2 split (v4)")
        self.version = W.Dropdown(options=list(_VERSIONS), value=version, description="version", layout=_DROPDOWN)
        self.status = W.HTML()
        self.result = None
        self.figure = go.FigureWidget(
            data=[go.Bar(x=[], y=[], name="time", marker_color="#1f77b4"),
                  go.Bar(x=[], y=[], name="HBM roofline", marker_color="#bbbbbb")],
            layout=dict(height=340, barmode="group", margin=dict(l=10, r=10, t=50, b=40),
                        title="decode step", yaxis=dict(title="µs")))
        self.widget = W.VBox([W.HBox([self.batch, self.context]), W.HBox([self.group, self.splits, self.version]),
                              self.status, self.figure])
        self._watch(self.batch, self.context, self.group, self.splits, self.version)
        self.update()

    def _run(self, batch, context, group, version, splits):
        lens = np.full(batch, context)
        kv_dtype = np.int8 if version == "v5" else np.float16
        r = decode_attention((batch, KV_HEADS * group, HEAD_DIM), ((batch, context, KV_HEADS, HEAD_DIM), kv_dtype),
                             None, lens, version=version, hw=self.chip, timing_only=True,
                             splits=splits if version == "v4" and splits else None)
        return r.timeline.total_us, r.roofline_us, r.tiling.splits

    def _key(self, b, c, g, v, sp) -> tuple:
        """The cache key of a run: v2's when v4's tiling equals v2's (no split: the same launch,
        the same tiling bytes, so the same timeline; only the launch's name differs)."""
        if v == "v4":
            lens, hw = np.full(b, c), self._spec(self.chip)
            t4 = decode_tiling(b, KV_HEADS, g, HEAD_DIM, c, lens, 2, hw, version="v4", splits=sp or None)
            if t4.splits == 1 and t4 == decode_tiling(b, KV_HEADS, g, HEAD_DIM, c, lens, 2, hw, version="v2"):
                return (b, c, g, "v2", 0)
        return (b, c, g, v, sp)

    def update(self) -> None:
        b, c, g, v = self.batch.value, self.context.value, self.group.value, self.version.value
        sp = self.splits.value if v == "v4" else 0
        try:
            base = self._runs.get_or((b, c, g, "v2", 0), lambda: self._run(b, c, g, "v2", 0))
            key = self._key(b, c, g, v, sp)
            mine = self._runs.get_or(key, lambda: self._run(*key))
        except _EXPECTED_ERRORS as err:
            self.error, self.result = str(err), None
            self.status.value = _error_html(f"{v} at batch {b}, context {c}", str(err))
            return
        self.error = None
        self.result = mine
        names = ["v2 (no split)", f"{v}" + (f" ({mine[2]} pieces)" if v == "v4" else "")]
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = names, [round(base[0], 1), round(mine[0], 1)]
            self.figure.data[1].x, self.figure.data[1].y = names, [round(base[1], 1), round(mine[1], 1)]
            self.figure.layout.title = (f"batch {b} x context {c}, {KV_HEADS * g} query heads / {KV_HEADS} KV heads: "
                                        f"{v} {mine[0]:.1f} µs")
        bn = b * KV_HEADS
        cores = self._spec(self.chip).vector_cores
        self.status.value = (
            f"v2 <b>{base[0]:.1f} µs</b> ({base[1] / base[0]:.0%} of the HBM roofline {base[1]:.1f} µs); "
            f"{v} <b>{mine[0]:.1f} µs</b> ({mine[1] / mine[0]:.0%} of {mine[1]:.1f} µs), S2 in {mine[2]} piece(s). "
            f"B·N2 = {bn} {'<' if bn < 0.4 * cores else '>='} 0.4 × {cores} cores: CANN's tiling "
            f"{'splits' if bn < 0.4 * cores else 'does not split'} S2.")
