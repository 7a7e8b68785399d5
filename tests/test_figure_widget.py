"""ExplorerFigureWidget: the browser's trace deltas are acknowledged, not merged (plotly.py issue
#4160 made the merge raise on numpy data, and IPython's traceback then held up the next slider
move for 0.3-0.6 s in notebook 05), and every explorer draws into one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import pytest

from npu_lab.course.figure_widget import ExplorerFigureWidget

REPO = Path(__file__).resolve().parents[1]


def _delta(fig, edit_id=None, **props):
    """What a browser view sends after an update: per trace its uid and the properties plotly.js
    filled in or found different (an array arrives as an {index: value} object)."""
    deltas = [dict(uid=t.uid, **props) for t in fig.data]
    return {"trace_deltas": deltas, "trace_edit_id": fig._last_trace_edit_id if edit_id is None else edit_id}


def _bar_figure(cls):
    fig = cls(data=[go.Bar(x=np.arange(4.0), y=np.arange(4.0), customdata=np.ones((4, 2)))])
    fig.data[0].x = np.arange(4.0) + 1          # an update: a trace edit is now in process
    return fig


def test_plotly_figure_widget_is_why():
    """The bug this module works round, as plotly 7.1 has it. If plotly fixes it, this test says
    so: the subclass could then go (and this test with it)."""
    fig = _bar_figure(go.FigureWidget)
    with pytest.raises(ValueError, match="truth value of an array"):
        fig._js2py_traceDeltas = _delta(fig, x={"0": 1.0, "1": 2.0})


def test_a_delta_with_arrays_is_acknowledged_not_merged():
    fig = _bar_figure(ExplorerFigureWidget)
    assert fig._trace_edit_in_process
    fig._js2py_traceDeltas = _delta(fig, x={"0": 1.0, "1": 2.0}, marker={"color": "#636efa"})
    assert not fig._trace_edit_in_process                # the edit is over, as plotly.py records it
    assert fig._js2py_traceDeltas is None                # cleared: the same message again is a change
    assert fig.data[0]._prop_defaults == {}              # nothing merged
    np.testing.assert_array_equal(fig.data[0].x, np.arange(4.0) + 1)   # the data is the kernel's


def test_waiting_edit_callbacks_run_once_the_edit_is_reported():
    fig = _bar_figure(ExplorerFigureWidget)
    fig._layout_edit_in_process = False
    calls = []
    fig.on_edits_completed(lambda: calls.append(1))
    assert calls == []                                   # an edit is in process: it waits
    fig._js2py_traceDeltas = _delta(fig, edit_id=fig._last_trace_edit_id - 1)
    assert calls == [] and fig._trace_edit_in_process    # a report on an older edit changes nothing
    fig._js2py_traceDeltas = _delta(fig)
    assert calls == [1] and not fig._trace_edit_in_process


def test_it_is_a_figure_widget_with_the_same_constructor():
    fig = ExplorerFigureWidget(data=[go.Scatter(x=[1, 2], y=[3, 4])], layout=dict(title=dict(text="t")))
    assert isinstance(fig, go.FigureWidget) and fig.layout.title.text == "t"
    with fig.batch_update():
        fig.data[0].y = [5, 6]
    assert tuple(fig.data[0].y) == (5, 6)


def _figure_widgets(widget):
    """Every plotly FigureWidget in an ipywidgets tree."""
    if isinstance(widget, go.FigureWidget):
        yield widget
    for child in getattr(widget, "children", ()) if isinstance(widget, W.Widget) else ():
        yield from _figure_widgets(child)


def _every_explorer():
    spec = importlib.util.spec_from_file_location("bench", REPO / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.every_explorer()


@pytest.mark.parametrize("name, make", _every_explorer(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_explorer_draws_into_explorer_figure_widgets(name, make):
    explorer = make()
    widget = getattr(explorer, "widget", explorer)
    figures = list(_figure_widgets(widget))
    assert figures, f"{name}: no plotly figure in its widget"
    assert all(isinstance(f, ExplorerFigureWidget) for f in figures), \
        f"{name}: {[type(f).__name__ for f in figures]} (make them with ExplorerFigureWidget)"
    # and every axis of them skips plotly.js's per-label overflow measurement (a redraw's cost)
    for f in figures:
        for axis in (*f.select_xaxes(), *f.select_yaxes()):
            assert axis.ticklabeloverflow == "allow", f"{name}: {axis.plotly_name}.ticklabeloverflow"


def test_axes_let_tick_labels_overflow_unless_the_figure_says_otherwise():
    """plotly.js's default ('hide past div') measures every tick label's box on every redraw (a
    forced layout each): 37 ms of notebook 09's 85 ms redraw, profiled in Chromium. A figure that
    sets its own value keeps it; the synced copy a later view starts from holds the setting."""
    from plotly.subplots import make_subplots

    fig = ExplorerFigureWidget(make_subplots(rows=2, cols=1))
    assert [a.ticklabeloverflow for a in (*fig.select_xaxes(), *fig.select_yaxes())] == ["allow"] * 4
    assert fig._widget_layout["yaxis2"]["ticklabeloverflow"] == "allow"
    own = ExplorerFigureWidget(layout=dict(xaxis=dict(ticklabeloverflow="hide past domain")))
    assert own.layout.xaxis.ticklabeloverflow == "hide past domain" and own.layout.yaxis.ticklabeloverflow == "allow"


def test_a_slider_move_after_a_browser_report_still_redraws():
    """Notebook 05's explorer: a report carrying the timeline's arrays, then the next move."""
    from npu_lab.course.explorers import DoubleBufferExplorer

    explorer = DoubleBufferExplorer(chip="ascend-910b2")
    explorer.tile_s.value = 16
    fig = explorer.figure
    before = [np.asarray(t.x).copy() for t in fig.data]
    fig._js2py_traceDeltas = _delta(fig, x={"0": 0.75, "1": 0.75}, base={"0": 0.0})
    explorer.tile_s.value = 32
    assert explorer.error is None
    assert any(len(b) != len(t.x) or not np.array_equal(b, t.x) for b, t in zip(before, fig.data))


def _sent_states(fig, monkeypatch):
    """The states ``fig`` sends to its views: one dict per comm message."""
    sent = []
    monkeypatch.setattr(fig, "_send", lambda msg, buffers=None: sent.append(msg["state"]))
    return sent


def test_an_update_is_one_comm_message_carrying_the_edit_ids(monkeypatch):
    """plotly.py sends a batch update as four messages (two edit ids, the update, its reset to
    None); here it is one, and what a view needs to draw it is in it."""
    fig = ExplorerFigureWidget(data=[go.Bar(x=[1, 2], y=[3, 4])], layout=dict(title=dict(text="t")))
    sent = _sent_states(fig, monkeypatch)
    for step in (1, 2):
        with fig.batch_update():
            fig.data[0].y = np.array([5.0, 6.0]) * step
            fig.layout.title.text = f"move {step}"
    assert len(sent) == 2, [sorted(s) for s in sent]
    for step, state in zip((1, 2), sent):
        assert {"_py2js_update", "_last_trace_edit_id", "_last_layout_edit_id"} <= set(state)
        msg = state["_py2js_update"]
        assert msg is not None and msg["trace_edit_id"] == state["_last_trace_edit_id"] == step
        assert msg["layout_data"] == {"title.text": f"move {step}"}
    assert fig._py2js_update["trace_edit_id"] == 2          # kept: a view draws it on change only
    # plotly's own widget, for comparison: four messages, the last a reset
    plain = go.FigureWidget(data=[go.Bar(x=[1, 2], y=[3, 4])])
    sent_plain = _sent_states(plain, monkeypatch)
    with plain.batch_update():
        plain.data[0].y = [5, 6]
    assert len(sent_plain) == 4 and sent_plain[-1] == {"_py2js_update": None}


def test_a_reset_outside_an_update_still_clears_the_message():
    fig = ExplorerFigureWidget(data=[go.Bar(x=[1], y=[2])])
    with fig.batch_update():
        fig.data[0].y = [3]
    assert fig._py2js_update is not None
    fig._py2js_update = None                     # not plotly's reset inside an update: taken as set
    assert fig._py2js_update is None
