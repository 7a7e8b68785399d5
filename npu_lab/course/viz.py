"""Plotly figures over a :class:`~npu_lab.sim.Timeline` and over sweep DataFrames.

Thin helpers: they read what the Timeline offers (``events()``, ``busy_us_by_pipe()``,
``utilisation_by_pipe()``) and draw it; nothing here models hardware. No library module imports
this one (README.md).

* :func:`timeline_figure` — a Gantt chart: one row per core × pipe, one bar per instruction;
  :func:`update_timeline_figure` swaps in another timeline's data in place (for sliders).
* :func:`pipe_utilisation_figure` — per-pipe utilisation of one or several timelines.
* :func:`latency_sweep_figure` — latency against a swept parameter, with an optional
  highlighted point and reference (measured) points; :func:`update_latency_sweep` in place.

Figures are plain ``go.Figure`` or, with ``widget=True``, ``go.FigureWidget`` built with the full
layout in the constructor (Voila does not show layout changes made before display). Updates run
inside ``fig.batch_update()`` so a browser gets one message per slider move.
"""

from __future__ import annotations

import html
import sys

# plotly's FigureWidget imports its renderers, which import nbformat, whose jsonschema imports
# rfc3987_syntax when it is installed: that package compiles ~40 lark grammars at import (5-10 s
# on the course's machines), only to validate IRIs, which nothing here does. jsonschema treats the
# module as optional (an ImportError is suppressed), so the course keeps it out: the first explorer
# of a kernel then builds in well under a second. Nothing changes if jsonschema is loaded already.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)

import numpy as np
import plotly.graph_objects as go

from ..sim.core import ALL_PIPES, CUBE_PIPES, PIPE_MEANING, VECTOR_PIPES
from ..sim.timeline import Timeline
from .figure_widget import ExplorerFigureWidget, sync_widget_state

__all__ = ["PIPE_COLOURS", "timeline_figure", "update_timeline_figure", "pipe_utilisation_figure",
           "latency_sweep_figure", "update_latency_sweep", "sync_widget_state", "sync_after_move"]

HOST = "host"
#: One colour per pipe (and the host row's launch overhead), the same in every figure.
PIPE_COLOURS = {
    "S": "#7f7f7f", "MTE2": "#1f77b4", "V": "#ff7f0e", "MTE3": "#2ca02c",
    "MTE1": "#17becf", "M": "#d62728", "FIX": "#9467bd", HOST: "#444444",
}
_MAX_EVENTS = 30_000   # bars drawn at most (SVG bars get sluggish beyond this)
_ROW_PX = 22
_SEP = " \u00b7 "      # "core 0 · MTE2"

#: hover of one bar. Per bar only numbers travel (customdata = [block, end µs, bytes, result
#: complete µs]); the words — instruction, source line, code — are the trace's: one trace per pipe
#: and issuing line (see :func:`_build_timeline_data`)
_HOVER_HEAD = "<b>{name}</b><br>block %{{customdata[0]}}, %{{y}}<br>%{{base:.3f}} \u2192 %{{customdata[1]:.3f}} \u00b5s (%{{x:.3f}} \u00b5s)<br>"
_HOVER_TAIL = "result complete at %{customdata[3]:.3f} \u00b5s (after the latency)<br>"
_HOVER_FOOT = "%{{customdata[2]}} bytes<br>{source}: <i>{code}</i><extra>%{{fullData.name}}</extra>"


# ---------------------------------------------------------------------------- timeline
def _check_timeline(timeline) -> Timeline:
    if not isinstance(timeline, Timeline):
        raise TypeError(f"expected an npu_lab Timeline (the second value a kernel returns), "
                        f"got {type(timeline).__name__}")
    if not timeline.launches:
        raise ValueError("the timeline is empty: run a kernel first")
    return timeline


def _trace_pipes(timeline: Timeline) -> list[str]:
    """Pipes that get a trace: every pipe of the core types launched, in ALL_PIPES order."""
    pipes = set()
    for launch in timeline.launches:
        pipes.update(VECTOR_PIPES if launch.core_type == "vector" else CUBE_PIPES)
    return [p for p in ALL_PIPES if p in pipes]


