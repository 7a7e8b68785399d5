"""The hand model of a tile loop (notebook 05): its rules, its closed forms, its agreement with the
simulator, and its figure (drawn in full, updated in place)."""

from __future__ import annotations

import itertools

import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import simulate_moe_gating
from npu_lab.course.pipeline_diagram import (STAGES, handoff_costs, period_formula, pipeline_figure,
                                             pipeline_latency, pipeline_schedule, stage_durations,
                                             steady_state_period, update_pipeline_figure)

durations = st.floats(min_value=0.0, max_value=50.0, allow_nan=False, allow_infinity=False)


def _by(sched):
    return {(int(r.tile), r.stage): (r.start_us, r.end_us) for r in sched.itertuples()}


def test_schedule_shape_and_one_tile_is_serial():
    sched = pipeline_schedule(1, 2.0, 5.0, 3.0)
    assert list(sched.columns) == ["tile", "stage", "start_us", "end_us", "ready_us"]
    assert list(sched["stage"]) == list(STAGES)
    assert list(sched["start_us"]) == [0.0, 2.0, 7.0] and list(sched["end_us"]) == [2.0, 7.0, 10.0]
    assert list(sched["ready_us"]) == list(sched["end_us"])          # no hand-off costs given
    # one tile: buffers and barrier change nothing
    for b, bar in itertools.product((1, 2, 3), (False, True)):
        assert pipeline_latency(1, 2.0, 5.0, 3.0, buffers=b, barrier=bar) == 10.0


def test_worked_example_from_the_notebook():
    # load 2, compute 5, store 3, four tiles
    assert pipeline_latency(4, 2, 5, 3, buffers=2) == 2 + 4 * 5 + 3          # compute-bound pipeline
    assert pipeline_latency(4, 2, 5, 3, buffers=1) == 2 + 5 + 3 * (5 + 3) + 3
    assert pipeline_latency(4, 2, 5, 3, buffers=2, barrier=True) == 4 * 10


def test_handoff_costs_delay_the_waiters_only():
    # one tile: the compute waits for the load's data (+ flag), the store for the compute (+ flag)
    sched = pipeline_schedule(1, 2.0, 5.0, 3.0, latency_us=0.5, sync_us=0.1)
    assert list(sched["start_us"]) == pytest.approx([0.0, 2.6, 7.7])
    assert list(sched["ready_us"]) == pytest.approx([2.5, 7.6, 11.2])
    assert pipeline_latency(1, 2.0, 5.0, 3.0, latency_us=0.5, sync_us=0.1) == pytest.approx(11.2)
    # back-to-back copies overlap their latencies: two buffers and a long compute hide them ...
    two = pipeline_latency(8, 1.0, 5.0, 1.0, buffers=2, latency_us=0.5)
    assert two == pytest.approx(pipeline_latency(8, 1.0, 5.0, 1.0, buffers=2) + 2 * 0.5)   # first load, last store
    # ... one buffer pays the store's latency every tile
    one = pipeline_latency(8, 1.0, 5.0, 1.0, buffers=1, latency_us=0.5)
    assert one - pipeline_latency(8, 1.0, 5.0, 1.0, buffers=1) == pytest.approx(8 * 0.5 + 0.5)
    assert handoff_costs("ascend-910b2") == {"latency_us": get_preset("ascend-910b2").cycles_to_us(900),
                                             "sync_us": get_preset("ascend-910b2").cycles_to_us(20)}
    with pytest.raises(TypeError, match="preset name"):
        handoff_costs(3)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 9), l=durations, c=durations, s=durations, b=st.integers(1, 3), bar=st.booleans(),
       lat=st.sampled_from([0.0, 0.5, 7.0]), sync=st.sampled_from([0.0, 0.01, 1.0]))
