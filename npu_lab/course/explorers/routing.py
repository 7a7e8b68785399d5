"""The router explorer (notebook 14): pick a model's router (Mixtral / Qwen-MoE / DeepSeek-V3-like),
see which experts (and groups) a few tokens choose, each expert's load and what a capacity drops.

Everything comes from the full-options gating reference (:func:`~npu_lab.kernels.moe_layer.route_preset`)
and the host dispatch (:func:`~npu_lab.kernels.moe_gating.moe_dispatch`); a move costs a few ms.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ...kernels.moe_gating import moe_dispatch
from ...kernels.moe_layer import ROUTER_PRESETS, route_preset
from ..figure_widget import ExplorerFigureWidget
from ._base import _DROPDOWN, _check_choice, _Explorer

__all__ = ["RoutingExplorer", "routing_summary"]

#: capacity factors the slider offers (0: dropless)
CAPACITY_FACTORS = (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def routing_summary(preset: str, num_tokens: int = 8, capacity_factor: float | None = None, seed: int = 0) -> dict:
    """What the explorer shows, as data: the weights heat map [N, E] (0 where not chosen), the
    groups chosen per token (grouped routers), the load per expert before capacity, the capacity and
    the slots dropped."""
    _, g = route_preset(preset, num_tokens, seed)
    p = ROUTER_PRESETS[preset]
    heat = np.zeros((num_tokens, p.num_experts), np.float32)
    np.put_along_axis(heat, g.indices.astype(np.int64), g.weights, axis=1)
    groups = p.options.get("num_groups", 1)
    chosen_groups = [sorted(set((row // (p.num_experts // groups)).tolist())) for row in g.indices]
    d = moe_dispatch(g.indices, g.weights, num_experts=p.num_experts,
                     capacity_factor=capacity_factor or None)
    return {"heat": heat, "groups": chosen_groups, "load": d.expert_tokens_before_capacity,
            "capacity": d.capacity, "dropped": d.tokens_dropped, "kept": d.expert_tokens_count}


class RoutingExplorer(_Explorer):
    """Controls ``.preset`` (Dropdown), ``.tokens`` (IntSlider 1..32), ``.capacity`` (capacity factor,
    0 = dropless). ``.figure``: the heat map of the chosen experts' weights; ``.load_figure``: the load
    per expert with the capacity line; ``.status``: groups chosen, drops."""

    def __init__(self, preset: str = "Mixtral-like", tokens: int = 8, capacity: float = 0.0):
        _check_choice("preset", preset, [(None, p) for p in ROUTER_PRESETS])
        _check_choice("capacity", capacity, [(None, c) for c in CAPACITY_FACTORS])
        self.preset = W.Dropdown(options=list(ROUTER_PRESETS), value=preset, description="router", layout=_DROPDOWN)
        self.tokens = W.IntSlider(value=tokens, min=1, max=32, description="tokens")
        self.capacity = W.SelectionSlider(options=list(CAPACITY_FACTORS), value=capacity, description="capacity f.")
        self.status = W.HTML()
        self.summary = None
        self.figure = ExplorerFigureWidget(
            data=[go.Heatmap(z=[[0]], colorscale="Blues", colorbar=dict(title="weight"))],
            layout=dict(height=320, margin=dict(l=10, r=10, t=40, b=40), title="chosen experts",
                        xaxis=dict(title="expert"), yaxis=dict(title="token", autorange="reversed")))
        self.load_figure = ExplorerFigureWidget(
            data=[go.Bar(x=[], y=[], name="chose it"), go.Bar(x=[], y=[], name="kept"),
                  go.Scatter(x=[], y=[], mode="lines", name="capacity", line=dict(color="#d62728", dash="dash"))],
            layout=dict(height=280, margin=dict(l=10, r=10, t=40, b=40), title="load per expert", barmode="overlay",
                        xaxis=dict(title="expert"), yaxis=dict(title="slots")))
        self.widget = W.VBox([W.HBox([self.preset, self.tokens, self.capacity]), self.status, self.figure,
                              self.load_figure])
        self._watch(self.preset, self.tokens, self.capacity)
        self.update()

    def update(self) -> None:
        name, n, cf = self.preset.value, self.tokens.value, self.capacity.value
        s = routing_summary(name, n, cf)
        self.summary = s
        E = ROUTER_PRESETS[name].num_experts
        experts = np.arange(E)
        with self.figure.batch_update():
            self.figure.data[0].z = s["heat"]
            self.figure.layout.title = f"{name}: the experts {n} tokens choose (weight)"
        with self.load_figure.batch_update():
            self.load_figure.data[0].x, self.load_figure.data[0].y = experts, s["load"]
            self.load_figure.data[1].x, self.load_figure.data[1].y = experts, s["kept"]
            cap = s["capacity"]
            self.load_figure.data[2].x = [0, E - 1] if cap is not None else []
            self.load_figure.data[2].y = [cap, cap] if cap is not None else []
        groups = ROUTER_PRESETS[name].options.get("num_groups", 1)
        g = f"; groups chosen by token 0: {s['groups'][0]} of {groups}" if groups > 1 else ""
        cap = "dropless" if s["capacity"] is None else f"capacity {s['capacity']} slots per expert"
        self.status.value = f"{cap}: <b>{s['dropped']}</b> of {int(s['load'].sum())} slots dropped{g}."
