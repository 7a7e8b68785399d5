"""The MoE layer explorer (notebook 14): the layer's stage times for a number of tokens (decode-like
to prefill-like), and gating's share of them.

Timing-only (:func:`~npu_lab.kernels.moe_layer.moe_layer_timing`, experts loaded evenly). One
preset's grid of token counts takes about a second to compute (almost all of it the expert GEMMs
on the cube), too long for a dropdown: the grids of every (preset, gating) the explorer offers are
computed once and committed (``data/moe_layer_explorer_stages.csv``, :func:`write_moe_layer_grid`,
checked fresh by tests/test_moe_layer_explorer_grid.py). The explorer checks its starting point
against a live run when it is built and ignores the file when they differ (a changed kernel or cost
model never shows stale numbers: it then computes each preset's grid when chosen, as before).
"""

from __future__ import annotations

import functools
from pathlib import Path

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ...kernels.moe_layer import ROUTER_PRESETS, STAGES, moe_layer_timing
from ...presets import DATA_DIR
from ..figure_widget import ExplorerFigureWidget
from ._base import _commit_grid_csv, _DROPDOWN, _check_choice, _Explorer

__all__ = ["MoeLayerExplorer", "TOKEN_STEPS", "layer_stages", "moe_layer_grid", "write_moe_layer_grid"]

#: token counts the slider offers: decode-like (1..16) to prefill-like (2048)
TOKEN_STEPS = (1, 2, 4, 8, 16, 64, 256, 1024, 2048)
#: the gating choices of the explorer's dropdown
GATINGS = ("v4", "discrete")
GRID_PATH = DATA_DIR / "moe_layer_explorer_stages.csv"
_GRID_KEYS = ["preset", "gating", "tokens"]
_GRIDS: dict = {}
#: whether the committed grid may be read: False once a live run disagreed with it
_USE_COMMITTED = {"ok": True}


def _config(preset: str, gating: str):
    """``"v4"``: the preset's fused kernel (v4, or the grouped kernel for a preset with routing
    options); ``"discrete"``: the framework chain, which computes the softmax path only (for such a
    preset: the softmax path of the same E and K)."""
    p = ROUTER_PRESETS[preset]
    if gating == "v4":
        return p.layer_config()
    return p.layer_config(gating_version=gating, softmax_path=not p.ladder_semantics)


def _live_stages(preset: str, tokens: int, gating_version: str) -> pd.DataFrame:
    p = ROUTER_PRESETS[preset]
    return moe_layer_timing(int(tokens), p.hidden_dim, _config(preset, gating_version)).stages


def layer_stages(preset: str, tokens: int, gating_version: str = "v4"):
    """The stage table of ``preset``'s layer at ``tokens`` tokens (cached; from the committed grid
    unless a live run disagreed with it); ``gating_version`` as the explorer's ``.gating`` (see
    :func:`_config`)."""
    key = (preset, int(tokens), gating_version)
    if key not in _GRIDS:
        committed = _load_grid().get(key) if _USE_COMMITTED["ok"] else None
        _GRIDS[key] = committed if committed is not None else _live_stages(*key)
    return _GRIDS[key]


def moe_layer_grid() -> pd.DataFrame:
    """The stage tables of every (preset, gating, tokens) the explorer offers, one row per stage
    (columns preset, gating, tokens, stage, us, share, kind, what). Timing-only; about 10 s."""
    frames = []
    for preset in ROUTER_PRESETS:
        for gating in GATINGS:
            for tokens in TOKEN_STEPS:
                st = _live_stages(preset, tokens, gating).reset_index()
                frames.append(st.assign(preset=preset, gating=gating, tokens=tokens))
    grid = pd.concat(frames, ignore_index=True)
    return grid[_GRID_KEYS + [c for c in grid.columns if c not in _GRID_KEYS]]


def write_moe_layer_grid() -> Path:
    """Recompute and commit the explorer's grid (after a kernel or the cost model changed):
    ``python -c 'from npu_lab.course.explorers.moe_layer import write_moe_layer_grid as w; w()'``."""
    grid = moe_layer_grid()
    _commit_grid_csv(grid, GRID_PATH)
    _load_grid.cache_clear()
    _GRIDS.clear()
    return GRID_PATH


@functools.lru_cache(maxsize=1)
def _load_grid() -> dict:
    """{(preset, tokens, gating): stage table} from the committed file ({} when it is missing)."""
    if not GRID_PATH.exists():
        return {}
    frame = pd.read_csv(GRID_PATH, keep_default_na=False)
    out = {}
    for (preset, gating, tokens), rows in frame.groupby(_GRID_KEYS, sort=False):
        table = rows.drop(columns=_GRID_KEYS).set_index("stage")
        out[(preset, int(tokens), gating)] = table
    return out


def same_stages(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two stage tables agree: the same stages, kinds and words, times to 1e-12."""
    return (list(a.index) == list(b.index) and list(a["kind"]) == list(b["kind"])
            and list(a["what"]) == list(b["what"])
            and bool(np.allclose(a["us"].to_numpy(float), b["us"].to_numpy(float), rtol=1e-12, atol=0))
            and bool(np.allclose(a["share"].to_numpy(float), b["share"].to_numpy(float), rtol=1e-12, atol=0)))


def _check_committed(preset: str, tokens: int, gating: str) -> None:
    """Run the starting point live; a committed table that differs retires the whole file."""
    committed = _load_grid().get((preset, int(tokens), gating)) if _USE_COMMITTED["ok"] else None
    if committed is None:
        return
    live = _live_stages(preset, tokens, gating)
    if not same_stages(committed, live):
        _USE_COMMITTED["ok"] = False
        _GRIDS.clear()
    _GRIDS[(preset, int(tokens), gating)] = live


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
        self.figure = ExplorerFigureWidget(
            data=[go.Bar(x=list(STAGES), y=[0] * len(STAGES), marker=dict(color=["#1f77b4"] * len(STAGES)))],
            layout=dict(height=340, margin=dict(l=10, r=10, t=50, b=60), title="MoE layer: time per stage",
                        yaxis=dict(title="µs", type="log"), xaxis=dict(title="stage")))
        self.widget = W.VBox([W.HBox([self.preset, self.tokens, self.gating]), self.status, self.figure])
        self._watch(self.preset, self.tokens, self.gating)
        if (preset, int(tokens), gating) not in _GRIDS:
            _check_committed(preset, tokens, gating)      # once per process and starting point
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