def _blocks_to_show(timeline: Timeline, max_blocks, max_cores: int) -> tuple[int, bool]:
    """How many leading blocks per launch to materialise: enough to cover every block that runs
    on the first ``max_cores`` cores, cut to ``max_blocks`` and to the bar budget.
    Returns (blocks, truncated_by_budget)."""
    needed, budget_cut = 0, None
    for launch in timeline.launches:
        on_shown = launch.block_core < max_cores
        shown_idx = np.flatnonzero(on_shown)
        if len(shown_idx) == 0:
            continue
        needed = max(needed, int(shown_idx[-1]) + 1)
        per_class = np.array([len(t.pipe) for t in launch.traces], dtype=np.int64)
        per_block = np.where(on_shown, per_class[launch.block_class], 0)
        cum = np.cumsum(per_block)
        if cum[-1] > _MAX_EVENTS:
            cut = int(np.searchsorted(cum, _MAX_EVENTS, side="right"))
            budget_cut = max(1, cut) if budget_cut is None else max(1, min(budget_cut, cut))
    blocks = needed if max_blocks is None else min(needed, max_blocks)
    if budget_cut is not None and budget_cut < blocks:
        return budget_cut, True
    return max(blocks, 1), False


def _literal(text: str) -> str:
    """``text`` as literal words in a hover template: HTML-escaped, and no ``%`` that plotly could
    take for the start of a ``%{...}`` field."""
    return html.escape(text).replace("%", "&#37;")


def _hover(name: str, source: str, code: str, tail: bool) -> str:
    return (_HOVER_HEAD.format(name=_literal(name)) + (_HOVER_TAIL if tail else "")
            + _HOVER_FOOT.format(source=_literal(source), code=_literal(code)))


def _timeline_data(timeline: Timeline, max_blocks, max_cores: int):
    """Per-trace bar data, the y rows in display order, and a note on what was cut. Kept on the
    timeline (a finished run does not change): an explorer that shows a cached run again, or
    prepared it while idle, does not rebuild its bars."""
    memo = timeline.__dict__.setdefault("_npu_figure_data", {})
    key = (max_blocks, int(max_cores))
    if key not in memo:
        memo[key] = _build_timeline_data(timeline, max_blocks, int(max_cores))
    return memo[key]


def _build_timeline_data(timeline: Timeline, max_blocks, max_cores: int):
    blocks, cut = _blocks_to_show(timeline, max_blocks, max_cores)
    df = timeline.events(max_blocks=blocks)
    df = df[df["core"] < max_cores]
    host = df["core"] < 0
    rows_pipe = df["pipe"].to_numpy(dtype=object)
    core = df["core"].to_numpy()
    label = np.where(host, HOST, "core " + core.astype(str) + _SEP + rows_pipe.astype(str))
    start = df["start_us"].to_numpy(dtype=float)
    end = df["end_us"].to_numpy(dtype=float)
    ready = df["ready_us"].to_numpy(dtype=float)
    # the latency a bar does not show: the pipe is free at its end, the result complete later
    tail = (ready - end) > 1e-9
    name = df["name"].to_numpy(dtype=object).astype(str)
    source = np.where(host, "host", df["source"].to_numpy(dtype=object)).astype(str)
    code = np.where(host, "launch overhead (runtime + task scheduler)",
                    df["code"].to_numpy(dtype=object)).astype(str)
    # 0.1 ns is finer than the hover shows (.3f µs) and keeps a saved figure small
    numbers = np.stack([df["block"].to_numpy(dtype=float), np.round(end, 4), df["bytes"].to_numpy(dtype=float),
                        np.round(ready, 4)], axis=1)
    pipe_key = np.where(host, HOST, rows_pipe)
    # one group per pipe and issuing line (instruction, source, code, whether a latency follows):
    # its words go into the trace's hover template once, not into every bar (a slider move of
    # notebook 05 sent ~110 KB of repeated source lines; now ~30 KB)
    sep = "\x1f"          # (numpy strings drop trailing NULs)
    site = np.char.add(np.char.add(np.char.add(np.char.add(name, sep), source), np.char.add(sep, code)),
                       np.where(tail, sep + "t", sep + "f"))
    data = {}
    for key in [HOST, *_trace_pipes(timeline)]:
        sel = np.flatnonzero(pipe_key == key)
        sites, inv = np.unique(site[sel], return_inverse=True)      # sorted: a stable order per move
        groups = []
        for g, text in enumerate(sites):
            rows = sel[inv == g]
            n, src, line, has_tail = text.split(sep)
            groups.append(dict(x=np.round(end[rows] - start[rows], 4), base=np.round(start[rows], 4),
                               y=label[rows], customdata=numbers[rows],
                               hovertemplate=_hover(n, src, line, has_tail == "t")))
        data[key] = groups
    # row order: host on top, then per core its pipes in pipe order (only pipes that did work)
    busy = timeline.busy_us_by_pipe()
    cores_shown = sorted(int(c) for c in np.unique(core) if c >= 0)
    pipes_with_work = [p for p in _trace_pipes(timeline) if busy.get(p, 0.0) > 0]
    rows = [HOST] + [f"core {c}{_SEP}{p}" for c in cores_shown for p in pipes_with_work]
    note = f"cores 0\u2013{max_cores - 1} of {timeline.core_count()}" if timeline.core_count() > max_cores else ""
    if cut:
        note = (note + ", " if note else "") + f"first {blocks} blocks"
    return data, rows, note


