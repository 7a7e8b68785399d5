"""moe_layer's §4b parts: the split plans (and the Q1 bug), the fusions' tables, the router presets."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.kernels.moe_layer import (ROUTER_PRESETS, block_segments, copy_params, coverage, gather_matmul_fusion,
                                       naive_segments, num_blocks, route_preset, router_gating_fusion, split_table)


@pytest.mark.parametrize("B,S,E,tb,ts,ec", [(3, 10, 16, 1, 4, 16), (4, 7, 8, 2, 7, 8), (5, 9, 12, 2, 4, 12),
                                            (2, 5, 64, 1, 2, 16), (3, 3, 10, 3, 2, 3)])
def test_every_plan_reads_every_element_once(B, S, E, tb, ts, ec):
    plan = [block_segments(i, B, S, E, tb, ts, ec) for i in range(num_blocks(B, S, E, tb, ts, ec))]
    assert (coverage(B, S, E, plan) == 1).all()


def test_the_naive_copy_is_wrong_exactly_when_tile_b_gt_1_and_tile_s_lt_s():
    B, S, E = 4, 10, 8
    for tb, ts, wrong in ((1, 4, False), (2, 10, False), (2, 4, True)):
        plan = [naive_segments(i, B, S, E, tb, ts) for i in range(num_blocks(B, S, E, tb, ts))]
        assert (not (coverage(B, S, E, plan) == 1).all()) == wrong
    p = copy_params(1, B, S, E, 2, 4)                 # tile (b 0..1, s 4..7): two runs S·E apart
    assert p["blockCount"] == 2 and p["blockLen"] == 4 * E * 4 and p["srcStride"] == (S - 4) * E * 4
    assert p["gm_offset"] == 4 * E


def test_split_table_says_which_split_needs_a_merge():
    t = split_table(4, 100, 64, 2)
    assert t.loc["E", "merge_pass"] and not t.loc["S", "merge_pass"]
    assert not t.loc["BS", "naive_copy_correct"] and t.loc["S", "naive_copy_correct"]
    assert t["covers_once"].all()


def test_fusions_save_what_they_should():
    rg = router_gating_fusion(16, 256, 64, 4)
    us = rg["us"].tolist()
    assert us[0] > us[1] and us[2] >= us[3]           # unfused > fused kernel; serial bound >= pipelined bound
    gm = gather_matmul_fusion([3, 0, 5, 8], 256, 128, 2)
    assert gm["us"].iloc[0] > gm["us"].iloc[1]
    assert gm.attrs["expanded_x_bytes_saved"] == 2 * 16 * 256 * 2


def test_presets_route_as_their_configs_say():
    _, mix = route_preset("Mixtral-like", 5)
    np.testing.assert_allclose(mix.weights.sum(axis=1), 1.0, rtol=1e-6)          # renorm
    _, qwen = route_preset("Qwen-MoE-like", 5)
    assert (qwen.weights.sum(axis=1) < 1.0).all()                               # no renorm
    _, ds = route_preset("DeepSeek-V3-like", 5)
    groups = ds.indices // (256 // 8)
    assert all(len(set(row)) <= 4 for row in groups.tolist())                    # top-4 groups of 8
    np.testing.assert_allclose(ds.weights.sum(axis=1), 2.5, rtol=1e-5)          # renorm x 2.5
    assert set(ROUTER_PRESETS) == {"Mixtral-like", "Qwen-MoE-like", "DeepSeek-V3-like"}
    with pytest.raises(ValueError, match="preset must be one of"):
        route_preset("GPT-like")
