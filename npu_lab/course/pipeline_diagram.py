"""Double buffering by hand: the load / compute / store schedule of a tile loop (notebook 05).

A tiny pure model, worked out before any simulator: a kernel loops over ``n_tiles`` tiles, and each
tile goes through three stages, each on its own pipe —

* **load**    (MTE2, GM → UB) for ``load_us``;
* **compute** (the scalar unit S in v1/v2, the vector unit V in v3) for ``compute_us``;
* **store**   (MTE3, UB → GM) for ``store_us``.

The rules are the simulator's queue rules (DESIGN.md §4.1), nothing more:

1. a pipe does one thing at a time, in program order (tile i before tile i+1);
2. a tile's compute waits for its load, its store waits for its compute;
3. the input queue has ``buffers`` slots: the load of tile i needs the slot that tile i − buffers
   used, which is freed when that tile's *compute* ends; the output queue likewise: the compute of
   tile i needs the output slot of tile i − buffers, freed when that tile's *store* ends;
4. ``barrier=True`` is the article's sync pitfall: the load of tile i + 1 waits until the store of
   tile i has finished (a ``pipe_barrier`` in the wrong place).

From these, the steady-state time per tile (the *period*) is

* 1 buffer:              compute + max(load, store)    (load i+1 overlaps only store i);
* 2 or more buffers:     max(load, compute, store)     (the slowest stage sets the pace);
* with the barrier:      load + compute + store        (whatever the buffer count).

:func:`pipeline_schedule` returns every box's start and end; :func:`pipeline_figure` draws the
boxes (one row per schedule × stage) and :func:`update_pipeline_figure` redraws a FigureWidget in
place. :func:`stage_durations` reads the three durations of one tile off a real kernel timeline, so
the hand model can be checked against the simulator.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..sim.timeline import Timeline
from .viz import PIPE_COLOURS

__all__ = ["STAGES", "STAGE_PIPES", "pipeline_schedule", "pipeline_latency", "steady_state_period",
           "period_formula", "stage_durations", "pipeline_figure", "update_pipeline_figure"]

STAGES = ("load", "compute", "store")
#: The pipe each stage runs on (compute: S in the scalar versions, V in the vectorized one).
STAGE_PIPES = {"load": ("MTE2",), "compute": ("S", "V"), "store": ("MTE3",)}
_STAGE_COLOURS = {"load": PIPE_COLOURS["MTE2"], "compute": PIPE_COLOURS["V"], "store": PIPE_COLOURS["MTE3"]}
_SEP = " \u00b7 "
_ROW_PX = 26


# ---------------------------------------------------------------------------- the model
def _check_duration(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite duration >= 0 (microseconds), got {value!r}")
    return float(value)


def _check_count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def pipeline_schedule(n_tiles: int, load_us: float, compute_us: float, store_us: float, *,
                      buffers: int = 2, barrier: bool = False) -> pd.DataFrame:
    """Start and end of every load / compute / store box of a ``n_tiles``-tile loop.

    ``buffers``: slots per queue (1 = single, 2 = double buffering). ``barrier``: the next load
    waits for this store (the pitfall). Returns a DataFrame with columns ``tile``, ``stage``
    (``load`` / ``compute`` / ``store``), ``start_us``, ``end_us``, ordered by tile then stage.
    The rules are in the module docstring; times start at 0."""
    n = _check_count("n_tiles", n_tiles)
    b = _check_count("buffers", buffers)
    durations = {s: _check_duration(f"{s}_us", v) for s, v in zip(STAGES, (load_us, compute_us, store_us))}
    if not isinstance(barrier, (bool, np.bool_)):
        raise ValueError(f"barrier must be True or False, got {barrier!r}")
    end = {s: np.zeros(n) for s in STAGES}
    start = {s: np.zeros(n) for s in STAGES}
    for i in range(n):
        ready = [end["load"][i - 1] if i else 0.0]                      # MTE2 in order
        if i >= b:
            ready.append(end["compute"][i - b])                         # input slot freed by compute
        if barrier and i:
            ready.append(end["store"][i - 1])                           # the misplaced barrier
        start["load"][i] = max(ready)
        end["load"][i] = start["load"][i] + durations["load"]
        ready = [end["load"][i], end["compute"][i - 1] if i else 0.0]   # its data, S/V in order
        if i >= b:
            ready.append(end["store"][i - b])                           # output slot freed by store
        start["compute"][i] = max(ready)
        end["compute"][i] = start["compute"][i] + durations["compute"]
        start["store"][i] = max(end["compute"][i], end["store"][i - 1] if i else 0.0)
        end["store"][i] = start["store"][i] + durations["store"]
    rows = [(i, s, start[s][i], end[s][i]) for i in range(n) for s in STAGES]
    return pd.DataFrame(rows, columns=["tile", "stage", "start_us", "end_us"])


def pipeline_latency(n_tiles: int, load_us: float, compute_us: float, store_us: float, *,
                     buffers: int = 2, barrier: bool = False) -> float:
    """When the last store of :func:`pipeline_schedule` ends (µs)."""
    sched = pipeline_schedule(n_tiles, load_us, compute_us, store_us, buffers=buffers, barrier=barrier)
    return float(sched["end_us"].max())


def steady_state_period(load_us: float, compute_us: float, store_us: float, *, buffers: int = 2,
                        barrier: bool = False) -> float:
    """Time each extra tile adds once the loop is running (µs), measured on the schedule: the gap
    between the last two tiles' stores of a long loop. Equals :func:`period_formula`."""
    n = 4 * _check_count("buffers", buffers) + 8
    sched = pipeline_schedule(n, load_us, compute_us, store_us, buffers=buffers, barrier=barrier)
    store_end = sched.loc[sched["stage"] == "store", "end_us"].to_numpy()
    return float(store_end[-1] - store_end[-2])