def _timeline_title(timeline: Timeline, title, note: str) -> str:
    if title is None:
        names = ", ".join(dict.fromkeys(l.name for l in timeline.launches))
        title = f"{names} on {timeline.hw.name}: {timeline.total_us:.2f} \u00b5s"
    return f"{title} <span style='font-size:0.8em'>({note})</span>" if note else title


def _end_marker(timeline: Timeline) -> tuple[list, dict]:
    """A dotted line where the whole run ends (later than the shown cores when blocks on other
    cores start later), and the x range that shows it."""
    end = timeline.total_us
    shape = dict(type="line", x0=end, x1=end, yref="paper", y0=0, y1=1,
                 line=dict(color="#444444", width=1, dash="dot"))
    return [shape], dict(range=[0, end * 1.02])


def _timeline_layout(rows, title: str, timeline: Timeline) -> dict:
    shapes, x_range = _end_marker(timeline)
    return dict(
        shapes=shapes,
        title=dict(text=title, x=0.01, xanchor="left"),
        barmode="overlay", bargap=0.25,
        height=max(260, 110 + _ROW_PX * len(rows)),
        margin=dict(l=10, r=10, t=50, b=40),
        xaxis=dict(title=dict(text="time (\u00b5s from launch; dotted: end of the run)"),
                   zeroline=False, **x_range),
        yaxis=dict(type="category", categoryorder="array", categoryarray=rows,
                   autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                    title=dict(text="pipe (click to hide)")),
        hoverlabel=dict(align="left"),
        uirevision="timeline",
    )


_EMPTY = dict(x=[], base=[], y=[], customdata=[], hovertemplate=None)


def _bar_trace(key: str, slot: int, group: dict) -> go.Bar:
    """Slot ``slot`` of pipe ``key``: a bar trace in the pipe's colour and legend group (one legend
    entry per pipe: clicking it hides all the pipe's traces)."""
    meaning = "launch overhead" if key == HOST else PIPE_MEANING.get(key, key)
    return go.Bar(name=key if key != HOST else "launch", orientation="h", legendgroup=key, showlegend=slot == 0,
                  marker=dict(color=PIPE_COLOURS.get(key, "#999999"), line=dict(width=0.5, color="rgba(0,0,0,0.4)")),
                  meta=dict(pipe=key, meaning=meaning, slot=slot), **group)


