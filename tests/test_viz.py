"""The plotly helpers draw what the Timeline says: one bar per instruction on the right
core × pipe row, hover text naming the source line, and in-place updates for sliders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest


from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.course.viz import (latency_sweep_figure, pipe_utilisation_figure, timeline_figure,
                         update_latency_sweep, update_timeline_figure)


@pytest.fixture(scope="module")
def run():
    """A small full run: 8 blocks on 8 of the 910B2's cores, 2 tiles each."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(8 * 512).astype(np.float32)
    y = rng.standard_normal(8 * 512).astype(np.float32)
    _, t = scaled_add(x, y, 2.0, tile_len=256, block_dim=8)
    return t


class _Pipe:
    """A pipe's bars over its traces (one trace per pipe and issuing line), in trace order."""

    def __init__(self, traces):
        self.traces = traces
        self.x = [v for tr in traces for v in tr.x]
        self.base = [v for tr in traces for v in tr.base]
        self.y = [v for tr in traces for v in tr.y]


def _bars(fig):
    names = list(dict.fromkeys(tr.name for tr in fig.data))
    return {n: _Pipe([tr for tr in fig.data if tr.name == n]) for n in names}


def test_one_trace_per_pipe_plus_launch(run):
    fig = timeline_figure(run)
    assert isinstance(fig, go.Figure) and not isinstance(fig, go.FigureWidget)
    assert list(dict.fromkeys(tr.name for tr in fig.data)) == ["launch", "S", "MTE2", "V", "MTE3"]
    assert all(tr.type == "bar" and tr.orientation == "h" for tr in fig.data)
    # one legend entry per pipe; its traces (one per issuing line) share its colour and legend group
    assert [tr.name for tr in fig.data if tr.showlegend] == ["launch", "S", "MTE2", "V", "MTE3"]
    for tr in fig.data:
        assert tr.legendgroup == tr.meta["pipe"] and tr.marker.color == fig.data[
            [t.name for t in fig.data].index(tr.name)].marker.color


def test_a_slider_move_sends_numbers_per_bar_and_words_per_trace(run):
    """The hover's words live in the trace's template; per bar only numbers (a 2-D float array)."""
    fig = timeline_figure(run)
    mte2 = _bars(fig)["MTE2"].traces
    assert len(mte2) == 2                        # x and y are loaded by two lines of the kernel
    for tr in fig.data:
        if len(tr.x):
            assert np.asarray(tr.customdata).dtype.kind == "f" and np.asarray(tr.customdata).shape == (len(tr.x), 4)
    assert len({tr.hovertemplate for tr in mte2}) == 2


def test_every_instruction_is_a_bar_on_its_row(run):
    fig = timeline_figure(run)
    ev = run.events()
    bars = _bars(fig)
    for pipe in ("MTE2", "V", "MTE3"):
        mine = ev[ev["pipe"] == pipe]
        tr = bars[pipe]
        assert len(tr.x) == len(mine)
        assert sorted(tr.y) == sorted(f"core {c} \u00b7 {pipe}" for c in mine["core"])
        # the figure keeps times to 0.1 ns (finer than its hover's .3f µs)
        np.testing.assert_allclose(sorted(tr.base), sorted(mine["start_us"]), rtol=0, atol=1.5e-4)
        np.testing.assert_allclose(sorted(np.asarray(tr.base) + np.asarray(tr.x)), sorted(mine["end_us"]),
                                   rtol=0, atol=1.5e-4)
    host = bars["launch"]
    assert list(host.y) == ["host"]
    assert host.base[0] == 0 and host.x[0] == pytest.approx(run.launch_overhead_us)


def test_rows_host_first_then_cores_with_working_pipes(run):
    rows = list(timeline_figure(run).layout.yaxis.categoryarray)
    assert rows[0] == "host"
    assert rows[1:4] == ["core 0 \u00b7 MTE2", "core 0 \u00b7 V", "core 0 \u00b7 MTE3"]
    assert len(rows) == 1 + 8 * 3  # the scalar pipe did no work of its own: no S rows


def test_hover_names_instruction_block_bytes_and_source_line(run):
    tr = _bars(timeline_figure(run))["MTE2"].traces[0]
    template = tr.hovertemplate
    for i in range(4):
        assert f"customdata[{i}]" in template
    block, end, nbytes, ready = tr.customdata[0]
    # a copy's data lands a latency after its bar
    assert "result complete at %{customdata[3]" in template and ready > end
    assert "<b>DataCopy GM-&gt;UB" in template
    assert nbytes == 1024 and block in range(8)
    assert "scaled_add.py:" in template and "data_copy" in template
    assert end == pytest.approx(tr.base[0] + tr.x[0], abs=1e-3)


def test_hover_words_cannot_open_a_template_field():
    from npu_lab.course.viz import _hover

    text = _hover("a%{x}b", "k.py:1", "ctx.f('%{y}', a < b)", False)
    assert "a%{x}b" not in text and "%{y}'" not in text and "&lt;" in text
    assert "a&#37;{x}b" in text


def test_max_cores_limits_rows_and_title_says_so(run):
    fig = timeline_figure(run, max_cores=2)
    rows = list(fig.layout.yaxis.categoryarray)
    assert rows == ["host"] + [f"core {c} \u00b7 {p}" for c in (0, 1) for p in ("MTE2", "V", "MTE3")]
    assert "cores 0\u20131 of 48" in fig.layout.title.text
    assert all(y == "host" or y.startswith(("core 0 ", "core 1 ")) for tr in fig.data for y in tr.y)