def test_rules_hold(n, l, c, s, b, bar, lat, sync):
    sched = pipeline_schedule(n, l, c, s, buffers=b, barrier=bar, latency_us=lat, sync_us=sync)
    box = _by(sched)
    ready = {(int(r.tile), r.stage): r.ready_us for r in sched.itertuples()}
    eps = 1e-9
    for i in range(n):
        assert ready[i, "load"] == pytest.approx(box[i, "load"][1] + lat)      # a copy completes later
        assert ready[i, "compute"] == box[i, "compute"][1]                     # S has no latency
        assert box[i, "compute"][0] >= ready[i, "load"] + sync - eps           # data before compute
        assert box[i, "store"][0] >= box[i, "compute"][1] + sync - eps         # result before store
        for stage in STAGES:                                                   # pipes in order
            if i:
                assert box[i, stage][0] >= box[i - 1, stage][1] - eps
        if i >= b:                                                             # slots
            assert box[i, "load"][0] >= box[i - b, "compute"][1] + sync - eps
            assert box[i, "compute"][0] >= ready[i - b, "store"] + sync - eps
        if bar and i:
            assert box[i, "load"][0] >= ready[i - 1, "store"] + sync - eps


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 9), l=durations, c=durations, s=durations)
def test_more_buffers_never_slower_and_barrier_is_serial(n, l, c, s):
    one = pipeline_latency(n, l, c, s, buffers=1)
    two = pipeline_latency(n, l, c, s, buffers=2)
    three = pipeline_latency(n, l, c, s, buffers=3)
    serial = pipeline_latency(n, l, c, s, buffers=2, barrier=True)
    assert three <= two + 1e-9 <= one + 2e-9 <= serial + 3e-9
    assert serial == pytest.approx(n * (l + c + s))
    assert two >= max(n * l, n * c, n * s) - 1e-9                       # no pipe does two things at once


