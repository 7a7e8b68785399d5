"""Figures of the cube notebook (09): the task grid a one-dimensional blockDim is decomposed into,
and the GEMM roofline (achieved TFLOPS of each version against the cube peak and the HBM roof).

* :func:`task_grid_figure` — one heat map per K-split: cell (M-tile, N-tile) coloured by the block
  that runs the task, labelled ``task t / block b`` (``block_tasks``: block b runs tasks b,
  b + blockDim, ...);
* :func:`gemm_roofline_figure` — log-log roofline: x the arithmetic intensity (FLOPs per HBM byte
  the run moved), y TFLOPS; the roof is min(cube peak, intensity x HBM bandwidth); one marker per
  row of :func:`~npu_lab.kernels.gemm.gemm_ladder`.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..kernels.gemm import GemmTiling, gemm_roofline
from ..presets import get_preset

__all__ = ["task_grid_figure", "gemm_roofline_figure", "roofline_points"]


def task_grid_figure(tiling: GemmTiling, *, max_k_splits: int = 4, title: str | None = None) -> go.Figure:
    """The (M-tile, N-tile, K-split) grid of ``tiling`` with the block of every task."""
    if not isinstance(tiling, GemmTiling):
        raise TypeError(f"tiling must be a GemmTiling (from gemm_tiling), got {type(tiling).__name__}")
    if isinstance(max_k_splits, bool) or not isinstance(max_k_splits, int) or max_k_splits < 1:
        raise ValueError(f"max_k_splits must be a whole number >= 1, got {max_k_splits!r}")
    t = tiling
    ks = min(t.kSplit, max_k_splits)
    fig = make_subplots(rows=1, cols=ks, subplot_titles=[f"K-split {k}" for k in range(ks)], shared_yaxes=True)
    for k in range(ks):
        task = np.array([[(mi * t.n_tiles + ni) * t.kSplit + k for ni in range(t.n_tiles)] for mi in range(t.m_tiles)])
        block = task % t.usedCoreNum
        text = [[f"t{x}<br>b{x % t.usedCoreNum}" for x in row] for row in task]
        fig.add_trace(go.Heatmap(z=block, text=text, texttemplate="%{text}", colorscale="Viridis", zmin=0,
                                 zmax=max(t.usedCoreNum - 1, 1), showscale=k == ks - 1,
                                 colorbar=dict(title="block"),
                                 hovertemplate="M-tile %{y}, N-tile %{x}<br>%{text}<extra></extra>"), 1, k + 1)
        fig.update_xaxes(title_text="N-tile", row=1, col=k + 1)
    fig.update_yaxes(title_text="M-tile", autorange="reversed", row=1, col=1)
    more = f" (first {ks} of {t.kSplit} K-splits)" if t.kSplit > ks else ""
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=70, b=40),
                      title=title or (f"{t.M}x{t.N}x{t.Ka}: {t.tasks} tasks of {t.singleCoreM}x{t.singleCoreN}x"
                                      f"{t.singleCoreK} on blockDim = {t.usedCoreNum}{more}"))
    return fig


def roofline_points(ladder, M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(intensity in FLOPs per HBM byte, TFLOPS) of each ladder row."""
    flops = 2.0 * M * N * K
    return flops / (ladder["hbm_mb"].to_numpy() * 1e6), ladder["tflops"].to_numpy()


def gemm_roofline_figure(ladder, M: int, N: int, K: int, dtype=np.float16, hw="ascend-910b2", *,
                         title: str | None = None) -> go.Figure:
    """The roofline with each version of ``ladder`` (a :func:`gemm_ladder` DataFrame at M x N x K)."""
    for col in ("hbm_mb", "tflops"):
        if col not in getattr(ladder, "columns", ()):
            raise ValueError(f"ladder must be gemm_ladder(...)'s DataFrame (column {col!r} missing)")
    hw = get_preset(hw) if isinstance(hw, str) else hw
    roof = gemm_roofline(M, N, K, dtype, hw)
    x, y = roofline_points(ladder, M, N, K)
    best_x = roof["flops"] / roof["min_hbm_bytes"]
    xs = np.logspace(np.log10(min(x.min(), best_x) / 4), np.log10(max(x.max(), best_x) * 4), 60)
    bw_tbps = hw.hbm_bandwidth_gbps / 1e3
    fig = go.Figure()
    fig.add_scatter(x=xs, y=np.minimum(roof["cube_tflops"], xs * bw_tbps), mode="lines", name="roof",
                    line=dict(color="grey"))
    fig.add_scatter(x=[best_x], y=[min(roof["cube_tflops"], best_x * bw_tbps)], mode="markers", name="minimum traffic",
                    marker=dict(symbol="star", size=12, color="grey"))
    fig.add_scatter(x=x, y=y, mode="markers+text", text=list(ladder.index), textposition="top center",
                    marker=dict(size=11), name="versions",
                    hovertemplate="%{text}: %{y:.1f} TFLOPS at %{x:.0f} FLOP/B<extra></extra>")
    fig.update_layout(height=400, margin=dict(l=10, r=10, t=50, b=40),
                      title=title or f"{M}x{N}x{K} on {hw.name}: cube peak {roof['cube_tflops']:.0f} TFLOPS, "
                                     f"HBM {bw_tbps:.1f} TB/s",
                      xaxis=dict(type="log", title="FLOPs per HBM byte moved"),
                      yaxis=dict(type="log", title="TFLOPS"))
    return fig