def test_huge_run_is_cut_to_a_bar_budget():
    _, t = scaled_add(1 << 24, None, timing_only=True, tile_len=64, block_dim=4096)
    fig = timeline_figure(t, max_cores=48)
    assert sum(len(tr.x) for tr in fig.data) <= 30_001
    assert "first" in fig.layout.title.text and "blocks" in fig.layout.title.text


def test_widget_has_full_layout_from_the_constructor(run):
    fig = timeline_figure(run, widget=True, title="demo")
    assert isinstance(fig, go.FigureWidget)
    assert fig.layout.title.text.startswith("demo")
    assert fig.layout.barmode == "overlay" and fig.layout.yaxis.autorange == "reversed"


def test_update_timeline_figure_changes_data_in_place(run):
    fig = timeline_figure(run, widget=True, max_cores=4)
    traces_before = list(fig.data)
    x_before = np.array(_bars(fig)["MTE2"].x)
    _, other = scaled_add(1 << 16, None, timing_only=True, tile_len=256, num_buffers=1)
    out = update_timeline_figure(fig, other)
    assert out is fig
    # the same traces (a pipe with more issuing lines than before would get more, after these)
    assert all(a is b for a, b in zip(traces_before, fig.data)) and len(fig.data) >= len(traces_before)
    fresh = _bars(timeline_figure(other, max_cores=4))
    now = _bars(fig)
    for name, pipe in now.items():
        np.testing.assert_allclose(np.asarray(pipe.base, float), np.asarray(fresh[name].base, float))
        assert list(pipe.y) == list(fresh[name].y)
    assert len(_bars(fig)["MTE2"].x) != len(x_before)
    assert "buffers=1" in fig.layout.title.text
    assert fig.layout.shapes[0].x0 == pytest.approx(other.total_us)      # dotted end-of-run line
    assert fig.layout.xaxis.range[1] == pytest.approx(1.02 * other.total_us)


def test_update_refuses_a_figure_it_did_not_make(run):
    with pytest.raises(ValueError, match="timeline_figure"):
        update_timeline_figure(go.Figure(), run)


def test_bad_arguments_say_what_is_wrong(run):
    with pytest.raises(TypeError, match="Timeline"):
        timeline_figure("not a timeline")
    with pytest.raises(ValueError, match="max_cores"):
        timeline_figure(run, max_cores=0)


def test_pipe_utilisation_side_by_side():
    _, t1 = scaled_add(1 << 18, None, timing_only=True, tile_len=1024, num_buffers=1)
    _, t2 = scaled_add(1 << 18, None, timing_only=True, tile_len=1024, num_buffers=2)
    fig = pipe_utilisation_figure({"1 buffer": t1, "2 buffers": t2})
    assert [tr.name for tr in fig.data] == ["1 buffer", "2 buffers"]
    for tr, t in zip(fig.data, (t1, t2)):
        assert list(tr.x) == ["MTE2", "V", "MTE3"]
        util = t.utilisation_by_pipe()
        np.testing.assert_allclose(tr.y, [100 * util[p] for p in tr.x])
        np.testing.assert_allclose(tr.customdata[:, 0], [t.busy_us_by_pipe()[p] for p in tr.x])
        assert "busy" in tr.hovertemplate
    single = pipe_utilisation_figure(t1)
    assert len(single.data) == 1


def test_latency_sweep_with_highlight_and_reference():
    df = pd.DataFrame({"tile_s": [1, 4, 8, 16], "latency_us": [900.0, 300.0, 200.0, 250.0]})
    ref = pd.DataFrame({"tile_s": [1, 8], "measured": [1500.0, 280.0]})
    fig = latency_sweep_figure(df, "tile_s", highlight=8, reference=ref, reference_y="measured", widget=True)
    assert [tr.name for tr in fig.data] == ["model", "selected", "measured (article)"]
    assert list(fig.data[0].x) == [1, 4, 8, 16] and fig.data[0].mode == "lines+markers"
    assert list(fig.data[1].x) == [8] and list(fig.data[1].y) == [200.0]
    assert list(fig.data[2].y) == [1500.0, 280.0] and fig.data[2].mode == "markers"
    update_latency_sweep(fig, df.assign(latency_us=df["latency_us"] / 2), highlight=16)
    assert list(fig.data[0].y) == [450.0, 150.0, 100.0, 125.0]
    assert list(fig.data[1].x) == [16] and list(fig.data[1].y) == [125.0]
    assert list(fig.data[2].y) == [1500.0, 280.0]
    update_latency_sweep(fig, df)
    assert len(fig.data[1].x) == 0


def test_latency_sweep_errors_name_the_column():
    df = pd.DataFrame({"tile_s": [1, 2], "latency_us": [2.0, 1.0]})
    with pytest.raises(KeyError, match="tile"):
        latency_sweep_figure(df, "tile")
    with pytest.raises(ValueError, match="highlight"):
        latency_sweep_figure(df, "tile_s", highlight=3)


def test_no_library_module_imports_viz_or_widgets():
    """Dependencies point one way: kernels -> lang -> sim -> hardware; viz and widgets sit on
    top (front ends such as the command line may use them)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "npu_lab"
    layers = [root / "hardware.py", root / "presets.py"]
    for sub in ("sim", "lang", "kernels", "tiling"):
        layers.extend((root / sub).rglob("*.py"))
    for path in layers:
        text = path.read_text()
        assert not re.search(r"^\s*(from|import)\s+[.\w]*\b(viz|widgets)\b", text, re.M), path
