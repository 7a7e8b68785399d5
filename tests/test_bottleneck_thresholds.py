"""The bottleneck verdict's thresholds, pinned (issue 11: moving the dispatch threshold from 0.5 to
0.2 flipped the article preset's verdicts and only nbval noticed).

Two layers: the verdicts of the article's sweep on both presets (what the notebooks print), and
for each threshold of :meth:`Timeline.bottleneck` a pair of synthetic timelines just either side
of it (the method reads only the figures set on the stand-in below)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import sweep
from npu_lab.sim import Timeline
from npu_lab.sim.core import ALL_PIPES, PIPE_CODE

ARTICLE_TILE_S = [1, 4, 8, 16, 32]

# issue 9 (docs/cost_model.md): copies hold their MTE pipe for issue + transfer only, so the
# 910B2's v1/v2 are no longer 'sync'/'memory' (900-cycle DMA occupancy was most of their pipe
# time): their scalar work dominates ('compute'); v3 at tileS=1 became launch-bound
PINNED = {
    ("v1", "article"): ["launch", "launch", "compute", "compute", "compute"],
    ("v1", "ascend-910b2"): ["launch", "compute", "compute", "compute", "compute"],
    ("v2", "article"): ["compute", "compute", "compute", "compute", "compute"],
    ("v2", "ascend-910b2"): ["compute"] * 5,
    ("v3", "article"): ["launch"] * 5,
    ("v3", "ascend-910b2"): ["launch"] * 5,
    ("discrete", "ascend-910b2"): ["launch"] * 5,
}


@pytest.mark.parametrize("version, chip", sorted(PINNED))
def test_article_shape_verdicts_are_pinned(version, chip):
    df = sweep(version, 1, 1024, 64, 2, chip, ARTICLE_TILE_S)
    assert df["bottleneck"].tolist() == PINNED[(version, chip)]


HW = get_preset("ascend-910b2")


def _timeline(*, total=100.0, launch=0.0, busy=None, hbm_share=0.0, dispatch_us=0.0):
    """A stand-in with the figures bottleneck() reads. busy: pipe -> busy µs on the one core."""
    by_core = np.zeros((1, len(ALL_PIPES)))
    for pipe, us in (busy or {}).items():
        by_core[0, PIPE_CODE[pipe]] = us
    record = SimpleNamespace(floor_cycles=0.0, body_cycles=1.0, floor_reason="", block_dim=1,
                             dispatch_cycles=HW.us_to_cycles(dispatch_us), hw=HW)
    return SimpleNamespace(total_us=total, launch_overhead_us=launch, busy_us_by_core=lambda: by_core,
                           achieved_bandwidth_gbps=hbm_share * HW.hbm_bandwidth_gbps, hw=HW,
                           launches=[record])


def _verdict(**kw) -> str:
    return Timeline.bottleneck(_timeline(**kw))[0]


def test_launch_share_threshold_is_one_half():
    assert _verdict(launch=50.0, busy={"V": 45}) == "launch"
    assert _verdict(launch=49.0, busy={"V": 45}) != "launch"


def test_dispatch_threshold_is_one_half_of_the_body():
    # body = 100 - 20 = 80 us after the launch overhead
    assert _verdict(launch=20.0, dispatch_us=40.0, busy={"V": 40}) == "launch"
    assert _verdict(launch=20.0, dispatch_us=39.0, busy={"V": 40}) == "compute"


def test_compute_threshold_is_forty_percent():
    assert _verdict(busy={"V": 40}) == "compute"
    assert _verdict(busy={"V": 39}) == "sync"


def test_memory_threshold_is_forty_percent_of_a_dma_pipe():
    assert _verdict(busy={"MTE2": 40}) == "memory"
    assert _verdict(busy={"MTE2": 39}) == "sync"


def test_hbm_threshold_is_sixty_percent_of_peak():
    assert _verdict(busy={"MTE2": 10}, hbm_share=0.6) == "memory"
    assert _verdict(busy={"MTE2": 10}, hbm_share=0.59) == "sync"


def test_taking_turns_is_sync_below_sixty_percent_each_and_eighty_together():
    assert _verdict(busy={"MTE2": 41, "V": 39}) == "sync"             # 80 % together, none >= 60 %
    assert _verdict(busy={"MTE2": 41, "V": 38}) == "memory"           # 79 %: judged on DMA alone
    assert _verdict(busy={"MTE2": 60, "V": 30}) == "memory"           # one pipe >= 60 %: not taking turns
    assert _verdict(busy={"MTE2": 30, "V": 60}) == "compute"
