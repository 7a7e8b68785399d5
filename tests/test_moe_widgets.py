"""The MoeGatingTopK explorers react to ``.value`` changes: their FigureWidget's traces change in
place (same figure, same trace objects, fixed order), the highlighted point follows the tileS
slider with the library's latency, and configurations the library refuses show its message in
the status line instead of raising."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import get_preset
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating import (calculate_moe_gating_tiling, moe_ub_budget, simulate_moe_gating,
                                        ub_used_bytes)
from npu_lab.course.explorers import (DiscreteChainExplorer, TileSweepExplorer, UbBudgetExplorer,
                                 minimum_hbm_bytes)


# ------------------------------------------------------------------------------ tileS sweep
@pytest.fixture(scope="module")
def sweep_explorer():
    return TileSweepExplorer(chip="ascend-910b2")


@pytest.fixture
def tse(sweep_explorer):
    """The shared explorer, reset to the article shape on the 910B2 with v1 and tileS = 8."""
    sweep_explorer.set(B=1, S=1024, E=64, K=2, chip="ascend-910b2", version="v1", tile_s=8)
    return sweep_explorer


def _latency(e):
    return simulate_moe_gating(e.B.value, e.S.value, e.E.value, e.K.value, version=e.version.value,
                               hw=e.chip.value, tile_s=e.tile_s.value).latency_us


def test_sweep_controls_and_traces(tse):
    assert tse.tile_s.description == "tileS"
    assert (tse.tile_s.min, tse.tile_s.max) == (1, 64)
    assert [tse.B.description, tse.S.description, tse.E.description, tse.K.description] == list("BSEK")
    assert {v for _, v in tse.chip.options} == {"article", "ascend-910b2", "ascend-310p3"}
    assert "v1" in [v for _, v in tse.version.options] and "discrete" not in [v for _, v in tse.version.options]
    assert [t.name for t in tse.figure.data] == ["model", "current tileS", "article (measured)"]
    assert tse.figure in tse.widget.children[-1].children and tse.status in tse.widget.children
    assert "application/vnd.jupyter.widget-view+json" in tse._repr_mimebundle_()


def test_highlight_is_the_slider_value_and_the_library_latency(tse):
    current = tse.figure.data[TileSweepExplorer.TRACE_CURRENT]
    assert list(current.x) == [8]
    assert current.y[0] == _latency(tse)
    result = simulate_moe_gating(1, 1024, 64, 2, version="v1", hw="ascend-910b2", tile_s=8)
    assert tse.status.value.startswith(
        f"<b>tileS=8: {result.latency_us:.1f} us, {result.block_dim} blocks, ")
    assert tse.error is None


@pytest.mark.parametrize("tile_s", [1, 5, 16, 64])
def test_slider_moves_the_highlight_in_place(tse, tile_s):
    fig, traces = tse.figure, tuple(tse.figure.data)
    model_x = list(fig.data[0].x)
    tse.tile_s.value = tile_s
    assert tse.figure is fig and tuple(fig.data) == traces
    assert list(fig.data[1].x) == [tile_s]
    assert fig.data[1].y[0] == pytest.approx(_latency(tse), rel=0, abs=0)
    assert list(fig.data[0].x) == model_x          # the sweep does not change with tileS
    assert f"tileS={tile_s}:" in tse.status.value
    assert tse.last_update_s > 0


def test_model_curve_is_the_sweep_and_article_points_only_at_its_shape(tse):
    hw = get_preset("ascend-910b2")
    xs = list(tse.figure.data[0].x)
    assert xs == [1, 2, 4, 8, 16, 32, 64]
    for x, y in zip(xs, tse.figure.data[0].y):
        assert y == simulate_moe_gating(1, 1024, 64, 2, version="v1", hw=hw, tile_s=int(x)).latency_us
    article = load_article_tile_sweep()
    assert list(tse.figure.data[2].x) == article["tile_s"].tolist()
    assert list(tse.figure.data[2].y) == article["latency_us"].astype(float).tolist()
    tse.S.value = 20                                   # off the article's shape
    assert len(tse.figure.data[2].x) == 0
    assert list(tse.figure.data[0].x) == [1, 2, 4, 8, 16, 20]
    assert "<table" in tse.table.value and "article" not in tse.table.value


def test_chip_and_version_change_the_curve(tse):
    before = list(tse.figure.data[0].y)
    tse.chip.value = "article"
    after_chip = list(tse.figure.data[0].y)
    assert after_chip != before
    tse.version.value = "v2"
    assert list(tse.figure.data[0].y) != after_chip
    assert tse.figure.data[1].y[0] == _latency(tse)
    assert "v2" in tse.figure.layout.title.text and "article" in tse.figure.layout.title.text


def test_k_larger_than_e_shows_the_library_message(tse):
    tse.set(E=4, K=8)
    assert tse.error and "k must be <= e" in tse.error.lower()
    assert "tileS=8 does not run" not in tse.status.value and "K=8 does not run" in tse.status.value
    assert "does not run" in tse.status.value and "color:#b00020" in tse.status.value
    assert len(tse.figure.data[0].x) == 0 and len(tse.figure.data[1].x) == 0
    tse.E.value = 64                                   # valid again
    assert tse.error is None and list(tse.figure.data[1].x) == [8]


def test_ub_overflow_shows_the_library_message(tse):
    tse.set(E=8000, tile_s=64)
    assert "does not fit" in tse.error and "UB" in tse.error
    assert "largest tileS that fits" in tse.status.value
    assert len(tse.figure.data[1].x) == 0              # no highlighted point for a run that cannot happen
    assert len(tse.figure.data[0].x) > 0               # the tiles that do fit are still drawn
    assert "does not fit" in tse.table.value
    tse.tile_s.value = 4
    assert tse.error is None and tse.figure.data[1].y[0] == _latency(tse)


def test_tile_larger_than_s_is_clamped_and_said(tse):
    tse.set(S=6, tile_s=32)
    assert list(tse.figure.data[1].x) == [6]           # on the curve, which ends at S
    assert tse.figure.data[1].y[0] == _latency(tse)
    assert "clamped" in tse.status.value


def test_one_plotly_message_per_update(tse, monkeypatch):
    calls = []
    original = tse.figure.plotly_update
    monkeypatch.setattr(tse.figure, "plotly_update", lambda *a, **k: (calls.append(1), original(*a, **k)))
    tse.tile_s.value = 4
    assert len(calls) == 1


def test_constructor_and_set_validate():
    with pytest.raises(ValueError, match="chip must be one of"):
        TileSweepExplorer(chip="ascend-999")
    with pytest.raises(ValueError, match="tile_s must be a whole number from 1 to 64"):
        TileSweepExplorer(tile_s=0)
    e = TileSweepExplorer(S=64)
    with pytest.raises(AttributeError, match="no control named"):
        e.set(tileS=4)


# ------------------------------------------------------------------------------ UB budget
@pytest.fixture
def ube():
    return UbBudgetExplorer()


def _bar_totals(e):
    n = len(UbBudgetExplorer.BUFFER_NAMES)
    used = [sum(e.figure.data[i].x[row] for i in range(n)) for row in (0, 1)]
    return used, list(e.figure.data[UbBudgetExplorer.TRACE_FREE].x)


def test_ub_budget_traces_and_controls(ube):
    names = [t.name for t in ube.figure.data]
    assert names[:3] == ["scores", "topk_values", "topk_indices"]
    assert names[-2:] == ["free", "article's formula"]
    assert ube.E.description == "E" and ube.chip.value == "ascend-910b2" and ube.version.value == "v2"
    assert "tileS=8" in ube.status.value


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_ub_budget_matches_the_library(ube, version):
    ube.version.value = version
    hw = get_preset("ascend-910b2")
    tiling = calculate_moe_gating_tiling(1, 1024, 64, 2, hw, version=version)
    used, free = _bar_totals(ube)
    assert used[0] * 1024 == pytest.approx(ub_used_bytes(tiling, version))
    assert used[0] + free[0] == pytest.approx(hw.ub_usable_bytes / 1024)
    assert used[1] + free[1] == pytest.approx(hw.ub_usable_bytes / 1024)          # the largest tile fills the UB
    present = {b.name for b in moe_ub_budget(version, 8, 64, 2)}
    for trace in ube.figure.data[:len(UbBudgetExplorer.BUFFER_NAMES)]:
        assert (trace.x[0] > 0) == (trace.name in present)
    assert ube.figure.data[UbBudgetExplorer.TRACE_ARTICLE].x[0] == pytest.approx(8 * (64 * 4 + 2 * 8) / 1024)


def test_ub_budget_details_show_the_struct(ube):
    packed = ube.tiling.pack()
    assert packed.hex(" ", 4) in ube.details.value
    assert "unpack(pack()) == tiling</code>: True" in ube.details.value
    assert "2,176 B" in ube.details.value and "5,120 B" in ube.details.value


def test_ub_budget_reacts_to_e_and_chip(ube):
    fig, scores = ube.figure, ube.figure.data[0]
    ube.E.value = 4096
    assert ube.figure is fig and ube.figure.data[0] is scores
    assert ube.tiling.tileS == 4 and "tileS=4" in ube.status.value
    ube.chip.value = "ascend-310p3"
    assert fig.layout.shapes[0].x0 == 248 and "usable UB 248.00 KB" in fig.layout.annotations[0].text   # 256 KB - 8 KB reserve
    ube.zoom.value = True
    assert fig.layout.xaxis.range[1] < 248


def test_ub_budget_too_wide_a_row_shows_the_message(ube):
    ube.E.value = 60000
    assert "too wide for one core" in ube.error and "does not run" in ube.status.value
    assert all(x == 0 for t in ube.figure.data for x in t.x)
    ube.E.value = 64
    assert ube.error is None and ube.tiling.E == 64


# ------------------------------------------------------------------------------ discrete chain
@pytest.fixture
def dce():
    return DiscreteChainExplorer()


def test_discrete_chain_figure_matches_the_timeline(dce):
    assert [t.name for t in dce.figure.data] == list(DiscreteChainExplorer.TRACE_NAMES)
    t = simulate_moe_gating(1, 1024, 64, 2, version="discrete", hw="ascend-910b2").timeline
    bytes_kb = sum(dce.figure.data[i].x[0] for i in (2, 3, 4))
    assert bytes_kb * 1024 == pytest.approx(t.hbm_bytes)
    assert dce.figure.data[6].x[0] * 1024 == minimum_hbm_bytes(1, 1024, 64, 2) == 1024 * 64 * 4 + 1024 * 2 * 8
    assert dce.figure.data[5].x[0] * 1024 == pytest.approx(dce.fused.timeline.hbm_bytes)
    overhead = np.array(dce.figure.data[0].x[:3])
    work = np.array(dce.figure.data[1].x[:3])
    assert overhead.sum() == pytest.approx(t.launch_overhead_us)
    assert (overhead + work).sum() == pytest.approx(t.total_us)
    assert f"{t.total_us:.1f} us in 3 launches, {t.bottleneck()[0]}-bound" in dce.status.value


def test_discrete_chain_sliders(dce):
    fig, traces = dce.figure, tuple(dce.figure.data)
    before = dce.figure.data[2].x[0]
    dce.S.value = 2048
    assert dce.figure is fig and tuple(fig.data) == traces
    assert dce.figure.data[2].x[0] == pytest.approx(2 * before)
    dce.E.value = 256
    assert dce.figure.data[6].x[0] * 1024 == minimum_hbm_bytes(1, 2048, 256, 2)


def test_discrete_chain_invalid_shows_the_message(dce):
    dce.set(E=2, K=4)
    assert "does not run" in dce.status.value and dce.error
    dce.K.value = 2
    assert dce.error is None


# ------------------------------------------------------------------------------ issue 11: bounds, messages
def test_k_larger_than_e_blames_the_shape_and_keeps_a_table(tse):
    tse.set(E=4, K=8)
    assert "E=4, K=8 does not run" in tse.status.value and "tileS=8 does not run" not in tse.status.value
    assert "K must be &lt;= E" in tse.table.value or "K must be <= E" in tse.table.value


def test_one_update_may_not_start_unbounded_work(monkeypatch):
    """B x ceil(S / tileS) tiles above the cap are refused with a message, fast, whatever max_S allows."""
    import time

    big = TileSweepExplorer(chip="ascend-910b2", max_S=1 << 20)
    monkeypatch.setattr(TileSweepExplorer, "MAX_TILES_PER_UPDATE", 4096)
    start = time.perf_counter()
    big.set(B=64, S=1 << 20, tile_s=1)
    assert time.perf_counter() - start < 5
    assert big.error and "tiles is more than" in big.error
    assert "too many tiles" in big.table.value
    big.set(B=1, S=4096, tile_s=8)               # 512 tiles: runs again
    assert big.error is None and len(big.figure.data[0].x) > 0


def test_set_refuses_outputs_and_bad_choices_with_the_library_message(tse):
    with pytest.raises(AttributeError, match="no control named \\['status'\\]"):
        tse.set(status="x")
    with pytest.raises(ValueError, match="chip must be one of"):
        tse.set(chip="h100")
    with pytest.raises(ValueError, match="S must be a whole number from 1 to"):
        tse.set(S="many")
    assert tse.chip.value == "ascend-910b2"      # nothing changed