def period_formula(load_us: float, compute_us: float, store_us: float, *, buffers: int = 2,
                   barrier: bool = False) -> tuple[float, str]:
    """The closed form of the steady-state period and the formula as text."""
    l, c, s = (_check_duration(f"{n}_us", v) for n, v in zip(STAGES, (load_us, compute_us, store_us)))
    b = _check_count("buffers", buffers)
    if barrier:
        return l + c + s, "load + compute + store (the barrier serialises every tile)"
    if b == 1:
        return c + max(l, s), "compute + max(load, store)"
    return max(l, c, s), "max(load, compute, store)"


def stage_durations(timeline: Timeline, block: int = 0, tiles: int = 1) -> dict[str, float]:
    """The load / compute / store time of one tile, read off a kernel timeline: the busy time of
    each stage's pipes (MTE2; S + V; MTE3) in block ``block`` of the first launch, divided by the
    ``tiles`` that block ran. For v1 (one tile per block) the defaults give one tile's stages."""
    if not isinstance(timeline, Timeline) or not timeline.launches:
        raise TypeError("stage_durations needs a non-empty npu_lab Timeline (the .timeline of a run)")
    launch = timeline.launches[0]
    b = _check_count("block", block, minimum=0)
    t = _check_count("tiles", tiles)
    if b >= launch.block_dim:
        raise ValueError(f"block {b} does not exist: the first launch ran {launch.block_dim} block(s)")
    trace = launch.traces[int(launch.block_class[b])]
    busy = trace.busy_cycles_by_pipe()
    hw = launch.hw
    return {stage: hw.cycles_to_us(sum(busy.get(p, 0.0) for p in pipes)) / t
            for stage, pipes in STAGE_PIPES.items()}


# ---------------------------------------------------------------------------- the figure
def _as_dict(schedules) -> dict[str, pd.DataFrame]:
    if isinstance(schedules, pd.DataFrame):
        schedules = {"": schedules}
    if not isinstance(schedules, dict) or not schedules:
        raise TypeError("pass a schedule DataFrame or a non-empty dict {label: schedule} "
                        "(each made by pipeline_schedule)")
    for label, df in schedules.items():
        if not isinstance(df, pd.DataFrame) or not {"tile", "stage", "start_us", "end_us"} <= set(df.columns):
            raise TypeError(f"schedule {label!r} is not a pipeline_schedule() DataFrame")
    return schedules


def _row(label: str, stage: str) -> str:
    return f"{label}{_SEP}{stage}" if label else stage


def _figure_data(schedules: dict[str, pd.DataFrame]):
    data = {}
    for stage in STAGES:
        xs, bases, ys, texts = [], [], [], []
        for label, df in schedules.items():
            part = df[df["stage"] == stage]
            xs.extend(part["end_us"] - part["start_us"])
            bases.extend(part["start_us"])
            ys.extend([_row(label, stage)] * len(part))
            texts.extend(str(int(t)) for t in part["tile"])
        data[stage] = dict(x=xs, base=bases, y=ys, text=texts)
    rows = [_row(label, s) for label in schedules for s in STAGES]
    ends = {label: float(df["end_us"].max()) for label, df in schedules.items()}
    return data, rows, ends


