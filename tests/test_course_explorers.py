"""The explorers of notebooks 05-07 (DoubleBufferExplorer, FastExpExplorer, TuningExplorer): controls drive the
simulations and the status lines."""

from __future__ import annotations

import pytest

from npu_lab.kernels.moe_gating import simulate_moe_gating
from npu_lab.course.explorers import DoubleBufferExplorer


@pytest.fixture(scope="module")
def dbe():
    return DoubleBufferExplorer()


@pytest.mark.parametrize("version", ["v1", "v2", "v2_bad_sync", "v2c"])
def test_status_is_the_simulated_latency(dbe, version):
    dbe.set(version=version, tile_s=8)
    truth = simulate_moe_gating(1, 1024, 64, 2, version=version, tile_s=8).latency_us
    assert dbe.error is None and f"simulator {truth:.1f} us" in dbe.status.value
    assert dbe.result.version == version


def test_hand_model_follows_the_kernel(dbe):
    ends = {}
    for version in ("v1", "v2", "v2_bad_sync"):
        dbe.set(version=version, tile_s=8)
        ends[version] = dbe.hand_schedule()[0].end_us.max()
    assert ends["v2"] < ends["v1"] == pytest.approx(ends["v2_bad_sync"])   # the barrier undoes the overlap
    dbe.set(version="v2c", tile_s=8)
    assert dbe.hand_schedule()[0].end_us.max() < ends["v2"]                # one copy per tile


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="version"):
        DoubleBufferExplorer(version="v9")
    with pytest.raises(ValueError, match="tile_s"):
        DoubleBufferExplorer(tile_s=3)


def test_fast_exp_explorer_status_and_marker():
    from npu_lab import get_preset
    from npu_lab.course.ex06 import exp_break_even_cycles
    from npu_lab.kernels.moe_gating import exp_speedup
    from npu_lab.course.explorers import FastExpExplorer

    fe = FastExpExplorer()
    hw = get_preset("ascend-910b2")
    assert fe.exp_cost.value == hw.vector_exp_cycles_per_repeat      # starts at the preset's assumption
    fe.set(n_floats=4096, exp_cost=35.0)
    truth = exp_speedup(hw.replace(vector_exp_cycles_per_repeat=35.0), 4096)
    assert fe.speedup == truth and f"{truth:.2f}x" in fe.status.value
    assert f"break-even at {exp_break_even_cycles(hw, 4096):.1f}" in fe.status.value
    assert list(fe.figure.data[1].x) == [35.0]
    with pytest.raises(ValueError, match="n_floats"):
        FastExpExplorer(n_floats=5)


def test_tuning_explorer_circles_the_tuners_choice_and_explains_refusals():
    from npu_lab.kernels.moe_gating import autotune
    from npu_lab.course.explorers import TuningExplorer
    from npu_lab.course.explorers.tuning import TUNING_TILES

    te = TuningExplorer(chip="ascend-910b2", version="v3")
    truth = autotune(1, 1024, 64, 2, version="v3", hw="ascend-910b2", candidates=list(TUNING_TILES))
    assert te.best.tile_s == truth.tile_s and truth.reason in te.status.value
    te.set(E=8, K=8)
    assert "E=8, K=8" in te.status.value
    te.set(chip="ascend-310p3", version="v1")
    assert te.error and "DataCopyPad" in te.status.value and te.best is None
    with pytest.raises(ValueError, match="version"):
        TuningExplorer(version="v4")               # v4 has no tileS


def test_heat_map_grid_marks_the_sweet_spot_and_refuses_a_bad_dimension():
    import numpy as np

    from npu_lab.course.explorers import sweet_spot_heat_map, tile_latency_grid
    from npu_lab.kernels.moe_gating import sweep

    grid = tile_latency_grid("v3", "S", [16, 1024], tiles=(1, 8, 32))
    assert list(grid.index) == [16, 1024] and list(grid.columns) == [1, 8, 32]
    assert np.isnan(grid.loc[16, 32])                                      # a tile longer than S does not exist
    row = sweep("v3", 1, 1024, 64, 2, "ascend-910b2", [1, 8, 32]).set_index("tileS")["latency_us"]
    assert np.allclose(grid.loc[1024].to_numpy(), row.reindex([1, 8, 32]).to_numpy())
    fig = sweet_spot_heat_map({"v3": grid}, "S")
    z = np.array(fig.data[0].z, dtype=float)
    assert np.nanmin(z, axis=1) == pytest.approx([1.0, 1.0])              # each row relative to its own best
    with pytest.raises(ValueError, match="dim"):
        tile_latency_grid("v3", "K", [2])