def timeline_figure(timeline: Timeline, *, max_blocks: int | None = None, max_cores: int = 8,
                    widget: bool = False, title: str | None = None):
    """A Gantt chart of a kernel run: what every pipe of every core did, and when.

    One row per core × pipe (``"core 0 · MTE2"``) plus a ``host`` row with the launch overhead;
    one bar per instruction, placed at its start and as long as it held its pipe, coloured by pipe
    (one trace per pipe, so clicking the legend hides a pipe). Hovering a bar shows the instruction,
    its block, start and end in µs, when its result was complete (a copy's data lands a DMA
    latency after its bar ends; a vector result a pipeline depth after), the bytes it moved and
    the kernel source line that issued it.

    ``max_cores``: only cores 0 .. max_cores-1 are drawn (the others usually look the same).
    ``max_blocks``: only the first blocks of each launch (huge runs are also cut automatically to
    about 30 000 bars; the title says so). ``widget=True`` returns a ``go.FigureWidget`` (for
    sliders, see :func:`update_timeline_figure`), else a ``go.Figure``.
    """
    _check_timeline(timeline)
    if isinstance(max_cores, bool) or not isinstance(max_cores, (int, np.integer)) or max_cores < 1:
        raise ValueError(f"max_cores must be a whole number >= 1, got {max_cores!r}")
    if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, (int, np.integer))
                                   or max_blocks < 1):
        raise ValueError(f"max_blocks must be None or a whole number >= 1, got {max_blocks!r}")
    data, rows, note = _timeline_data(timeline, max_blocks, int(max_cores))
    traces = []
    for key, groups in data.items():
        traces += [_bar_trace(key, slot, group) for slot, group in enumerate(groups or [_EMPTY])]
    layout = _timeline_layout(rows, _timeline_title(timeline, title, note), timeline)
    # everything in the constructor: Voila does not show layout changes made before display
    layout["meta"] = dict(kind="timeline", max_blocks=max_blocks, max_cores=int(max_cores),
                          custom_title=title)
    return (ExplorerFigureWidget if widget else go.Figure)(data=traces, layout=layout)


def update_timeline_figure(fig, timeline: Timeline, *, title: str | None = None):
    """Put ``timeline``'s bars into ``fig`` (made by :func:`timeline_figure`) in place.

    Same figure object, same traces: only each trace's x / base / y / customdata, the row list,
    the height and the title change, inside one ``fig.batch_update()`` — what a slider callback
    calls so the browser redraws without rebuilding the figure. Returns ``fig``."""
    _check_timeline(timeline)
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else None
    if not meta or meta.get("kind") != "timeline":
        raise ValueError("update_timeline_figure needs a figure made by timeline_figure()")
    data, rows, note = _timeline_data(timeline, meta["max_blocks"], meta["max_cores"])
    slots: dict[str, list] = {}
    for tr in fig.data:
        slots.setdefault(tr.meta["pipe"], []).append(tr)
    missing = [k for k, groups in data.items() if k not in slots and groups]
    if missing:
        raise ValueError(f"the new timeline uses pipe(s) {missing} that this figure has no trace for "
                         "(a cube kernel on a vector-kernel figure?); build a new timeline_figure")
    # a pipe with more issuing lines than traces gets more (rare: another kernel version); they go
    # in before the batch, which cannot add traces
    extra = [_bar_trace(k, slot, _EMPTY) for k, groups in data.items() for slot in range(len(slots.get(k, ())), len(groups))]
    if extra:
        fig.add_traces(extra)
        slots = {}
        for tr in fig.data:
            slots.setdefault(tr.meta["pipe"], []).append(tr)
    title = title if title is not None else meta.get("custom_title")
    with fig.batch_update():
        for key, traces in slots.items():
            groups = data.get(key, [])
            for slot, trace in enumerate(traces):
                d = groups[slot] if slot < len(groups) else _EMPTY
                trace.x, trace.base, trace.y, trace.customdata = d["x"], d["base"], d["y"], d["customdata"]
                if d["hovertemplate"] is not None and trace.hovertemplate != d["hovertemplate"]:
                    trace.hovertemplate = d["hovertemplate"]
        # layout only where it changed: a new height or row list makes the browser lay the plot out
        # again, which a slider move that keeps the rows should not pay
        if list(fig.layout.yaxis.categoryarray or ()) != list(rows):
            fig.layout.yaxis.categoryarray = rows
        height = max(260, 110 + _ROW_PX * len(rows))
        if fig.layout.height != height:
            fig.layout.height = height
        text = _timeline_title(timeline, title, note)
        if fig.layout.title.text != text:
            fig.layout.title.text = text
        shapes, x_range = _end_marker(timeline)
        fig.layout.shapes = shapes
        fig.layout.xaxis.range = x_range["range"]
    return fig