def _title(ends: dict[str, float], title) -> str:
    if title:
        return title
    return "Tile loop by hand: " + ", ".join(f"{k or 'total'} {v:.2f} \u00b5s" for k, v in ends.items())


def _end_markers(ends: dict[str, float]):
    xs, ys = [], []
    for label, end in ends.items():
        xs.append(end)
        ys.append(_row(label, "store"))
    return dict(x=xs, y=ys, text=[f"{e:.2f} \u00b5s" for e in ends.values()])


def pipeline_figure(schedules, *, widget: bool = False, title: str | None = None):
    """Draw one or more schedules of :func:`pipeline_schedule` as boxes on a time axis.

    ``schedules``: one DataFrame, or a dict ``{label: schedule}`` (e.g. ``{"1 buffer": ...,
    "2 buffers": ...}``) drawn one under the other. One row per label × stage, one box per tile
    labelled with its tile number, coloured by stage like the pipes of :func:`npu_lab.course.viz.
    timeline_figure` (load = MTE2 blue, compute = orange, store = MTE3 green); a marker shows
    where each schedule ends. ``widget=True`` gives a ``go.FigureWidget`` with its full layout
    (for :func:`update_pipeline_figure`)."""
    schedules = _as_dict(schedules)
    data, rows, ends = _figure_data(schedules)
    traces = [go.Bar(name=stage, orientation="h", **data[stage], textposition="inside",
                     insidetextanchor="middle", marker=dict(color=_STAGE_COLOURS[stage],
                                                            line=dict(color="white", width=1)),
                     hovertemplate=("tile %{text}: " + stage + " %{base:.2f} \u2192 "
                                    "%{customdata:.2f} \u00b5s<extra></extra>"),
                     customdata=np.add(data[stage]["base"], data[stage]["x"]))
              for stage in STAGES]
    traces.append(go.Scatter(name="end", mode="markers+text", **_end_markers(ends),
                             textposition="middle right", marker=dict(symbol="line-ns-open", size=18,
                                                                      color="#d62728", line=dict(width=3)),
                             hovertemplate="ends at %{x:.2f} \u00b5s<extra></extra>"))
    xmax = max(ends.values()) * 1.15 or 1.0
    layout = dict(
        title=dict(text=_title(ends, title), x=0.01), barmode="overlay", bargap=0.2,
        height=max(220, 100 + _ROW_PX * len(rows)), margin=dict(l=10, r=10, t=50, b=40),
        xaxis=dict(title=dict(text="time (\u00b5s)"), range=[0, xmax], zeroline=False),
        yaxis=dict(type="category", categoryorder="array", categoryarray=rows, autorange="reversed",
                   automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        meta=dict(kind="pipeline", custom_title=title), uirevision="pipeline")
    return (go.FigureWidget if widget else go.Figure)(data=traces, layout=layout)


def update_pipeline_figure(fig, schedules, *, title: str | None = None):
    """Put new schedules into a :func:`pipeline_figure` in place (one ``batch_update``): the
    boxes, the end markers, the rows, the height, the x range and the title. Returns ``fig``."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else None
    if not meta or meta.get("kind") != "pipeline":
        raise ValueError("update_pipeline_figure needs a figure made by pipeline_figure()")
    schedules = _as_dict(schedules)
    data, rows, ends = _figure_data(schedules)
    title = title if title is not None else meta.get("custom_title")
    with fig.batch_update():
        for trace, stage in zip(fig.data[:3], STAGES):
            d = data[stage]
            trace.x, trace.base, trace.y, trace.text = d["x"], d["base"], d["y"], d["text"]
            trace.customdata = np.add(d["base"], d["x"])
        marks = _end_markers(ends)
        fig.data[3].x, fig.data[3].y, fig.data[3].text = marks["x"], marks["y"], marks["text"]
        fig.layout.yaxis.categoryarray = rows
        fig.layout.height = max(220, 100 + _ROW_PX * len(rows))
        fig.layout.xaxis.range = [0, max(ends.values()) * 1.15 or 1.0]
        fig.layout.title.text = _title(ends, title)
    return fig
