"""The MoE layer explorer (notebook 14): the layer's stage times for a number of tokens (decode-like
to prefill-like), and gating's share of them.

Timing-only (:func:`~npu_lab.kernels.moe_layer.moe_layer_timing`, experts loaded evenly). The grid of
token counts of the chosen preset is computed once when the preset is chosen (under a second to about
two, almost all of it the expert GEMMs on the cube; the dispatch kernel's per-slot scatter is
fast-forwarded, a few ms); a slider move then only reads it (well under 50 ms).
"""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from ...kernels.moe_layer import ROUTER_PRESETS, STAGES, moe_layer_timing
from ._base import _DROPDOWN, _check_choice, _Explorer

__all__ = ["MoeLayerExplorer", "TOKEN_STEPS", "layer_stages"]

#: token counts the slider offers: decode-like (1..16) to prefill-like (2048)
TOKEN_STEPS = (1, 2, 4, 8, 16, 64, 256, 1024, 2048)
_GRIDS: dict = {}


def _config(preset: str, gating: str):
    """``"v4"``: the preset's fused kernel (v4, or the grouped kernel for a preset with routing
    options); ``"discrete"``: the framework chain, which computes the softmax path only (for such a
    preset: the softmax path of the same E and K)."""
    p = ROUTER_PRESETS[preset]
    if gating == "v4":
        return p.layer_config()
    return p.layer_config(gating_version=gating, softmax_path=not p.ladder_semantics)


def layer_stages(preset: str, tokens: int, gating_version: str = "v4"):
    """The stage table of ``preset``'s layer at ``tokens`` tokens (cached); ``gating_version`` as
    the explorer's ``.gating`` (see :func:`_config`)."""
    key = (preset, int(tokens), gating_version)
    if key not in _GRIDS:
        p = ROUTER_PRESETS[preset]
        _GRIDS[key] = moe_layer_timing(int(tokens), p.hidden_dim, _config(preset, gating_version)).stages
    return _GRIDS[key]


class MoeLayerExplorer(_Explorer):
    """Controls ``.preset`` (Dropdown), ``.tokens`` (SelectionSlider over :data:`TOKEN_STEPS`),
    ``.gating`` ("v4": the preset's fused kernel — v4, or the grouped kernel when the preset has
    routing options; "discrete": the unfused chain, softmax path). ``.figure``: one bar per stage (µs);
    ``.status``: total, gating's share."""

    def __init__(self, preset: str = "Qwen-MoE-like", tokens: int = 8, gating: str = "v4"):
        _check_choice("preset", preset, [(None, p) for p in ROUTER_PRESETS])
        _check_choice("tokens", tokens, [(None, t) for t in TOKEN_STEPS])
        _check_choice("gating", gating, [(None, g) for g in ("v4", "discrete")])
        self.preset = W.Dropdown(options=list(ROUTER_PRESETS), value=preset, description="model", layout=_DROPDOWN)
        self.tokens = W.SelectionSlider(options=list(TOKEN_STEPS), value=tokens, description="tokens")
        self.gating = W.Dropdown(options=[("fused kernel", "v4"), ("discrete chain", "discrete")], value=gating,
                                 description="gating")
        self.status = W.HTML()
        self.stages = None
        self.figure = go.FigureWidget(
            data=[go.Bar(x=list(STAGES), y=[0] * len(STAGES), marker=dict(color=["#1f77b4"] * len(STAGES)))],
            layout=dict(height=340, margin=dict(l=10, r=10, t=50, b=60), title="MoE layer: time per stage",
                        yaxis=dict(title="µs", type="log"), xaxis=dict(title="stage")))
        self.widget = W.VBox([W.HBox([self.preset, self.tokens, self.gating]), self.status, self.figure])
        self._watch(self.preset, self.tokens, self.gating)
        self._fill(preset, gating)
        self.update()

    def _fill(self, preset: str, gating: str) -> None:
        for t in TOKEN_STEPS:
            layer_stages(preset, t, gating)

    def update(self) -> None:
        preset, n, g = self.preset.value, self.tokens.value, self.gating.value
        self._fill(preset, g)                  # once per (preset, gating); then cached
        st = layer_stages(preset, n, g)
        self.stages = st
        colors = ["#d62728" if s == "gating" else ("#bbbbbb" if k == "stand-in" else "#1f77b4")
                  for s, k in zip(st.index, st["kind"])]
        total = float(st["us"].sum())
        with self.figure.batch_update():
            self.figure.data[0].y = [round(float(v), 3) for v in st["us"]]
            self.figure.data[0].marker.color = colors
            self.figure.layout.title = f"{preset}, {n} tokens: {total:.0f} µs"
        share = float(st.loc["gating", "us"]) / total
        kernel = _config(preset, g).gating_version
        self.status.value = (f"total <b>{total:.1f} µs</b>; gating ({kernel}) {float(st.loc['gating', 'us']):.1f} µs = "
                             f"<b>{share:.1%}</b>; expert GEMMs "
                             f"{float(st.loc[['experts_up', 'experts_down'], 'us'].sum()) / total:.0%} "
                             "(grey: stand-ins)")