# ---------------------------------------------------------------------------- utilisation
def pipe_utilisation_figure(timelines, *, widget: bool = False, title: str | None = None):
    """Bars of per-pipe utilisation: the busy time of each pipe summed over cores, divided by
    (cores × total latency) — how much of the chip's time that pipe was working.

    ``timelines`` is one Timeline or a dict ``{label: Timeline}`` (e.g. ``{"1 buffer": t1,
    "2 buffers": t2}``), drawn side by side, one colour per label. Hover shows the busy µs too.
    Only pipes that did some work in at least one timeline get a bar group."""
    if isinstance(timelines, Timeline):
        timelines = {"run": timelines}
    if not isinstance(timelines, dict) or not timelines:
        raise TypeError("pass a Timeline or a non-empty dict {label: Timeline}")
    for label, t in timelines.items():
        try:
            _check_timeline(t)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"timelines[{label!r}]: {exc}") from None
    busy = {k: t.busy_us_by_pipe() for k, t in timelines.items()}
    util = {k: t.utilisation_by_pipe() for k, t in timelines.items()}
    pipes = [p for p in ALL_PIPES if any(b.get(p, 0.0) > 0 for b in busy.values())]
    traces = []
    for label, t in timelines.items():
        traces.append(go.Bar(
            name=str(label), x=pipes, y=[100 * util[label][p] for p in pipes],
            customdata=np.array([[busy[label][p], t.total_us, t.core_count()] for p in pipes]),
            text=[f"{100 * util[label][p]:.1f}%" for p in pipes], textposition="outside",
            hovertemplate=("<b>%{x}</b>: %{y:.1f}% busy<br>%{customdata[0]:.2f} \u00b5s busy summed over "
                           "%{customdata[2]} cores<br>latency %{customdata[1]:.2f} \u00b5s"
                           "<extra>%{fullData.name}</extra>")))
    layout = dict(
        title=dict(text=title or "Per-pipe utilisation (busy time / (cores \u00d7 latency))", x=0.01),
        barmode="group", height=360, margin=dict(l=10, r=10, t=50, b=40),
        yaxis=dict(title=dict(text="utilisation (%)"), rangemode="tozero", automargin=True),
        xaxis=dict(title=dict(text="pipe"), type="category"),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    return (ExplorerFigureWidget if widget else go.Figure)(data=traces, layout=layout)


# ---------------------------------------------------------------------------- sweeps
def _sweep_xy(df, x, y, what):
    for col in (x, y):
        if col not in df.columns:
            raise KeyError(f"{what} has no column {col!r}; columns: {list(df.columns)}")
    return df[x].to_numpy(), df[y].to_numpy(dtype=float)


def _highlight_xy(df, x, y, highlight):
    if highlight is None:
        return [], []
    hit = df[df[x] == highlight]
    if hit.empty:
        raise ValueError(f"highlight={highlight!r} is not a value of column {x!r}; "
                         f"values: {df[x].tolist()}")
    return [hit[x].iloc[0]], [float(hit[y].iloc[0])]


def latency_sweep_figure(df, x: str, y: str = "latency_us", highlight=None, reference=None, *,
                         widget: bool = False, title: str | None = None, reference_y: str | None = None,
                         reference_name: str = "measured (article)", log_x: bool = False):
    """Latency (column ``y``) against a swept parameter (column ``x``) as a line with markers.

    ``highlight``: a value of ``x`` whose point is circled (the current slider choice).
    ``reference``: another DataFrame (say, the article's measured points) with column ``x`` and
    column ``reference_y`` (default ``y``), drawn as separate markers. Traces, in order: model,
    highlight (empty when none), reference (when given) — :func:`update_latency_sweep` relies on
    that order. ``widget=True`` returns a ``go.FigureWidget``."""
    xs, ys = _sweep_xy(df, x, y, "df")
    hx, hy = _highlight_xy(df, x, y, highlight)
    y_label = y.replace("_us", " (\u00b5s)").replace("_", " ")
    traces = [
        go.Scatter(name="model", x=xs, y=ys, mode="lines+markers",
                   line=dict(color="#1f77b4"), marker=dict(size=7),
                   hovertemplate=f"{x} = %{{x}}<br>{y_label} = %{{y:.2f}}<extra>model</extra>"),
        go.Scatter(name="selected", x=hx, y=hy, mode="markers",
                   marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="#d62728", width=3)),
                   hovertemplate=f"selected {x} = %{{x}}<br>{y_label} = %{{y:.2f}}<extra></extra>"),
    ]
    if reference is not None:
        rx, ry = _sweep_xy(reference, x, reference_y or y, "reference")
        traces.append(go.Scatter(
            name=reference_name, x=rx, y=ry, mode="markers",
            marker=dict(size=10, symbol="diamond", color="#2ca02c"),
            hovertemplate=f"{x} = %{{x}}<br>{y_label} = %{{y:.2f}}<extra>{html.escape(reference_name)}</extra>"))
    layout = dict(
        title=dict(text=title or f"{y_label} vs {x}", x=0.01), height=380,
        margin=dict(l=10, r=10, t=50, b=40),
        xaxis=dict(title=dict(text=x), type="log" if log_x else "linear"),
        yaxis=dict(title=dict(text=y_label), rangemode="tozero", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        meta=dict(kind="latency_sweep", x=x, y=y), uirevision="sweep")
    return (ExplorerFigureWidget if widget else go.Figure)(data=traces, layout=layout)


def update_latency_sweep(fig, df, highlight=None):
    """Replace the model line and the highlighted point of a :func:`latency_sweep_figure` in
    place (one ``batch_update``); the reference markers stay. Returns ``fig``."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else None
    if not meta or meta.get("kind") != "latency_sweep":
        raise ValueError("update_latency_sweep needs a figure made by latency_sweep_figure()")
    x, y = meta["x"], meta["y"]
    xs, ys = _sweep_xy(df, x, y, "df")
    hx, hy = _highlight_xy(df, x, y, highlight)
    with fig.batch_update():
        fig.data[0].x, fig.data[0].y = xs, ys
        fig.data[1].x, fig.data[1].y = hx, hy
    return fig


#: How long the kernel waits after a slider move from the browser before it copies the figures'
#: state (a burst of key presses costs one copy, after the last). Longer than the gap between two
#: presses of someone stepping a slider: a copy that lands on a press delays it (05's timeline:
#: a 200 KB copy, measured at 0.6 s under load with a 0.5 s delay).
SYNC_DELAY_S = 2.0


def from_browser(change) -> bool:
    """True when a control's ``change`` (a traitlets change dict) came from a browser view:
    ipywidgets holds a property lock while it applies a front-end message (on ``value``, or on
    ``index`` for a SelectionSlider / Dropdown, whose ``value`` follows)."""
    owner = change.get("owner") if isinstance(change, dict) else None
    return bool(getattr(owner, "_property_lock", None))


def sync_after_move(holder, sync, change=None) -> None:
    """Run ``sync()`` (copies of figures' state, :func:`sync_widget_state`) for ``holder`` (an
    explorer): now after a change made from code (a later cell, Voila), else — a move of a control
    in the browser, whose views have drawn it already — once the kernel has been idle for
    :data:`SYNC_DELAY_S`. The copy deep-copies every trace and sends the whole figure (megabytes for
    a timeline): on each move it delayed the next one. Without a running event loop: now."""
    import asyncio

    pending = getattr(holder, "_npu_sync_handle", None)
    if pending is not None:
        pending.cancel()
        holder._npu_sync_handle = None
    if not from_browser(change):
        sync()
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        sync()
        return

    def run():
        holder._npu_sync_handle = None
        sync()
    holder._npu_sync_handle = loop.call_later(SYNC_DELAY_S, run)
