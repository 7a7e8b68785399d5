"""Double buffering by hand: the load / compute / store schedule of a tile loop (notebook 05).

A tiny pure model, worked out before any simulator: a kernel loops over ``n_tiles`` tiles, and each
tile goes through three stages, each on its own pipe —

* **load**    (MTE2, GM → UB): the pipe is busy ``load_us``;
* **compute** (the scalar unit S in v1/v2, the vector unit V in v3): busy ``compute_us``;
* **store**   (MTE3, UB → GM): busy ``store_us``.

Two more numbers, both 0 unless given, are the costs of handing a tile from one pipe to the next
(docs/cost_model.md §0, §1, §4):

* ``latency_us`` — a copy's data is *complete* ``latency_us`` after its box ends (the DMA latency:
  the pipe may start the next copy meanwhile, so latencies overlap; only a stage that *waits for
  the data* sees it);
* ``sync_us`` — each hand-off through a flag (or a barrier) passes ``sync_us`` after what it waits for.

Each box therefore has a *ready* time besides its start and end, like the simulator's timeline:
end + ``latency_us`` for a load or a store, its end for the compute (S has no latency).

The rules are the simulator's queue rules (docs/cost_model.md), nothing more:

1. a pipe does one thing at a time, in program order (tile i before tile i+1);
2. a tile's compute waits for its load's data (ready + sync); its store waits for its compute
   (end + sync);
3. the input queue has ``buffers`` slots: the load of tile i needs the slot that tile i − buffers
   used, which is freed when that tile's *compute* ends (+ sync); the output queue likewise: the
   compute of tile i needs the output slot of tile i − buffers, freed when that tile's *store* is
   complete (ready + sync);
4. ``barrier=True`` is the article's sync pitfall: the load of tile i + 1 waits until the store of
   tile i is complete (ready + sync: a ``pipe_barrier`` in the wrong place);
5. the loop ends when the last store is complete (its ready time).

From these, the steady-state time per tile (the *period*) is the slowest of the pipes and of the
round trips a slot makes. With ``latency_us = sync_us = 0``:

* 1 buffer:              compute + max(load, store)    (load i+1 overlaps only store i);
* 2 or more buffers:     max(load, compute, store)     (the slowest stage sets the pace);
* with the barrier:      load + compute + store        (whatever the buffer count).

With them, a slot's round trip gains its hand-offs: the input slot goes load → (latency + sync) →
compute → (sync) → the load ``buffers`` tiles later, the output slot compute → (sync) → store →
(latency + sync) → the compute ``buffers`` tiles later, and each round trip is shared by
``buffers`` tiles. So the period is ``max(load, compute, store, (load + compute + latency + 2·sync) /
buffers, (compute + store + latency + 2·sync) / buffers)``, and with the barrier
``load + compute + store + 2·latency + 3·sync``. Two buffers hide the latency as long as a round
trip is shorter than two of the slowest stage; one buffer and the barrier pay it every tile.

:func:`pipeline_schedule` returns every box's start, end and ready time; :func:`pipeline_figure`
draws the boxes (one row per schedule × stage) and :func:`update_pipeline_figure` redraws a
FigureWidget in place. :func:`stage_durations` reads the three durations of one tile off a real
kernel timeline and :func:`handoff_costs` the two hand-off costs off its hardware, so the hand
model can be checked against the simulator.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..hardware import HardwareSpec
from ..presets import get_preset
from ..sim.timeline import Timeline
from .viz import PIPE_COLOURS
from .figure_widget import ExplorerFigureWidget

__all__ = ["STAGES", "STAGE_PIPES", "pipeline_schedule", "pipeline_latency", "steady_state_period",
           "period_formula", "handoff_costs", "stage_durations", "pipeline_figure", "update_pipeline_figure"]

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


def _check_handoff(latency_us, sync_us) -> tuple[float, float]:
    return _check_duration("latency_us", latency_us), _check_duration("sync_us", sync_us)


#: Most tiles :func:`pipeline_schedule` / :func:`pipeline_latency` model (a DataFrame of three
#: rows a tile; the latency's loop keeps only ``buffers`` tiles, ~1 µs a tile). A longer loop
#: runs at :func:`steady_state_period` per tile: n × period is its time to within the ramp.
MAX_PIPELINE_TILES = 1_000_000


def _check_schedule_args(n_tiles, load_us, compute_us, store_us, buffers, barrier, latency_us, sync_us):
    n = _check_count("n_tiles", n_tiles)
    if n > MAX_PIPELINE_TILES:
        raise ValueError(f"n_tiles must be at most {MAX_PIPELINE_TILES:,} (npu_lab.course.pipeline_diagram."
                         f"MAX_PIPELINE_TILES), got {n:,}; a long loop runs at steady_state_period(...) per tile, "
                         "so n_tiles x that period is its time to within the first tiles' ramp")
    b = _check_count("buffers", buffers)
    stage_us = tuple(_check_duration(f"{s}_us", v) for s, v in zip(STAGES, (load_us, compute_us, store_us)))
    if not isinstance(barrier, (bool, np.bool_)):
        raise ValueError(f"barrier must be True or False, got {barrier!r}")
    lat, sync = _check_handoff(latency_us, sync_us)
    return n, b, stage_us, lat, sync


def pipeline_schedule(n_tiles: int, load_us: float, compute_us: float, store_us: float, *,
                      buffers: int = 2, barrier: bool = False, latency_us: float = 0.0,
                      sync_us: float = 0.0) -> pd.DataFrame:
    """Start, end and ready time of every load / compute / store box of a ``n_tiles``-tile loop.

    ``buffers``: slots per queue (1 = single, 2 = double buffering). ``barrier``: the next load
    waits for this store (the pitfall). ``latency_us``: a copy's data is complete that long after
    its box ends (the DMA latency); ``sync_us``: the cost of each flag hand-off (both µs, default 0:
    the model without hand-off costs). Returns a DataFrame with columns ``tile``, ``stage``
    (``load`` / ``compute`` / ``store``), ``start_us``, ``end_us`` (the pipe is free again) and
    ``ready_us`` (the result is complete), ordered by tile then stage. The rules are in the module
    docstring; times start at 0."""
    n, b, stage_us, lat, sync = _check_schedule_args(n_tiles, load_us, compute_us, store_us, buffers,
                                                     barrier, latency_us, sync_us)
    durations = dict(zip(STAGES, stage_us))
    latency = {"load": lat, "compute": 0.0, "store": lat}          # S has no latency; a copy does
    start, end, ready = ({s: np.zeros(n) for s in STAGES} for _ in range(3))

    def box(stage, i, earliest):
        start[stage][i] = max(earliest)
        end[stage][i] = start[stage][i] + durations[stage]
        ready[stage][i] = end[stage][i] + latency[stage]

    for i in range(n):
        earliest = [end["load"][i - 1] if i else 0.0]                        # MTE2 in order
        if i >= b:
            earliest.append(end["compute"][i - b] + sync)                   # input slot freed by compute
        if barrier and i:
            earliest.append(ready["store"][i - 1] + sync)                   # the misplaced barrier
        box("load", i, earliest)
        earliest = [ready["load"][i] + sync, end["compute"][i - 1] if i else 0.0]   # its data; S/V in order
        if i >= b:
            earliest.append(ready["store"][i - b] + sync)                   # output slot freed by store
        box("compute", i, earliest)
        box("store", i, [end["compute"][i] + sync, end["store"][i - 1] if i else 0.0])
    rows = [(i, s, start[s][i], end[s][i], ready[s][i]) for i in range(n) for s in STAGES]
    return pd.DataFrame(rows, columns=["tile", "stage", "start_us", "end_us", "ready_us"])


def pipeline_latency(n_tiles: int, load_us: float, compute_us: float, store_us: float, *,
                     buffers: int = 2, barrier: bool = False, latency_us: float = 0.0,
                     sync_us: float = 0.0) -> float:
    """When the last store of :func:`pipeline_schedule` is complete (its ready time, µs): the same
    rules, evaluated keeping only the last ``buffers`` tiles (no DataFrame)."""
    n, b, (l, c, s), lat, sync = _check_schedule_args(n_tiles, load_us, compute_us, store_us, buffers,
                                                       barrier, latency_us, sync_us)
    load_end = comp_end = store_end = 0.0
    comp_hist = [0.0] * b            # end of compute of tile i-b .. i-1 (ring)
    store_ready_hist = [0.0] * b     # ready of store of tile i-b .. i-1
    store_ready = 0.0
    for i in range(n):
        k = i % b
        start = load_end
        if i >= b:
            start = max(start, comp_hist[k] + sync)
        if barrier and i:
            start = max(start, store_ready + sync)
        load_end = start + l
        start = max(load_end + lat + sync, comp_end)
        if i >= b:
            start = max(start, store_ready_hist[k] + sync)
        comp_end = start + c
        store_end = max(comp_end + sync, store_end) + s
        store_ready = store_end + lat
        comp_hist[k], store_ready_hist[k] = comp_end, store_ready
    return float(store_ready)


def steady_state_period(load_us: float, compute_us: float, store_us: float, *, buffers: int = 2,
                        barrier: bool = False, latency_us: float = 0.0, sync_us: float = 0.0) -> float:
    """Time each extra tile adds once the loop is running (µs), measured on the schedule of a long
    loop: the time between the last store and the store ``buffers`` tiles before it, divided by
    ``buffers`` (with several slots, odd and even tiles may settle into alternating gaps; their
    average is the period). Equals :func:`period_formula`."""
    b = _check_count("buffers", buffers)
    n = 16 * b + 32
    sched = pipeline_schedule(n, load_us, compute_us, store_us, buffers=b, barrier=barrier,
                              latency_us=latency_us, sync_us=sync_us)
    store_end = sched.loc[sched["stage"] == "store", "end_us"].to_numpy()
    return float(store_end[-1] - store_end[-1 - b]) / b


def period_formula(load_us: float, compute_us: float, store_us: float, *, buffers: int = 2,
                   barrier: bool = False, latency_us: float = 0.0, sync_us: float = 0.0) -> tuple[float, str]:
    """The closed form of the steady-state period (µs) and the formula as text: the slowest pipe or
    slot round trip (module docstring). Without hand-off costs the text is the short form."""
    l, c, s = (_check_duration(f"{n}_us", v) for n, v in zip(STAGES, (load_us, compute_us, store_us)))
    b = _check_count("buffers", buffers)
    lat, sync = _check_handoff(latency_us, sync_us)
    plain = lat == 0 and sync == 0
    if barrier:
        return (l + c + s + 2 * lat + 3 * sync,
                "load + compute + store" + ("" if plain else " + 2·latency + 3·sync")
                + " (the barrier serialises every tile)")
    trips = (l + c + lat + 2 * sync, c + s + lat + 2 * sync)      # input slot, output slot
    value = max(l, c, s, *(t / b for t in trips))
    if plain:
        return value, "compute + max(load, store)" if b == 1 else "max(load, compute, store)"
    if b == 1:
        return value, "compute + max(load, store) + latency + 2·sync"
    return value, (f"max(load, compute, store, (load + compute + latency + 2·sync) / {b}, "
                   f"(compute + store + latency + 2·sync) / {b})")


def handoff_costs(hw) -> dict[str, float]:
    """The hand-off costs of :func:`pipeline_schedule` for a chip: ``{"latency_us": the DMA latency,
    "sync_us": one flag}`` in µs, from ``hw`` (a preset name, a ``HardwareSpec`` or a ``Timeline``,
    whose first launch's hardware is used). Pass them on as ``**handoff_costs(hw)``. A barrier is
    charged one flag too (the presets price ``pipe_barrier_cycles`` like ``sync_flag_cycles``)."""
    if isinstance(hw, Timeline):
        if not hw.launches:
            raise ValueError("handoff_costs needs a Timeline with at least one launch")
        hw = hw.launches[0].hw
    if isinstance(hw, str):
        hw = get_preset(hw)
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"handoff_costs needs a preset name, a HardwareSpec or a Timeline, got {type(hw).__name__}")
    return {"latency_us": hw.cycles_to_us(hw.dma_latency_cycles), "sync_us": hw.cycles_to_us(hw.sync_flag_cycles)}


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
    # a loop ends when its last result is complete (ready), not when the last pipe is free
    ends = {label: float(df["ready_us" if "ready_us" in df else "end_us"].max()) for label, df in schedules.items()}
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
    where each schedule ends (its last store complete). ``widget=True`` gives a ``go.FigureWidget`` with its full layout
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
    return (ExplorerFigureWidget if widget else go.Figure)(data=traces, layout=layout)


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
