"""The performance monitor drawn, and run over the MoE ladder (docs/monitor.md).

* :func:`monitor_bars_figure` — per core, one stacked bar per pipe: busy / waiting on data /
  waiting on sync / idle µs (they add up to the core's span);
* :func:`utilisation_heatmap` — pipe utilisation, cores × pipes, the pipes named as msprof names
  them (``aiv_vec``, ``aiv_mte2``, ...);
* :func:`monitor_ladder` — one row per MoeGatingTopK version at one shape: the verdict, msprof's
  ratios, the overlap, the balance (the numbers are :func:`npu_lab.sim.monitor.monitor`'s).

Presentation only: the library proper never imports this module; the numbers live in
``npu_lab.sim.monitor``.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..sim.monitor import CATEGORIES, MonitorReport, monitor
from ..sim.timeline import Timeline
from .figure_widget import ExplorerFigureWidget

__all__ = ["monitor_bars_figure", "utilisation_heatmap", "monitor_ladder", "monitor_course", "CATEGORY_COLOURS",
           "LADDER_COLUMNS", "COURSE_COLUMNS"]

#: one colour per part of a span, the same in every figure
CATEGORY_COLOURS = {"busy": "#2ca02c", "wait_data": "#1f77b4", "wait_sync": "#ff7f0e", "idle": "#d9d9d9"}
_LABELS = {"busy": "busy", "wait_data": "waiting on data", "wait_sync": "waiting on sync", "idle": "idle"}


def _report(obj) -> MonitorReport:
    """A MonitorReport from a report or a Timeline (monitored here); anything else is an error."""
    if isinstance(obj, MonitorReport):
        return obj
    if isinstance(obj, Timeline):
        return monitor(obj)
    raise TypeError(f"pass a Timeline or the MonitorReport monitor() returns, got {type(obj).__name__}")


def _cores_to_show(report: MonitorReport, max_cores) -> list[int]:
    if isinstance(max_cores, bool) or not isinstance(max_cores, (int, np.integer)) or max_cores < 1:
        raise ValueError(f"max_cores must be a whole number >= 1, got {max_cores!r}")
    t = report.table
    kind = t["core_type"].iloc[0]
    cores = sorted(t.loc[t["core_type"] == kind, "core"].unique())
    return cores[:max_cores]


def monitor_bars_figure(run, *, max_cores: int = 8, widget: bool = False, title: str | None = None):
    """Stacked bars: for each of the first ``max_cores`` cores (of the first core type launched)
    and each of its pipes, busy / waiting on data / waiting on sync / idle µs. ``run``: a Timeline
    or a MonitorReport. Each bar's height is the core's span (the time after the launch overhead)."""
    report = _report(run)
    cores = _cores_to_show(report, max_cores)
    t = report.table
    kind = t["core_type"].iloc[0]
    t = t[(t["core_type"] == kind) & t["core"].isin(cores)].sort_values(["core"], kind="stable")
    x = [[f"core {c}" for c in t["core"]], list(t["pipe"])]
    traces = [go.Bar(name=_LABELS[cat], x=x, y=t[f"{cat}_us"].to_numpy(), marker_color=CATEGORY_COLOURS[cat],
                     customdata=np.stack([t["msprof"].to_numpy(), t["utilisation"].to_numpy() * 100], axis=1),
                     hovertemplate=(f"<b>%{{x}}</b>: {_LABELS[cat]} %{{y:.3f}} \u00b5s<br>"
                                    "utilisation %{customdata[1]:.1f}% (%{customdata[0]}, busy / span)"
                                    "<extra></extra>"))
              for cat in CATEGORIES]
    layout = dict(title=dict(text=title or f"Where each pipe's time went ({report.verdict}-bound)", x=0.01),
                  barmode="stack", height=380, margin=dict(l=10, r=10, t=50, b=60),
                  yaxis=dict(title=dict(text="\u00b5s"), rangemode="tozero", automargin=True),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    return (ExplorerFigureWidget if widget else go.Figure)(data=traces, layout=layout)


def utilisation_heatmap(run, *, max_cores: int = 48, widget: bool = False, title: str | None = None):
    """Heat map of pipe utilisation (busy / span), rows cores, columns pipes by msprof's names.
    ``run``: a Timeline or a MonitorReport."""
    report = _report(run)
    cores = _cores_to_show(report, max_cores)
    m = report.utilisation_matrix().loc[cores]
    t = report.table
    order = list(dict.fromkeys(t.loc[t["core_type"] == t["core_type"].iloc[0], "msprof"]))
    m = m[order]
    trace = go.Heatmap(z=100 * m.to_numpy(), x=order, y=[f"core {c}" for c in m.index], zmin=0, zmax=100,
                       colorscale="Viridis", colorbar=dict(title=dict(text="%")),
                       hovertemplate="%{y}, %{x}_ratio: %{z:.1f}%<extra></extra>")
    layout = dict(title=dict(text=title or "Pipe utilisation per core (msprof's names)", x=0.01),
                  height=max(240, 18 * len(cores) + 120), margin=dict(l=10, r=10, t=50, b=40),
                  yaxis=dict(autorange="reversed", automargin=True), xaxis=dict(type="category"))
    return (ExplorerFigureWidget if widget else go.Figure)(data=[trace], layout=layout)


#: the columns of monitor_ladder's DataFrame (after ``version``)
LADDER_COLUMNS = ["latency_us", "verdict", "aiv_scalar_ratio", "aiv_vec_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio",
                  "memory_bound", "dma_compute_overlap", "dma_compute_overlap_with_scalar", "wait_data_share",
                  "wait_sync_share", "idle_share", "cores_used", "idle_cores", "balance_max_over_mean",
                  "gm_read_bytes", "gm_reread_fraction", "l2_hit_bytes", "ub_hit_rate", "advice", "error"]


def monitor_ladder(B: int, S: int, E: int, K: int, hw="ascend-910b2", *, versions=None):
    """The monitor on every MoeGatingTopK version (``npu_lab.kernels.moe_gating.VERSIONS``) at one
    shape, timing-only: one row per version with the columns of :data:`LADDER_COLUMNS`. A version
    the chip cannot run (v1..v4 use DataCopyPad, absent on the 310P) or the shape does not fit gets
    a row with its ``error`` and no figures. ``gm_reread_fraction`` counts the gate logits
    (B·S·E float32) as the distinct input bytes."""
    import pandas as pd

    from ..kernels.moe_gating import VERSIONS, simulate_moe_gating
    from ..lang.errors import CapabilityError
    from ..presets import get_preset

    spec = get_preset(hw) if isinstance(hw, str) else hw
    chosen = list(VERSIONS) if versions is None else list(versions)
    bad = [v for v in chosen if v not in VERSIONS]
    if bad:
        raise ValueError(f"unknown version(s) {bad}; choose from {', '.join(VERSIONS)}")
    rows = []
    for v in chosen:
        try:
            t = simulate_moe_gating(B, S, E, K, version=v, hw=spec).timeline
        except CapabilityError as exc:
            rows.append({"version": v, "error": str(exc).split(";")[0]})
            continue
        s = monitor(t, spec, input_bytes=B * S * E * 4).summary
        rows.append({"version": v, **{c: s[c] for c in LADDER_COLUMNS if c in s}, "error": ""})
    return pd.DataFrame(rows, columns=["version", *LADDER_COLUMNS]).set_index("version")


#: the columns of monitor_course's DataFrame (after ``family``, ``version``)
COURSE_COLUMNS = ["latency_us", "launches", "core_type", "verdict", "aiv_vec_ratio", "aiv_scalar_ratio",
                  "aiv_mte2_ratio", "aic_mac_ratio", "aic_mte1_ratio", "aic_fixpipe_ratio", "memory_bound",
                  "dma_compute_overlap", "wait_data_share", "wait_sync_share", "cores_used", "idle_cores",
                  "balance_max_over_mean", "advice", "error"]


def _course_runs(spec):
    """(family, version, thunk) for every kernel version of the course at a small shape, timing-only."""
    import numpy as np

    from ..kernels.decode import decode_attention
    from ..kernels.decode.scheduled import SCHEDULES, random_decode_inputs, scheduled_decode_attention
    from ..kernels.gemm.run import GEMM_VERSIONS, gemm
    from ..kernels.moe_gating import VERSIONS, simulate_moe_gating
    from ..kernels.scaled_add import scaled_add

    runs = [("MoeGatingTopK", v, lambda v=v: simulate_moe_gating(2, 2048, 128, 4, version=v, hw=spec).timeline)
            for v in VERSIONS]
    runs += [("scaled_add", f"BUFFER_NUM={nb}",
              lambda nb=nb: scaled_add(1 << 16, None, hw=spec, num_buffers=nb, timing_only=True)[1]) for nb in (1, 2)]
    runs += [("GEMM", v, lambda v=v: gemm((256, 512), (512, 256), version=v, hw=spec, timing_only=True,
                                          dtype=np.float16)[1]) for v in GEMM_VERSIONS]
    for v in ("v1", "v2", "v4", "v5"):
        n = 64 if v == "v1" else 1024                   # v1 holds the whole S2 in the UB
        kv = ((4, n, 8, 128), np.int8 if v == "v5" else np.float16)
        runs.append(("decode attention", v, lambda v=v, kv=kv, n=n: decode_attention(
            (4, 32, 128), kv, None, np.full(4, n), version=v, hw=spec, timing_only=True).timeline))
    lens = [900, 40, 300, 120, 64, 500, 16, 200]
    q, k, val, l = random_decode_inputs(lens)
    cores = min(8, spec.vector_cores)
    runs += [("decode, scheduled", s, lambda s=s: scheduled_decode_attention(
        q, k, val, l, s, cores=cores, hw=spec, timing_only=True).timeline) for s in SCHEDULES]
    return runs


def monitor_course(hw="ascend-910b2"):
    """The monitor on every kernel version of the course — the MoE ladder (discrete chain, v1..v4),
    scaled-add single/double-buffered, the GEMM ladder on the cube cores, decode attention v1/v2/v4/v5
    and the decode kernel under each schedule — at small shapes, timing-only: one row per version
    with :data:`COURSE_COLUMNS` (msprof's names; a cube run shows ``aic_mac_ratio``). A version the
    chip cannot run gets its ``error`` and no figures. A few seconds on the 910B2."""
    import pandas as pd

    from ..lang.errors import CapabilityError
    from ..presets import get_preset

    spec = get_preset(hw) if isinstance(hw, str) else hw
    rows = []
    for family, version, run in _course_runs(spec):
        try:
            t = run()
        except (CapabilityError, ValueError) as exc:       # an instruction the chip lacks, a shape past its UB
            rows.append({"family": family, "version": version, "error": str(exc).split(";")[0][:160]})
            continue
        s = monitor(t, spec).summary
        rows.append({"family": family, "version": version, **{c: s[c] for c in COURSE_COLUMNS if c in s},
                     "error": ""})
    return pd.DataFrame(rows, columns=["family", "version", *COURSE_COLUMNS]).set_index(["family", "version"])
