"""The static HBM share against the streams actually in flight (npu_lab.sim.hbm_share): at the
article's shape and at a tail-heavy one it is pessimistic, and by too little to move a lesson."""

from __future__ import annotations

import pytest

from npu_lab.kernels.moe_gating import simulate_moe_gating
from npu_lab.sim.hbm_share import hbm_share_report


def test_one_core_gets_its_peak_either_way():
    """One block: the static share is already the core's peak, so a dynamic one changes nothing."""
    (rep,) = hbm_share_report(simulate_moe_gating(1, 8, 64, 2, version="v3", tile_s=8).timeline)
    assert rep.active_cores == 1 and rep.static_gbps == rep.peak_gbps
    assert rep.dynamic_over_static == pytest.approx(1.0) and rep.max_core_change_us == pytest.approx(0.0)


@pytest.mark.parametrize("version", ["v1", "v2", "v3", "discrete"])
@pytest.mark.parametrize("S, tile_s", [(1024, None), (392, 8)])   # 392 = 49 tiles of 8 on 48 cores: a tail
def test_static_share_is_pessimistic_by_too_little_to_matter(version, S, tile_s):
    res = simulate_moe_gating(1, S, 64, 2, version=version, tile_s=tile_s if version != "discrete" else None)
    for rep in hbm_share_report(res.timeline):
        assert 1 <= rep.max_streams and rep.mean_streams <= rep.active_cores
        assert rep.oversubscribed_share == 0.0            # the static rates never exceed HBM
        assert rep.dynamic_over_static <= 1.0             # so a dynamic share could only be faster
        assert rep.max_core_change_us <= 0.0
        assert -rep.max_core_change_us < 0.02 * rep.latency_us


def test_input_is_checked():
    with pytest.raises(TypeError, match="Timeline"):
        hbm_share_report("v3")
