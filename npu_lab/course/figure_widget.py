"""The FigureWidget the course's explorers draw into: plotly's, without the merge of the
browser's "trace deltas" into the kernel's figure.

After every update, a plotly ``FigureWidget`` view in the browser sends the kernel a message per
figure, ``_js2py_traceDeltas``: for each trace, every property plotly.js filled in (its defaults)
and every property whose value differs from the view's own copy of the figure. plotly.py merges
it into each trace's defaults (``BaseFigureWidget._handler_js2py_traceDeltas``). In the course
that merge costs a slider move twice:

* It raises whenever the message carries a data array, with numpy arrays in the trace, which
  every explorer's bars and lines have: ``_remove_overlapping_props`` tests ``if not array``
  (plotly.py issue #4160, still in plotly 7.1). A delta carries an array when the view's copy is
  older than the figure, and the explorers refresh that copy only once the learner stops moving
  (``viz.sync_after_move``). IPython then formats the traceback in the kernel (it goes to the
  kernel's log, not to a cell). In notebook 05, measured in JupyterLab, that took 0.3-0.6 s, and
  the next slider move waited for it: the browser test's worst press was 354-585 ms, and 98-175 ms
  with this class.
* Without the error, the merge still costs 5-20 ms of kernel time per figure per move, on the
  path of the next move.

Nothing in the course reads those defaults, so :class:`ExplorerFigureWidget` drops the deltas and
keeps the handler's bookkeeping: the trace edit is over, and callbacks waiting in
``on_edits_completed`` run, as in plotly.py. What changes is that reading a property nobody set
(``fig.data[0].marker.line.color`` when only ``marker.color`` was given) returns None, where
plotly.py would return the browser's default once a view had reported it. (plotly 7.1's view sends
the layout's deltas as ``_js2py_widget_layoutDelta``, a name plotly.py does not observe, so the
layout's defaults never arrived anyway.)

It also sets ``ticklabeloverflow="allow"`` on every axis the figure is built with (unless the
figure sets its own). plotly.js's default for numeric axes, ``"hide past div"``, measures every
tick label's box on every redraw to hide the ones past the figure's edge, a forced layout of the
page each time: in notebook 09, profiled in JupyterLab under Chromium, 37 ms of an 85 ms redraw.
The explorers' labels sit inside their margins, so nothing is hidden either way. Axes added after
the figure is built keep plotly's default.

And an update (``batch_update``, ``plotly_update``) goes to the browser as one comm message, not
four: plotly.py sets the trace and layout edit ids and the update message as three synced traits,
each its own message, then resets the message to None, a fourth. Here the three travel in one
message (ipywidgets' ``hold_sync``) and the reset is dropped: it only made an identical next
message a change again, and every message carries new edit ids. Each message costs the kernel a
serialisation and a signature, and the page a dispatch; notebook 05 updates two figures a move.
The last message stays in the trait (the views draw it on change only, never at creation).
"""

from __future__ import annotations

import copy

import plotly.graph_objects as go
from traitlets import observe

__all__ = ["ExplorerFigureWidget", "sync_widget_state"]


class ExplorerFigureWidget(go.FigureWidget):
    """A ``go.FigureWidget`` (same constructor, same updates, ``isinstance`` of it) whose browser
    views' trace deltas are acknowledged but not merged (see the module's docstring for why)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for axis in (*self.select_xaxes(), *self.select_yaxes()):
            if axis.ticklabeloverflow is None:
                axis.ticklabeloverflow = "allow"
        # the views built later start from the synced copy: it must hold the axes' setting too
        sync_widget_state(self)

    def _send_update_msg(self, restyle_data, relayout_data, trace_indexes=None, source_view_id=None):
        # the edit ids and the update in one comm message (see the module's docstring)
        self._npu_one_message = True
        try:
            with self.hold_sync():
                super()._send_update_msg(restyle_data, relayout_data, trace_indexes, source_view_id)
        finally:
            self._npu_one_message = False

    def __setattr__(self, name, value):
        # plotly.py's reset of the message to None right after setting it: skipped, so the held
        # state hold_sync sends is the message itself (a traitlets validator never sees a None)
        if name == "_py2js_update" and value is None and getattr(self, "_npu_one_message", False):
            return
        super().__setattr__(name, value)

    @observe("_js2py_traceDeltas")
    def _handler_js2py_traceDeltas(self, change):
        msg = change["new"]
        if not msg:
            return
        # the edit this message reports on is over: plotly.py's handler does this after merging
        if msg.get("trace_edit_id") == self._last_trace_edit_id:
            self._trace_edit_in_process = False
            if not self._layout_edit_in_process:
                while self._waiting_edit_callbacks:
                    self._waiting_edit_callbacks.pop()()
        # clear it, as plotly.py does, so that an identical next message is a change again
        self._js2py_traceDeltas = None


def sync_widget_state(fig) -> None:
    """Copy a FigureWidget's current data and layout into its synced widget state.

    A FigureWidget sends each update as a message to the front-end views that exist, but its
    synced state (``_widget_data`` / ``_widget_layout``) is refreshed only by the figure's own
    ``_repr_mimebundle_`` — never called when the figure is shown inside a box. A page that builds
    its widgets from the kernel's state later (Voila, a reloaded JupyterLab tab) would draw the
    figure as first built. Call this after updating a boxed figure. Existing views do not redraw
    on it. (Relies on plotly internals; tests/browser checks it under Voila.)"""
    fig._widget_data = copy.deepcopy(fig._data)
    fig._widget_layout = copy.deepcopy(fig._layout_obj._props)
