"""Smoke test of the browser harness on a tiny slider notebook, in JupyterLab and Voila.

The notebook is written at test time: an ``IntSlider`` "tileS" drives a plotly
``FigureWidget`` (a curve that depends on the slider, and a one-point marker at the
current value) through ``observe`` + ``fig.batch_update()``.
"""

from __future__ import annotations

import time

import nbformat
import pytest

from . import harness as h

NOTEBOOK = "slider_smoke.ipynb"


def cost(t: int) -> int:
    """The notebook's formula (kept in sync with SOURCE below)."""
    return 1024 // t + 4 * t


SOURCE = '''\
import ipywidgets as widgets
import plotly.graph_objects as go

def cost(t):
    return 1024 // t + 4 * t

xs = list(range(1, 33))
slider = widgets.IntSlider(description="tileS", min=1, max=32, value=8)

def curve(v):
    return [cost(x) + abs(x - v) for x in xs]

fig = go.FigureWidget(
    data=[go.Scatter(x=xs, y=curve(slider.value), mode="lines", name="cost"),
          go.Scatter(x=[slider.value], y=[cost(slider.value)], mode="markers",
                     marker=dict(size=14, color="red"), name="tileS")],
    layout=dict(title="smoke: cost vs tileS", width=700, height=400,
                xaxis_title="tileS", yaxis_title="cost"),
)

def on_change(change):
    v = change["new"]
    with fig.batch_update():
        fig.data[0].y = curve(v)
        fig.data[1].x = [v]
        fig.data[1].y = [cost(v)]

slider.observe(on_change, names="value")
widgets.VBox([slider, fig])
'''


def write_notebook(folder) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Slider smoke test"), nbformat.v4.new_code_cell(SOURCE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(folder / NOTEBOOK))


@pytest.mark.browser
@pytest.mark.parametrize("app", ["lab", "voila"])
def test_slider_moves_plot(app, tmp_path, page, shots, lab_server, voila_server):
    t0 = time.monotonic()
    write_notebook(tmp_path)
    print(f"screenshots: {shots}")

    if app == "lab":
        srv = lab_server(tmp_path)
        errors = h.open_notebook_and_run_all(page, srv.url, srv.token, NOTEBOOK)
    else:
        srv = voila_server(tmp_path / NOTEBOOK)
        errors = h.open_voila(page, srv.url)
    assert errors == [], f"error outputs: {errors}\nserver log:\n{srv.log_tail()}"

    slider = h.find_slider(page, "tileS")
    assert h.slider_value(slider) == "8"
    before = h.read_plotly_data(page, plot_index=0)
    assert before[1]["x"] == [8] and before[1]["y"] == [cost(8)]
    h.screenshot(page, shots, f"smoke-{app}-before")

    h.press_slider_key(page, slider, "ArrowRight", times=1)
    after = h.wait_for_plot_change(page, before, timeout=15, plot_index=0)
    h.screenshot(page, shots, f"smoke-{app}-after")

    h.wait_for_slider_value(page, slider, 9)
    assert after[1]["x"] == [9]
    assert after[1]["y"] == [cost(9)]
    assert after[0]["y"] == [cost(x) + abs(x - 9) for x in range(1, 33)]
    print(f"{app}: {time.monotonic() - t0:.1f} s; browser console errors: {page.npu_console_errors}")