@settings(max_examples=60, deadline=None)
@given(l=durations, c=durations, s=durations, b=st.integers(1, 3), bar=st.booleans())
def test_steady_state_period_matches_the_closed_form(l, c, s, b, bar):
    assert steady_state_period(l, c, s, buffers=b, barrier=bar) == pytest.approx(
        period_formula(l, c, s, buffers=b, barrier=bar)[0], abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(l=durations, c=durations, s=durations, b=st.integers(1, 3), bar=st.booleans(),
       lat=st.floats(0.0, 20.0), sync=st.floats(0.0, 2.0))
def test_period_with_handoff_costs_matches_the_closed_form(l, c, s, b, bar, lat, sync):
    kw = dict(buffers=b, barrier=bar, latency_us=lat, sync_us=sync)
    value, text = period_formula(l, c, s, **kw)
    assert steady_state_period(l, c, s, **kw) == pytest.approx(value, rel=1e-9, abs=1e-9)
    assert value >= period_formula(l, c, s, buffers=b, barrier=bar)[0] - 1e-12   # hand-offs never help
    assert ("latency" in text) == (lat > 0 or sync > 0)


def test_period_formula_texts():
    assert period_formula(2, 5, 3, buffers=1)[1] == "compute + max(load, store)"
    assert period_formula(2, 5, 3, buffers=2)[1] == "max(load, compute, store)"
    value, text = period_formula(2, 5, 3, buffers=1, latency_us=0.5, sync_us=0.1)
    assert value == pytest.approx(5 + 3 + 0.5 + 0.2) and "latency" in text
    # two buffers hide a short latency entirely, not a long one
    assert period_formula(2, 5, 3, buffers=2, latency_us=0.5)[0] == 5
    assert period_formula(2, 5, 3, buffers=2, latency_us=4.0)[0] == pytest.approx((5 + 3 + 4.0) / 2)
    assert period_formula(2, 5, 3, barrier=True, latency_us=0.5, sync_us=0.1)[0] == pytest.approx(10 + 1.0 + 0.3)


@pytest.mark.parametrize("bad", [dict(n_tiles=0), dict(n_tiles=2.5), dict(buffers=0), dict(load_us=-1.0),
                                 dict(compute_us=float("nan")), dict(store_us="3"), dict(barrier="yes"),
                                 dict(latency_us=-0.5), dict(sync_us=float("inf"))])
def test_bad_input_is_named(bad):
    args = dict(n_tiles=3, load_us=1.0, compute_us=1.0, store_us=1.0)
    kw = {k: v for k, v in bad.items() if k in ("buffers", "barrier", "latency_us", "sync_us")}
    args.update({k: v for k, v in bad.items() if k not in kw})
    with pytest.raises(ValueError, match=next(iter(bad))):
        pipeline_schedule(**args, **kw)


# ------------------------------------------------------------ the hand model vs the simulator
@pytest.mark.parametrize("chip", ["ascend-910b2", "article"])
@pytest.mark.parametrize("tile_s", [1, 4, 8, 16])
@pytest.mark.parametrize("version, barrier", [("v2", False), ("v2_bad_sync", True)])
def test_hand_model_predicts_a_v2_block(chip, tile_s, version, barrier):
    """Stage durations read off one v1 tile and the chip's hand-off costs (DMA latency, flag), fed to
    the hand model, give the span of v2's block 0 (which loops over several tiles) to within the
    scalar unit's issue costs."""
    stages = stage_durations(simulate_moe_gating(1, 1024, 64, 2, version="v1", hw=chip, tile_s=tile_s).timeline)
    run = simulate_moe_gating(1, 1024, 64, 2, version=version, hw=chip, tile_s=tile_s)
    launch = run.timeline.launches[0]
    span = get_preset(chip).cycles_to_us(launch.traces[int(launch.block_class[0])].duration_cycles)
    tiles = len(range(0, run.tiling.totalTiles, run.block_dim))
    predicted = pipeline_latency(tiles, stages["load"], stages["compute"], stages["store"],
                                 buffers=2, barrier=barrier, **handoff_costs(chip))
    assert predicted == pytest.approx(span, rel=5e-3)
    # one v1 block is one tile of the serial model
    v1 = simulate_moe_gating(1, 1024, 64, 2, version="v1", hw=chip, tile_s=tile_s).timeline.launches[0]
    assert pipeline_latency(1, *stages.values(), **handoff_costs(chip)) == pytest.approx(
        get_preset(chip).cycles_to_us(v1.traces[int(v1.block_class[0])].duration_cycles), rel=5e-3)


def test_stage_durations_of_v1_and_v3():
    v1 = stage_durations(simulate_moe_gating(1, 64, 64, 2, version="v1", tile_s=8).timeline)
    assert set(v1) == set(STAGES) and all(v > 0 for v in v1.values())
    v3 = stage_durations(simulate_moe_gating(1, 64, 64, 2, version="v3", tile_s=8).timeline)
    assert v3["compute"] > 0                      # V, not S, in the vectorized version
    with pytest.raises(ValueError, match="block 99"):
        stage_durations(simulate_moe_gating(1, 64, 64, 2, version="v1", tile_s=8).timeline, block=99)
    with pytest.raises(TypeError, match="Timeline"):
        stage_durations("not a timeline")


# ------------------------------------------------------------ the figure
def test_figure_has_a_box_per_tile_and_stage():
    scheds = {"1 buffer": pipeline_schedule(4, 2, 5, 3, buffers=1),
              "2 buffers": pipeline_schedule(4, 2, 5, 3, buffers=2)}
    fig = pipeline_figure(scheds)
    assert isinstance(fig, go.Figure) and not isinstance(fig, go.FigureWidget)
    assert [t.name for t in fig.data] == [*STAGES, "end"]
    for trace in fig.data[:3]:
        assert len(trace.x) == 8 and sorted(set(trace.text)) == ["0", "1", "2", "3"]
    assert list(fig.layout.yaxis.categoryarray) == [f"{k} \u00b7 {s}" for k in scheds for s in STAGES]
    assert list(fig.data[3].x) == [pipeline_latency(4, 2, 5, 3, buffers=1), pipeline_latency(4, 2, 5, 3)]
    assert "2 buffers 25.00" in fig.layout.title.text


def test_single_schedule_and_custom_title():
    fig = pipeline_figure(pipeline_schedule(2, 1, 1, 1), title="hello")
    assert list(fig.layout.yaxis.categoryarray) == list(STAGES) and fig.layout.title.text == "hello"
    with pytest.raises(TypeError, match="pipeline_schedule"):
        pipeline_figure({"x": "not a frame"})


def test_widget_updates_in_place():
    fig = pipeline_figure({"a": pipeline_schedule(2, 1, 1, 1)}, widget=True)
    assert isinstance(fig, go.FigureWidget)
    before = fig.data
    update_pipeline_figure(fig, {"a": pipeline_schedule(5, 1, 2, 1), "b": pipeline_schedule(5, 1, 2, 1, buffers=1)})
    assert fig.data is before or all(x is y for x, y in zip(fig.data, before))
    assert len(fig.data[0].x) == 10 and len(fig.layout.yaxis.categoryarray) == 6
    assert fig.layout.xaxis.range[1] == pytest.approx(1.15 * pipeline_latency(5, 1, 2, 1, buffers=1))
    with pytest.raises(ValueError, match="pipeline_figure"):
        update_pipeline_figure(go.Figure(), {"a": pipeline_schedule(1, 1, 1, 1)})
